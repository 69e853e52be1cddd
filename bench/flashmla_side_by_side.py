"""FlashMLA's sparse FP8 decode and mlajit's decoder on the same card, same inputs.

Issue 48's ratios are mlajit's GPU time over FlashMLA's. shared/BENCH.md holds
FlashMLA's figures on an H200; on any other card (the device often lends an
H100) the ratio needs FlashMLA timed beside mlajit in the same process. This
script does that with bench/python_bench.py's inputs, check and graph timing
(BENCH.md's protocol: b sequences in HBM, a random block table, 10 calls per
graph, the median of 20 replays / 10), the two entries' replays interleaved
round by round. Each entry's output is first checked against the fp64
reference on 2 rows, so a FlashMLA build that misreads the inputs fails
loudly instead of timing.

FlashMLA is DeepSeek's public package (`flash_mla`, built from its source on
the GPU host: tools/device-run.sh flashmla-build); mlajit is this tree's
Python package. V3.2 rows only (FlashMLA runs 64 and 128 heads).

    PYTHONPATH=python:/tmp/flashmla MLAJIT_LIBRARY=build-gpu/libmlajit.so \\
        python3 bench/flashmla_side_by_side.py --heads 64,128 --json OUT.jsonl [--rows B:TOPK,...]
    ... --only flashmla|mlajit --rows B:TOPK   # one entry, one row (under ncu)
"""
import argparse
import json
import statistics
import sys

import torch

import python_bench as pb  # bench/: inputs, check, graph_us and BENCH.md's rows

ROWS = {(b, topk): (b, s_q, seqlen, topk) for b, s_q, seqlen, topk in pb.V32_ROWS}


def entries(q, kv, idx, h, scale, only):
    """name -> a call, and name -> (out, lse as [b, s_q, h]) after one call."""
    import flash_mla  # DeepSeek's package (the upstream one, not mlajit.flash_mla)

    b, s_q, topk = idx.shape
    out = torch.empty(b, s_q, h, pb.D_V, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(b, s_q, h, device="cuda")
    dec = pb.mlajit.SparseMLADecoder("v32", h, pb.PAGE, max_batch_size=b, max_s_q=s_q, max_topk=topk)
    dec.warmup([b], [s_q], [topk])
    meta, _ = flash_mla.get_mla_metadata()
    calls = {
        "flashmla": lambda: flash_mla.flash_mla_with_kvcache(q, kv, None, None, pb.D_V, meta, softmax_scale=scale,
                                                             is_fp8_kvcache=True, indices=idx),
        "mlajit": lambda: dec.run(q, kv, idx, out, scale, lse=lse),
    }
    calls = {k: v for k, v in calls.items() if only in (None, k)}
    results = {}
    if "flashmla" in calls:
        fo, fl = calls["flashmla"]()  # also builds FlashMLA's schedule, outside any graph
        results["flashmla"] = (fo, fl.transpose(1, 2) if fl.shape == (b, h, s_q) else fl)
    if "mlajit" in calls:
        calls["mlajit"]()
        results["mlajit"] = (out, lse)
    return calls, results, dec


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", default="64,128")
    parser.add_argument("--rows", help="B:TOPK,... of BENCH.md's V3.2 rows (default: all s_q 1 rows)")
    parser.add_argument("--only", choices=["flashmla", "mlajit"], help="time one entry (for ncu)")
    parser.add_argument("--json", help="write every row as a JSON line here")
    args = parser.parse_args()
    rows = [ROWS[tuple(int(v) for v in r.split(":"))] for r in args.rows.split(",")] if args.rows else pb.V32_ROWS
    json_out = open(args.json, "w") if args.json else None
    gen = torch.Generator(device="cuda")
    gen.manual_seed(2026)
    scale = pb.D_QK ** -0.55
    failed = 0
    print(f"device: {torch.cuda.get_device_name()}")
    for h in (int(v) for v in args.heads.split(",")):
        for b, s_q, seqlen, topk in rows:
            q, kv, idx = pb.inputs(b, s_q, h, seqlen, topk, gen)
            calls, results, dec = entries(q, kv, idx, h, scale, args.only)
            checks = {}
            for name, (o, lse) in results.items():
                try:
                    pb.check(o, lse, q, kv, idx, scale, f"{name} h{h} b{b} topk {topk}")
                    checks[f"{name}_check"] = "pass"
                except AssertionError as e:  # still timed, but the run fails and the line says why
                    print(f"FAIL {e}", flush=True)
                    checks[f"{name}_check"] = str(e)
                    failed += 1
            gpu = pb.graph_us(calls)
            kernel, splits = pb.plan_of(dec, (b, s_q, topk, 0)) if "mlajit" in results else (None, None)
            line = {"model": "v32", "h_q": h, "b": b, "s_q": s_q, "seqlen": seqlen, "topk": topk,
                    "device": torch.cuda.get_device_name(), "mlajit_kernel": kernel, "mlajit_splits": splits,
                    **checks}
            for name, (g, samples) in gpu.items():
                line[f"{name}_us"] = round(g, 2)
                line[f"{name}_drift"] = round(statistics.median(samples[pb.REPLAYS // 2:]) /
                                              statistics.median(samples[:pb.REPLAYS // 2]), 4)
            if len(gpu) == 2:
                line["ratio"] = round(line["mlajit_us"] / line["flashmla_us"], 4)
            print(" ".join(f"{k}={v}" for k, v in line.items() if k != "device"), flush=True)
            if json_out:
                json_out.write(json.dumps(line) + "\n")
                json_out.flush()
            q = kv = idx = calls = results = dec = None
            torch.cuda.empty_cache()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
