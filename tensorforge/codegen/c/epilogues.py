"""Epilogues: C snippets a generated GEMM applies to each finished output vector before storing it.

They are how the fusion engine fuses elementwise consumers (bias, activation, residual add) into
a GEMM without a second pass over C. An epilogue is text plus the kernel arguments it needs, so
new ones need no change to the generator.
"""
from __future__ import annotations

from dataclasses import dataclass, field

EXTENTS = ("col", "row", "tile")


@dataclass(frozen=True)
class EpilogueParam:
    """A kernel argument an epilogue needs: ``kind`` is "ptr" (const float array) or "index" (long).
    ``extent`` says how a "ptr" is indexed, so callers can check its size: "col" (N values, by j),
    "row" (M values, by i) or "tile" (an M x N array with leading dimension ``ld_<name>``)."""

    name: str
    kind: str = "ptr"
    extent: str = "col"

    @property
    def c_decl(self) -> str:
        if self.kind == "ptr":
            return f"const float *restrict {self.name}"
        if self.kind == "index":
            return f"long {self.name}"
        raise ValueError(f"EpilogueParam {self.name!r}: kind must be 'ptr' or 'index', got {self.kind!r}")


@dataclass(frozen=True)
class Epilogue:
    """C statements run on each finished output vector before it is stored.

    The body sees ``x`` (``tf_vf``, read and write), ``i`` (its row), ``j`` (the column of lane 0),
    ``nv`` (how many lanes are inside C, ``TF_VW`` except at the right edge), its params by name,
    and the helpers ``tf_ld_n(p, nv)`` (load nv floats, zeros beyond), ``tf_bcast(s)`` and
    ``tf_relu(x)``. Lanes past ``nv`` are never stored, so the body need not guard them.
    """

    name: str
    body: str
    params: tuple[EpilogueParam, ...] = field(default_factory=tuple)


def bias_add(name: str = "bias") -> Epilogue:
    """x += bias[j] per column (the bias of a linear layer)."""
    return Epilogue("bias_add", f"x += tf_ld_n({name} + j, nv);", (EpilogueParam(name),))


def relu() -> Epilogue:
    """max(x, 0) as compare-and-select (x < 0 ? 0 : x; NaN and -0.0 stay, as in torch), which stays in vector registers."""
    return Epilogue("relu", "x = tf_relu(x);")


def residual_add(name: str = "residual") -> Epilogue:
    """x += residual[i, j] from a row-major array with leading dimension ``ld_<name>``."""
    ld = f"ld_{name}"
    return Epilogue("residual_add", f"x += tf_ld_n({name} + i * {ld} + j, nv);",
                    (EpilogueParam(name, extent="tile"), EpilogueParam(ld, "index")))
