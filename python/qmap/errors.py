"""qmap's exceptions: qmap.Error and one subclass per kind of qmap_status (include/qmap_errors.h).

Every error the library reports, and every bad argument the package refuses before calling it, is raised
as a subclass of qmap.Error carrying the status's code, its name ("QMAP_ERR_SHAPE") and the one-line
message naming the file, key or tensor at fault. Where a kind has an obvious built-in counterpart the class
derives from it too (FileIOError is an OSError, InvalidArgumentError a ValueError, ...), so code that
catches the built-in catches qmap's.
"""
import re
from typing import Any, Dict, Optional, Type

_TAGGED = re.compile(r"\[QM(AP)?_[A-Z0-9_]+\]$")   # the library's messages end with their status


class Error(Exception):
    """Base of every qmap error. `code` is the qmap_status value, `status` its name, `message` the
    library's (or the package's) one-line message."""

    def __init__(self, message: str, *, code: int, status: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def __str__(self) -> str:
        return self.message if _TAGGED.search(self.message) else "%s [%s]" % (self.message, self.status)


class FileIOError(Error, OSError):
    """QMAP_ERR_IO: a file could not be opened, read or mapped (missing, a directory, a FIFO...)."""


class OutOfMemoryError(Error, MemoryError):
    """QMAP_ERR_NOMEM: a buffer (a session's KV cache, ...) did not fit."""


class InvalidArgumentError(Error, ValueError):
    """QMAP_ERR_INVALID_ARGUMENT: an argument out of range (an id outside the vocabulary, a prompt longer than
    the context, an input of the wrong shape or dtype, ...)."""


class StateError(Error, RuntimeError):
    """QMAP_ERR_STATE: the call is not allowed now (the model is closed, a streamed generation is running)."""


class NotFoundError(Error, LookupError):
    """QMAP_ERR_NOT_FOUND: something the call needs is absent (the container has no tokenizer, ...)."""


class TypeMismatchError(Error, TypeError):
    """QMAP_ERR_TYPE_MISMATCH: a metadata value has another type than the one asked for."""


class FormatError(Error):
    """The file is not a valid .qmap container (codes 7..39 of qmap_errors.h: bad magic, truncated, bad
    layout, ...; spec/FORMAT.md section 7)."""


class ChecksumError(FormatError):
    """QMAP_ERR_HEADER_CHECKSUM / QMAP_ERR_TENSOR_CHECKSUM: bytes differ from what was written."""


class Utf8Error(FormatError, ValueError):
    """QMAP_ERR_BAD_UTF8: a string (in the file, or text given to the tokenizer) is not valid UTF-8."""


class UnsupportedError(Error):
    """QMAP_ERR_UNSUPPORTED_VERSION / _UNSUPPORTED / _UNKNOWN_ARCH: valid, but beyond what this library runs."""


class SourceError(Error):
    """QMAP_ERR_BAD_SOURCE / _FORBIDDEN / _BAD_CONFIG: a checkpoint or config given to convert is malformed,
    uses a forbidden pickle global, or lacks a value."""


class WeightsError(Error):
    """QMAP_ERR_SHAPE / _MISSING_TENSOR / _UNEXPECTED_TENSOR / _NONFINITE: the tensors do not fit the
    architecture (a shape, a missing or extra tensor, a NaN)."""


# Every code of include/qmap_errors.h (0 is success and never raised). Codes are frozen; a code this table
# does not know yet (a newer library) raises the base Error.
_FORMAT_CODES = [7, 8] + list(range(10, 16)) + [17, 18, 19] + list(range(21, 38)) + [39]
CLASS_OF_CODE: Dict[int, Type[Error]] = {
    1: FileIOError, 2: OutOfMemoryError, 3: InvalidArgumentError, 4: StateError, 5: NotFoundError,
    6: TypeMismatchError, 9: UnsupportedError, 16: ChecksumError, 20: Utf8Error, 38: ChecksumError,
    40: SourceError, 41: UnsupportedError, 42: SourceError, 43: WeightsError, 44: WeightsError,
    45: WeightsError, 46: WeightsError, 47: SourceError, 48: UnsupportedError,
}
CLASS_OF_CODE.update({c: FormatError for c in _FORMAT_CODES})

# The codes the package raises itself, with the names qmap_status_name gives them.
QMAP_ERR_IO = 1
QMAP_ERR_INVALID_ARGUMENT = 3
QMAP_ERR_STATE = 4
QMAP_ERR_NOT_FOUND = 5


def error_for(code: int, message: str, status: Optional[str] = None) -> Error:
    """The exception for status `code` (its class from CLASS_OF_CODE, else Error)."""
    if status is None:
        from . import _lib
        status = _lib.lib.qmap_status_name(code).decode()
    return CLASS_OF_CODE.get(code, Error)(message, code=code, status=status)


def raise_if(status: int, err: Any) -> None:
    """Raise the exception for a C call's status (0: nothing), with the message it wrote into err (a
    _lib.qmap_error)."""
    if status != 0:
        raise error_for(status, err.message.decode("utf-8", "replace"))


def invalid(message: str) -> InvalidArgumentError:
    """The InvalidArgumentError of an argument the package itself refuses (before any C call)."""
    return InvalidArgumentError(message, code=QMAP_ERR_INVALID_ARGUMENT, status="QMAP_ERR_INVALID_ARGUMENT")
