"""On a GPU (the H200 host), under SPEC.md's bar:
  - every golden case through each entry point (flash_mla_with_kvcache,
    SparseMLADecoder.run, torch.ops.mlajit.sparse_mla_decode), and through a
    caller written against FlashMLA's interface, run unchanged on both;
  - a sweep of head counts 1-128 x page sizes x ragged topks against the torch
    fp64 reference (reference.py);
  - (T, 1, H, D) calls with T = 32768, s_q 64, and the largest row count;
  - capture and replay over 8 batch sizes with new indices each replay,
    nothing compiled after warm-up, an unwarmed shape refused under capture;
  - torch.compile of a function that calls the op;
  - quantize_kv on the GPU equal to its CPU path.
Skipped, saying why, without torch or a GPU."""
import itertools
import math

import pytest

from conftest import NO_TORCH

torch = pytest.importorskip("torch", reason=NO_TORCH)

import golden  # noqa: E402
import mlajit  # noqa: E402
import reference  # noqa: E402
from mlajit import flash_mla  # noqa: E402

pytestmark = pytest.mark.gpu

CASES = golden.cases()
CASE_IDS = [d.rsplit("/", 1)[-1] for d in CASES]


def gpu_cache(cache):
    """A cache view moved to the GPU with its page stride kept."""
    if cache is None:
        return None
    nb, s0 = cache.shape[0], cache.stride(0)
    raw = torch.as_strided(cache, (nb, s0), (s0, 1)).contiguous().cuda()
    return raw.as_strided(cache.shape, cache.stride())


def gpu_case(case_dir):
    c = golden.load_case(case_dir)
    for k in ("q", "indices", "topk_length", "attn_sink", "extra_indices", "extra_topk_length"):
        if c[k] is not None:
            c[k] = c[k].cuda()
    c["k_cache"] = gpu_cache(c["k_cache"])
    c["extra_k_cache"] = gpu_cache(c["extra_k_cache"])
    return c


def flashmla_caller(fm, q, k_cache, indices, sm_scale, attn_sink=None, topk_length=None, extra_k_cache=None,
                    extra_indices=None, extra_topk_length=None):
    """A decode step written against FlashMLA's interface, as an engine calls it."""
    tile_scheduler_metadata, num_splits = fm.get_mla_metadata()
    out, lse = fm.flash_mla_with_kvcache(
        q, k_cache, None, None, 512, tile_scheduler_metadata, num_splits,
        softmax_scale=sm_scale, causal=False, is_fp8_kvcache=True, indices=indices, attn_sink=attn_sink,
        extra_k_cache=extra_k_cache, extra_indices_in_kvcache=extra_indices, topk_length=topk_length,
        extra_topk_length=extra_topk_length)
    return out, lse


def run_caller(fm, c):
    return flashmla_caller(fm, c["q"], c["k_cache"], c["indices"], c["sm_scale"], c["attn_sink"], c["topk_length"],
                           c["extra_k_cache"], c["extra_indices"], c["extra_topk_length"])


# ---- the golden cases through every entry point ------------------------------------

@pytest.mark.parametrize("case_dir", CASES, ids=CASE_IDS)
def test_golden_through_flash_mla_with_kvcache(case_dir):
    c = gpu_case(case_dir)
    out, lse = run_caller(flash_mla, c)
    b, s_q, h = c["b"], c["s_q"], c["h_q"]
    assert out.shape == (b, s_q, h, 512) and out.dtype == torch.bfloat16
    assert lse.shape == (b, h, s_q) and lse.dtype == torch.float32 and lse.stride() == (s_q * h, 1, h)  # FlashMLA's
    golden.check_bar(out, lse.transpose(1, 2), c["expected_out"], c["expected_lse"], c["name"])
    # the same metadata again: the fast path, the same bytes; and into a caller's out
    meta, _ = flash_mla.get_mla_metadata()
    args = (c["q"], c["k_cache"], None, None, 512, meta)
    kw = dict(softmax_scale=c["sm_scale"], indices=c["indices"], attn_sink=c["attn_sink"],
              extra_k_cache=c["extra_k_cache"], extra_indices_in_kvcache=c["extra_indices"],
              topk_length=c["topk_length"], extra_topk_length=c["extra_topk_length"])
    first, _ = flash_mla.flash_mla_with_kvcache(*args, **kw)
    mine = torch.empty_like(first)
    second, lse2 = flash_mla.flash_mla_with_kvcache(*args, **kw, out=mine)
    assert second is mine and torch.equal(first, second) and torch.equal(first, out)
    assert meta.have_initialized and meta.config["b"] == b


@pytest.mark.parametrize("case_dir", CASES, ids=CASE_IDS)
def test_golden_through_the_decoder(case_dir):
    c = gpu_case(case_dir)
    b, s_q, h = c["b"], c["s_q"], c["h_q"]
    topk = c["indices"].shape[-1]
    extra_topk = c["extra_indices"].shape[-1] if c["extra_indices"] is not None else 0
    dec = mlajit.SparseMLADecoder(c["model"], h, c["page_size"], extra_page_size=c["extra_page_size"],
                                  features=golden.features_of(c), max_batch_size=b, max_s_q=s_q, max_topk=topk,
                                  max_extra_topk=extra_topk)
    dec.warmup([b], [s_q], [topk], [extra_topk] if extra_topk else None)
    out = torch.full((b, s_q, h, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(b, h, s_q, device="cuda").transpose(1, 2)  # any strides
    got = dec.run(c["q"], c["k_cache"], c["indices"], out, c["sm_scale"], topk_length=c["topk_length"],
                  attn_sink=c["attn_sink"], extra_kv_cache=c["extra_k_cache"], extra_indices=c["extra_indices"],
                  extra_topk_length=c["extra_topk_length"], lse=lse)
    assert got is out
    golden.check_bar(out, lse, c["expected_out"], c["expected_lse"], c["name"])


@pytest.mark.parametrize("case_dir", CASES, ids=CASE_IDS)
def test_golden_through_the_torch_op(case_dir):
    c = gpu_case(case_dir)
    b, s_q, h = c["b"], c["s_q"], c["h_q"]
    out = torch.empty(b, s_q, h, 512, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(b, s_q, h, device="cuda")
    torch.ops.mlajit.sparse_mla_decode(c["q"], c["k_cache"], c["indices"], out, lse, c["sm_scale"], c["topk_length"],
                                       c["attn_sink"], c["extra_k_cache"], c["extra_indices"], c["extra_topk_length"])
    golden.check_bar(out, lse, c["expected_out"], c["expected_lse"], c["name"])


@pytest.mark.parametrize("case_dir", CASES, ids=CASE_IDS)
def test_a_flashmla_caller_runs_unchanged_on_flashmla_too(case_dir):
    """The caller above, unchanged, on FlashMLA itself where it is installed and
    has the shape (h_q 64 or 128): both under the bar, and close to each other."""
    fm = pytest.importorskip("flash_mla", reason="FlashMLA (flash_mla) is not installed on this host")
    c = gpu_case(case_dir)
    if c["h_q"] not in (64, 128):
        pytest.skip(f"FlashMLA has no kernel for h_q {c['h_q']} (mlajit's run is in the test above)")
    theirs, their_lse = run_caller(fm, c)
    ours, our_lse = run_caller(flash_mla, c)
    golden.check_bar(theirs, their_lse.transpose(1, 2), c["expected_out"], c["expected_lse"], c["name"] + " FlashMLA")
    golden.check_bar(ours, our_lse.transpose(1, 2), c["expected_out"], c["expected_lse"], c["name"])
    assert our_lse.shape == their_lse.shape and our_lse.stride() == their_lse.stride()


# ---- synthesized calls ----------------------------------------------------------------

def synth(model, b, s_q, h, topk, page, seqlen, *, seed, extra=None, lengths=False, sink=False, invalid=0.05,
          block_table_pages=None):
    """BENCH.md's recipe on the GPU: b sequences of seqlen tokens on pages from a
    random block table, topk random positions per (row, token) (repeats allowed:
    they count twice, as in SPEC.md), K normal/10 clamped and quantized, q normal
    clamped. extra = (page, seqlen, topk) for a second cache."""
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    info = mlajit.model_info(model)

    def cache_and_indices(page, seqlen, topk):
        per_seq = math.ceil(seqlen / page)
        blocks = b * per_seq + 1  # page 0 stays unused
        table = (torch.randperm(blocks - 1, generator=g, device="cuda") + 1).view(b, per_seq)
        values = (torch.randn(blocks * page, info.d_qk, generator=g, device="cuda") / 10).clamp(-1, 1)
        cache = mlajit.quantize_kv(values.to(torch.bfloat16), model, page)
        pos = torch.randint(0, seqlen, (b, s_q, topk), generator=g, device="cuda")
        slots = table.gather(1, (pos // page).view(b, -1)).view(b, s_q, topk) * page + pos % page
        drop = torch.rand(b, s_q, topk, generator=g, device="cuda") < invalid
        slots = torch.where(drop, torch.full_like(slots, -1), slots)
        return cache, slots.to(torch.int32).contiguous()

    c = {"model": model, "b": b, "s_q": s_q, "h_q": h, "sm_scale": info.d_qk ** -0.55, "page_size": page}
    c["k_cache"], c["indices"] = cache_and_indices(page, seqlen, topk)
    c["q"] = torch.randn(b, s_q, h, info.d_qk, generator=g, device="cuda").clamp(-1, 1).to(torch.bfloat16)
    c["topk_length"] = (torch.randint(0, topk + 1, (b,), generator=g, device="cuda").to(torch.int32)
                        if lengths else None)
    c["attn_sink"] = None
    if sink:
        s = torch.randn(h, generator=g, device="cuda")
        s[0] = float("inf")
        if h > 1:
            s[1] = float("-inf")
        c["attn_sink"] = s
    c["extra_k_cache"] = c["extra_indices"] = c["extra_topk_length"] = None
    c["extra_page_size"] = 0
    if extra:
        epage, eseqlen, etopk = extra
        c["extra_k_cache"], c["extra_indices"] = cache_and_indices(epage, eseqlen, etopk)
        c["extra_page_size"] = epage
        if lengths:
            c["extra_topk_length"] = torch.randint(0, etopk + 1, (b,), generator=g, device="cuda").to(torch.int32)
    return c


def expected(c):
    return reference.decode(c["model"], c["q"], c["k_cache"], c["indices"], c["sm_scale"], c["topk_length"],
                            c["attn_sink"], c["extra_k_cache"], c["extra_indices"], c["extra_topk_length"])


HEADS = [1, 2, 3, 8, 15, 16, 17, 32, 33, 64, 65, 96, 128]  # the edges of the kernels' head groups
SWEEP = {"v32": [1, 61, 64], "dsv4": [2, 64, 256]}
TOPKS = [1, 33, 100, 257, 600, 2048]


@pytest.mark.parametrize("model", sorted(SWEEP))
def test_sweep_heads_pages_ragged_topks_against_the_fp64_reference(model):
    pages = SWEEP[model]
    ctx = mlajit.context()
    ctx.warmup([model], HEADS, pages, feature_sets=[["topk_length"]])  # every kernel, compiled in parallel
    failures = []
    for i, (h, page) in enumerate(itertools.product(HEADS, pages)):
        topk = TOPKS[i % len(TOPKS)]
        b, s_q = 1 + i % 3, 1 + i % 2
        c = synth(model, b, s_q, h, topk, page, seqlen=max(2 * topk, 64), lengths=True, seed=i)
        out, lse = run_caller(flash_mla, c)
        ref_out, ref_lse = expected(c)
        try:
            golden.check_bar(out, lse.transpose(1, 2), ref_out, ref_lse, f"{model} h{h} p{page} topk {topk} b{b} "
                                                                         f"s_q{s_q}")
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("b, s_q, h, topk, page", [
    (32768, 1, 16, 128, 64),   # a mixed batch of T = 32768 tokens as (T, 1, H, D)
    (32768, 1, 32, 64, 64),
    (1, 64, 16, 512, 64),      # speculative decoding's s_q 64
    (1024, 64, 8, 32, 16),     # the most rows: 65536
    (1, 4096, 16, 128, 64),    # a mixed batch as (1, T, H, D), T past 64: run as T rows (flash_mla)
])
def test_the_geometry_engines_send(b, s_q, h, topk, page):
    c = synth("v32", b, s_q, h, topk, page, seqlen=max(topk, page), seed=b + s_q)
    out, lse = run_caller(flash_mla, c)
    ref_out, ref_lse = expected(c)
    golden.check_bar(out, lse.transpose(1, 2), ref_out, ref_lse, f"(b {b}, s_q {s_q}, h {h}) topk {topk}")


def test_an_empty_batch_is_a_no_op():
    c = synth("dsv4", 1, 1, 8, 64, 64, 64, seed=0)
    out = torch.full((0, 1, 8, 512), 7.0, dtype=torch.bfloat16, device="cuda")
    torch.ops.mlajit.sparse_mla_decode(c["q"][:0], c["k_cache"], c["indices"][:0], out, None, 0.04)
    torch.cuda.synchronize()


# ---- CUDA graphs ----------------------------------------------------------------------

def test_capture_and_replay_over_8_batch_sizes_with_new_indices_each_replay():
    sizes = [1, 2, 4, 8, 16, 32, 64, 128]
    h, page, topk = 16, 64, 512
    dec = mlajit.SparseMLADecoder("v32", h, page, features=["topk_length"], max_batch_size=128, max_topk=topk)
    dec.warmup(sizes, topks=[topk])
    compiles = dec.context.info().compiles
    base = synth("v32", 128, 1, h, topk, page, seqlen=4096, lengths=True, seed=1)
    kv = base["k_cache"]
    # static buffers per batch size; each replay reads what they hold then
    bufs = {n: {"q": torch.empty(n, 1, h, 576, dtype=torch.bfloat16, device="cuda"),
                "idx": torch.empty(n, 1, topk, dtype=torch.int32, device="cuda"),
                "len": torch.empty(n, dtype=torch.int32, device="cuda"),
                "out": torch.empty(n, 1, h, 512, dtype=torch.bfloat16, device="cuda"),
                "lse": torch.empty(n, 1, h, device="cuda")} for n in sizes}
    scale = 576 ** -0.55
    graphs = {}
    for n in sizes:
        bf = bufs[n]
        bf["q"].copy_(base["q"][:n]), bf["idx"].copy_(base["indices"][:n]), bf["len"].copy_(base["topk_length"][:n])
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dec.run(bf["q"], kv, bf["idx"], bf["out"], scale, topk_length=bf["len"], lse=bf["lse"])
        graphs[n] = g
    gen = torch.Generator(device="cuda")
    gen.manual_seed(5)
    slots = kv.shape[0] * page
    for step in range(3):
        for n in sizes:
            bf = bufs[n]
            bf["idx"].copy_(torch.randint(-1, slots, (n, 1, topk), generator=gen, device="cuda").to(torch.int32))
            bf["len"].copy_(torch.randint(0, topk + 1, (n,), generator=gen, device="cuda").to(torch.int32))
            bf["q"].copy_(torch.randn(n, 1, h, 576, generator=gen, device="cuda").clamp(-1, 1).to(torch.bfloat16))
            graphs[n].replay()
            ref_out, ref_lse = reference.decode("v32", bf["q"], kv, bf["idx"], scale, bf["len"])
            golden.check_bar(bf["out"], bf["lse"], ref_out, ref_lse, f"replay {step} of batch {n}")
    assert dec.context.info().compiles == compiles, "nothing compiles after warm-up"

    # a shape that was not warmed up is refused under capture, before anything is enqueued
    g = torch.cuda.CUDAGraph()
    with pytest.raises(mlajit.GraphCaptureError, match=r"\(3, 1, 512, 0\), which was not warmed up"):
        with torch.cuda.graph(g):
            dec.run(base["q"][:3], kv, base["indices"][:3], torch.empty(3, 1, h, 512, dtype=torch.bfloat16,
                                                                         device="cuda"), scale,
                    topk_length=base["topk_length"][:3])


def test_flash_mla_captures_after_one_eager_call_of_its_geometry():
    c = synth("v32", 4, 2, 32, 256, 64, 1024, seed=3)
    meta, _ = flash_mla.get_mla_metadata()
    kw = dict(softmax_scale=c["sm_scale"], indices=c["indices"])
    flash_mla.flash_mla_with_kvcache(c["q"], c["k_cache"], None, None, 512, meta, **kw)  # plans and loads
    meta2, _ = flash_mla.get_mla_metadata()  # a fresh metadata, bound under capture (no compile needed)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = flash_mla.flash_mla_with_kvcache(c["q"], c["k_cache"], None, None, 512, meta2, **kw)
    g.replay()
    ref_out, ref_lse = expected(c)
    golden.check_bar(out, lse.transpose(1, 2), ref_out, ref_lse, "captured flash_mla")


# ---- torch.compile ----------------------------------------------------------------------

def test_torch_compile_traces_a_function_that_calls_the_op():
    c = synth("dsv4", 3, 2, 64, 128, 256, 512, seed=4, extra=(64, 512, 256), lengths=True, sink=True)

    def attend(q, kv, idx, lengths, sink, ekv, eidx, elengths):
        out = torch.empty(q.shape[0], q.shape[1], q.shape[2], 512, dtype=torch.bfloat16, device=q.device)
        lse = torch.empty(q.shape[0], q.shape[1], q.shape[2], dtype=torch.float32, device=q.device)
        torch.ops.mlajit.sparse_mla_decode(q, kv, idx, out, lse, 512 ** -0.55, lengths, sink, ekv, eidx, elengths)
        return out.float() * 2.0, lse

    args = (c["q"], c["k_cache"], c["indices"], c["topk_length"], c["attn_sink"], c["extra_k_cache"],
            c["extra_indices"], c["extra_topk_length"])
    eager_out, eager_lse = attend(*args)
    compiled = torch.compile(attend, fullgraph=True)
    out, lse = compiled(*args)
    assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse)
    ref_out, ref_lse = expected(c)
    golden.check_bar(out / 2, lse, ref_out, ref_lse, "torch.compile")


# ---- the quantizer, errors ------------------------------------------------------------------

@pytest.mark.parametrize("model, page", [("v32", 64), ("dsv4", 61), ("glm_nsa", 7)])
def test_quantize_kv_on_the_gpu_is_its_cpu_path(model, page):
    info = mlajit.model_info(model)
    g = torch.Generator().manual_seed(page)
    values = ((torch.randn(page * 300, info.d_qk, generator=g) / 10).clamp(-1, 1) *
              torch.rand(page * 300, 1, generator=g) ** 4).to(torch.bfloat16)
    on_gpu = mlajit.quantize_kv(values.cuda(), model, page)
    on_cpu = mlajit.quantize_kv(values, model, page)
    raw = lambda t: torch.as_strided(t, (t.shape[0], t.stride(0)), (t.stride(0), 1))  # noqa: E731
    gpu_bytes, cpu_bytes = raw(on_gpu).cpu(), raw(on_cpu)
    differ = (gpu_bytes != cpu_bytes).nonzero()
    assert differ.numel() == 0, (f"{differ.shape[0]} bytes differ; first (page, byte in page): "
                                 f"{differ[:8].tolist()} (a token's row is {info.bytes_per_token} bytes)")


def test_bad_device_tensors_name_the_argument():
    c = synth("v32", 2, 1, 16, 64, 64, 64, seed=6)
    meta, _ = flash_mla.get_mla_metadata()
    flash_mla.flash_mla_with_kvcache(c["q"], c["k_cache"], None, None, 512, meta, indices=c["indices"])
    with pytest.raises(mlajit.InvalidArgumentError, match="q = 0x.* is not 16-byte aligned"):
        flat = torch.empty(c["q"].numel() + 8, dtype=torch.bfloat16, device="cuda")
        flash_mla.flash_mla_with_kvcache(flat[1:1 + c["q"].numel()].view(c["q"].shape), c["k_cache"], None, None,
                                         512, meta, indices=c["indices"])
    with pytest.raises(mlajit.InvalidArgumentError, match="indices is on cpu"):
        flash_mla.flash_mla_with_kvcache(c["q"], c["k_cache"], None, None, 512, meta, indices=c["indices"].cpu())
    with pytest.raises(mlajit.InvalidArgumentError, match=r"q.shape = \(3, 1, 16, 576\); allowed: \(2, 1, 16, 576\)"):
        flash_mla.flash_mla_with_kvcache(torch.cat([c["q"], c["q"][:1]]), c["k_cache"], None, None, 512, meta,
                                         indices=c["indices"])
