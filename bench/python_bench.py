"""The Python entry points by shared/BENCH.md's protocol, beside `mlajit bench`.

Per entry point (flash_mla.flash_mla_with_kvcache, SparseMLADecoder.run,
torch.ops.mlajit.sparse_mla_decode) and per BENCH.md V3.2 row at the head counts
asked (default 16 and 128; at 128 also the s_q 2 rows):
  gpu_us    CUDA-graph replay: 10 back-to-back calls captured, 20 replays, the
            median / 10 (the figure the goals use), against `mlajit bench`'s
            gpu_us for the same row, run first in the same call (goal: within 3%),
            and against a second `mlajit bench` run after the Python rows;
  eager_us  CUDA events around each call, median of 100 after 20 warm-up calls;
            both interleaved: each round times one replay (one call) of every
            entry, in a rotating order, so the GPU's clocks drifting over a row
            weigh on the three alike;
  host_us   eager_us - gpu_us: what the call adds on the host (goal: <= 10 us;
            FlashMLA through PyTorch: 25-60 us); call_us, the Python call alone
            on the host's clock, median.
Every row is checked once against the fp64 reference (python/tests/reference.py)
on its first rows. Then the warm-up time of examples/engine_decode.py's envelope
in fresh processes: cold (empty cache, JIT), from the disk cache, and from a
pack (`mlajit pack build`, JIT disabled).

    PYTHONPATH=python MLAJIT_LIBRARY=build-gpu/libmlajit.so \\
        python3 bench/python_bench.py --cli build-gpu/mlajit --json OUT.jsonl [--heads 16,128] [--quick]
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

import mlajit  # noqa: E402
from mlajit import flash_mla  # noqa: E402

# BENCH.md's V3.2 rows, page 64: (b, s_q, seqlen, topk); the s_q 2 rows at 128 heads
V32_ROWS = [(1, 1, 32768, 2048), (8, 1, 32768, 2048), (64, 1, 8192, 128), (128, 1, 8192, 128),
            (64, 1, 16384, 512), (128, 1, 16384, 512), (64, 1, 32768, 2048), (128, 1, 32768, 2048),
            (256, 1, 16384, 2048)]
MTP_ROWS = [(2, 2, 32768, 2048), (64, 2, 32768, 2048), (128, 2, 32768, 2048)]
PAGE, D_QK, D_V = 64, 576, 512


def c_bench(cli, heads, quick):
    """`mlajit bench` rows (V3.2) at these heads: {(h, b, s_q, topk): gpu_us}."""
    rows = {}
    for h in heads:
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
            cmd = [cli, "bench", "--model", "v32", "--heads", str(h), "--json", f.name] + (["--quick"] if quick else [])
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            for line in open(f.name):
                r = json.loads(line)
                rows[(r["h_q"], r["b"], r["s_q"], r["topk"])] = r["gpu_us"]
    return rows


def inputs(b, s_q, h, seqlen, topk, gen):
    """BENCH.md's inputs: b sequences of seqlen tokens on random pages, topk distinct
    positions per (row, token), K normal/10 clamped and quantized, q normal clamped."""
    per_seq = seqlen // PAGE
    blocks = b * per_seq + 1
    table = (torch.randperm(blocks - 1, generator=gen, device="cuda") + 1).view(b, per_seq)
    values = (torch.randn(blocks * PAGE, D_QK, generator=gen, device="cuda") / 10).clamp(-1, 1)
    kv = mlajit.quantize_kv(values.to(torch.bfloat16), "v32", PAGE)
    del values
    pos = torch.stack([torch.randperm(seqlen, generator=gen, device="cuda")[:topk] for _ in range(b * s_q)])
    pos = pos.view(b, s_q, topk)
    idx = (table.gather(1, (pos // PAGE).view(b, -1)).view(b, s_q, topk) * PAGE + pos % PAGE).to(torch.int32)
    q = torch.randn(b, s_q, h, D_QK, generator=gen, device="cuda").clamp(-1, 1).to(torch.bfloat16)
    return q, kv, idx.contiguous()


def rotations(names, rounds):
    """names in `rounds` rounds, each starting one later than the last."""
    for r in range(rounds):
        k = r % len(names)
        yield names[k:] + names[:k]


def graph_us(entries):
    """Per entry, 10 calls captured in one graph (after 3 eager calls and one
    untimed replay); then 20 rounds, each replaying every entry's graph once in a
    rotating order, so a drift of the GPU's clocks over the row weighs on every
    entry alike: each entry's median replay / 10."""
    graphs = {}
    for name, call in entries.items():
        for _ in range(3):
            call()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(10):
                call()
        g.replay()
        graphs[name] = g
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = {name: [] for name in entries}
    for order in rotations(list(entries), 20):
        for name in order:
            start.record()
            graphs[name].replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1000.0 / 10)
    return {name: statistics.median(t) for name, t in times.items()}


def eager_us(entries):
    """Per entry, events around each call (host time included) and the call alone
    on the host's clock: 20 warm-up calls each, then 100 rounds of one call per
    entry in a rotating order; the medians."""
    for call in entries.values():
        for _ in range(20):
            call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    events = {name: [] for name in entries}
    host = {name: [] for name in entries}
    for order in rotations(list(entries), 100):
        for name in order:
            start.record()
            t0 = time.perf_counter()
            entries[name]()
            host[name].append((time.perf_counter() - t0) * 1e6)
            end.record()
            end.synchronize()
            events[name].append(start.elapsed_time(end) * 1000.0)
    return {name: (statistics.median(events[name]), statistics.median(host[name])) for name in entries}


def check(out, lse_bsh, q, kv, idx, scale, label):
    import golden
    import reference
    n = min(2, q.shape[0])
    ref_out, ref_lse = reference.decode("v32", q[:n], kv, idx[:n], scale)
    golden.check_bar(out[:n], lse_bsh[:n], ref_out, ref_lse, label)


def bench_rows(heads, quick, c_rows, json_out):
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
            meta, _ = flash_mla.get_mla_metadata()
            entry = {
                "flash_mla": lambda: flash_mla.flash_mla_with_kvcache(q, kv, None, None, D_V, meta,
                                                                      softmax_scale=scale, indices=idx),
                "decoder": lambda: dec.run(q, kv, idx, out, scale, lse=lse),
                "op": lambda: torch.ops.mlajit.sparse_mla_decode(q, kv, idx, out, lse, scale),
            }
            fo, fl = entry["flash_mla"]()
            check(fo, fl.transpose(1, 2), q, kv, idx, scale, f"flash_mla h{h} b{b}")
            for name in ("decoder", "op"):
                entry[name]()
                check(out, lse, q, kv, idx, scale, f"{name} h{h} b{b}")
            c_us = c_rows.get((h, b, s_q, topk))
            gpu = graph_us(entry)
            eager = eager_us(entry)
            for name in entry:
                g = gpu[name]
                e, host = eager[name]
                r = {"entry": name, "model": "v32", "h_q": h, "b": b, "s_q": s_q, "seqlen": seqlen, "topk": topk,
                     "gpu_us": round(g, 2), "c_gpu_us": c_us, "ratio_to_c": round(g / c_us, 4) if c_us else None,
                     "eager_us": round(e, 2), "host_us": round(e - g, 2), "call_us": round(host, 2),
                     "check": "pass"}
                results.append(r)
                print(f"{name:>9} h{h:3d} b{b:4d} s_q{s_q} topk {topk:5d}: gpu {g:8.2f} us (mlajit bench "
                      f"{c_us if c_us else float('nan'):8.2f}, x{(g / c_us) if c_us else float('nan'):.3f})  "
                      f"eager {e:8.2f}  host {e - g:6.2f}  call {host:6.2f} us", flush=True)
                if json_out:
                    json_out.write(json.dumps(r) + "\n")
                    json_out.flush()
            q = kv = idx = out = lse = dec = meta = entry = None  # the next row's inputs in their place
            torch.cuda.empty_cache()
    return results


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", default=os.path.join(ROOT, "build-gpu", "mlajit"), help="the mlajit CLI")
    parser.add_argument("--heads", default="16,128")
    parser.add_argument("--quick", action="store_true", help="BENCH.md's quick rows (no b 256, no seqlen 8192)")
    parser.add_argument("--json", help="write every row as a JSON line here")
    parser.add_argument("--no-warmup-times", action="store_true")
    args = parser.parse_args()
    heads = [int(h) for h in args.heads.split(",")]
    json_out = open(args.json, "w") if args.json else None
    c_rows = c_bench(args.cli, heads, args.quick)
    results = bench_rows(heads, args.quick, c_rows, json_out)
    # `mlajit bench` again after the Python rows: a gap that the second run closes
    # is the GPU's state over the run, not the entry points'
    c_after = c_bench(args.cli, heads, args.quick)
    for r in results:
        after = c_after.get((r["h_q"], r["b"], r["s_q"], r["topk"]))
        r["ratio_to_c_after"] = round(r["gpu_us"] / after, 4) if after else None
    if json_out:
        json_out.write(json.dumps({"mlajit_bench_after": [{"h_q": h, "b": b, "s_q": s_q, "topk": topk, "gpu_us": us}
                                                          for (h, b, s_q, topk), us in sorted(c_after.items())]})
                       + "\n")
    summary(results)
    if not args.no_warmup_times:
        warmup_times(args.cli, json_out)


if __name__ == "__main__":
    main()
