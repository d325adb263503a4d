"""Running compiled models: the native library wrapper (native.py), the signature a model is
checked against (signature.py), aligned buffers (buffers.py), ``.tfm`` artifacts (artifact.py)
and the call-overhead probe (overhead.py).  Nothing here imports torch, onnx or the frontends."""
from .native import NativeModel  # noqa: F401
from .signature import TensorSpec  # noqa: F401
