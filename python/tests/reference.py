"""SPEC.md's operation in torch float64: the cache dequantized exactly as the
kernels do (bf16(fp8 x scale) for the NoPE dims, RoPE as stored), then softmax
attention over the valid candidates of both scopes, the sink applied to out
only; rows with nothing to attend get out 0 and lse +inf. Runs on the device
of its inputs; `rows_per_chunk` bounds the memory it gathers."""
import torch

import mlajit
from mlajit import _capi


def dequantize(k_cache, model):
    """All slots of a cache [num_blocks, page, 1, bpt] (any page stride) as float32
    [num_blocks * page, d_qk]; unreferenced (poisoned) slots give NaN / inf, which
    the reference never gathers."""
    info = mlajit.model_info(model)
    nb, page = k_cache.shape[0], k_cache.shape[1]
    pages = torch.as_strided(k_cache, (nb, page * info.bytes_per_token), (k_cache.stride(0), 1)).contiguous()
    if info.scale_place == _capi.SCALES_INLINE:
        rows = pages.reshape(nb * page, info.row_bytes)
        codes = rows[:, :info.d_nope]
        scales = rows[:, info.d_nope:info.d_nope + 4 * info.num_scales].contiguous().view(torch.float32)
        rope = rows[:, info.d_nope + 4 * info.num_scales:].contiguous().view(torch.bfloat16)
    else:
        data = pages[:, :page * info.row_bytes].reshape(nb * page, info.row_bytes)
        footer = pages[:, page * info.row_bytes:].reshape(nb * page, info.footer_bytes)
        codes = data[:, :info.d_nope]
        rope = data[:, info.d_nope:].contiguous().view(torch.bfloat16)
        e = footer[:, :info.num_scales].to(torch.int32)
        scales = torch.ldexp(torch.ones_like(e, dtype=torch.float32), e - 127)
        scales = torch.where(e == 255, torch.full_like(scales, float("nan")), scales)
    values = codes.contiguous().view(torch.float8_e4m3fn).float().reshape(-1, info.num_scales, info.quant_tile)
    nope = (values * scales.unsqueeze(-1)).to(torch.bfloat16).float().reshape(-1, info.d_nope)
    return torch.cat([nope, rope.float()], dim=1)


def _scope(deq, num_slots, indices, lengths, rows):
    b = indices.shape[0]
    pos = torch.arange(indices.shape[-1], device=indices.device)
    valid = (indices >= 0) & (indices < num_slots)
    if lengths is not None:
        valid &= pos.view(1, 1, -1) < lengths.view(b, 1, 1).clamp(min=0)
    k = deq[indices.clamp(0, num_slots - 1)].double()
    return k[rows], valid[rows]


def decode(model, q, k_cache, indices, sm_scale, topk_length=None, attn_sink=None, extra_k_cache=None,
           extra_indices=None, extra_topk_length=None, rows_per_chunk=256):
    """(out [b, s_q, h_q, d_v], lse [b, s_q, h_q]) in float64."""
    info = mlajit.model_info(model)
    b, s_q, h_q, _ = q.shape
    deq = dequantize(k_cache, model)
    extra_deq = dequantize(extra_k_cache, model) if extra_k_cache is not None else None
    out = torch.empty((b, s_q, h_q, info.d_v), dtype=torch.float64, device=q.device)
    lse = torch.empty((b, s_q, h_q), dtype=torch.float64, device=q.device)
    for start in range(0, b, max(1, rows_per_chunk // max(s_q, 1))):
        rows = slice(start, min(b, start + max(1, rows_per_chunk // max(s_q, 1))))
        k, valid = _scope(deq, deq.shape[0], indices, topk_length, rows)
        if extra_deq is not None:
            ek, evalid = _scope(extra_deq, extra_deq.shape[0], extra_indices, extra_topk_length, rows)
            k, valid = torch.cat([k, ek], dim=2), torch.cat([valid, evalid], dim=2)
        k = torch.where(valid.unsqueeze(-1), k, torch.zeros((), dtype=k.dtype, device=k.device))
        scores = torch.einsum("bshd,bsnd->bshn", q[rows].double(), k) * float(sm_scale)
        scores = scores.masked_fill(~valid.unsqueeze(2), float("-inf"))
        l = torch.logsumexp(scores, dim=-1)
        empty = torch.isinf(l) & (l < 0)
        p = torch.exp(scores - torch.where(empty, torch.zeros_like(l), l).unsqueeze(-1))
        o = torch.einsum("bshn,bsnd->bshd", p, k[..., :info.d_v])
        if attn_sink is not None:
            sink = attn_sink.double().view(1, 1, h_q)
            factor = 1.0 / (1.0 + torch.exp(sink - l))
            factor = torch.where(sink == float("inf"), torch.zeros_like(factor), factor)
            factor = torch.where(sink == float("-inf"), torch.ones_like(factor), factor)
            o = o * factor.unsqueeze(-1)
        o = torch.where(empty.unsqueeze(-1), torch.zeros_like(o), o)
        out[rows] = o
        lse[rows] = torch.where(empty, torch.full_like(l, float("inf")), l)
    return out, lse
