"""Inputs for the differential fuzzer: ordinary random values with IEEE special values mixed in.

A float input is drawn from a normal distribution (at a random scale) and then a fraction of its
positions is overwritten with values from ``SPECIALS``: NaN, +-Inf, -0.0, denormals, huge and
tiny magnitudes.  Integer inputs are small (so that sums and products never overflow) with zeros
mixed in; booleans are fair coins.  Everything is reproducible from a ``numpy.random.Generator``.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

# name -> value; the names are what --specials accepts and what a report prints.
SPECIALS: dict[str, float] = {
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "-0": -0.0,
    "denorm": 1e-40,          # a float32 denormal
    "-denorm": -1e-40,
    "huge": 1e30,
    "-huge": -1e30,
    "tiny": 1e-30,            # small but normal in float32
    "-tiny": -1e-30,
}
NONFINITE = ("nan", "inf", "-inf")
DEFAULT_SPECIALS: tuple[str, ...] = tuple(SPECIALS)


def parse_specials(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"nan,inf,-0"`` -> names (checked); None or "all" -> every special; "" or "none" -> none."""
    if text is None:
        return DEFAULT_SPECIALS
    names = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    if names in (["all"],):
        return DEFAULT_SPECIALS
    if names in ([], ["none"]):
        return ()
    bad = [n for n in names if n not in SPECIALS]
    if bad:
        raise ValueError(f"unknown special value(s) {bad}; choose from {', '.join(SPECIALS)}")
    return tuple(names)


def random_float(rng: np.random.Generator, shape: Sequence[int], dtype=np.float32,
                 fraction: float = 0.0, specials: Iterable[str] = DEFAULT_SPECIALS) -> np.ndarray:
    """A float array: N(0, scale) with ``fraction`` of the positions replaced by special values."""
    scale = float(rng.choice([1.0, 1.0, 3.0, 0.25]))
    x = (rng.standard_normal(tuple(shape)) * scale).astype(dtype)
    return sprinkle(rng, x, fraction, specials)


def sprinkle(rng: np.random.Generator, x: np.ndarray, fraction: float,
             specials: Iterable[str] = DEFAULT_SPECIALS) -> np.ndarray:
    """``x`` (copied) with about ``fraction`` of its positions set to a random special value."""
    names = list(specials)
    x = np.array(x, copy=True)
    if fraction <= 0 or not names or x.size == 0 or x.dtype.kind != "f":
        return x
    mask = rng.random(x.shape) < fraction
    count = int(mask.sum())
    if count:
        vals = np.array([SPECIALS[n] for n in names], dtype=np.float64)
        with np.errstate(over="ignore", under="ignore"):
            x[mask] = vals[rng.integers(0, len(vals), count)].astype(x.dtype)
    return x


def random_int(rng: np.random.Generator, shape: Sequence[int], dtype=np.int64, low: int = -5,
               high: int = 6, zero_fraction: float = 0.1) -> np.ndarray:
    x = rng.integers(low, high, tuple(shape)).astype(dtype)
    if zero_fraction > 0 and x.size:
        x[rng.random(x.shape) < zero_fraction] = 0
    return x


def random_value(rng: np.random.Generator, shape: Sequence[int], dtype, fraction: float = 0.0,
                 specials: Iterable[str] = DEFAULT_SPECIALS) -> np.ndarray:
    """An input of any supported element type."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return random_float(rng, shape, dtype, fraction, specials)
    if dtype.kind == "b":
        return rng.random(tuple(shape)) < 0.5
    return random_int(rng, shape, dtype)


def specials_in(x: np.ndarray) -> set[str]:
    """Which kinds of special value ``x`` holds (names of ``SPECIALS``)."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.size == 0:
        return set()
    found = set()
    with np.errstate(invalid="ignore"):
        x64 = x.astype(np.float64)
        for name, v in SPECIALS.items():
            if name == "nan":
                hit = np.isnan(x64).any()
            elif name == "-0":
                hit = ((x64 == 0) & np.signbit(x64)).any()
            else:
                hit = (x64 == np.float64(np.array(v, dtype=x.dtype))).any() and v != 0
            if hit:
                found.add(name)
    return found


def without_specials(rng: np.random.Generator, x: np.ndarray, names: Iterable[str] | None = None) -> np.ndarray:
    """``x`` with the special values named (default: all) replaced by ordinary random values."""
    x = np.array(x, copy=True)
    if x.dtype.kind != "f" or x.size == 0:
        return x
    mask = special_mask(x, names)
    if mask.any():
        x[mask] = rng.standard_normal(int(mask.sum())).astype(x.dtype)
    return x


def special_mask(x: np.ndarray, names: Iterable[str] | None = None) -> np.ndarray:
    """Positions of ``x`` holding one of the special values named (default: all of them)."""
    names = list(SPECIALS) if names is None else list(names)
    x64 = np.asarray(x).astype(np.float64)
    mask = np.zeros(x64.shape, bool)
    for name in names:
        v = SPECIALS[name]
        if name == "nan":
            mask |= np.isnan(x64)
        elif name == "-0":
            mask |= (x64 == 0) & np.signbit(x64)
        else:
            mask |= x64 == np.float64(np.array(v, dtype=np.asarray(x).dtype))
    return mask
