"""mlajit: run-time generated sparse-MLA attention decode kernels for FP8 KV
caches, from PyTorch.

The one-line swap from FlashMLA::

    from mlajit.flash_mla import flash_mla_with_kvcache, get_mla_metadata

The engine-shaped object, CUDA-graph safe after warm-up::

    dec = mlajit.SparseMLADecoder("v32", 16, 64, max_batch_size=256, max_topk=2048)
    dec.warmup(batch_sizes=[1, 2, 4, 8])
    dec.run(q, kv_cache, indices, out, sm_scale)

Also: ``torch.ops.mlajit.sparse_mla_decode`` (torch.compile traces it),
``mlajit.supported(...)`` (the envelope, no GPU needed), ``mlajit.quantize_kv``
(SPEC.md's quantizer in torch), ``mlajit.context()`` (the kernel caches and
their counters). The package binds the C library (libmlajit.so) with ctypes, so
it has no torch ABI in it: one build serves every Python 3.9+ and torch version.
Importing it does not import torch; the torch parts load on first use.
"""
from __future__ import annotations

from . import _capi, _log
from ._capi import LibraryNotFound
from .context import Context, ContextInfo, KernelReport, Plan, TuneReport, WarmupReport, context
from .envelope import supported
from .errors import (CacheError, CompileError, CorruptError, CudaError, FileError, GraphCaptureError,
                     InternalError, InvalidArgumentError, MlajitError, NoDeviceError, NotFoundError,
                     OutOfHostMemoryError, UnsupportedError)
from .models import FEATURES, Layout, Model, ModelInfo, model_info

__version__ = "1.0.0"  # the C library's (tests/test_abi.py checks it against mlajit_version)

_log.install()

# Names that need torch, loaded on first use (PEP 562).
_LAZY = {
    "SparseMLADecoder": ("decoder", "SparseMLADecoder"),
    "DecoderWarmup": ("decoder", "DecoderWarmup"),
    "quantize_kv": ("quantize", "quantize_kv"),
    "flash_mla": ("flash_mla", None),
    "ops": ("ops", None),
}


def __getattr__(name):
    entry = _LAZY.get(name)
    if entry is None:
        raise AttributeError(f"module 'mlajit' has no attribute {name!r}")
    import importlib
    module = importlib.import_module(f".{entry[0]}", __name__)
    value = module if entry[1] is None else getattr(module, entry[1])
    globals()[name] = value
    return value


def library_path() -> str:
    """The libmlajit.so this package loaded."""
    return _capi.lib.path


__all__ = [
    "CacheError", "CompileError", "Context", "ContextInfo", "CorruptError", "CudaError", "DecoderWarmup", "FEATURES",
    "FileError", "GraphCaptureError", "InternalError", "InvalidArgumentError", "KernelReport", "Layout", "LibraryNotFound",
    "MlajitError", "Model", "ModelInfo", "NoDeviceError", "NotFoundError", "OutOfHostMemoryError", "Plan",
    "SparseMLADecoder", "TuneReport", "UnsupportedError", "WarmupReport", "context", "flash_mla", "library_path",
    "model_info", "ops", "quantize_kv", "supported",
]
