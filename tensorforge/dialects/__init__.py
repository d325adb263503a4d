"""Dialects: ``graph`` (tensor ops), later ``structured`` and ``loop``."""
