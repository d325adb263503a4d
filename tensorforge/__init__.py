"""tensorforge: a deep-learning compiler.

    import tensorforge
    cm = tensorforge.compile(model, example_inputs)   # torch.nn.Module, onnx.ModelProto or .onnx path
    out = cm(*inputs)
"""
from .api import CompiledModel, compile, import_model
from .errors import TensorforgeError

__version__ = "0.1.0"

__all__ = ["CompiledModel", "TensorforgeError", "compile", "import_model", "__version__"]
