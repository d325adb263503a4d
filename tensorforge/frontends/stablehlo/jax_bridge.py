"""JAX functions in, JAX-shaped results out.

``tensorforge.compile(fn, example_inputs)`` for a ``jax.jit``-able function (or an already jitted
one): the function is lowered by ``jax.jit(...).lower(*example_inputs)`` to StableHLO, printed in
the generic op form and imported like any other StableHLO text, so the importer is the one code
path for every producer.  Arguments and results may be pytrees (parameter dicts, tuples): the
lowered ``main`` takes the flattened leaves, so the compiled model flattens its arguments the same
way and rebuilds the result's structure.  NumPy arrays in give NumPy arrays out; JAX arrays in give
JAX arrays out.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ...errors import FrontendError, TensorforgeError


def is_jax_function(model: Any) -> bool:
    """A jitted function, or a plain Python function while jax is importable (torch modules and
    every other model kind are callables too, and are checked before this)."""
    import types
    return isinstance(model, (types.FunctionType, types.BuiltinFunctionType)) or \
        (callable(model) and type(model).__module__.startswith(("jax", "functools")))


def _require_jax():
    try:
        import jax
    except ImportError:
        raise FrontendError("compiling a Python function needs jax (it is lowered with jax.jit): "
                            "pip install 'tensorforge[jax]'") from None
    return jax


def stablehlo_text(fn: Callable, example_inputs: Sequence) -> tuple[str, Any, Any]:
    """The generic-form StableHLO of ``fn`` at ``example_inputs``, and the input and output pytree
    structures.  A jitted function is re-jitted with ``keep_unused=True`` so that its lowered
    ``main`` takes every argument (jit drops unused ones by default)."""
    jax = _require_jax()
    base = getattr(fn, "__wrapped__", fn) if hasattr(fn, "lower") else fn
    args = tuple(example_inputs)
    try:
        lowered = jax.jit(base, keep_unused=True).lower(*args)
        text = lowered.compiler_ir("stablehlo").operation.get_asm(print_generic_op_form=True)
        out_shape = jax.eval_shape(base, *args)
    except Exception as e:       # a tracing error is the user's function's, with jax's message
        raise FrontendError(f"jax could not lower {getattr(base, '__name__', base)!r} at the example inputs: "
                            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    _, in_tree = jax.tree_util.tree_flatten(args)
    _, out_tree = jax.tree_util.tree_flatten(out_shape)
    return text, in_tree, out_tree


def compile_jax(fn: Callable, example_inputs: Sequence | None, compile_module: Callable):
    """Lowers, imports and compiles ``fn``; ``compile_module(module)`` compiles the graph module
    (``tensorforge.compile`` with the user's options)."""
    if example_inputs is None:
        raise TensorforgeError("compiling a JAX function needs example_inputs (a tuple of arrays with the shapes "
                               "and dtypes you will call it with)")
    module, in_tree, out_tree, text = import_jax(fn, example_inputs)
    return JaxModel(compile_module(module), in_tree, out_tree, text)


def import_jax(fn: Callable, example_inputs: Sequence, name: str | None = None) -> tuple[Any, Any, Any, str]:
    """``(graph module, input pytree, output pytree, StableHLO text)`` of ``fn`` at ``example_inputs``;
    errors are located at ``<jax:name>`` (default: the function's name)."""
    from .importer import import_stablehlo
    name = name or getattr(getattr(fn, "__wrapped__", fn), "__name__", "jax_function")
    text, in_tree, out_tree = stablehlo_text(fn, example_inputs)
    return import_stablehlo(text, source=f"<jax:{name}>"), in_tree, out_tree, text


class JaxModel:
    """A compiled JAX function: call it with the same (pytree) arguments as the function."""

    def __init__(self, inner, in_tree, out_tree, stablehlo: str):
        self.inner = inner            # the CompiledModel of the flattened function
        self.in_tree, self.out_tree = in_tree, out_tree
        self.stablehlo = stablehlo    # what jax lowered the function to (generic op form)
        self.target = inner.target
        self.module = inner.module
        self.source = inner.source
        self._dtypes = [t.dtype.np for t in inner.input_types]

    def __getattr__(self, name: str):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)     # describe, input_specs, set_threads, save, ...

    def _flat_inputs(self, args: tuple) -> tuple[list, bool]:
        import jax
        leaves, tree = jax.tree_util.tree_flatten(args)
        if tree != self.in_tree:
            raise TensorforgeError(f"the arguments' structure {tree} differs from the example inputs' {self.in_tree}")
        as_jax = any(isinstance(x, jax.Array) for x in leaves)
        flat = []
        for x, dtype in zip(leaves, self._dtypes):
            arr = np.asarray(x)
            flat.append(arr if arr.dtype == dtype else arr.astype(dtype))   # jax's own dtype canonicalisation
        return flat, as_jax

    def run(self, *args) -> list:
        """The flat results as NumPy arrays."""
        flat, _ = self._flat_inputs(args)
        return self.inner.run(*flat)

    def __call__(self, *args):
        import jax
        flat, as_jax = self._flat_inputs(args)
        outs = self.inner.run(*flat)
        if as_jax:
            outs = [jax.numpy.asarray(o) for o in outs]
        return jax.tree_util.tree_unflatten(self.out_tree, outs)
