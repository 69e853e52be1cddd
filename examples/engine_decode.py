"""engine_decode.py - an engine-shaped decode loop over mlajit from PyTorch.

Set-up: a paged FP8 DeepSeek-V3.2 cache of many sequences (656 bytes a token,
page 64), the attention of a V3.2 decode step at 16 heads (a TP8 shard of 128)
with multi-token prediction (s_q 2), topk 2048, over LAYERS layers (each layer
its own q and output; the layers share one cache here to keep memory small).

Graphs: a SparseMLADecoder warmed up for every batch size in {1, 2, 4, ..., 256},
then one CUDA graph per batch size, captured once and replayed each step with
new indices written into the graph's input buffer (the graph
contract: pointers and shapes frozen, contents read fresh).

Output: attention time per decode step (all layers) per batch size, and, when
FlashMLA (flash_mla) is importable, the same loop through it with the heads
padded to 64 (its kernels exist for 64 and 128 heads only).

    PYTHONPATH=python MLAJIT_LIBRARY=build/libmlajit.so python3 examples/engine_decode.py [--steps 20]
"""
import argparse
import time

import torch

import mlajit

MODEL, HEADS, PAGE, S_Q, TOPK = "v32", 16, 64, 2, 2048
BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
D_QK, D_V = 576, 512
SM_SCALE = D_QK ** -0.5


def make_decoder(device=None):
    """The example's decoder: its envelope is what warm-up compiles or loads."""
    return mlajit.SparseMLADecoder(MODEL, HEADS, PAGE, max_batch_size=max(BATCH_SIZES), max_s_q=S_Q, max_topk=TOPK,
                                   device=device)


def warm_up(decoder):
    return decoder.warmup(BATCH_SIZES, s_qs=[S_Q], topks=[TOPK])


class Cache:
    """Sequences of seqlen tokens each on pages handed out by a random block table."""

    def __init__(self, sequences, seqlen, gen):
        self.seqlen = seqlen
        self.pages_per_seq = -(-seqlen // PAGE)
        blocks = sequences * self.pages_per_seq + 1
        self.block_table = (torch.randperm(blocks - 1, generator=gen, device="cuda") + 1).view(sequences, -1)
        values = (torch.randn(blocks * PAGE, D_QK, generator=gen, device="cuda") / 10).clamp(-1, 1)
        self.kv = mlajit.quantize_kv(values.to(torch.bfloat16), MODEL, PAGE)

    def indices(self, batch, gen, out):
        """New top-k slots for `batch` running sequences into out [batch, S_Q, TOPK]."""
        seqs = torch.randint(0, self.block_table.shape[0], (batch,), generator=gen, device="cuda")
        pos = torch.randint(0, self.seqlen, (batch, S_Q, TOPK), generator=gen, device="cuda")
        pages = self.block_table[seqs].gather(1, (pos // PAGE).view(batch, -1)).view(batch, S_Q, TOPK)
        out.copy_(pages * PAGE + pos % PAGE)


class Step:
    """One batch size's graph: static inputs and outputs for every layer."""

    def __init__(self, batch, layers, heads):
        self.q = [torch.randn(batch, S_Q, heads, D_QK, device="cuda").clamp(-1, 1).to(torch.bfloat16)
                  for _ in range(layers)]
        self.out = [torch.empty(batch, S_Q, heads, D_V, dtype=torch.bfloat16, device="cuda") for _ in range(layers)]
        self.indices = torch.empty(batch, S_Q, TOPK, dtype=torch.int32, device="cuda")
        self.graph = torch.cuda.CUDAGraph()


def run_loop(name, batch_sizes, layers, steps, cache, gen, attend, heads):
    """Capture one graph per batch size (attend(step, layer) enqueues a layer),
    then replay each `steps` times with new indices; returns us per step."""
    results = {}
    for batch in batch_sizes:
        st = Step(batch, layers, heads)
        cache.indices(batch, gen, st.indices)
        for layer in range(layers):  # one eager pass first (FlashMLA binds its metadata there)
            attend(st, layer)
        with torch.cuda.graph(st.graph):
            for layer in range(layers):
                attend(st, layer)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(steps):
            cache.indices(batch, gen, st.indices)  # what the indexer would write
            start.record()
            st.graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0)
        times.sort()
        results[batch] = times[len(times) // 2]
        print(f"{name:>22}  batch {batch:4d}: {results[batch]:9.1f} us per step ({layers} layers), "
              f"{results[batch] / layers:7.2f} us per layer")
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seqlen", type=int, default=8192, help="tokens per cached sequence")
    args = parser.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    cache = Cache(max(BATCH_SIZES), args.seqlen, gen)

    decoder = make_decoder()
    t0 = time.perf_counter()
    report = warm_up(decoder)
    print(f"warm-up: {report.kernels} kernels ({report.compiled} compiled, {report.from_packs} from packs, "
          f"{report.from_disk} from the cache), {report.plans} plans, {time.perf_counter() - t0:.2f} s")
    compiles = decoder.context.info().compiles

    def mlajit_layer(st, layer):
        decoder.run(st.q[layer], cache.kv, st.indices, st.out[layer], SM_SCALE)

    ours = run_loop("mlajit, 16 heads", BATCH_SIZES, args.layers, args.steps, cache, gen, mlajit_layer, HEADS)
    assert decoder.context.info().compiles == compiles, "nothing compiles after warm-up"

    try:
        import flash_mla
    except ImportError:
        print("flash_mla is not installed: no FlashMLA comparison")
        return
    metas = {}

    def flashmla_layer(st, layer):  # heads padded to 64: st.q holds 64 heads, 16 of them real
        key = (st.q[layer].shape[0], torch.cuda.is_current_stream_capturing())
        if key not in metas:
            metas[key] = flash_mla.get_mla_metadata()[0]
        out, _ = flash_mla.flash_mla_with_kvcache(st.q[layer], cache.kv, None, None, D_V, metas[key], None,
                                                  softmax_scale=SM_SCALE, causal=False, is_fp8_kvcache=True,
                                                  indices=st.indices)
        st.out[layer] = out

    theirs = run_loop("FlashMLA, 16 padded to 64", BATCH_SIZES, args.layers, args.steps, cache, gen, flashmla_layer,
                      64)
    for batch in BATCH_SIZES:
        print(f"batch {batch:4d}: mlajit / FlashMLA padded = {ours[batch] / theirs[batch]:.2f}")


if __name__ == "__main__":
    main()
