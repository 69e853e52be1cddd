"""The exceptions: one per C status code (include/mlajit.h's mlajit_status), each
also a subclass of the built-in exception an engine would catch for it, so a bad
tensor or an unsupported shape is a ``ValueError``, an allocation failure a
``MemoryError``, a missing file an ``OSError``.

Every exception carries ``status`` (the C code, or None for errors raised by the
Python layer) and its message, which names the argument at fault and what is
allowed.
"""
from __future__ import annotations

from typing import Dict, Optional, Type

from . import _capi


class MlajitError(Exception):
    """Base of every mlajit exception."""

    status: Optional[int] = None

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgumentError(MlajitError, ValueError):
    """An argument (a tensor's dtype, device, shape, stride or alignment, a size,
    a name) is outside what is allowed; the message names it and the allowed values."""

    status = _capi.ERR_INVALID_ARGUMENT


class UnsupportedError(MlajitError, ValueError):
    """A valid request outside the supported envelope (mlajit.supported says why)."""

    status = _capi.ERR_UNSUPPORTED


class OutOfHostMemoryError(MlajitError, MemoryError):
    status = _capi.ERR_OUT_OF_MEMORY


class NoDeviceError(MlajitError, RuntimeError):
    """No CUDA driver or GPU; the message says which."""

    status = _capi.ERR_NO_DEVICE


class CompileError(MlajitError, RuntimeError):
    """NVRTC rejected the generated source (a bug in mlajit; please report it)."""

    status = _capi.ERR_COMPILE


class CacheError(MlajitError, RuntimeError):
    status = _capi.ERR_CACHE


class CudaError(MlajitError, RuntimeError):
    """A CUDA Driver API call failed; the message names it and its error."""

    status = _capi.ERR_CUDA


class FileError(MlajitError, OSError):
    status = _capi.ERR_IO


class NotFoundError(MlajitError, LookupError):
    """A looked-up entry does not exist: with JIT disabled, a kernel missing from
    the packs and the cache (the message names the spec; a pack that holds it, from
    `mlajit pack build`, serves it)."""

    status = _capi.ERR_NOT_FOUND


class CorruptError(MlajitError, RuntimeError):
    status = _capi.ERR_CORRUPT


class InternalError(MlajitError, RuntimeError):
    status = _capi.ERR_INTERNAL


class GraphCaptureError(MlajitError, RuntimeError):
    """A call under CUDA stream capture that would have to compile, allocate or
    synchronize (a shape that was not warmed up); nothing was enqueued."""


_BY_STATUS: Dict[int, Type[MlajitError]] = {
    cls.status: cls
    for cls in (InvalidArgumentError, UnsupportedError, OutOfHostMemoryError, NoDeviceError, CompileError, CacheError,
                CudaError, FileError, NotFoundError, CorruptError, InternalError)
}


def exception_for(status: int, message: str = "") -> MlajitError:
    """The exception of a C status code and message (an unknown code is an
    InternalError that names it)."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        return InternalError(f"mlajit returned the unknown status {status}: {message}", status)
    return cls(message or _capi.status_string(status), status)


def check(status: int, what: str = "") -> None:
    """Raise the exception of a failed call's status, with the thread's message."""
    if status:
        message = _capi.last_error() or _capi.status_string(status)
        raise exception_for(status, f"{what}: {message}" if what else message)
