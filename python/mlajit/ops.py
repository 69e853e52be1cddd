"""``torch.ops.mlajit.sparse_mla_decode``: the decode as a torch operator, with a
fake (meta) implementation and ``out`` / ``lse`` declared as mutated, so
``torch.compile`` traces through it (fullgraph) and CUDA graphs capture it.

Importing mlajit.flash_mla, mlajit.decoder or this module registers it. The
direct calls (flash_mla_with_kvcache, SparseMLADecoder.run) stay the fast path.
The operator keeps a launcher per signature of its arguments (shapes, optional
inputs, kv_scale_format, device) and calling thread: a call of a signature seen
before looks it up and launches; a first call checks the arguments, plans
(compiling or loading the kernel when needed; under capture only when its kernel
is already loaded) and makes the launcher. A split plan's workspace is one per
device and stream, grown to the largest plan that ran there (the stream orders
its calls); under capture each call takes its own from torch's allocator, which
gives it from the graph's pool, so graphs never share one.
"""
from __future__ import annotations

import threading
from typing import Optional

import torch

from . import _launch

__all__ = ["sparse_mla_decode"]

_NAMES = _launch.Names(q="q", kv="kv_cache", indices="indices", out="out", lse="lse", topk_length="topk_length",
                       attn_sink="attn_sink", extra_kv="extra_kv_cache", extra_indices="extra_indices",
                       extra_topk_length="extra_topk_length", sm_scale="sm_scale")
_thread = threading.get_ident


def _decode(q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, out: torch.Tensor,
            lse: Optional[torch.Tensor], sm_scale: float, topk_length: Optional[torch.Tensor] = None,
            attn_sink: Optional[torch.Tensor] = None, extra_kv_cache: Optional[torch.Tensor] = None,
            extra_indices: Optional[torch.Tensor] = None, extra_topk_length: Optional[torch.Tensor] = None,
            kv_scale_format: str = "auto") -> None:
    """Sparse MLA decode (SPEC.md): writes out [b, s_q, h_q, 512] bf16 and, when
    given, lse [b, s_q, h_q] float32 (any strides; natural log, +inf where
    nothing is attended). kv_cache is [num_blocks, page_size, 1, bytes_per_token]
    (FlashMLA's layout), indices [b, s_q, topk] int32."""
    q_shape, kv_shape, idx_shape = q.shape, kv_cache.shape, indices.shape
    plans = _launch.plans
    try:  # what decides the plan, and the thread (a launcher's argument block is written per call)
        key = (q.get_device(), q_shape, kv_shape[1], kv_shape[-1], idx_shape[-1],
               0 if extra_kv_cache is None else extra_kv_cache.shape[1],
               0 if extra_indices is None else extra_indices.shape[-1],
               topk_length is None, attn_sink is None, extra_topk_length is None, kv_scale_format, _thread())
    except IndexError:  # a tensor of too few dimensions: _bind says which
        key = None
    launcher = plans.op_launchers.get(key)
    if launcher is None:
        launcher = _bind(plans, key, q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                         extra_topk_length, kv_scale_format)
    if launcher.workspace_size:
        _workspace(plans, launcher)
    launcher.launch(q, q_shape, kv_cache, kv_shape, indices, idx_shape, out, lse, sm_scale, topk_length, attn_sink,
                    extra_kv_cache, extra_indices, extra_topk_length, _NAMES)


def _bind(plans: _launch.PlanCache, key: Optional[tuple], q, kv_cache, indices, topk_length, attn_sink,
          extra_kv_cache, extra_indices, extra_topk_length, kv_scale_format) -> _launch.Launcher:
    """A signature's first call on this thread: the arguments that decide the
    plan checked, the plan (made when needed) and a launcher of its own, kept
    under the signature (key) _decode looks up."""
    device_index = _launch.device_index_of(q, "q")
    if (q.dim() != 4 or kv_cache.dim() not in (3, 4) or indices.dim() != 3 or
            (extra_kv_cache is not None and extra_kv_cache.dim() not in (3, 4)) or
            (extra_indices is not None and extra_indices.dim() != 3) or key is None):
        raise _launch.InvalidArgumentError(
            f"q {tuple(q.shape)}, kv_cache {tuple(kv_cache.shape)}, indices {tuple(indices.shape)}"
            f"{_shape_of('extra_kv_cache', extra_kv_cache)}{_shape_of('extra_indices', extra_indices)}; allowed: "
            "q [b, s_q, h_q, d_qk], kv_cache [num_blocks, page_size, 1, bytes_per_token], indices [b, s_q, topk] "
            "(extra_kv_cache and extra_indices as kv_cache and indices)")
    b, s_q, h_q, d_qk = q.shape
    model = _launch.model_of_cache(d_qk, kv_cache.shape[-1], kv_scale_format)
    extra_page = extra_kv_cache.shape[1] if extra_kv_cache is not None else 0
    extra_topk = extra_indices.shape[-1] if extra_indices is not None else 0
    features = _launch.features_of(attn_sink, topk_length, extra_topk_length)
    layout = plans.layout(model, h_q, kv_cache.shape[1], extra_page, features)
    ctx = _launch.context_for(device_index)
    plan = plans.plan(ctx, layout, b, s_q, indices.shape[-1], extra_topk)
    return plans.op_launchers.setdefault(key, _launch.Launcher(layout, plan, device_index))


def _shape_of(name: str, t: Optional[torch.Tensor]) -> str:
    return f", {name} {tuple(t.shape)}" if t is not None else ""


def _workspace(plans: _launch.PlanCache, launcher: _launch.Launcher) -> None:
    """Give a split plan's launcher its workspace: outside capture the one of
    this device and stream (grown when this plan needs more), under capture a
    new one, from the graph's pool."""
    device_index, size = launcher.device_index, launcher.workspace_size
    if _launch.capturing():
        workspace = _launch.allocate_workspace(size, device_index)
    else:
        key = (device_index, _launch.current_stream(device_index))
        workspace = plans.op_workspaces.get(key)
        if workspace is None or workspace.numel() < size:
            workspace = plans.op_workspaces[key] = _launch.allocate_workspace(size, device_index)
    if workspace is not launcher.workspace:
        launcher.set_workspace(workspace)


# The operator's schema: out and lse written in place (aliases a3 and a4, the
# names torch.library.custom_op gives them), nothing returned.
_SCHEMA = ("sparse_mla_decode(Tensor q, Tensor kv_cache, Tensor indices, Tensor(a3!) out, Tensor(a4!)? lse, "
           "float sm_scale, Tensor? topk_length=None, Tensor? attn_sink=None, Tensor? extra_kv_cache=None, "
           "Tensor? extra_indices=None, Tensor? extra_topk_length=None, str kv_scale_format='auto') -> ()")

# Kept alive for the process: the registrations go with the Library object.
_library = None


def _fake(q, kv_cache, indices, out, lse, sm_scale, topk_length=None, attn_sink=None, extra_kv_cache=None,
          extra_indices=None, extra_topk_length=None, kv_scale_format="auto"):
    # Writes out and lse in place, returns nothing: the shapes are the caller's.
    if out.shape[:3] != q.shape[:3]:
        raise _launch.InvalidArgumentError(f"out.shape = {tuple(out.shape)}; allowed: [b, s_q, h_q, d_v] with "
                                           f"q's [b, s_q, h_q] = {tuple(q.shape[:3])}")
    return None


def _register():
    global _library
    try:
        return torch.ops.mlajit.sparse_mla_decode  # registered by an earlier import (a reload)
    except (AttributeError, RuntimeError):
        pass
    # Defined through torch.library.Library rather than the custom_op decorator:
    # the same schema, fake implementation and torch.compile tracing, for a
    # quarter of the dispatch cost per call (measured on CPU tensors: 2.9 us
    # against 11.2 us for a no-op of this signature under torch 2.15).
    _library = torch.library.Library("mlajit", "DEF")
    _library.define(_SCHEMA)
    _library.impl("sparse_mla_decode", _decode, "CompositeExplicitAutograd")
    torch.library.register_fake("mlajit::sparse_mla_decode", _fake, lib=_library)
    return torch.ops.mlajit.sparse_mla_decode


sparse_mla_decode = _register()
