"""The torch side of a decode call, shared by every entry point
(mlajit.flash_mla, SparseMLADecoder, torch.ops.mlajit.sparse_mla_decode):
tensors checked against a plan, the C argument block filled, mlajit_decode on
torch's current stream.

The per-call path is kept short: a Launcher is made once per plan and holds a
prebuilt ctypes mlajit_decode_args; a call reads each tensor's shape, dtype,
device and pointer once (its strides only when it is not contiguous),
compares them with what the plan was made for, writes the fields in one
struct.pack_into and calls mlajit_decode with plain addresses, holding the GIL.
Only when a check fails does the slow path (_explain) work out which argument
is wrong and say what is allowed. bench/python_overhead.py times it.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Dict, NamedTuple, Optional

import torch

from . import _capi
from .context import Context, Plan, context as default_context
from .errors import GraphCaptureError, InvalidArgumentError, MlajitError, exception_for
from .models import Model, ModelInfo, as_features, make_spec, model_info

_lib = _capi.lib
_decode = _capi.decode  # mlajit_decode, holding the GIL
# mlajit_decode_args from q up to the workspace, written in one call per decode
# (a leading field before q, such as a struct_size, stays as the Launcher set it)
_ARGS_PACKER, _ARGS_PACK_OFFSET = _capi.packer(_capi.DecodeArgs, "q", "workspace")
_pack_args = _ARGS_PACKER.pack_into
_BF16 = torch.bfloat16
_F32 = torch.float32
_I32 = torch.int32
CACHE_DTYPES = (torch.float8_e4m3fn, torch.int8, torch.uint8)

try:  # an int, no Stream object: the cheapest way to torch's current stream
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - older torch
    def _raw_stream(device_index):
        return torch.cuda.current_stream(device_index).cuda_stream


def current_stream(device_index: int) -> int:
    return _raw_stream(device_index)


# Whether torch's current stream is being captured into a CUDA graph (torch's
# own function, without torch.cuda's Python wrapper around it).
capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)


class Names(NamedTuple):
    """The caller's names for the arguments, for the messages."""

    q: str
    kv: str
    indices: str
    out: str
    lse: str
    topk_length: str
    attn_sink: str
    extra_kv: str
    extra_indices: str
    extra_topk_length: str
    sm_scale: str


# The C library's names in its messages (args.kv.page_stride, ...) and the
# caller's, so a refusal by mlajit_decode names what the caller passed.
_C_NAMES = ("extra_indices", "extra_topk_length", "extra_kv", "indices", "topk_length", "attn_sink", "q", "out", "lse",
            "sm_scale", "kv")


class Layout:
    """What a kernel is specialized on, from the caller's terms: model, heads,
    page sizes, features. ``key`` identifies it in the plan caches."""

    __slots__ = ("model", "info", "heads", "page_size", "extra_page_size", "features", "spec", "key")

    def __init__(self, model: Model, heads: int, page_size: int, extra_page_size: int, features: int):
        self.model = model
        self.info: ModelInfo = model_info(model)
        self.heads = heads
        self.page_size = page_size
        self.extra_page_size = extra_page_size
        self.features = as_features(features)
        self.spec = make_spec(model, heads, page_size, extra_page_size=extra_page_size, features=self.features)
        self.key = (int(model), heads, page_size, extra_page_size, self.features)

    @property
    def has_sink(self) -> bool:
        return bool(self.features & _capi.FEATURE_SINK)

    @property
    def has_topk_length(self) -> bool:
        return bool(self.features & _capi.FEATURE_TOPK_LENGTH)

    @property
    def has_extra_topk_length(self) -> bool:
        return bool(self.features & _capi.FEATURE_EXTRA_TOPK_LENGTH)


def _kept(strides, sizes) -> tuple:
    """Strides as mlajit_decode takes them: a dimension of one entry gets 0 (the
    library's "dense": its stride is never used, and torch's value there is
    arbitrary)."""
    return tuple(st if n > 1 else 0 for st, n in zip(strides, sizes))


def _contiguous(sizes) -> tuple:
    """The strides of a contiguous tensor of these sizes."""
    strides, step = [], 1
    for n in reversed(sizes):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class _Cache:
    """What a cache argument (the main or the extra one) must look like, and the
    shape seen last: [pages, page, 1, bpt] or [pages, page, bpt], 1-byte elements,
    each page's tokens contiguous; the page stride is stride(0)."""

    __slots__ = ("page_size", "tails", "page_bytes", "single_page_stride", "seen_shape")

    def __init__(self, page_size: int, bytes_per_token: int, min_page_stride: int):
        self.page_size = page_size
        self.tails = (torch.Size((page_size, 1, bytes_per_token)), torch.Size((page_size, bytes_per_token)))
        self.page_bytes = page_size * bytes_per_token  # a contiguous cache's page stride
        # a one-page cache's stride is never used: the layout's minimum, rounded to 16
        self.single_page_stride = (min_page_stride + 15) // 16 * 16
        self.seen_shape = None  # a shape whose tail passed (the next layer's cache, say)


# At most this many stride patterns remembered per argument of a launcher.
_MEMO_SIZE = 32


class Launcher:
    """One plan with its argument block, for calls of exactly its geometry.

    A call reads each tensor's shape, dtype, device and pointer once and compares
    them with what the plan was made for. Strides: a contiguous tensor's are the
    plan's dense ones (``is_contiguous()`` is cheaper than reading ``stride()``);
    another's are checked once per stride pattern and remembered per argument.
    Pointers' alignment, page strides and overlapping output rows are
    mlajit_decode's checks, on every call. The fields go into the argument block
    in one struct.pack_into, and mlajit_decode runs on torch's current stream."""

    __slots__ = ("plan", "layout", "device_index", "device", "args", "args_address", "plan_handle", "batch", "s_q",
                 "topk", "extra_topk", "heads", "workspace", "workspace_size", "bytes_per_token",
                 "q_shape", "idx_shape", "extra_idx_shape", "out_shape", "lse_shape", "rows_shape", "sink_shape",
                 "q_dense", "idx_dense", "extra_idx_dense", "out_dense", "lse_dense",
                 "q_seen", "idx_seen", "extra_idx_seen", "out_seen", "lse_seen", "kv", "extra_kv",
                 "out_dims", "out_strides", "lse_dims", "lse_strides",
                 "has_sink", "has_topk_length", "has_extra", "has_extra_topk_length")

    def __init__(self, layout: Layout, plan: Plan, device_index: int):
        self.plan = plan
        self.layout = layout
        self.device_index = device_index
        # where flash_mla allocates its outputs (the fake-driver tests run on CPU tensors: -1)
        self.device = torch.device("cuda", device_index) if device_index >= 0 else torch.device("cpu")
        self.plan_handle = plan.handle
        b, s_q, topk, extra_topk = plan.shape
        self.batch, self.s_q, self.topk, self.extra_topk = b, s_q, topk, extra_topk
        info = layout.info
        h = self.heads = layout.heads
        self.q_shape = torch.Size((b, s_q, h, info.d_qk))
        self.idx_shape = torch.Size((b, s_q, topk))
        self.extra_idx_shape = torch.Size((b, s_q, extra_topk))
        self.out_shape = torch.Size((b, s_q, h, info.d_v))
        self.lse_shape = torch.Size((b, s_q, h))
        self.rows_shape = torch.Size((b,))
        self.sink_shape = torch.Size((h,))
        # a contiguous tensor's fields (rows: the last dimension is the element's, stride 1)
        self.q_dense = _kept(_contiguous(self.q_shape)[:3], self.q_shape)
        self.idx_dense = _kept(_contiguous(self.idx_shape)[:2], self.idx_shape)
        self.extra_idx_dense = _kept(_contiguous(self.extra_idx_shape)[:2], self.extra_idx_shape)
        self.out_dense = _kept(_contiguous(self.out_shape)[:3], self.out_shape)
        self.lse_dense = _kept(_contiguous(self.lse_shape), self.lse_shape)
        # other strides that passed, per argument: stride() -> fields
        self.q_seen, self.idx_seen, self.extra_idx_seen, self.out_seen, self.lse_seen = {}, {}, {}, {}, {}
        bpt = self.bytes_per_token = info.bytes_per_token
        self.kv = _Cache(layout.page_size, bpt, info.min_page_stride(layout.page_size))
        self.extra_kv = (_Cache(layout.extra_page_size, bpt, info.min_page_stride(layout.extra_page_size))
                         if layout.extra_page_size else None)
        # flash_mla's outputs as it allocates them: out contiguous, lse FlashMLA's
        # [b, h_q, s_q] over memory laid out [b, s_q, h_q] (lse_dense)
        self.out_dims = tuple(self.out_shape)
        self.out_strides = _contiguous(self.out_dims)
        self.lse_dims = (b, h, s_q)
        self.lse_strides = (s_q * h, 1, h)
        self.has_sink = layout.has_sink
        self.has_topk_length = layout.has_topk_length
        self.has_extra = bool(layout.extra_page_size)
        self.has_extra_topk_length = layout.has_extra_topk_length
        self.args = _capi.DecodeArgs()
        self.args_address = ctypes.addressof(self.args)
        self.workspace = None
        self.workspace_size = plan.workspace_size

    def set_workspace(self, workspace: Optional[torch.Tensor]) -> None:
        """The device memory the plan's split partials go to (None when it needs none)."""
        self.workspace = workspace
        self.args.workspace = workspace.data_ptr() if workspace is not None else None
        self.args.workspace_size = workspace.numel() if workspace is not None else 0

    # -- the call --------------------------------------------------------------

    def __call__(self, q, kv, indices, out, lse, sm_scale, topk_length, attn_sink, extra_kv, extra_indices,
                 extra_topk_length, names: Names) -> None:
        """launch(), reading the shapes here."""
        self.launch(q, q.shape, kv, kv.shape, indices, indices.shape, out, lse, sm_scale, topk_length, attn_sink,
                    extra_kv, extra_indices, extra_topk_length, names)

    def launch(self, q, q_shape, kv, kv_shape, indices, idx_shape, out, lse, sm_scale, topk_length, attn_sink,
               extra_kv, extra_indices, extra_topk_length, names: Names, fresh: bool = False) -> None:
        """Check the tensors and run the decode. q_shape, kv_shape and idx_shape
        are q.shape, kv.shape and indices.shape, which the entry points read
        already. fresh: out and lse were just allocated by launcher.out_dims /
        out_strides and lse_dims / lse_strides (flash_mla), so they need no check."""
        dev = self.device_index
        # q [b, s_q, h_q, d_qk] bf16, last dim contiguous (the shape is compared
        # before the strides are read, so a tensor of another rank is named; a
        # stride 0 on a dimension of more than one entry, a broadcast, is refused:
        # the library would read 0 as the dense step)
        if q_shape != self.q_shape or q.dtype is not _BF16 or q.get_device() != dev:
            self._explain(q, self.q_shape, _BF16, names.q)
        q_b, q_s, q_h = self.q_dense if q.is_contiguous() else self._strides(q, self.q_seen, self.q_shape, _BF16,
                                                                             names.q)
        # the cache [pages, page, 1, bpt] or [pages, page, bpt], 1-byte elements
        page_stride = self._page_stride(kv, kv_shape, self.kv, names.kv)
        # indices [b, s_q, topk] int32, last dim contiguous
        if idx_shape != self.idx_shape or indices.dtype is not _I32 or indices.get_device() != dev:
            self._explain(indices, self.idx_shape, _I32, names.indices)
        i_b, i_s = self.idx_dense if indices.is_contiguous() else self._strides(indices, self.idx_seen,
                                                                                self.idx_shape, _I32, names.indices)
        # optional inputs: exactly those the kernel was made with, contiguous
        if topk_length is not None:
            if (not self.has_topk_length or topk_length.shape != self.rows_shape or topk_length.dtype is not _I32 or
                    topk_length.get_device() != dev or not topk_length.is_contiguous()):
                self._explain_optional(topk_length, self.has_topk_length, self.rows_shape, _I32, names.topk_length)
            lengths_ptr = topk_length.data_ptr()
        elif self.has_topk_length:
            self._missing(names.topk_length, "int32 [b]")
        else:
            lengths_ptr = 0
        if attn_sink is not None:
            if (not self.has_sink or attn_sink.shape != self.sink_shape or attn_sink.dtype is not _F32 or
                    attn_sink.get_device() != dev or not attn_sink.is_contiguous()):
                self._explain_optional(attn_sink, self.has_sink, self.sink_shape, _F32, names.attn_sink)
            sink_ptr = attn_sink.data_ptr()
        elif self.has_sink:
            self._missing(names.attn_sink, "float32 [h_q]")
        else:
            sink_ptr = 0
        if self.has_extra:
            e_kv, e_page_stride, e_pages, e_idx, e_b, e_s, e_lengths = self._extra(extra_kv, extra_indices,
                                                                                    extra_topk_length, names)
        elif extra_kv is not None or extra_indices is not None or extra_topk_length is not None:
            self._unexpected(names, extra_kv, extra_indices, extra_topk_length)
        else:
            e_kv = e_page_stride = e_pages = e_idx = e_b = e_s = e_lengths = 0
        if fresh:  # flash_mla's own outputs, made by this launcher's numbers
            o_b, o_s, o_h = self.out_dense
            lse_ptr = lse.data_ptr()
            l_b, l_s, l_h = self.lse_dense
        else:
            # out [b, s_q, h_q, d_v] bf16, last dim contiguous
            if out.shape != self.out_shape or out.dtype is not _BF16 or out.get_device() != dev:
                self._explain(out, self.out_shape, _BF16, names.out)
            o_b, o_s, o_h = (self.out_dense if out.is_contiguous() else
                             self._strides(out, self.out_seen, self.out_shape, _BF16, names.out))
            # lse [b, s_q, h_q] float32, any strides
            if lse is not None:
                if lse.shape != self.lse_shape or lse.dtype is not _F32 or lse.get_device() != dev:
                    self._explain(lse, self.lse_shape, _F32, names.lse)
                l_b, l_s, l_h = (self.lse_dense if lse.is_contiguous() else
                                 self._strides(lse, self.lse_seen, self.lse_shape, _F32, names.lse, unit_last=False))
                lse_ptr = lse.data_ptr()
            else:
                lse_ptr = l_b = l_s = l_h = 0
        _pack_args(self.args, _ARGS_PACK_OFFSET, q.data_ptr(), q_b, q_s, q_h, kv.data_ptr(), page_stride, kv_shape[0],
                   indices.data_ptr(), i_b, i_s, lengths_ptr, sink_ptr, e_kv, e_page_stride, e_pages, e_idx, e_b, e_s,
                   e_lengths, sm_scale, out.data_ptr(), o_b, o_s, o_h, lse_ptr, l_b, l_s, l_h)
        status = _decode(self.plan_handle, self.args_address, _raw_stream(dev))
        if status:
            self._failed(status, names)

    def _strides(self, t, seen: dict, shape, dtype, name: str, unit_last: bool = True) -> tuple:
        """The fields of a tensor that is not contiguous: its strides checked once
        per pattern and remembered in `seen` (no broadcast dimension; with
        unit_last, the last dimension contiguous and left out of the fields)."""
        stride = t.stride()
        fields = seen.get(stride)
        if fields is None:
            if ((unit_last and stride[-1] != 1 and shape[-1] > 1) or
                    any(not st and n > 1 for st, n in zip(stride, shape))):
                self._explain(t, shape, dtype, name)
            fields = _kept(stride[:-1] if unit_last else stride, shape)
            if len(seen) >= _MEMO_SIZE:
                seen.clear()
            seen[stride] = fields
        return fields

    def _page_stride(self, kv, shape, cache: _Cache, name: str) -> int:
        """A cache's page stride, the cache checked: its shape's tail when the
        shape is new (the next layer's cache of the same shape needs no second
        look), its dtype and device each call, its strides when it is not
        contiguous (pages apart, say)."""
        if shape != cache.seen_shape or kv.dtype not in CACHE_DTYPES or kv.get_device() != self.device_index:
            if shape[1:] not in cache.tails or kv.dtype not in CACHE_DTYPES or kv.get_device() != self.device_index:
                self._explain_cache(kv, cache.page_size, name)
            cache.seen_shape = shape
        pages = shape[0]
        if kv.is_contiguous():
            return cache.page_bytes if pages > 1 else cache.single_page_stride
        stride = kv.stride()
        if stride[-1] != 1 or stride[1] != self.bytes_per_token or (not stride[0] and pages > 1):
            self._explain_cache(kv, cache.page_size, name)
        return stride[0] if pages > 1 else cache.single_page_stride

    def _extra(self, extra_kv, extra_indices, extra_topk_length, names: Names) -> tuple:
        """The extra cache's fields of the argument block (DeepSeek-V4's dual cache)."""
        dev = self.device_index
        if extra_kv is None or extra_indices is None:
            self._missing(names.extra_kv if extra_kv is None else names.extra_indices, "the extra cache and its indices")
        shape = extra_kv.shape
        page_stride = self._page_stride(extra_kv, shape, self.extra_kv, names.extra_kv)
        if (extra_indices.shape != self.extra_idx_shape or extra_indices.dtype is not _I32 or
                extra_indices.get_device() != dev):
            self._explain(extra_indices, self.extra_idx_shape, _I32, names.extra_indices)
        e_b, e_s = (self.extra_idx_dense if extra_indices.is_contiguous() else
                    self._strides(extra_indices, self.extra_idx_seen, self.extra_idx_shape, _I32, names.extra_indices))
        if extra_topk_length is not None:
            if (not self.has_extra_topk_length or extra_topk_length.shape != self.rows_shape or
                    extra_topk_length.dtype is not _I32 or extra_topk_length.get_device() != dev or
                    not extra_topk_length.is_contiguous()):
                self._explain_optional(extra_topk_length, self.has_extra_topk_length, self.rows_shape, _I32,
                                       names.extra_topk_length)
            lengths_ptr = extra_topk_length.data_ptr()
        elif self.has_extra_topk_length:
            self._missing(names.extra_topk_length, "int32 [b]")
        else:
            lengths_ptr = 0
        return extra_kv.data_ptr(), page_stride, shape[0], extra_indices.data_ptr(), e_b, e_s, lengths_ptr

    # -- the slow paths: say exactly what is wrong -------------------------------

    def _failed(self, status: int, names: Names):
        message = _capi.last_error()
        for c_name in _C_NAMES:  # "args.kv.page_stride" -> "k_cache page stride" etc.
            message = message.replace(f"args.{c_name}", getattr(names, c_name))
        raise exception_for(status, message)

    def _explain_device(self, t, name):
        raise InvalidArgumentError(f"{name} is on {t.device}; allowed: cuda:{self.device_index}, where q is")

    def _explain(self, t, shape, dtype, name, contiguous=False):
        if not isinstance(t, torch.Tensor):
            raise InvalidArgumentError(f"{name}: {type(t).__name__}; allowed: a torch.Tensor")
        if t.dtype is not dtype:
            raise InvalidArgumentError(f"{name}.dtype = {t.dtype}; allowed: {dtype}")
        if t.shape != shape:
            raise InvalidArgumentError(f"{name}.shape = {tuple(t.shape)}; allowed: {tuple(shape)} (the geometry this plan was made for)")
        if t.get_device() != self.device_index:
            if not t.is_cuda:
                raise InvalidArgumentError(f"{name} is on {t.device}; allowed: a CUDA tensor "
                                           f"(cuda:{self.device_index})")
            self._explain_device(t, name)
        if any(st == 0 and n > 1 for st, n in zip(t.stride(), t.shape)):
            raise InvalidArgumentError(f"{name}.stride() = {t.stride()}; allowed: no broadcast dimension (stride 0 "
                                       "where the size is above 1: each entry needs its own memory); pass "
                                       ".contiguous()")
        if contiguous:
            raise InvalidArgumentError(f"{name}.stride() = {t.stride()}; allowed: contiguous (.contiguous())")
        raise InvalidArgumentError(f"{name}.stride() = {t.stride()}; allowed: the last dimension contiguous "
                                   "(stride 1)")

    def _explain_cache(self, kv, page_size, name):
        bpt = self.bytes_per_token
        want = f"[num_blocks, {page_size}, 1, {bpt}] (or [num_blocks, {page_size}, {bpt}])"
        if not isinstance(kv, torch.Tensor):
            raise InvalidArgumentError(f"{name}: {type(kv).__name__}; allowed: a torch.Tensor {want}")
        if kv.dtype not in CACHE_DTYPES:
            raise InvalidArgumentError(f"{name}.dtype = {kv.dtype}; allowed: torch.float8_e4m3fn, torch.int8 or "
                                       "torch.uint8 (the cache's bytes)")
        shape = tuple(kv.shape)
        if len(shape) not in (3, 4) or shape[1] != page_size or shape[-1] != bpt or (len(shape) == 4 and shape[2] != 1):
            raise InvalidArgumentError(f"{name}.shape = {shape}; allowed: {want} ({self.layout.info.name}, page size "
                                       f"{page_size})")
        if kv.get_device() != self.device_index:
            if not kv.is_cuda:
                raise InvalidArgumentError(f"{name} is on {kv.device}; allowed: a CUDA tensor "
                                           f"(cuda:{self.device_index})")
            self._explain_device(kv, name)
        if kv.stride()[0] == 0 and shape[0] > 1:
            raise InvalidArgumentError(f"{name}.stride() = {kv.stride()}; allowed: a page stride stride(0) >= "
                                       f"{page_size * bpt}, a multiple of 16 (0, a broadcast over pages, is not a "
                                       "cache)")
        raise InvalidArgumentError(f"{name}.stride() = {kv.stride()}; allowed: each page's tokens contiguous "
                                   f"(stride(1) = {bpt}, stride(-1) = 1); the page stride stride(0) is free "
                                   f"(>= {page_size * bpt}, a multiple of 16)")

    def _explain_optional(self, t, wanted, shape, dtype, name):
        if not wanted:
            raise InvalidArgumentError(f"{name} was given, but this kernel was made without it; allowed: None")
        self._explain(t, shape, dtype, name, contiguous=True)

    def _missing(self, name, what):
        raise InvalidArgumentError(f"{name} is None, but this kernel was made with it; pass {what}")

    def _unexpected(self, names: Names, extra_kv, extra_indices, extra_topk_length):
        given = [n for n, t in ((names.extra_kv, extra_kv), (names.extra_indices, extra_indices),
                                (names.extra_topk_length, extra_topk_length)) if t is not None]
        raise InvalidArgumentError(f"{', '.join(given)} given, but this kernel has no extra cache; allowed: None")


# --- plans shared by the entry points -------------------------------------------------

class PlanCache:
    """Plans by (context, layout, geometry), shared by every entry point, and
    launchers and workspaces for the entry point that has no object of its own
    to hold them (the torch op). Making a plan compiles or loads its kernel when
    it has to, which cannot happen under stream capture: there a miss plans only
    when its kernel is already loaded (host work alone), else raises
    GraphCaptureError."""

    def __init__(self):
        self._lock = threading.Lock()
        self._plans: Dict[tuple, Plan] = {}
        self._layouts: Dict[tuple, Layout] = {}
        # The torch op's launchers by its arguments' signature and the calling
        # thread (a launcher's argument block is written per call), and its split
        # workspaces by (device, stream): ops.py.
        self.op_launchers: Dict[tuple, Launcher] = {}
        self.op_workspaces: Dict[tuple, torch.Tensor] = {}
        # Specs of the kernels plans were made on, per context.
        self._loaded: Dict[int, set] = {}

    def layout(self, model: Model, heads: int, page_size: int, extra_page_size: int, features: int) -> Layout:
        key = (int(model), heads, page_size, extra_page_size, features)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts.setdefault(key, Layout(model, heads, page_size, extra_page_size, features))
        return layout

    def plan(self, ctx: Context, layout: Layout, batch: int, s_q: int, topk: int, extra_topk: int, *,
             strict_capture: bool = False) -> Plan:
        """The plan of this geometry; strict_capture: under capture, refuse any
        miss (SparseMLADecoder: only warmed-up shapes are captured)."""
        key = (ctx.handle, layout.key, batch, s_q, topk, extra_topk)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        if capturing() and (strict_capture or not self.kernel_loaded(ctx, layout, batch, s_q, topk, extra_topk)):
            what = (f"{layout.info.name} h_q {layout.heads} page {layout.page_size} at b {batch}, s_q {s_q}, "
                    f"topk {topk}{f', extra_topk {extra_topk}' if extra_topk else ''}")
            raise GraphCaptureError(
                f"a decode of {what} under CUDA graph capture needs a plan that was not made before capture "
                "(making it may compile or load a kernel, which cannot be captured); "
                + ("warm this shape up first (SparseMLADecoder.warmup)" if strict_capture else
                   "make the same call once before capture"))
        plan = ctx.plan(layout.spec, batch, s_q, topk, extra_topk)
        with self._lock:
            plan = self._plans.setdefault(key, plan)
            self._loaded.setdefault(ctx.handle, set()).add(plan.report.spec)
        return plan

    def kernel_loaded(self, ctx: Context, layout: Layout, batch: int, s_q: int, topk: int, extra_topk: int) -> bool:
        """Whether a plan of this geometry would run a kernel a plan made here
        already loaded (mlajit_plan_describe_in_context: the same choice, tuned
        tactics included, without compiling)."""
        info = ctx.info()
        if not info.has_device:
            return False
        outline = _capi.PlanOutline()
        shape = _capi.DecodeShape(batch, s_q, topk, extra_topk, 0)
        spec = _capi.KernelSpec.from_buffer_copy(layout.spec)
        spec.arch = info.device_arch.encode()
        if _lib.mlajit_plan_describe_in_context(ctx.handle, ctypes.byref(spec), ctypes.byref(shape),
                                                ctypes.byref(outline)):
            return False
        return outline.kernel.decode() in self._loaded.get(ctx.handle, ())


plans = PlanCache()


SCALE_FORMATS = ("auto", "fp32_pow2", "fp32", "ue8m0")
# (d_qk, bytes per token) of FlashMLA's layouts -> kv_scale_format -> the model
_CACHE_LAYOUTS = {(576, 656): {"auto": Model.V32, "fp32_pow2": Model.V32, "fp32": Model.GLM_NSA},
                  (512, 584): {"auto": Model.DSV4, "ue8m0": Model.DSV4},
                  (512, 656): {"auto": Model.GLM53_NOPE, "fp32": Model.GLM53_NOPE},
                  (1088, 1160): {"auto": Model.DOTS3_SWA, "ue8m0": Model.DOTS3_SWA},
                  # bf16 caches (no scales): V3.2's and V4's dims, two bytes each
                  (576, 1152): {"auto": Model.V32_BF16},
                  (512, 1024): {"auto": Model.DSV4_BF16}}


def model_of_cache(d_qk: int, bytes_per_token: int, kv_scale_format: str = "auto") -> Model:
    """The model of a q row width and a cache row width (FlashMLA's way), with
    kv_scale_format naming the scales where the widths leave a choice."""
    if kv_scale_format not in SCALE_FORMATS:
        raise InvalidArgumentError(f"kv_scale_format = {kv_scale_format!r}; allowed: {', '.join(SCALE_FORMATS)}")
    by_format = _CACHE_LAYOUTS.get((d_qk, bytes_per_token))
    if by_format is None:
        raise InvalidArgumentError(
            f"q.shape[-1] = {d_qk} with {bytes_per_token} bytes per cache token (the cache's last dimension) is no "
            "known layout; allowed: 576 with 656 (DeepSeek-V3.2, GLM-NSA), 512 with 584 (DeepSeek-V4), 512 with 656 "
            "(GLM-5.3 NoPE), 1088 with 1160 (dots3 SWA), 576 with 1152 (V3.2 in bf16) or 512 with 1024 (V4 in bf16)")
    model = by_format.get(kv_scale_format)
    if model is None:
        raise InvalidArgumentError(f"kv_scale_format = {kv_scale_format!r} does not fit a d_qk {d_qk} cache; "
                                   f"allowed: {', '.join(by_format)}")
    return model


def features_of(attn_sink, topk_length, extra_topk_length) -> int:
    """The feature bits of the optional inputs a call passes."""
    return ((_capi.FEATURE_SINK if attn_sink is not None else 0) |
            (_capi.FEATURE_TOPK_LENGTH if topk_length is not None else 0) |
            (_capi.FEATURE_EXTRA_TOPK_LENGTH if extra_topk_length is not None else 0))


def device_index_of(t: torch.Tensor, name: str) -> int:
    if not isinstance(t, torch.Tensor):
        raise InvalidArgumentError(f"{name}: {type(t).__name__}; allowed: a torch.Tensor")
    if not t.is_cuda:
        raise InvalidArgumentError(f"{name} is on {t.device}; allowed: a CUDA tensor")
    return t.get_device()


def context_for(device_index: int) -> Context:
    return default_context(device_index)


def allocate_workspace(size: int, device_index: int) -> Optional[torch.Tensor]:
    if not size:
        return None
    return torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", device_index))


__all__ = ["Layout", "Launcher", "Names", "PlanCache", "plans", "current_stream", "capturing", "device_index_of",
           "context_for", "allocate_workspace", "MlajitError"]
