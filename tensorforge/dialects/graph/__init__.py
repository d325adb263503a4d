"""The ``graph`` dialect: tensor ops with NumPy broadcasting (≈ StableHLO / TOSA).

Importing this package registers every op; one module per op family.
"""
from . import (attention, constant, control_flow, conv, data_dependent, elementwise, index, linalg,  # noqa: F401
               norm, pool, quant, reduce, shape, layout, scatter, grid, sampling)
