"""Running compiled models: the native library wrapper, arena and weight blob."""
from .native import NativeModel  # noqa: F401
