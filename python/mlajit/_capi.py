"""The C library through ctypes: every struct of ``include/mlajit.h`` the package
uses, the constants, the function prototypes, and the loader.

This module is the one place the C ABI is written down in Python: the rest of the
package imports the structs and functions from here, and ``python/tests/
test_abi.py`` checks each struct's size and field offsets (and the constants)
against the header, through a small C program built by meson (``abi_layout``).
Change a struct here and in the header together, and that test says whether
they agree.
"""
from __future__ import annotations

import ctypes
import glob
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int, c_int64, c_size_t,
                    c_uint, c_uint16, c_void_p)

# --- constants (checked against the header by test_abi.py) -------------------------

OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_UNSUPPORTED = 2
ERR_OUT_OF_MEMORY = 3
ERR_NO_DEVICE = 4
ERR_COMPILE = 5
ERR_CACHE = 6
ERR_CUDA = 7
ERR_IO = 8
ERR_NOT_FOUND = 9
ERR_CORRUPT = 10
ERR_INTERNAL = 11

MODEL_V32 = 1
MODEL_DSV4 = 2
MODEL_GLM_NSA = 3
MODEL_GLM53_NOPE = 4
MODEL_DOTS3_SWA = 5
MODEL_V32_BF16 = 6
MODEL_DSV4_BF16 = 7
MODEL_CUSTOM = 100  # the layout in KernelSpec.layout

SCALE_FP32_POW2 = 1
SCALE_FP32 = 2
SCALE_UE8M0 = 3
SCALE_NONE = 4  # bf16 NoPE values, no scales
LAYOUT_STRING_LEN = 64

SCALES_INLINE = 1
SCALES_PAGE_FOOTER = 2

FEATURE_SINK = 0x1
FEATURE_TOPK_LENGTH = 0x2
FEATURE_EXTRA_TOPK_LENGTH = 0x4
FEATURE_ALL = 0x7

MAX_HEADS = 128
MAX_PAGE_SIZE = 1024
MAX_TOPK = 16384
MAX_SQ = 64
MAX_BATCH = 65536
MAX_ROWS = 65536
ARCH_LEN = 16

VARIANT_AUTO = 0

CONTEXT_NO_DEVICE = 0x1
CONTEXT_NO_DISK_CACHE = 0x2
CONTEXT_NO_JIT = 0x4

LOG_WARNING = 1
LOG_INFO = 2

SOURCE_COMPILED = 0
SOURCE_MEMORY = 1
SOURCE_PACK = 2
SOURCE_DISK = 3

DEFAULT_SM_COUNT = 132
TACTIC_RULES = 0
TACTIC_TUNED = 1
TACTIC_TUNED_BELOW = 2

# --- structs (field for field as include/mlajit.h) ----------------------------------


class SizedStructure(Structure):
    """A struct that starts with `size_t struct_size` (include/mlajit.h's rule: the
    library reads and writes only that many bytes). Constructing one sets it to
    this binding's sizeof, so positional and keyword arguments are the fields
    after it, as before."""

    def __init__(self, *args, **kwargs):
        super().__init__(ctypes.sizeof(type(self)), *args, **kwargs)


class ModelDesc(Structure):  # the library's, returned by pointer: its struct_size is the library's
    _fields_ = [
        ("struct_size", c_size_t),
        ("model", c_int),
        ("name", c_char_p),
        ("d_qk", c_int),
        ("d_nope", c_int),
        ("d_rope", c_int),
        ("d_v", c_int),
        ("quant_tile", c_int),
        ("num_scales", c_int),
        ("scale_format", c_int),
        ("scale_place", c_int),
        ("row_bytes", c_int),
        ("footer_bytes", c_int),
        ("bytes_per_token", c_int),
        ("scale_offset", c_int),
        ("rope_offset", c_int),
    ]


class Layout(Structure):  # embedded by value in KernelSpec: no struct_size, never grows
    _fields_ = [
        ("d_nope", c_int),
        ("d_rope", c_int),
        ("d_v", c_int),
        ("quant_tile", c_int),
        ("scale_format", c_int),
        ("scale_place", c_int),
        ("row_bytes", c_int),
        ("footer_bytes", c_int),
        ("reserved", c_int * 8),
    ]


class KernelSpec(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("model", c_int),
        ("h_q", c_int),
        ("page_size", c_int),
        ("extra_page_size", c_int),
        ("features", c_uint),
        ("tile", c_int),
        ("heads_per_cta", c_int),
        ("variant", c_int),
        ("arch", c_char * ARCH_LEN),
        ("layout", Layout),
    ]


class ContextOptions(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("device", c_int),
        ("cache_dir", c_char_p),
        ("flags", c_uint),
        ("packs", c_char_p),
    ]


class ContextInfo(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("has_device", c_int),
        ("device_name", c_char * 128),
        ("device_arch", c_char * ARCH_LEN),
        ("sm_count", c_int),
        ("driver_version", c_int),
        ("nvrtc_major", c_int),
        ("nvrtc_minor", c_int),
        ("cache_dir", c_char * 1024),
        ("cache_bytes", c_int64),
        ("cache_entries", c_int64),
        ("cache_writable", c_int),
        ("pack_count", c_int),
        ("jit_disabled", c_int),
        ("memory_hits", c_int64),
        ("pack_hits", c_int64),
        ("disk_hits", c_int64),
        ("compiles", c_int64),
        ("corrupt", c_int64),
        ("jit_refusals", c_int64),
        ("compile_ms", c_double),
        ("l2_bytes", c_int64),
        ("no_device_reason", c_char * 256),
        ("stale", c_int64),
    ]


class KernelReport(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("spec", c_char * 128),
        ("key", c_char * 33),
        ("cache_hit", c_int),
        ("loaded", c_int),
        ("generate_ms", c_double),
        ("compile_ms", c_double),
        ("lookup_ms", c_double),
        ("registers", c_int),
        ("shared_bytes", c_int),
        ("spill_bytes", c_int),
        ("cubin_bytes", c_size_t),
        ("source", c_int),
    ]


class KernelGrid(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("models", POINTER(c_int)),
        ("num_models", c_int),
        ("head_counts", POINTER(c_int)),
        ("num_head_counts", c_int),
        ("page_sizes", POINTER(c_int)),
        ("num_page_sizes", c_int),
        ("extra_page_sizes", POINTER(c_int)),
        ("num_extra_page_sizes", c_int),
        ("feature_sets", POINTER(c_uint)),
        ("num_feature_sets", c_int),
        ("archs", POINTER(c_char_p)),
        ("num_archs", c_int),
        ("layouts", POINTER(Layout)),
        ("num_layouts", c_int),
    ]


class WarmupReport(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("kernels", c_int),
        ("from_memory", c_int),
        ("from_packs", c_int),
        ("from_disk", c_int),
        ("compiled", c_int),
        ("loaded", c_int),
        ("wall_ms", c_double),
        ("compile_ms", c_double),
    ]


class TuneGrid(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("models", POINTER(c_int)),
        ("num_models", c_int),
        ("head_counts", POINTER(c_int)),
        ("num_head_counts", c_int),
        ("page_sizes", POINTER(c_int)),
        ("num_page_sizes", c_int),
        ("feature_sets", POINTER(c_uint)),
        ("num_feature_sets", c_int),
        ("topks", POINTER(c_int)),
        ("num_topks", c_int),
        ("rows", POINTER(c_int)),
        ("num_rows", c_int),
        ("extra_topks", POINTER(c_int)),
        ("num_extra_topks", c_int),
        ("extra_page_size", c_int),
        ("layouts", POINTER(Layout)),  # added after 1.0
        ("num_layouts", c_int),
    ]


class TuneReport(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("buckets", c_int),
        ("buckets_done", c_int),
        ("stored", c_int),
        ("timed", c_int),
        ("dropped", c_int),
        ("pruned", c_int),
        ("failed_checks", c_int),
        ("deadline_hit", c_int),
        ("seconds", c_double),
    ]


class DecodeShape(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("batch", c_int),
        ("s_q", c_int),
        ("topk", c_int),
        ("extra_topk", c_int),
        ("num_splits", c_int),
    ]


class PlanOutline(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("kernel", c_char * 128),
        ("variant", c_int),
        ("tile", c_int),
        ("heads_per_cta", c_int),
        ("num_splits", c_int),
        ("head_groups", c_int),
        ("rows", c_int),
        ("tiles_per_split", c_int),
        ("reserved_1_0", c_int),
        ("tactic", c_int),
    ]


class CacheView(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("page_stride", c_int64),
        ("num_pages", c_int64),
    ]


class DecodeArgs(SizedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("q", c_void_p),
        ("q_stride_b", c_int64),
        ("q_stride_s", c_int64),
        ("q_stride_h", c_int64),
        ("kv", CacheView),
        ("indices", c_void_p),
        ("indices_stride_b", c_int64),
        ("indices_stride_s", c_int64),
        ("topk_length", c_void_p),
        ("attn_sink", c_void_p),
        ("extra_kv", CacheView),
        ("extra_indices", c_void_p),
        ("extra_indices_stride_b", c_int64),
        ("extra_indices_stride_s", c_int64),
        ("extra_topk_length", c_void_p),
        ("sm_scale", c_float),
        ("out", c_void_p),
        ("out_stride_b", c_int64),
        ("out_stride_s", c_int64),
        ("out_stride_h", c_int64),
        ("lse", c_void_p),
        ("lse_stride_b", c_int64),
        ("lse_stride_s", c_int64),
        ("lse_stride_h", c_int64),
        ("workspace", c_void_p),
        ("workspace_size", c_size_t),
    ]


# Every public struct, by its C name: what test_abi.py compares with the header.
STRUCTS = {
    "mlajit_model_desc": ModelDesc,
    "mlajit_layout": Layout,
    "mlajit_kernel_spec": KernelSpec,
    "mlajit_context_options": ContextOptions,
    "mlajit_context_info": ContextInfo,
    "mlajit_kernel_report": KernelReport,
    "mlajit_kernel_grid": KernelGrid,
    "mlajit_warmup_report": WarmupReport,
    "mlajit_decode_shape": DecodeShape,
    "mlajit_plan_outline": PlanOutline,
    "mlajit_cache_view": CacheView,
    "mlajit_decode_args": DecodeArgs,
    "mlajit_tune_grid": TuneGrid,
    "mlajit_tune_report": TuneReport,
}

LOG_HANDLER = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p)

_PACK_CODES = {c_void_p: "Q", c_char_p: "Q", c_int64: "q", c_size_t: "Q", c_int: "i", c_uint: "I", c_float: "f",
               c_double: "d"}


def flat_fields(cls, base=0, prefix=""):
    """(name, offset, ctype) of every scalar field of a struct, nested ones
    flattened as "kv.data"; in order."""
    out = []
    for name, ctype in cls._fields_:
        offset = base + getattr(cls, name).offset
        if isinstance(ctype, type) and issubclass(ctype, Structure):
            out += flat_fields(ctype, offset, f"{prefix}{name}.")
        else:
            out.append((prefix + name, offset, ctype))
    return out


def packer(cls, first: str, end: str):
    """A struct.Struct that writes the fields of cls from `first` up to (not
    including) `end` in one call, pointers as integers (0 for NULL), with the
    padding the compiler put between them; and the byte offset it starts at.
    Derived from the ctypes definition above, so the layout stays in one place."""
    import struct
    fields = flat_fields(cls)
    names = [f[0] for f in fields]
    lo, hi = names.index(first), names.index(end)
    start = pos = fields[lo][1]
    fmt = "<"
    for name, offset, ctype in fields[lo:hi]:
        fmt += "x" * (offset - pos) + _PACK_CODES[ctype]
        pos = offset + ctypes.sizeof(ctype)
    return struct.Struct(fmt), start

# --- prototypes --------------------------------------------------------------------

_PROTOTYPES = {
    "mlajit_version": (c_char_p, [POINTER(c_int), POINTER(c_int), POINTER(c_int)]),
    "mlajit_status_string": (c_char_p, [c_int]),
    "mlajit_last_error": (c_char_p, []),
    "mlajit_free": (None, [c_void_p]),
    "mlajit_set_log_handler": (None, [LOG_HANDLER, c_void_p]),
    "mlajit_model_describe": (POINTER(ModelDesc), [c_int]),
    "mlajit_model_from_name": (c_int, [c_char_p, POINTER(c_int)]),
    "mlajit_min_page_stride": (c_int64, [c_int, c_int]),
    "mlajit_layout_validate": (c_int, [POINTER(Layout)]),
    "mlajit_layout_parse": (c_int, [c_char_p, POINTER(Layout)]),
    "mlajit_layout_string": (c_int, [POINTER(Layout), c_char_p, c_size_t]),
    "mlajit_model_layout": (c_int, [c_int, POINTER(Layout)]),
    "mlajit_layout_describe": (POINTER(ModelDesc), [POINTER(Layout)]),
    "mlajit_layout_min_page_stride": (c_int64, [POINTER(Layout), c_int]),
    "mlajit_spec_init": (c_int, [POINTER(KernelSpec), c_int, c_int, c_int]),
    "mlajit_spec_init_layout": (c_int, [POINTER(KernelSpec), POINTER(Layout), c_int, c_int]),
    "mlajit_spec_validate": (c_int, [POINTER(KernelSpec)]),
    "mlajit_spec_string": (c_int, [POINTER(KernelSpec), c_char_p, c_size_t]),
    "mlajit_spec_parse": (c_int, [c_char_p, POINTER(KernelSpec)]),
    "mlajit_spec_resolve": (c_int, [POINTER(KernelSpec), POINTER(KernelSpec)]),
    "mlajit_envelope_check": (c_int, [POINTER(KernelSpec), POINTER(DecodeShape)]),
    "mlajit_context_create": (c_int, [POINTER(ContextOptions), POINTER(c_void_p)]),
    "mlajit_context_destroy": (None, [c_void_p]),
    "mlajit_context_get_info": (c_int, [c_void_p, POINTER(ContextInfo)]),
    "mlajit_kernel_prepare": (c_int, [c_void_p, POINTER(KernelSpec), POINTER(KernelReport)]),
    "mlajit_warmup": (c_int, [c_void_p, POINTER(KernelGrid), c_int, POINTER(WarmupReport)]),
    "mlajit_tune": (c_int, [c_void_p, POINTER(TuneGrid), c_double, POINTER(TuneReport)]),
    "mlajit_plan_create": (c_int, [c_void_p, POINTER(KernelSpec), POINTER(DecodeShape), POINTER(c_void_p)]),
    "mlajit_plan_destroy": (None, [c_void_p]),
    "mlajit_plan_workspace_size": (c_size_t, [c_void_p]),
    "mlajit_plan_num_splits": (c_int, [c_void_p]),
    "mlajit_plan_report": (POINTER(KernelReport), [c_void_p]),
    "mlajit_plan_describe": (c_int, [POINTER(KernelSpec), POINTER(DecodeShape), c_int, POINTER(PlanOutline)]),
    "mlajit_plan_get_outline": (c_int, [c_void_p, POINTER(PlanOutline)]),
    "mlajit_plan_describe_in_context": (c_int, [c_void_p, POINTER(KernelSpec), POINTER(DecodeShape),
                                                POINTER(PlanOutline)]),
    # The hot call: plain addresses (ints), so ctypes converts nothing but ints
    # (see also `decode` below, the same function called holding the GIL).
    "mlajit_decode": (c_int, [c_void_p, c_void_p, c_void_p]),
    "mlajit_quantize_token": (c_int, [c_int, POINTER(c_uint16), c_void_p, c_int, c_int]),
    "mlajit_dequantize_token": (c_int, [c_int, c_void_p, c_int, c_int, POINTER(c_float)]),
    "mlajit_quantize_token_layout": (c_int, [POINTER(Layout), POINTER(c_uint16), c_void_p, c_int, c_int]),
    "mlajit_dequantize_token_layout": (c_int, [POINTER(Layout), c_void_p, c_int, c_int, POINTER(c_float)]),
    "mlajit_reference_decode": (c_int, [POINTER(KernelSpec), POINTER(DecodeShape), POINTER(DecodeArgs),
                                        POINTER(c_double), POINTER(c_double)]),
}

LIBRARY_ENV = "MLAJIT_LIBRARY"
_LIBRARY_NAME = "libmlajit.so"


def library_candidates():
    """Where the library is looked for, in order: $MLAJIT_LIBRARY (a path to
    libmlajit.so), the package's own folder (an installed wheel), then, for a
    package used from the source tree (python/mlajit), the build folders at the
    repository root (build*/libmlajit.so, the newest first)."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.join(here, _LIBRARY_NAME)]
    root = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(root, "meson.build")):
        builds = glob.glob(os.path.join(root, "build*", _LIBRARY_NAME))
        found += sorted(builds, key=os.path.getmtime, reverse=True)
    return found


class LibraryNotFound(ImportError):
    pass


def _load():
    tried = []
    for path in library_candidates():
        if not os.path.exists(path):
            tried.append(f"{path} (missing)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:  # a sanitizer build without its runtime, a foreign arch
            tried.append(f"{path} ({e})")
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        lib.path = path
        return lib, _holding_gil(path, "mlajit_decode")
    raise LibraryNotFound(
        "mlajit: libmlajit.so not found; tried: " + "; ".join(tried) +
        f". Install the package (pip install .), build the library (meson compile -C build), or set "
        f"{LIBRARY_ENV} to its path")


def _holding_gil(path: str, name: str):
    """A function of the library called without releasing the GIL (ctypes.PyDLL).
    For mlajit_decode: a few microseconds that hold no lock of the library while
    waiting (its one possible log line, once per context, reaches the handler on
    this thread, which holds the GIL already); releasing and taking back the GIL
    around it costs more, and more again where other Python threads want it.
    torch launches its own kernels holding the GIL too."""
    fn = getattr(ctypes.PyDLL(path), name)
    fn.restype, fn.argtypes = _PROTOTYPES[name]
    return fn


lib, decode = _load()


def last_error() -> str:
    return lib.mlajit_last_error().decode("utf-8", "replace")


def status_string(status: int) -> str:
    return lib.mlajit_status_string(status).decode()
