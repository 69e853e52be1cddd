"""The fake CUDA driver's control functions (tests/fake_cuda/fake_cuda.h) for the
suites marked fake_driver."""
import ctypes
import os

import pytest

# Bytes of the kernels' parameter block (src/codegen/kernel_abi.h, at least this
# long) that the fake records per launch and the tests compare: both sides of a
# comparison are filled by the library, so its layout may change freely.
PARAM_PREFIX = 232


class Counts(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in (
        "images_loaded", "images_live", "primary_retained", "context_depth", "allocations_live", "streams_live",
        "events_live", "graphs_live", "execs_live", "launches", "launch_ex_calls")]


class Launch(ctypes.Structure):
    # fake_cuda_launch; params is _Alignas(16): after `captured` (offset 148) it starts at 160
    _fields_ = [("function", ctypes.c_char * 96), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_bytes", ctypes.c_uint), ("stream", ctypes.c_void_p), ("extended", ctypes.c_int),
                ("programmatic", ctypes.c_int), ("captured", ctypes.c_int), ("_pad", ctypes.c_char * 12),
                ("params", ctypes.c_ubyte * 512)]


def load():
    """The fake libcuda.so.1 this process loaded, or a skip saying how to get it."""
    if not os.environ.get("MLAJIT_FAKE_CUDA"):
        pytest.skip("needs the fake CUDA driver: run `meson test -C build python_fake_gpu`")
    driver = ctypes.CDLL("libcuda.so.1")  # what the library's dlopen gets
    if not hasattr(driver, "fake_cuda_counts_get"):
        pytest.skip("libcuda.so.1 on the loader path is the real driver, not tests/fake_cuda's")
    driver.fake_cuda_counts_get.restype = Counts
    driver.fake_cuda_launch_at.restype = ctypes.POINTER(Launch)
    driver.fake_cuda_launch_at.argtypes = [ctypes.c_int]
    driver.fake_cuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    driver.fake_cuda_set_param_bytes.argtypes = [ctypes.c_size_t]
    return driver


def params(driver, i):
    launch = driver.fake_cuda_launch_at(i)
    assert launch, f"no launch {i}"
    return bytes(launch.contents.params[:PARAM_PREFIX])
