"""The Python entry points' per-call host cost, without a GPU.

Each entry point (SparseMLADecoder.run, flash_mla.flash_mla_with_kvcache,
torch.ops.mlajit.sparse_mla_decode, and the Launcher they share) is called in a
tight loop against the fake CUDA driver (tests/fake_cuda), CPU tensors standing
in for device memory, as python/tests/test_fake_driver_entry_points.py does: the
fake launches nothing and reads no pointer, so what is timed is the Python
layer plus mlajit_decode's host work. ``c`` is mlajit_decode alone on the same
prebuilt argument block, so an entry's Python cost is its time minus ``c``.

What this cannot see: torch's CUDA-side costs (the current-stream look-up,
the caching allocator behind flash_mla's two outputs; here they come from the
CPU allocator) and the real driver's launch cost, which the GPU host's
bench/python_bench.py measures. The prediction for the GPU host is its
mlajit_decode time (bench/NOTES.md 1b) plus the Python cost measured here,
scaled by how much slower that host runs Python.

    python3 bench/python_overhead.py [--build build] [--python DIR] [--calls 20000] [--repeat 5] [--profile]

It runs itself again with the fake driver's environment (LD_LIBRARY_PATH,
MLAJIT_FAKE_CUDA, MLAJIT_LIBRARY) taken from the meson build folder; --python
names another copy of the package's folder (an older commit's python/, from
git archive) to compare with. Figures are the best of --repeat loops of --calls
calls, in microseconds of this thread's CPU time per call (time.thread_time:
other processes on a busy host do not count, its caches still do).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD = "MLAJIT_OVERHEAD_CHILD"  # set in the process that runs with the fake driver's environment


def fake_env(build: str, python: str) -> dict:
    """This process's environment with the fake driver's variables of a build,
    and the package's folder."""
    build = os.path.abspath(build)
    fake = os.path.join(build, "tests", "fake_cuda")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (fake, build, env.get("LD_LIBRARY_PATH")) if p)
    env["MLAJIT_FAKE_CUDA"] = os.path.join(fake, "libcuda.so.1")
    env["MLAJIT_LIBRARY"] = os.path.join(build, "libmlajit.so")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(python), env.get("PYTHONPATH")) if p)
    return env


def per_call_us(fn, calls: int, repeat: int) -> float:
    """Best of `repeat` loops: microseconds of CPU time per call of fn()."""
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, time.thread_time() - start)
    return best / calls * 1e6


# (label, model, heads, page, b, s_q, topk, extra_page, extra_topk, features): BENCH.md's kinds of
# rows, one plan unsplit and one split (on the fake GPU's 132 SMs) at 16 heads, and DeepSeek-V4's
# dual cache with the sink.
CASES = [("v32 h16 b64 topk128", "v32", 16, 64, 64, 1, 128, 0, 0, ()),
         ("v32 h16 b1 topk2048", "v32", 16, 64, 1, 1, 2048, 0, 0, ()),
         ("dsv4 h16 b2 s_q2 sink+extra", "dsv4", 16, 256, 2, 2, 128, 64, 512, ("sink",))]


def run(args) -> None:
    import ctypes

    import torch

    import mlajit
    from mlajit import _launch, flash_mla

    driver = ctypes.CDLL("libcuda.so.1")
    if not hasattr(driver, "fake_cuda_set_devices"):
        sys.exit("libcuda.so.1 is not the fake driver: check --build")
    driver.fake_cuda_set_devices(1, None)
    cache = tempfile.TemporaryDirectory(prefix="mlajit-overhead-")
    ctx = mlajit.Context(0, cache_dir=cache.name, packs="")
    # The torch-side hooks pointed at the host, as the fake-driver tests do.
    _launch._raw_stream = lambda device_index: 0
    _launch.capturing = lambda: False
    _launch.device_index_of = lambda t, name: t.get_device()
    _launch.context_for = lambda device_index: ctx
    _launch.allocate_workspace = (lambda size, device_index:
                                  torch.empty(size, dtype=torch.uint8) if size else None)

    print(f"{os.path.dirname(mlajit.__file__)}: torch {torch.__version__}, python {sys.version.split()[0]}, "
          f"{args.calls} calls x {args.repeat}, us of CPU per call (best loop)")
    header = f"{'case':30s} {'splits':>6s} {'c':>6s} {'launcher':>9s} {'decoder':>8s} {'flash_mla':>10s} {'op':>7s}"
    print(header)
    for label, model, h, page, b, s_q, topk, extra_page, extra_topk, features in CASES:
        info = mlajit.model_info(model)
        q = torch.zeros(b, s_q, h, info.d_qk, dtype=torch.bfloat16)
        kv = torch.zeros(4, page, 1, info.bytes_per_token, dtype=torch.uint8)
        idx = torch.zeros(b, s_q, topk, dtype=torch.int32)
        out = torch.empty(b, s_q, h, info.d_v, dtype=torch.bfloat16)
        lse = torch.empty(b, h, s_q, dtype=torch.float32).transpose(1, 2)  # FlashMLA's order, through strides
        sink = torch.zeros(h) if "sink" in features else None
        ekv = torch.zeros(4, extra_page, 1, info.bytes_per_token, dtype=torch.uint8) if extra_page else None
        eidx = torch.zeros(b, s_q, extra_topk, dtype=torch.int32) if extra_page else None
        scale = info.d_qk ** -0.5

        dec = mlajit.SparseMLADecoder(model, h, page, max_batch_size=b, max_s_q=s_q, max_topk=topk,
                                      extra_page_size=extra_page, max_extra_topk=extra_topk, features=features,
                                      device=-1, context=ctx)
        dec.warmup([b], s_qs=[s_q], topks=[topk], extra_topks=[extra_topk] if extra_topk else None)
        launcher = dec._plan((b, s_q, topk, extra_topk))
        names = _launch.Names(*_launch.Names._fields)
        meta, _ = flash_mla.get_mla_metadata()
        op = torch.ops.mlajit.sparse_mla_decode
        decode, handle, address = _launch._decode, launcher.plan_handle, launcher.args_address

        entries = {
            "c": lambda: decode(handle, address, 0),
            "launcher": lambda: launcher(q, kv, idx, out, lse, scale, None, sink, ekv, eidx, None, names),
            "decoder": lambda: dec.run(q, kv, idx, out, scale, attn_sink=sink, extra_kv_cache=ekv,
                                       extra_indices=eidx, lse=lse),
            "flash_mla": lambda: flash_mla.flash_mla_with_kvcache(q, kv, None, None, info.d_v, meta,
                                                                  softmax_scale=scale, indices=idx, attn_sink=sink,
                                                                  extra_k_cache=ekv, extra_indices_in_kvcache=eidx),
            "op": lambda: op(q, kv, idx, out, lse, scale, None, sink, ekv, eidx),
        }
        times = {}
        for name, fn in entries.items():
            fn()  # binds / plans on the first call
            times[name] = per_call_us(fn, args.calls, args.repeat)
        print(f"{label:30s} {launcher.plan.num_splits:6d} {times['c']:6.2f} {times['launcher']:9.2f} "
              f"{times['decoder']:8.2f} {times['flash_mla']:10.2f} {times['op']:7.2f}")
        if args.profile:
            for name in ("decoder", "flash_mla", "op"):
                prof = cProfile.Profile()
                fn = entries[name]
                prof.enable()
                for _ in range(args.calls):
                    fn()
                prof.disable()
                print(f"--- {label}: {name}")
                pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    ctx.close()
    cache.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="the meson build folder")
    parser.add_argument("--python", default=os.path.join(ROOT, "python"), help="the package's folder")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile each entry point too")
    args = parser.parse_args()
    if not os.environ.get(_CHILD):  # the loader reads LD_LIBRARY_PATH at start: run again with it
        env = fake_env(args.build, args.python)
        env[_CHILD] = "1"
        os.execvpe(sys.executable, [sys.executable] + sys.argv, env)
    run(args)


if __name__ == "__main__":
    main()
