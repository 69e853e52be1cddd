"""The C status codes to the exception hierarchy, and real failures of the
library raising the mapped exception with the library's message."""
import ctypes

import pytest

import mlajit
from mlajit import _capi, errors


@pytest.mark.parametrize("status, cls, builtin", [
    (_capi.ERR_INVALID_ARGUMENT, mlajit.InvalidArgumentError, ValueError),
    (_capi.ERR_UNSUPPORTED, mlajit.UnsupportedError, ValueError),
    (_capi.ERR_OUT_OF_MEMORY, mlajit.OutOfHostMemoryError, MemoryError),
    (_capi.ERR_NO_DEVICE, mlajit.NoDeviceError, RuntimeError),
    (_capi.ERR_COMPILE, mlajit.CompileError, RuntimeError),
    (_capi.ERR_CACHE, mlajit.CacheError, RuntimeError),
    (_capi.ERR_CUDA, mlajit.CudaError, RuntimeError),
    (_capi.ERR_IO, mlajit.FileError, OSError),
    (_capi.ERR_NOT_FOUND, mlajit.NotFoundError, LookupError),
    (_capi.ERR_CORRUPT, mlajit.CorruptError, RuntimeError),
    (_capi.ERR_INTERNAL, mlajit.InternalError, RuntimeError),
])
def test_each_status_has_its_exception(status, cls, builtin):
    e = errors.exception_for(status, "the message")
    assert type(e) is cls and isinstance(e, builtin) and isinstance(e, mlajit.MlajitError)
    assert e.status == status and str(e) == "the message"
    # without a message: the library's description of the code
    assert str(errors.exception_for(status)) == _capi.status_string(status)


def test_every_status_code_is_mapped():
    codes = [v for k, v in vars(_capi).items() if k.startswith("ERR_")]
    assert sorted(codes) == sorted(errors._BY_STATUS)


def test_an_unknown_status_is_an_internal_error_naming_it():
    e = errors.exception_for(99, "x")
    assert isinstance(e, mlajit.InternalError) and "99" in str(e)


def test_a_refused_spec_raises_invalid_argument_with_the_librarys_message():
    with pytest.raises(ValueError, match=r"h_q = 0; allowed 1\.\.128") as info:
        mlajit.models.make_spec("v32", 0, 64)
    assert isinstance(info.value, mlajit.InvalidArgumentError)
    assert info.value.status == _capi.ERR_INVALID_ARGUMENT


def test_an_unsupported_spec_raises_unsupported():
    spec = mlajit.models.make_spec("v32", 128, 64, arch="sm_120a")
    spec.tile, spec.heads_per_cta = 64, 32  # does not fit sm_120a's shared memory
    with pytest.raises(mlajit.UnsupportedError, match="shared memory"):
        errors.check(_capi.lib.mlajit_spec_resolve(ctypes.byref(spec), ctypes.byref(_capi.KernelSpec())))


def test_python_side_checks_name_the_argument():
    with pytest.raises(mlajit.InvalidArgumentError, match="model = 'v4'.*allowed: v32, dsv4, glm_nsa, glm53_nope, dots3_swa"):
        mlajit.model_info("v4")
    with pytest.raises(mlajit.InvalidArgumentError, match="features: 'sinks' is unknown; allowed: sink"):
        mlajit.models.as_features(["sinks"])
    with pytest.raises(mlajit.InvalidArgumentError, match="device = -1"):
        mlajit.Context(-1)
