"""The golden cases (shared/golden, README there) as torch tensors, and SPEC.md's
numerical bar, for the torch suites."""
import json
import os

import torch

from conftest import golden_cases

MODEL_NAMES = {"v32": "v32", "dsv4": "dsv4", "glm_nsa": "glm_nsa"}


def _read(case_dir, name, dtype, shape=None):
    with open(os.path.join(case_dir, name), "rb") as f:
        data = bytearray(f.read())
    t = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
    return t.reshape(shape) if shape is not None else t


def cache_tensor(case_dir, kv, bytes_per_token):
    """k_cache as FlashMLA takes it: [num_blocks, page, 1, bytes_per_token] uint8,
    a view whose stride(0) is the file's page stride."""
    nb, page, stride = kv["num_blocks"], kv["page_block_size"], kv["block_stride_bytes"]
    raw = _read(case_dir, kv["file"], torch.uint8).reshape(nb, stride)
    return raw.as_strided((nb, page, 1, bytes_per_token), (stride, bytes_per_token, bytes_per_token, 1))


def load_case(case_dir):
    with open(os.path.join(case_dir, "case.json")) as f:
        meta = json.load(f)
    b, s_q, h_q, d_qk, d_v = meta["b"], meta["s_q"], meta["h_q"], meta["d_qk"], meta["d_v"]
    bpt = meta["bytes_per_token"]
    c = {"name": os.path.basename(case_dir), "dir": case_dir, "model": meta["model"], "b": b, "s_q": s_q,
         "h_q": h_q, "d_qk": d_qk, "d_v": d_v, "bytes_per_token": bpt, "sm_scale": meta["sm_scale"],
         "page_size": meta["kv"]["page_block_size"]}
    c["q"] = _read(case_dir, meta["q"]["file"], torch.int16).view(torch.bfloat16).reshape(b, s_q, h_q, d_qk)
    c["k_cache"] = cache_tensor(case_dir, meta["kv"], bpt)
    c["indices"] = _read(case_dir, meta["indices"]["file"], torch.int32, meta["indices"]["shape"])
    c["topk_length"] = (_read(case_dir, meta["topk_length"]["file"], torch.int32, [b])
                        if meta.get("topk_length") else None)
    c["attn_sink"] = _read(case_dir, meta["attn_sink"]["file"], torch.float32, [h_q]) if meta.get("attn_sink") else None
    extra = meta.get("extra_kv")
    c["extra_page_size"] = extra["page_block_size"] if extra else 0
    c["extra_k_cache"] = cache_tensor(case_dir, extra, bpt) if extra else None
    c["extra_indices"] = (_read(case_dir, meta["extra_indices"]["file"], torch.int32, meta["extra_indices"]["shape"])
                          if extra else None)
    c["extra_topk_length"] = (_read(case_dir, meta["extra_topk_length"]["file"], torch.int32, [b])
                              if meta.get("extra_topk_length") else None)
    c["expected_out"] = _read(case_dir, meta["expected"]["out"], torch.float32, [b, s_q, h_q, d_v])
    c["expected_lse"] = _read(case_dir, meta["expected"]["lse"], torch.float32, [b, s_q, h_q])
    src = meta["kv"].get("source_bf16")
    c["k_source"] = (_read(case_dir, src, torch.int16).view(torch.bfloat16).reshape(-1, meta["kv"]["page_block_size"],
                                                                                     d_qk) if src else None)
    c["block_stride"] = meta["kv"]["block_stride_bytes"]
    return c


def cases():
    return golden_cases()


def features_of(c):
    return [n for n, k in (("sink", "attn_sink"), ("topk_length", "topk_length"),
                           ("extra_topk_length", "extra_topk_length")) if c[k] is not None]


def to(c, device):
    return {k: (v.to(device) if isinstance(v, torch.Tensor) and k not in ("k_source",) else v) for k, v in c.items()}


def check_bar(out, lse, ref_out, ref_lse, label):
    """SPEC.md's bar: every out element within 1e-3 + 2^-7 |ref|, cosine >= 0.99999;
    lse within 1e-5 + 1.2e-4 |ref|, infinities in the same places, never NaN.
    Computed in float64 on the device of out (large calls stay on the GPU)."""
    device = out.device
    out = out.double()
    ref_out = ref_out.to(device).double()
    lse = lse.to(device).double()
    ref_lse = ref_lse.to(device).double()
    err = (out - ref_out).abs()
    bad = ~(err <= 1e-3 + 2 ** -7 * ref_out.abs())
    max_err = float(err.max()) if err.numel() else 0.0
    assert not bad.any(), f"{label}: {int(bad.sum())} out elements outside the bar, max |err| {max_err:.3e}"
    a, r = out.flatten(), ref_out.flatten()
    if r.numel() and float(r.norm()) > 0:
        cos = float(a @ r / (a.norm() * r.norm()))
        assert cos >= 0.99999, f"{label}: cosine {cos}"
    assert not torch.isnan(lse).any(), f"{label}: NaN in lse"
    inf_ref = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), inf_ref) and torch.equal(lse[inf_ref], ref_lse[inf_ref]), \
        f"{label}: infinities of lse misplaced"
    fin = ~inf_ref
    lerr = (lse[fin] - ref_lse[fin]).abs()
    assert bool((lerr <= 1e-5 + 1.2e-4 * ref_lse[fin].abs()).all()), \
        f"{label}: lse max |err| {float(lerr.max()) if lerr.numel() else 0.0:.3e}"
    return max_err
