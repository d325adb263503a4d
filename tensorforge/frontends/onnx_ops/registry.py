"""The table from ONNX op type to handler, and the ops rejected on purpose.

Handler modules register with ``@handles("Relu", "Abs", ...)``; an op may be listed in
``REJECTED`` with the reason it can never be imported (data-dependent output shapes,
randomness, training-only state), which gives a better error than "not implemented".
"""
from __future__ import annotations

from .context import Handler

HANDLERS: dict[str, Handler] = {}

REJECTED: dict[str, str] = {
    "StringSplit": "its output shape depends on the input values (and strings are not supported)",
    "TfIdfVectorizer": "its output depends on string/n-gram tables that are not supported",
    "Bernoulli": "it is random",
    "RandomNormal": "it is random",
    "RandomUniform": "it is random",
    "RandomNormalLike": "it is random",
    "RandomUniformLike": "it is random",
    "Multinomial": "it is random",
}

# the ai.onnx.ml ops with a handler (the importer takes these, and only these, from that domain)
ML_DOMAIN = "ai.onnx.ml"
ML_OPS = frozenset({"Binarizer", "ArrayFeatureExtractor"})


def handles(*op_types: str):
    """Registers a handler for ONNX op types of the default domain."""
    def deco(fn: Handler) -> Handler:
        for t in op_types:
            if t in HANDLERS:
                raise RuntimeError(f"two handlers for ONNX op {t}")
            HANDLERS[t] = fn
        return fn
    return deco
