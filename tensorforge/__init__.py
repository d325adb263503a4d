"""tensorforge: a deep-learning compiler.

    import tensorforge
    cm = tensorforge.compile(model, example_inputs)   # torch.nn.Module, onnx.ModelProto or .onnx path
    out = cm(*inputs)
"""
from .api import CompiledModel, compile, import_model, load
from .codegen.mlir import export_mlir
from .errors import TensorforgeError
from .quantization import Calibration, calibration_stats, quantize
from . import tune          # callable: tensorforge.tune(model, inputs, trials=...) (see tune/__init__.py)

__version__ = "0.1.0"

try:  # torch is optional; the hook registers the torch.compile backend "tensorforge" lazily
    from .frontends.torch import register_backend as _register_torch_backend
except ImportError:
    pass
else:
    _register_torch_backend()

__all__ = ["CompiledModel", "TensorforgeError", "compile", "import_model", "load", "tune", "__version__"]
