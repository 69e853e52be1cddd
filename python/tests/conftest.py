"""Shared set-up of the Python suites (run by `meson test`: suites python and
python_fake_gpu; by hand: PYTHONPATH=python python3 -m pytest python/tests).

What needs what, and skips saying so:
  - the ctypes layer needs only libmlajit.so (CI runs it);
  - tests marked fake_driver need the project's fake libcuda.so.1 loaded
    instead of the real one (meson test python_fake_gpu);
  - torch tests need torch (CI does not install it: it pulls several GB);
  - GPU tests need torch with CUDA and a GPU (the H200 host).
"""
import glob
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))  # the package from the source tree

try:
    import torch
    HAVE_TORCH = True
except ImportError:
    torch = None
    HAVE_TORCH = False

NO_TORCH = ("torch is not installed (CI does not install it: it pulls several GB of CUDA libraries); "
            "these tests run where torch is, as on the H200 host")


def gpu_unavailable_reason():
    if not HAVE_TORCH:
        return NO_TORCH
    if os.environ.get("MLAJIT_FAKE_CUDA"):
        return "this process has the fake CUDA driver loaded (suite python_fake_gpu)"
    if not torch.cuda.is_available():
        return "no GPU on this machine (torch.cuda.is_available() is False); GPU tests run on the H200 host"
    return None


requires_torch = pytest.mark.skipif(not HAVE_TORCH, reason=NO_TORCH)


def pytest_configure(config):
    config.addinivalue_line("markers", "fake_driver: needs the fake libcuda.so.1 (meson test python_fake_gpu)")
    config.addinivalue_line("markers", "gpu: needs torch with CUDA and a GPU")


def pytest_collection_modifyitems(config, items):
    reason = gpu_unavailable_reason()
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def golden_dir():
    """MLAJIT_GOLDEN_DIR (meson sets it), else ../shared/golden, else .golden."""
    env = os.environ.get("MLAJIT_GOLDEN_DIR")
    if env:
        return env
    for d in (os.path.join(ROOT, "..", "shared", "golden"), os.path.join(ROOT, ".golden")):
        if os.path.isdir(d):
            return d
    return os.path.join(ROOT, ".golden")


def golden_cases():
    """The full set's case directories; without it, the build's unpacked subset
    (tests/golden, $MLAJIT_GOLDEN_SUBSET)."""
    found = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(golden_dir(), "*", "case.json")))
    subset = os.environ.get("MLAJIT_GOLDEN_SUBSET")
    if not found and subset:
        found = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(subset, "*", "case.json")))
    return found


def build_file(name, env):
    """A file of the build: $env (meson sets it), else the newest build*/name."""
    path = os.environ.get(env)
    if path:
        return path
    found = sorted(glob.glob(os.path.join(ROOT, "build*", name)), key=os.path.getmtime, reverse=True)
    return found[0] if found else None


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "cache")


@pytest.fixture(scope="session")
def shared_cache_dir(tmp_path_factory):
    """One kernel cache for the tests that do not count compiles: each kernel compiles once per run."""
    return str(tmp_path_factory.mktemp("shared-cache"))


@pytest.fixture(scope="session")
def fake():
    """The fake CUDA driver's controls (the fake_driver suites), or a skip saying how to get it."""
    import fake_driver
    return fake_driver.load()
