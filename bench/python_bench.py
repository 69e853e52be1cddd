"""The Python entry points by shared/BENCH.md's protocol, beside `mlajit bench`.

Per entry point (flash_mla.flash_mla_with_kvcache, SparseMLADecoder.run,
torch.ops.mlajit.sparse_mla_decode) and per BENCH.md V3.2 row at the head counts
asked (default 16 and 128; at 128 also the s_q 2 rows), with `mlajit bench`'s
inputs and sequence (src/cli/bench.c, src/harness/synth.c), so the GPU times
compare:
  inputs    b sequences of seqlen tokens on the pages of a random block table
            (page 0 unused): the pool holds b * seqlen tokens; per (row, token)
            topk distinct random positions of the row's own sequence, unsorted;
            only the attended slots hold quantized K (normal/10 clamped), every
            other byte 0xFF as synth.c leaves them; q normal clamped; one index
            set for all calls (as `mlajit bench`);
  check     the call once, its first 2 rows against the fp64 reference
            (python/tests/reference.py) on the slots they attend;
  eager_us  CUDA events around each call, median of 100 after 20 warm-up calls;
  gpu_us    then 10 back-to-back calls captured, one untimed replay, 20 timed
            replays: the median / 10 (the figure the goals use), against `mlajit
            bench`'s gpu_us for the same row, run first in the same call (goal:
            within 3%), and against a second `mlajit bench` run after the Python
            rows; the plan's kernel and split count beside `mlajit bench`'s;
  host_us   eager_us - gpu_us: what the call adds on the host (goal: <= 10 us;
            FlashMLA through PyTorch: 25-60 us); call_us, the Python call alone
            on the host's clock, median.
Eager calls and replays are interleaved: each round times one call (or one
replay) of every entry in a rotating order, so a drift of the GPU's state over a
row weighs on the three alike; every replay is kept in the JSON line
(samples_us), and drift is the median of the last 10 replays over the first 10.
Then the warm-up time of examples/engine_decode.py's envelope in fresh processes:
cold (empty cache, JIT), from the disk cache, and from a pack (`mlajit pack
build`, JIT disabled).

    PYTHONPATH=python MLAJIT_LIBRARY=build-gpu/libmlajit.so \\
        python3 bench/python_bench.py --cli build-gpu/mlajit --json OUT.jsonl [--heads 16,128] [--quick]
    python3 bench/python_bench.py --self-check   # no GPU: the inputs and the check on CPU tensors
--graph-first --full-pool-check bring back the sequence before issue 46's fix
(graphs timed first, right after the reference dequantized the whole pool on
the GPU), for an A/B in the same call.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))

import golden  # noqa: E402  (python/tests)
import mlajit  # noqa: E402
import reference  # noqa: E402  (python/tests)
from mlajit import flash_mla  # noqa: E402

# BENCH.md's V3.2 rows, page 64: (b, s_q, seqlen, topk); the s_q 2 rows at 128 heads
V32_ROWS = [(1, 1, 32768, 2048), (8, 1, 32768, 2048), (64, 1, 8192, 128), (128, 1, 8192, 128),
            (64, 1, 16384, 512), (128, 1, 16384, 512), (64, 1, 32768, 2048), (128, 1, 32768, 2048),
            (256, 1, 16384, 2048)]
MTP_ROWS = [(2, 2, 32768, 2048), (64, 2, 32768, 2048), (128, 2, 32768, 2048)]
PAGE, D_QK, D_V, BPT = 64, 576, 512, 656  # V3.2: 656 bytes a token, so a page of 64 is 41984 (a multiple of 16)
CALLS, REPLAYS, WARMUP, EAGER = 10, 20, 20, 100  # `mlajit bench`'s (src/cli/bench.c)
L2_BYTES = 50 * 2 ** 20  # H100 and H200 (BENCH.md)


def c_bench(cli, heads, quick):
    """`mlajit bench` rows (V3.2) at these heads: {(h, b, s_q, topk): its JSON line}."""
    rows = {}
    for h in heads:
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
            cmd = [cli, "bench", "--model", "v32", "--heads", str(h), "--json", f.name] + (["--quick"] if quick else [])
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            for line in open(f.name):
                r = json.loads(line)
                rows[(r["h_q"], r["b"], r["s_q"], r["topk"])] = r
    return rows


def inputs(b, s_q, h, seqlen, topk, gen, device="cuda"):
    """`mlajit bench`'s inputs (synth.c, BENCH.md's recipe): (q, kv, idx).

    kv [b * seqlen / 64 + 1, 64, 1, 656] uint8: b sequences on the pages of a
    random block table (page 0 unused). idx [b, s_q, topk] int32: per (row,
    token) topk distinct random positions of the row's sequence, in the order
    drawn. Only the slots idx names are quantized from normal/10 clamped to
    [-1, 1]; every other byte is 0xFF, as synth.c leaves it (the kernel reads
    the same bytes either way, and no multi-GB fp32 cache is built and freed
    on the GPU before the timing). q [b, s_q, h, 576] bf16, normal clamped."""
    per_seq = seqlen // PAGE
    blocks = b * per_seq + 1
    table = (torch.randperm(blocks - 1, generator=gen, device=device) + 1).view(b, per_seq)
    pos = torch.stack([torch.randperm(seqlen, generator=gen, device=device)[:topk] for _ in range(b * s_q)])
    pos = pos.view(b, s_q, topk)
    idx = (table.gather(1, (pos // PAGE).view(b, -1)).view(b, s_q, topk) * PAGE + pos % PAGE).to(torch.int32)
    pool = torch.full((blocks * PAGE, BPT), 0xFF, dtype=torch.uint8, device=device)
    slots = torch.unique(idx.view(-1).long())
    values = (torch.randn(slots.numel(), D_QK, generator=gen, device=device) / 10).clamp(-1, 1)
    # a token's 656 bytes do not depend on the page size: quantized as pages of one
    pool[slots] = mlajit.quantize_kv(values.to(torch.bfloat16), "v32", 1).view(slots.numel(), BPT)
    del values
    q = torch.randn(b, s_q, h, D_QK, generator=gen, device=device).clamp(-1, 1).to(torch.bfloat16)
    return q, pool.view(blocks, PAGE, 1, BPT), idx.contiguous()


def reference_rows(q, kv, idx, scale, n=2):
    """The fp64 reference of the first n rows, on the slots they attend alone (a
    cache of pages of one token), as `mlajit bench` checks its first 2 rows: the
    whole pool dequantized on the GPU (GBs) would stand between the inputs and
    the timing."""
    slots, local = torch.unique(idx[:n].long(), return_inverse=True)
    sub = kv.reshape(-1, BPT)[slots].view(-1, 1, 1, BPT)
    return reference.decode("v32", q[:n], sub, local.to(torch.int32), scale)


def check(out, lse_bsh, q, kv, idx, scale, label, full_pool=False):
    """full_pool: the reference dequantizes the whole pool (the check before issue
    46: GBs of GPU work just before the timing), for an A/B of that burst."""
    n = min(2, q.shape[0])
    if full_pool:
        ref_out, ref_lse = reference.decode("v32", q[:n], kv, idx[:n], scale)
    else:
        ref_out, ref_lse = reference_rows(q, kv, idx, scale, n)
    golden.check_bar(out[:n], lse_bsh[:n], ref_out, ref_lse, label)


def rotations(names, rounds):
    """names in `rounds` rounds, each starting one later than the last."""
    for r in range(rounds):
        k = r % len(names)
        yield names[k:] + names[:k]


def eager_us(entries):
    """Per entry, events around each call (host time included) and the call alone
    on the host's clock: WARMUP calls each, then EAGER rounds of one call per entry
    in a rotating order; the medians. Runs before the graphs, as in `mlajit bench`."""
    for call in entries.values():
        for _ in range(WARMUP):
            call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    events = {name: [] for name in entries}
    host = {name: [] for name in entries}
    for order in rotations(list(entries), EAGER):
        for name in order:
            start.record()
            t0 = time.perf_counter()
            entries[name]()
            host[name].append((time.perf_counter() - t0) * 1e6)
            end.record()
            end.synchronize()
            events[name].append(start.elapsed_time(end) * 1000.0)
    return {name: (statistics.median(events[name]), statistics.median(host[name])) for name in entries}


def graph_us(entries):
    """Per entry, CALLS calls captured in one graph and one untimed replay (as
    mlajit_time_plan_graph); then REPLAYS rounds, each replaying every entry's
    graph once in a rotating order: per entry (median replay / CALLS, every
    replay / CALLS in order)."""
    graphs = {}
    for name, call in entries.items():
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(CALLS):
                call()
        g.replay()
        graphs[name] = g
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = {name: [] for name in entries}
    for order in rotations(list(entries), REPLAYS):
        for name in order:
            start.record()
            graphs[name].replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1000.0 / CALLS)
    return {name: (statistics.median(t), t) for name, t in times.items()}


def plan_of(dec, shape):
    """The plan the three entry points launch for this geometry (one plan cache
    serves them all): (kernel spec, split count)."""
    plan = dec._launchers[shape].plan
    return plan.report.spec, plan.num_splits


def bench_rows(heads, quick, c_rows, json_out, full_pool_check=False, graph_first=False):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(2026)
    scale = D_QK ** -0.55
    results = []
    for h in heads:
        rows = [r for r in V32_ROWS if not (quick and (r[0] == 256 or r[2] == 8192))]
        rows += MTP_ROWS if h == 128 else []
        for b, s_q, seqlen, topk in rows:
            q, kv, idx = inputs(b, s_q, h, seqlen, topk, gen)
            out = torch.empty(b, s_q, h, D_V, dtype=torch.bfloat16, device="cuda")
            lse = torch.empty(b, s_q, h, device="cuda")
            dec = mlajit.SparseMLADecoder("v32", h, PAGE, max_batch_size=b, max_s_q=s_q, max_topk=topk)
            dec.warmup([b], [s_q], [topk])
            kernel, splits = plan_of(dec, (b, s_q, topk, 0))
            meta, _ = flash_mla.get_mla_metadata()
            entry = {
                "flash_mla": lambda: flash_mla.flash_mla_with_kvcache(q, kv, None, None, D_V, meta,
                                                                      softmax_scale=scale, indices=idx),
                "decoder": lambda: dec.run(q, kv, idx, out, scale, lse=lse),
                "op": lambda: torch.ops.mlajit.sparse_mla_decode(q, kv, idx, out, lse, scale),
            }
            fo, fl = entry["flash_mla"]()
            check(fo, fl.transpose(1, 2), q, kv, idx, scale, f"flash_mla h{h} b{b}", full_pool_check)
            for name in ("decoder", "op"):
                entry[name]()
                check(out, lse, q, kv, idx, scale, f"{name} h{h} b{b}", full_pool_check)
            fo = fl = None
            c_row = c_rows.get((h, b, s_q, topk)) or {}
            c_us = c_row.get("gpu_us")
            same_plan = (c_row.get("kernel"), c_row.get("splits")) == (kernel, splits) if c_row else None
            if graph_first:  # the order before issue 46's fix, for the A/B
                gpu = graph_us(entry)
                eager = eager_us(entry)
            else:
                eager = eager_us(entry)
                gpu = graph_us(entry)
            for name in entry:
                g, samples = gpu[name]
                e, host = eager[name]
                drift = statistics.median(samples[REPLAYS // 2:]) / statistics.median(samples[:REPLAYS // 2])
                r = {"entry": name, "model": "v32", "h_q": h, "b": b, "s_q": s_q, "seqlen": seqlen, "topk": topk,
                     "gpu_us": round(g, 2), "c_gpu_us": c_us, "ratio_to_c": round(g / c_us, 4) if c_us else None,
                     "eager_us": round(e, 2), "host_us": round(e - g, 2), "call_us": round(host, 2),
                     "kernel": kernel, "splits": splits, "c_kernel": c_row.get("kernel"),
                     "c_splits": c_row.get("splits"), "same_plan": same_plan, "drift": round(drift, 4),
                     "samples_us": [round(t, 2) for t in samples], "graph_first": graph_first,
                     "full_pool_check": full_pool_check, "check": "pass"}
                results.append(r)
                print(f"{name:>9} h{h:3d} b{b:4d} s_q{s_q} topk {topk:5d}: gpu {g:8.2f} us (mlajit bench "
                      f"{c_us if c_us else float('nan'):8.2f}, x{(g / c_us) if c_us else float('nan'):.3f})  "
                      f"eager {e:8.2f}  host {e - g:6.2f}  call {host:6.2f} us  drift x{drift:.3f}  "
                      f"{splits} splits{'' if same_plan in (True, None) else '  PLAN DIFFERS from mlajit bench'}",
                      flush=True)
                if json_out:
                    json_out.write(json.dumps(r) + "\n")
                    json_out.flush()
            q = kv = idx = out = lse = dec = meta = entry = None  # the next row's inputs in their place
            torch.cuda.empty_cache()
    return results


def host_floors(json_out):
    """What a call costs the host before it does any of mlajit's work, timed as
    eager_us times the entries (events around the call, median of EAGER after
    WARMUP): nothing; flash_mla's two new outputs (torch.empty_strided on the
    GPU, the shapes of h128 b64); and a no-op torch.library operator of
    sparse_mla_decode's schema, registered as ops.py registers it, on the GPU
    tensors of a small call. With the decoder's own overhead, these are the
    floors of flash_mla's and the op's: what they add to the decoder that
    mlajit's code does not spend."""
    lib = torch.library.Library("mlajit_floor", "DEF")
    lib.define(ops_schema())
    lib.impl("noop", lambda *args: None, "CompositeExplicitAutograd")
    noop = torch.ops.mlajit_floor.noop
    q = torch.zeros(1, 1, 16, D_QK, dtype=torch.bfloat16, device="cuda")
    kv = torch.zeros(2, PAGE, 1, BPT, dtype=torch.uint8, device="cuda")
    idx = torch.zeros(1, 1, 128, dtype=torch.int32, device="cuda")
    out = torch.empty(1, 1, 16, D_V, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(1, 1, 16, device="cuda")
    b, h = 64, 128
    dev = torch.device("cuda")

    def two_outputs():
        torch.empty_strided((b, 1, h, D_V), (h * D_V, h * D_V, D_V, 1), dtype=torch.bfloat16, device=dev)
        torch.empty_strided((b, h, 1), (h, 1, h), dtype=torch.float32, device=dev)

    entries = {"nothing": lambda: None, "two_outputs": two_outputs,
               "noop_op": lambda: noop(q, kv, idx, out, lse, 1.0)}
    floors = eager_us(entries)
    for name, (e, host) in floors.items():
        print(f"host floor {name:>12}: events {e:6.2f} us, the call alone {host:6.2f} us", flush=True)
        if json_out:
            json_out.write(json.dumps({"host_floor": name, "eager_us": round(e, 2), "call_us": round(host, 2)})
                           + "\n")
    return floors


def ops_schema():
    """sparse_mla_decode's schema (python/mlajit/ops.py) under the name noop."""
    from mlajit import ops
    return ops._SCHEMA.replace("sparse_mla_decode(", "noop(", 1)


def placement_scan(row, placements, json_out):
    """One row's decoder timed at several places in device memory: before each
    placement a pad of 7 MB more than the last stays allocated, then new inputs,
    out, lse and decoder (workspace included), and the graph replay time as in
    graph_us. Every placement's tensors stay alive, so each gets memory no earlier
    placement had. A spread past 3% here is the row's sensitivity to where its
    bytes land (L2 residency between the 10 captured calls), not the entry
    point's: the kernel, grid and inputs' values are the same each time."""
    h, b, s_q, topk = row
    seqlen = 32768
    keep, times = [], []
    scale = D_QK ** -0.55
    for k in range(placements):
        gen = torch.Generator(device="cuda")
        gen.manual_seed(2026)
        pad = torch.empty(k * 7 * 2 ** 20 + 1, dtype=torch.uint8, device="cuda")
        q, kv, idx = inputs(b, s_q, h, seqlen, topk, gen)
        out = torch.empty(b, s_q, h, D_V, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(b, s_q, h, device="cuda")
        dec = mlajit.SparseMLADecoder("v32", h, PAGE, max_batch_size=b, max_s_q=s_q, max_topk=topk)
        dec.warmup([b], [s_q], [topk])
        call = lambda: dec.run(q, kv, idx, out, scale, lse=lse)  # noqa: E731
        call()
        check(out, lse, q, kv, idx, scale, f"placement {k}")
        g, samples = graph_us({"decoder": call})["decoder"]
        times.append(g)
        keep.append((pad, q, kv, idx, out, lse, dec))
        ptrs = {"kv": kv.data_ptr(), "out": out.data_ptr(), "workspace": dec._workspace.data_ptr() if dec._workspace is not None else 0}
        print(f"placement {k}: h{h} b{b} s_q{s_q} topk {topk}: gpu {g:8.2f} us  "
              + "  ".join(f"{n} 0x{v:x}" for n, v in ptrs.items()), flush=True)
        if json_out:
            json_out.write(json.dumps({"placement": k, "h_q": h, "b": b, "s_q": s_q, "topk": topk,
                                       "gpu_us": round(g, 2), "samples_us": [round(t, 2) for t in samples],
                                       **{n + "_ptr": v for n, v in ptrs.items()}}) + "\n")
    print(f"placement scan h{h} b{b} s_q{s_q} topk {topk}: {min(times):.2f}-{max(times):.2f} us "
          f"(max / min {max(times) / min(times):.3f}) over {placements} placements")


def summary(results):
    for name in ("flash_mla", "decoder", "op"):
        rs = [r for r in results if r["entry"] == name]
        ratios = [r["ratio_to_c"] for r in rs if r["ratio_to_c"]]
        hosts = [r["host_us"] for r in rs]
        if not rs:
            continue
        worst = max(ratios, key=lambda x: abs(x - 1)) if ratios else float("nan")
        print(f"{name:>9}: gpu / mlajit bench over {len(ratios)} rows: median {statistics.median(ratios):.3f}, "
              f"worst {worst:.3f} (goal within 3%); host overhead median {statistics.median(hosts):.2f} us, "
              f"max {max(hosts):.2f} us (goal <= 10 us)")
        drifts = [r["drift"] for r in rs]
        worst = max(drifts, key=lambda x: abs(x - 1))
        print(f"{name:>9}: last 10 replays / first 10 (drift): median {statistics.median(drifts):.3f}, "
              f"worst {worst:.3f}; plan as mlajit bench's on {sum(r['same_plan'] is True for r in rs)} of "
              f"{sum(r['same_plan'] is not None for r in rs)} rows")
        after = [r["ratio_to_c_after"] for r in rs if r.get("ratio_to_c_after")]
        if after:
            worst = max(after, key=lambda x: abs(x - 1))
            print(f"{name:>9}: gpu / mlajit bench run after: median {statistics.median(after):.3f}, worst {worst:.3f}")


WARMUP_SNIPPET = """
import sys, time
sys.path.insert(0, {examples!r})
import engine_decode
t0 = time.perf_counter()
dec = engine_decode.make_decoder()
report = engine_decode.warm_up(dec)
print(f"{{time.perf_counter() - t0:.3f}} {{report.kernels}} {{report.compiled}} {{report.from_packs}} {{report.from_disk}}")
"""


def warmup_times(cli, json_out):
    """The example's envelope warmed up in fresh processes: cold, from the disk
    cache, and from a pack (JIT disabled)."""
    snippet = WARMUP_SNIPPET.format(examples=os.path.join(ROOT, "examples"))
    with tempfile.TemporaryDirectory() as tmp:
        def run(label, **env):
            e = dict(os.environ, **env)
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-c", snippet], env=e, check=True, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            warm, kernels, compiled, packs, disk = p.stdout.split()
            r = {"warmup": label, "warmup_s": float(warm), "process_s": round(wall, 3), "kernels": int(kernels),
                 "compiled": int(compiled), "from_packs": int(packs), "from_disk": int(disk)}
            print(f"warm-up of the example's envelope, {label}: {float(warm):.2f} s in the process "
                  f"({wall:.2f} s with start-up): {kernels} kernels, {compiled} compiled, {packs} from packs, "
                  f"{disk} from the cache", flush=True)
            if json_out:
                json_out.write(json.dumps(r) + "\n")
            return r
        cache = os.path.join(tmp, "cache")
        run("cold (empty cache, JIT)", MLAJIT_CACHE_DIR=cache, MLAJIT_PACKS="")
        run("from the disk cache", MLAJIT_CACHE_DIR=cache, MLAJIT_PACKS="")
        pack = os.path.join(tmp, "example.pack")
        t0 = time.perf_counter()
        subprocess.run([cli, "pack", "build", "--models", "v32", "--heads", "16", "--pages", "64",
                        "--features", "none", "--archs", "sm_90a", "--out", pack, "--no-cache"], check=True,
                       stdout=subprocess.DEVNULL, env=dict(os.environ, MLAJIT_CACHE_DIR=os.path.join(tmp, "c2")))
        print(f"mlajit pack build of the envelope: {time.perf_counter() - t0:.2f} s")
        run("from a pack (JIT disabled)", MLAJIT_CACHE_DIR=os.path.join(tmp, "empty"), MLAJIT_PACKS=pack,
            MLAJIT_DISABLE_JIT="1")


def self_check():
    """No GPU needed: the inputs and the check on CPU tensors, at a small shape,
    against synth.c's recipe; then the bytes of every row against the L2."""
    gen = torch.Generator()
    gen.manual_seed(46)
    b, s_q, h, seqlen, topk = 3, 2, 16, 4096, 256
    q, kv, idx = inputs(b, s_q, h, seqlen, topk, gen, device="cpu")
    blocks = b * seqlen // PAGE + 1
    assert kv.shape == (blocks, PAGE, 1, BPT) and kv.is_contiguous() and kv.dtype is torch.uint8
    assert idx.shape == (b, s_q, topk) and idx.dtype is torch.int32 and idx.is_contiguous()
    assert q.shape == (b, s_q, h, D_QK) and q.dtype is torch.bfloat16
    pages = idx.long() // PAGE
    for i in range(b):
        own = torch.unique(pages[i])  # every index on this row's own pages, never page 0
        assert own.min() >= 1 and own.max() < blocks
        for j in range(s_q):
            assert torch.unique(idx[i, j]).numel() == topk, "positions not distinct"
        for k in range(b):
            if k != i:
                assert not bool(torch.isin(own, torch.unique(pages[k])).any()), "rows share pages"
    used = torch.unique(pages)
    assert used.numel() <= blocks - 1
    slots = kv.reshape(-1, BPT)
    attended = torch.zeros(slots.shape[0], dtype=torch.bool)
    attended[idx.view(-1).long()] = True
    assert bool((slots[~attended] == 0xFF).all()), "unattended slots not poisoned"
    assert not bool((slots[attended] == 0xFF).all(dim=1).any()), "an attended slot not quantized"
    # a token's bytes are the same quantized as pages of one or of 64
    vals = (torch.randn(2 * PAGE, D_QK, generator=gen) / 10).clamp(-1, 1).to(torch.bfloat16)
    assert torch.equal(mlajit.quantize_kv(vals, "v32", 1).reshape(-1, BPT),
                       mlajit.quantize_kv(vals, "v32", PAGE).reshape(-1, BPT))
    # the check on the attended slots alone is the check on the whole pool
    scale = D_QK ** -0.55
    full = reference.decode("v32", q[:2], kv, idx[:2], scale)
    part = reference_rows(q, kv, idx, scale)
    assert torch.equal(full[0], part[0]) and torch.equal(full[1], part[1])
    assert bool(torch.isfinite(part[0]).all())
    print(f"self-check: b {b} s_q {s_q} seqlen {seqlen} topk {topk}: pool {blocks} pages x {PAGE * BPT} B, "
          f"{int(attended.sum())} slots quantized, the rest 0xFF; indices distinct, on each row's own pages; "
          "the 2-row check on the attended slots equals the whole pool's: ok")
    print(f"per row (V3.2, page {PAGE}): the pool, and what one call reads (KV gathered at {BPT} B a token, q) "
          f"and writes (out), against the {L2_BYTES >> 20} MiB L2")
    print(f"{'h_q':>4} {'b':>4} {'s_q':>3} {'seqlen':>6} {'topk':>5} {'pool MB':>8} {'KV MB':>7} {'q MB':>6} "
          f"{'out MB':>6} {'call/L2':>7}")
    for h in (16, 128):
        for b, s_q, seqlen, topk in V32_ROWS + (MTP_ROWS if h == 128 else []):
            pool = (b * seqlen // PAGE + 1) * PAGE * BPT
            kv_b, q_b, out_b = b * s_q * topk * BPT, b * s_q * h * D_QK * 2, b * s_q * h * D_V * 2
            print(f"{h:4d} {b:4d} {s_q:3d} {seqlen:6d} {topk:5d} {pool / 1e6:8.0f} {kv_b / 1e6:7.1f} "
                  f"{q_b / 1e6:6.1f} {out_b / 1e6:6.1f} {(kv_b + q_b + out_b) / L2_BYTES:7.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", default=os.path.join(ROOT, "build-gpu", "mlajit"), help="the mlajit CLI")
    parser.add_argument("--heads", default="16,128")
    parser.add_argument("--quick", action="store_true", help="BENCH.md's quick rows (no b 256, no seqlen 8192)")
    parser.add_argument("--json", help="write every row as a JSON line here")
    parser.add_argument("--no-warmup-times", action="store_true")
    parser.add_argument("--full-pool-check", action="store_true",
                        help="check against the reference on the whole pool (GBs of GPU work right before the "
                        "timing, as before issue 46's fix): the A/B of that burst")
    parser.add_argument("--graph-first", action="store_true",
                        help="time the graphs before the eager calls (the order before issue 46's fix): with "
                        "--full-pool-check, the old sequence")
    parser.add_argument("--self-check", action="store_true",
                        help="no GPU: check the inputs and the reference check on CPU tensors, print the bytes")
    parser.add_argument("--placement-scan", metavar="H,B,S_Q,TOPK",
                        help="only time this row's decoder at several places in device memory (see "
                        "placement_scan), beside `mlajit bench`'s figure for it")
    parser.add_argument("--placements", type=int, default=6)
    parser.add_argument("--floors", action="store_true", help="only time the host floors (host_floors)")
    args = parser.parse_args()
    if args.floors:
        host_floors(open(args.json, "w") if args.json else None)
        return
    if args.placement_scan:
        h, b, s_q, topk = (int(v) for v in args.placement_scan.split(","))
        json_out = open(args.json, "w") if args.json else None
        for _ in range(2):
            subprocess.run([args.cli, "bench", "--model", "v32", "--heads", str(h), "--batch", str(b),
                            "--topk", str(topk)], check=True)
        placement_scan((h, b, s_q, topk), args.placements, json_out)
        return
    if args.self_check:
        self_check()
        return
    heads = [int(h) for h in args.heads.split(",")]
    json_out = open(args.json, "w") if args.json else None
    c_rows = c_bench(args.cli, heads, args.quick)
    results = bench_rows(heads, args.quick, c_rows, json_out, args.full_pool_check, args.graph_first)
    # `mlajit bench` again after the Python rows: a gap that the second run closes
    # is the GPU's state over the run, not the entry points'
    c_after = c_bench(args.cli, heads, args.quick)
    for r in results:
        after = c_after.get((r["h_q"], r["b"], r["s_q"], r["topk"]), {}).get("gpu_us")
        r["ratio_to_c_after"] = round(r["gpu_us"] / after, 4) if after else None
    if json_out:
        json_out.write(json.dumps({"mlajit_bench_after": [{"h_q": h, "b": b, "s_q": s_q, "topk": topk,
                                                           "gpu_us": c["gpu_us"], "kernel": c.get("kernel"),
                                                           "splits": c.get("splits")}
                                                          for (h, b, s_q, topk), c in sorted(c_after.items())]})
                       + "\n")
    summary(results)
    host_floors(json_out)
    if not args.no_warmup_times:
        warmup_times(args.cli, json_out)


if __name__ == "__main__":
    main()
