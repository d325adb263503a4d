"""The StableHLO frontend: StableHLO text (any producer) and JAX functions -> graph modules.

``import_stablehlo(text_or_path)`` reads the generic op form; ``import_jax(fn, example_inputs)``
lowers a JAX function with ``jax.jit`` and imports its StableHLO (see ``jax_bridge.py``).
"""
from .importer import import_stablehlo, supported_ops
from .jax_bridge import import_jax

__all__ = ["import_jax", "import_stablehlo", "supported_ops"]
