"""The ``graph`` dialect: tensor ops with NumPy broadcasting (≈ StableHLO / TOSA).

Importing this package registers every op; one module per op family.
"""
from . import (attention, constant, conv, data_dependent, elementwise, index, linalg, norm, pool,  # noqa: F401
               reduce, shape, layout)
