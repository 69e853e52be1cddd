"""SparseMLADecoder: the persistent object an engine holds per layer type, in the
style of FlashInfer's wrappers: made once for a model, head count, page sizes,
features and the largest shape; warmed up before CUDA graph capture; then run
per layer and step on torch's current stream."""
from __future__ import annotations

import dataclasses
import itertools
import logging
import sys
import time
from typing import Dict, Iterable, List, Optional, Tuple, Union

import torch

from . import _capi, _launch, _log
from . import ops as _ops  # noqa: F401  (registers torch.ops.mlajit.sparse_mla_decode)
from .context import Context, context as default_context
from .envelope import supported
from .errors import GraphCaptureError, InvalidArgumentError, UnsupportedError
from .models import FeaturesLike, ModelLike, as_features, as_model

__all__ = ["SparseMLADecoder", "DecoderWarmup"]

_NAMES = _launch.Names(q="q", kv="kv_cache", indices="indices", out="out", lse="lse", topk_length="topk_length",
                       attn_sink="attn_sink", extra_kv="extra_kv_cache", extra_indices="extra_indices",
                       extra_topk_length="extra_topk_length", sm_scale="sm_scale")

Shape = Tuple[int, int, int, int]  # (batch, s_q, topk, extra_topk)


@dataclasses.dataclass(frozen=True)
class DecoderWarmup:
    """What SparseMLADecoder.warmup did."""

    kernels: int          # kernels of the decoder's spec (with the ones its plans switch to)
    compiled: int         # compiled by NVRTC now
    from_packs: int
    from_disk: int
    from_memory: int
    plans: int            # geometries planned (every combination asked for)
    workspace_bytes: int  # the decoder's workspace after warm-up
    seconds: float


class SparseMLADecoder:
    """Sparse MLA decode for one model, head count, page size(s) and feature set.

    Made from the largest shape it will see (max_batch_size x max_s_q rows of
    max_topk (+ max_extra_topk) candidates), checked against the envelope at
    once. ``warmup`` compiles or loads every kernel and plans every geometry an
    engine will capture; ``run`` launches on ``torch.cuda.current_stream()``.
    The decoder owns the split workspace (sized for the largest plan warmed up);
    use one decoder from one stream at a time.

    The CUDA graph contract: capture ``run`` only for geometries (batch, s_q,
    topk, extra_topk) that ``warmup`` planned; under capture nothing compiles,
    allocates or synchronizes, and any other geometry raises GraphCaptureError
    before anything is enqueued. A graph freezes the pointers of every tensor
    passed (q, the caches, indices, lengths, sink, out, lse) and of the
    workspace, the geometry, and sm_scale. Each replay reads afresh what those
    pointers hold: q, the indices, topk_length / extra_topk_length and the
    caches' bytes, so an engine writes new indices and lengths into the same
    buffers between replays (and its cache stays where it is).
    """

    def __init__(self, model: ModelLike, num_heads: int, page_size: int, *, max_batch_size: int, max_topk: int,
                 max_s_q: int = 1, extra_page_size: int = 0, max_extra_topk: int = 0, features: FeaturesLike = (),
                 device: Union[int, str, torch.device, None] = None, context: Optional[Context] = None):
        self.model = as_model(model)
        self.features = as_features(features)
        if extra_page_size and not max_extra_topk:
            raise InvalidArgumentError("max_extra_topk = 0 with an extra cache (extra_page_size "
                                       f"{extra_page_size}); allowed: 1..{_capi.MAX_TOPK}")
        if max_extra_topk and not extra_page_size:
            raise InvalidArgumentError(f"max_extra_topk = {max_extra_topk} without an extra cache; set "
                                       "extra_page_size or pass 0")
        ok, why = supported(self.model, num_heads, page_size, max_topk, extra_page_size=extra_page_size,
                            extra_topk=max_extra_topk, features=self.features, batch_size=max_batch_size,
                            s_q=max_s_q)
        if not ok:
            raise UnsupportedError(f"SparseMLADecoder: {why}")
        self.num_heads = num_heads
        self.page_size = page_size
        self.extra_page_size = extra_page_size
        self.max_shape: Shape = (max_batch_size, max_s_q, max_topk, max_extra_topk)
        self.device_index = _device_index(device)
        self.context = context if context is not None else default_context(self.device_index)
        self._layout = _launch.plans.layout(self.model, num_heads, page_size, extra_page_size, self.features)
        self._launchers: Dict[Shape, _launch.Launcher] = {}
        self._workspace: Optional[torch.Tensor] = None
        self._retired: List[torch.Tensor] = []  # earlier workspaces a captured graph may still use

    # -- set-up ------------------------------------------------------------------

    @property
    def shapes(self) -> List[Shape]:
        """The geometries planned so far (batch, s_q, topk, extra_topk)."""
        return sorted(self._launchers)

    @property
    def workspace_bytes(self) -> int:
        return self._workspace.numel() if self._workspace is not None else 0

    def warmup(self, batch_sizes: Iterable[int], s_qs: Iterable[int] = (1,), topks: Optional[Iterable[int]] = None,
               extra_topks: Optional[Iterable[int]] = None, *, threads: int = 0) -> DecoderWarmup:
        """Compile or load every kernel (mlajit_warmup, `threads` compile workers,
        0 = one per CPU) and plan every combination of the lists (topks default to
        max_topk, extra_topks to max_extra_topk), then size the workspace for the
        largest plan. Call it before graph capture; it prints progress on a
        terminal and logs to the "mlajit" logger."""
        start = time.perf_counter()
        max_b, max_s, max_k, max_e = self.max_shape
        batch_sizes = _ints("batch_sizes", batch_sizes, 0, max_b)
        s_qs = _ints("s_qs", s_qs, 0, max_s)
        topks = _ints("topks", topks if topks is not None else [max_k], 1, max_k)
        extra_topks = _ints("extra_topks", extra_topks if extra_topks is not None else [max_e], 1 if max_e else 0,
                            max_e)
        progress = _Progress(sys.stderr.isatty())
        _log.add_listener(progress.line)
        try:
            kernels = self.context.warmup([self.model], [self.num_heads], [self.page_size],
                                          extra_page_sizes=[self.extra_page_size], feature_sets=[self.features],
                                          threads=threads)
            geometries = list(itertools.product(batch_sizes, s_qs, topks, extra_topks))
            for i, shape in enumerate(geometries):
                self._plan(shape)
                progress.show(f"planned {i + 1}/{len(geometries)} geometries")
        finally:
            _log.remove_listener(progress.line)
            progress.done()
        seconds = time.perf_counter() - start
        result = DecoderWarmup(kernels=kernels.kernels, compiled=kernels.compiled, from_packs=kernels.from_packs,
                               from_disk=kernels.from_disk, from_memory=kernels.from_memory, plans=len(geometries),
                               workspace_bytes=self.workspace_bytes, seconds=seconds)
        _log.logger.info("warmup: %s h_q %d page %d: %d kernels (%d compiled, %d from packs, %d from disk, "
                         "%d in memory), %d geometries planned, workspace %d bytes, %.2f s",
                         self.model.name.lower(), self.num_heads, self.page_size, result.kernels, result.compiled,
                         result.from_packs, result.from_disk, result.from_memory, result.plans,
                         result.workspace_bytes, seconds)
        return result

    def _plan(self, shape: Shape) -> _launch.Launcher:
        launcher = self._launchers.get(shape)
        if launcher is not None:
            return launcher
        b, s_q, topk, extra_topk = shape
        plan = _launch.plans.plan(self.context, self._layout, b, s_q, topk, extra_topk, strict_capture=True)
        launcher = _launch.Launcher(self._layout, plan, self.device_index)
        if plan.workspace_size > self.workspace_bytes:
            if self._workspace is not None:
                self._retired.append(self._workspace)
            self._workspace = _launch.allocate_workspace(plan.workspace_size, self.device_index)
        launcher.set_workspace(self._workspace if plan.workspace_size else None)
        self._launchers[shape] = launcher
        return launcher

    # -- the call ----------------------------------------------------------------

    def run(self, q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, out: torch.Tensor,
            sm_scale: float, *, topk_length: Optional[torch.Tensor] = None, attn_sink: Optional[torch.Tensor] = None,
            extra_kv_cache: Optional[torch.Tensor] = None, extra_indices: Optional[torch.Tensor] = None,
            extra_topk_length: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Decode into out [b, s_q, h_q, 512] bf16 (and lse [b, s_q, h_q] float32,
        any strides, when given) on torch's current stream; returns out.

        q [b, s_q, h_q, d_qk] bf16; kv_cache [num_blocks, page_size, 1,
        bytes_per_token] (or [num_blocks, page_size, bytes_per_token]) fp8 / int8 /
        uint8; indices [b, s_q, topk] int32; topk_length / extra_topk_length [b]
        int32 and attn_sink [h_q] float32 exactly when the decoder has that
        feature; extra_kv_cache and extra_indices [b, s_q, extra_topk] with an
        extra cache. A geometry not warmed up is planned now, outside capture."""
        try:
            q_shape, idx_shape, kv_shape = q.shape, indices.shape, kv_cache.shape
            shape = (q_shape[0], q_shape[1], idx_shape[-1],
                     extra_indices.shape[-1] if extra_indices is not None else 0)
        except (AttributeError, IndexError, TypeError):
            raise InvalidArgumentError("q, kv_cache, indices (and extra_indices): allowed torch.Tensors q [b, s_q, "
                                       "h_q, d_qk], kv_cache [num_blocks, page_size, 1, bytes_per_token], indices "
                                       "[b, s_q, topk]") from None
        launcher = self._launchers.get(shape)
        if launcher is None:
            launcher = self._miss(shape)
        launcher.launch(q, q_shape, kv_cache, kv_shape, indices, idx_shape, out, lse, sm_scale, topk_length,
                        attn_sink, extra_kv_cache, extra_indices, extra_topk_length, _NAMES)
        return out

    def _miss(self, shape: Shape) -> _launch.Launcher:
        names = ("batch (q.shape[0])", "s_q (q.shape[1])", "topk (indices.shape[-1])",
                 "extra_topk (extra_indices.shape[-1])")
        for name, value, most in zip(names, shape, self.max_shape):
            if value > most:
                raise InvalidArgumentError(f"{name} = {value}; allowed up to {most}, this decoder's largest shape")
        if _launch.capturing():
            warmed = ", ".join(str(s) for s in self.shapes[:12]) + (" ..." if len(self._launchers) > 12 else "")
            raise GraphCaptureError(
                f"SparseMLADecoder.run under CUDA graph capture with (batch, s_q, topk, extra_topk) = {shape}, which "
                f"was not warmed up (planning it may compile, load or allocate); warm it up before capture: "
                f"decoder.warmup(batch_sizes=[{shape[0]}], s_qs=[{shape[1]}], topks=[{shape[2]}]"
                f"{f', extra_topks=[{shape[3]}]' if shape[3] else ''}). Warmed up: {warmed or 'none'}")
        return self._plan(shape)

    def __repr__(self) -> str:
        return (f"SparseMLADecoder({self.model.name.lower()}, heads={self.num_heads}, page_size={self.page_size}"
                f"{f', extra_page_size={self.extra_page_size}' if self.extra_page_size else ''}, "
                f"features={self.features:#x}, max_shape={self.max_shape}, shapes planned={len(self._launchers)})")


def _device_index(device) -> int:
    if device is None:
        return torch.cuda.current_device() if torch.cuda.is_available() else 0
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    d = torch.device(device)
    if d.type != "cuda":
        raise InvalidArgumentError(f"device = {device!r}; allowed: a CUDA device")
    return d.index if d.index is not None else (torch.cuda.current_device() if torch.cuda.is_available() else 0)


def _ints(name: str, values, low: int, high: int) -> List[int]:
    out = []
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
            raise InvalidArgumentError(f"{name}: {v!r}; allowed ints {low}..{high} (the decoder's largest shape)")
        out.append(v)
    if not out:
        raise InvalidArgumentError(f"{name} is empty; allowed: at least one value")
    return sorted(set(out))


class _Progress:
    """One status line on a terminal, rewritten in place (compiles as they finish)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.shown = False

    def line(self, level: int, message: str) -> None:
        if level >= logging.INFO:
            self.show(message)

    def show(self, message: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\x1b[Kmlajit: warmup: {message[:150]}")
            sys.stderr.flush()
            self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
