"""The exceptions a tensorforge user can see.

Every error a user can trigger is a ``TensorforgeError`` whose message names the
thing at fault (op, node, file, location) and, where there is one, what to do.
Callers catch the narrow subclass; the CLI catches the base class and prints one line.
"""
from __future__ import annotations


class TensorforgeError(Exception):
    """Base of all tensorforge errors."""


class IRError(TensorforgeError):
    """Malformed IR built through the API (bad operand, unknown op, wrong attribute)."""


class VerificationError(IRError):
    """An op broke one of its rules; the message names the op, its location and the rule."""


class ParseError(TensorforgeError):
    """Text that is not valid tensorforge IR; the message starts with ``line:col``."""

    def __init__(self, message: str, line: int = 0, col: int = 0, source: str = "<text>"):
        self.line, self.col, self.source = line, col, source
        super().__init__(f"{source}:{line}:{col}: {message}")


class ShapeError(IRError):
    """Operand shapes that an op cannot accept."""


class UnsupportedOpError(TensorforgeError):
    """A model uses an op or attribute that tensorforge does not support (yet)."""


class FrontendError(TensorforgeError):
    """A model file or module that a frontend cannot import."""


class PassError(TensorforgeError):
    """A pass or pipeline failed (unknown pass name, illegal ops left after conversion)."""


class CompileError(TensorforgeError):
    """Native compilation failed; the message names the kernel and the generated source."""


class ScheduleError(TensorforgeError):
    """A schedule primitive that would be illegal; the message names the primitive, the loop and the rule."""


class TuningDatabaseError(TensorforgeError):
    """A tuning database that cannot be used (corrupt, foreign, newer schema, bad JSON lines); the
    message names the file and what to do."""


class TensorforgeWarning(UserWarning):
    """Something a user may want to act on that is not an error (e.g. a compiled specialisation
    evicted from a full cache)."""


class InputShapeError(TensorforgeError):
    """Inputs a compiled model cannot run: a size outside a symbol's range, two inputs that
    disagree on a shared symbol, a wrong rank or static size; one line naming the input, the axis,
    the value and what was allowed, raised before anything runs."""


class ArtifactError(TensorforgeError):
    """A ``.tfm`` file that must not be loaded: not an artifact, truncated, incomplete, a member
    whose bytes differ from what its manifest recorded, or not the file a ``sha256=`` pin names.
    Raised before any code from the file runs; the message names the file and the member, and
    says what to do (save the model again, download the file again)."""


class ResourceError(TensorforgeError):
    """This machine lacks what the operation needs (a C compiler, disk space, a writable cache
    folder, memory). The model is not at fault: the message says what was needed and how to
    provide it, and the same call works once it is."""


class CompilerNotFoundError(ResourceError, CompileError):
    """No C compiler can run: the message names the compiler looked for (``$CC``, else gcc or cc on
    ``$PATH``) and says how to install one, or to use ``target="interpreter"``."""


class CacheWriteError(ResourceError, CompileError):
    """The compile cache (``$TENSORFORGE_CACHE``) could not be written: a full disk, a quota, an I/O
    error, or an unwritable cache with no writable temporary folder to fall back on."""
