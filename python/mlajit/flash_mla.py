"""A drop-in for FlashMLA's sparse decode interface (``flash_mla``'s
``get_mla_metadata`` and ``flash_mla_with_kvcache``): same argument order,
meaning, shapes, dtypes and return values, so an engine switches by changing
one import::

    from mlajit.flash_mla import flash_mla_with_kvcache, get_mla_metadata

It takes what FlashMLA refuses: any head count 1..128 without padding, any topk,
any page size, and GLM-NSA's arbitrary fp32 scales (``kv_scale_format="fp32"``);
rows (b x s_q) up to 65,536 and s_q up to 64, and a whole mixed batch as
(1, T, H, D) with T past 64 too (as T rows of one token) when no topk_length
applies.
The dense (non-sparse) path is not provided: ``indices`` is required.

As in FlashMLA, the metadata object binds to the geometry of its first call:
that call plans (compiling or loading the kernel when needed) and allocates the
split workspace; later calls with the same metadata are the fast path and must
keep its shapes. Under CUDA graph capture a first call works when the kernel is
already loaded (an earlier call of that geometry); else it raises
GraphCaptureError.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import _capi, _launch
from .errors import InvalidArgumentError
from .models import model_info
from . import ops as _ops  # noqa: F401  (registers torch.ops.mlajit.sparse_mla_decode)

__all__ = ["MLASchedMeta", "get_mla_metadata", "flash_mla_with_kvcache"]

_BF16 = torch.bfloat16
_F32 = torch.float32

_NAMES = _launch.Names(q="q", kv="k_cache", indices="indices", out="out", lse="lse", topk_length="topk_length",
                       attn_sink="attn_sink", extra_kv="extra_k_cache", extra_indices="extra_indices_in_kvcache",
                       extra_topk_length="extra_topk_length", sm_scale="softmax_scale")

class MLASchedMeta:
    """What get_mla_metadata returns (FlashMLA's FlashMLASchedMeta): empty until
    the first flash_mla_with_kvcache call binds it to that call's geometry (a
    plan, its workspace, and the argument block). Reuse it across calls (and
    layers) of the same shapes, as with FlashMLA."""

    __slots__ = ("_launcher", "config", "_default_scale", "_folded")

    def __init__(self):
        self._launcher: Optional[_launch.Launcher] = None
        self.config: Optional[dict] = None
        self._default_scale = 0.0
        self._folded = False

    @property
    def have_initialized(self) -> bool:
        return self._launcher is not None


def get_mla_metadata(*args, **kwargs) -> Tuple[MLASchedMeta, None]:
    """(an empty MLASchedMeta, None), as FlashMLA: the arguments of the old
    interface are accepted and unused; scheduling happens in the first
    flash_mla_with_kvcache call."""
    return MLASchedMeta(), None


def _check_flags(num_splits, causal, is_fp8_kvcache, indices) -> None:
    if num_splits is not None:
        raise InvalidArgumentError("num_splits must be None (pass the second value get_mla_metadata returns)")
    if causal:
        raise InvalidArgumentError("causal = True; allowed: False (the sparse path attends to the indices given)")
    if not is_fp8_kvcache:
        raise InvalidArgumentError("is_fp8_kvcache = False; allowed: True (mlajit decodes FP8 caches)")
    if indices is None:
        raise InvalidArgumentError("indices is None; mlajit runs FlashMLA's sparse path only: pass indices "
                                   "[b, s_q, topk] int32")


def _tensor(t, name: str, ndim: int, dtype=None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise InvalidArgumentError(f"{name}: {type(t).__name__}; allowed: a torch.Tensor")
    if t.dim() != ndim:
        raise InvalidArgumentError(f"{name} has {t.dim()} dimensions (shape {tuple(t.shape)}); allowed: {ndim}")
    if dtype is not None and t.dtype is not dtype:
        raise InvalidArgumentError(f"{name}.dtype = {t.dtype}; allowed: {dtype}")
    return t


def _bind(meta: MLASchedMeta, q, k_cache, head_dim_v, num_splits, causal, is_fp8_kvcache, indices, attn_sink,
          extra_k_cache, extra_indices, topk_length, extra_topk_length, kv_scale_format) -> _launch.Launcher:
    """The first call of a metadata: every argument checked, naming what is
    allowed; the plan (compiled or loaded when needed) and its workspace."""
    _check_flags(num_splits, causal, is_fp8_kvcache, indices)
    q = _tensor(q, "q", 4, torch.bfloat16)
    if k_cache is None or not isinstance(k_cache, torch.Tensor) or k_cache.dim() not in (3, 4):
        raise InvalidArgumentError(f"k_cache: {getattr(k_cache, 'shape', type(k_cache).__name__)}; allowed: a "
                                   "torch.Tensor [num_blocks, page_block_size, 1, bytes_per_token]")
    if k_cache.dtype not in _launch.CACHE_DTYPES:
        raise InvalidArgumentError(f"k_cache.dtype = {k_cache.dtype}; allowed: torch.float8_e4m3fn, torch.int8 or "
                                   "torch.uint8")
    indices = _tensor(indices, "indices", 3, torch.int32)
    b, s_q, h_q, d_qk = q.shape
    # One row of more query tokens than a row may have (a whole mixed batch as
    # (1, T, H, D)): its tokens as T rows, when no length applies to all of them.
    folded = b == 1 and s_q > _capi.MAX_SQ and topk_length is None and extra_topk_length is None
    model = _launch.model_of_cache(d_qk, k_cache.shape[-1], kv_scale_format)
    layout_info = model_info(model)
    if head_dim_v != layout_info.d_v:
        raise InvalidArgumentError(f"head_dim_v = {head_dim_v}; allowed: {layout_info.d_v} ({layout_info.name})")
    extra_page = 0
    extra_topk = 0
    if extra_k_cache is not None or extra_indices is not None:
        if extra_k_cache is None or extra_indices is None:
            raise InvalidArgumentError("extra_k_cache and extra_indices_in_kvcache go together; pass both or neither")
        if not isinstance(extra_k_cache, torch.Tensor) or extra_k_cache.dim() not in (3, 4):
            raise InvalidArgumentError("extra_k_cache: allowed a torch.Tensor [num_blocks, page_block_size, 1, "
                                       "bytes_per_token]")
        extra_page = extra_k_cache.shape[1]
        extra_topk = _tensor(extra_indices, "extra_indices_in_kvcache", 3, torch.int32).shape[-1]
    elif extra_topk_length is not None:
        raise InvalidArgumentError("extra_topk_length given without extra_k_cache; allowed: None")
    device_index = _launch.device_index_of(q, "q")
    features = _launch.features_of(attn_sink, topk_length, extra_topk_length)
    layout = _launch.plans.layout(model, h_q, k_cache.shape[1], extra_page, features)
    ctx = _launch.context_for(device_index)
    plan = _launch.plans.plan(ctx, layout, s_q if folded else b, 1 if folded else s_q, indices.shape[-1],
                              extra_topk)
    launcher = _launch.Launcher(layout, plan, device_index)
    launcher.set_workspace(_launch.allocate_workspace(plan.workspace_size, device_index))
    meta.config = {"b": b, "s_q": s_q, "h_q": h_q, "page_block_size": k_cache.shape[1], "h_k": 1, "causal": False,
                   "is_fp8_kvcache": True, "topk": indices.shape[-1],
                   "extra_page_block_size": extra_page or None, "extra_topk": extra_topk or None,
                   "model": layout_info.name}
    meta._default_scale = d_qk ** -0.5
    meta._folded = folded
    meta._launcher = launcher
    return launcher


def flash_mla_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: Optional[torch.Tensor],
    cache_seqlens: Optional[torch.Tensor],
    head_dim_v: int,
    tile_scheduler_metadata: MLASchedMeta,
    num_splits: None = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    is_fp8_kvcache: bool = True,
    indices: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices_in_kvcache: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    kv_scale_format: str = "auto",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sparse attention decode over an FP8 paged KV cache, as FlashMLA's.

    Arguments (FlashMLA's; see SPEC.md for the operation):
        q: [b, s_q, h_q, d_qk] bf16, last dim contiguous; h_q any of 1..128.
        k_cache: [num_blocks, page_block_size, 1, bytes_per_token] float8_e4m3fn,
            int8 or uint8; each page's tokens contiguous, the page stride free. The
            model comes from d_qk and the bytes per token: 576 / 656 is
            DeepSeek-V3.2 (or GLM-NSA with kv_scale_format="fp32"), 512 / 584
            DeepSeek-V4.
        block_table, cache_seqlens: accepted and ignored (the sparse path).
        head_dim_v: 512.
        tile_scheduler_metadata: get_mla_metadata()[0]; reuse it across calls of
            the same shapes.
        num_splits: None.
        softmax_scale: default d_qk ** -0.5.
        causal: False. is_fp8_kvcache: True.
        indices: [b, s_q, topk] int32 slots (page * page_block_size + offset), -1
            or out of range = skipped; any topk.
        attn_sink: [h_q] float32, optional. topk_length: [b] int32, optional.
        extra_k_cache, extra_indices_in_kvcache ([b, s_q, extra_topk]),
            extra_topk_length ([b]): the second cache (DeepSeek-V4), optional.
        out: [b, s_q, h_q, 512] bf16 to write into (mlajit's addition), optional.
        kv_scale_format: "auto", "fp32_pow2" (V3.2), "fp32" (GLM-NSA's arbitrary
            scales) or "ue8m0" (DeepSeek-V4).

    Returns:
        (out [b, s_q, h_q, 512] bf16, lse [b, h_q, s_q] float32 natural log, a
        view like FlashMLA's; +inf on rows with nothing to attend).
    """
    meta = tile_scheduler_metadata
    launcher = meta._launcher if type(meta) is MLASchedMeta else None
    if launcher is None:
        if not isinstance(meta, MLASchedMeta):
            raise InvalidArgumentError(f"tile_scheduler_metadata: {type(meta).__name__}; allowed: the first value "
                                       "mlajit.flash_mla.get_mla_metadata() returns")
        launcher = _bind(meta, q, k_cache, head_dim_v, num_splits, causal, is_fp8_kvcache, indices, attn_sink,
                         extra_k_cache, extra_indices_in_kvcache, topk_length, extra_topk_length, kv_scale_format)
    elif num_splits is not None or causal or not is_fp8_kvcache or indices is None:
        _check_flags(num_splits, causal, is_fp8_kvcache, indices)
    if softmax_scale is None:
        softmax_scale = meta._default_scale
    if meta._folded:
        return _folded_call(launcher, q, k_cache, indices, out, softmax_scale, topk_length, attn_sink, extra_k_cache,
                            extra_indices_in_kvcache, extra_topk_length)
    try:
        q_shape, kv_shape, idx_shape = q.shape, k_cache.shape, indices.shape
    except AttributeError:
        raise InvalidArgumentError("q, k_cache, indices: allowed torch.Tensors, of the shapes this metadata was made "
                                   f"for ({meta.config})") from None
    device = launcher.device
    if out is None:  # both outputs new, in the layouts the launcher expects (no check needed)
        out = torch.empty_strided(launcher.out_dims, launcher.out_strides, dtype=_BF16, device=device)
        lse = torch.empty_strided(launcher.lse_dims, launcher.lse_strides, dtype=_F32, device=device)
        launcher.launch(q, q_shape, k_cache, kv_shape, indices, idx_shape, out, lse, softmax_scale, topk_length,
                        attn_sink, extra_k_cache, extra_indices_in_kvcache, extra_topk_length, _NAMES, True)
        return out, lse
    lse = torch.empty(launcher.lse_shape, dtype=_F32, device=device)
    launcher.launch(q, q_shape, k_cache, kv_shape, indices, idx_shape, out, lse, softmax_scale, topk_length,
                    attn_sink, extra_k_cache, extra_indices_in_kvcache, extra_topk_length, _NAMES)
    return out, lse.transpose(1, 2)


def _folded_call(launcher, q, k_cache, indices, out, softmax_scale, topk_length, attn_sink, extra_k_cache,
                 extra_indices, extra_topk_length):
    """A (1, T, H, D) call as T rows of one token: views of the caller's tensors,
    and out and lse returned in its shapes."""
    t = launcher.batch
    if topk_length is not None or extra_topk_length is not None:
        raise InvalidArgumentError("topk_length / extra_topk_length given, but this metadata was made without them "
                                   "(its (1, T) call runs as T rows); allowed: None")
    if q.dim() != 4 or q.shape[0] != 1 or indices.dim() != 3 or indices.shape[0] != 1:
        raise InvalidArgumentError(f"q.shape = {tuple(q.shape)}, indices.shape = {tuple(indices.shape)}; allowed: "
                                   f"(1, {t}, ...), the geometry this metadata was made for")
    if out is None:
        out = torch.empty((1, t) + launcher.out_shape[2:], dtype=torch.bfloat16, device=q.device)
    elif out.dim() != 4 or out.shape[0] != 1:
        raise InvalidArgumentError(f"out.shape = {tuple(out.shape)}; allowed: (1, {t}, h_q, 512)")
    lse = torch.empty(launcher.lse_shape, dtype=torch.float32, device=q.device)  # [T, 1, h] is [1, T, h]
    launcher(q[0].unsqueeze(1), k_cache, indices[0].unsqueeze(1), out[0].unsqueeze(1), lse, softmax_scale, None,
             attn_sink, extra_k_cache, extra_indices[0].unsqueeze(1) if extra_indices is not None else None, None,
             _NAMES)
    return out, lse.view(1, t, -1).transpose(1, 2)
