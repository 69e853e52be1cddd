"""The torch layer without a GPU: the tests' fp64 reference against the golden
cases, every entry point's argument checks (a ValueError naming the argument
and what is allowed), and the torch op's schema and fake implementation."""
import pytest

from conftest import NO_TORCH

torch = pytest.importorskip("torch", reason=NO_TORCH)

import mlajit  # noqa: E402
from mlajit import flash_mla  # noqa: E402
import golden  # noqa: E402
import reference  # noqa: E402


@pytest.mark.parametrize("case_dir", golden.cases(), ids=lambda d: d.rsplit("/", 1)[-1])
def test_the_fp64_reference_reproduces_the_golden_expected(case_dir):
    c = golden.load_case(case_dir)
    out, lse = reference.decode(c["model"], c["q"], c["k_cache"], c["indices"], c["sm_scale"], c["topk_length"],
                                c["attn_sink"], c["extra_k_cache"], c["extra_indices"], c["extra_topk_length"])
    assert torch.allclose(out, c["expected_out"].double(), atol=2e-6, rtol=1e-5)
    fin = torch.isfinite(c["expected_lse"])
    assert torch.equal(torch.isfinite(lse), fin)
    assert torch.allclose(lse[fin], c["expected_lse"][fin].double(), atol=1e-5, rtol=1e-6)


def v32_inputs(b=2, s_q=1, h=16, topk=64, page=64, device="cpu"):
    q = torch.zeros(b, s_q, h, 576, dtype=torch.bfloat16, device=device)
    kv = torch.zeros(4, page, 1, 656, dtype=torch.uint8, device=device)
    idx = torch.zeros(b, s_q, topk, dtype=torch.int32, device=device)
    return q, kv, idx


def call(q, kv, idx, **kw):
    meta, _ = flash_mla.get_mla_metadata()
    return flash_mla.flash_mla_with_kvcache(q, kv, None, None, kw.pop("head_dim_v", 512), meta, indices=idx, **kw)


@pytest.mark.parametrize("edit, words", [
    (lambda q, kv, idx: dict(q=q.float()), "q.dtype = torch.float32; allowed: torch.bfloat16"),
    (lambda q, kv, idx: dict(q=q[..., :500]), "q.shape[-1] = 500 with 656 bytes per cache token"),
    (lambda q, kv, idx: dict(q=q[0]), "q has 3 dimensions"),
    (lambda q, kv, idx: dict(kv=kv.view(torch.int16)), "k_cache.dtype = torch.int16"),
    (lambda q, kv, idx: dict(kv=kv[..., :600]), "is no known layout"),
    (lambda q, kv, idx: dict(idx=idx.long()), "indices.dtype = torch.int64; allowed: torch.int32"),
    (lambda q, kv, idx: dict(idx=None), "indices is None"),
    (lambda q, kv, idx: dict(causal=True), "causal = True; allowed: False"),
    (lambda q, kv, idx: dict(is_fp8_kvcache=False), "is_fp8_kvcache = False; allowed: True"),
    (lambda q, kv, idx: dict(num_splits=4), "num_splits must be None"),
    (lambda q, kv, idx: dict(head_dim_v=576), "head_dim_v = 576; allowed: 512"),
    (lambda q, kv, idx: dict(kv_scale_format="e4m3"), "kv_scale_format = 'e4m3'; allowed: auto, fp32_pow2, fp32"),
    (lambda q, kv, idx: dict(kv_scale_format="ue8m0"), "does not fit a d_qk 576 cache; allowed: auto, fp32_pow2"),
    (lambda q, kv, idx: dict(extra_k_cache=kv), "extra_k_cache and extra_indices_in_kvcache go together"),
    (lambda q, kv, idx: dict(extra_topk_length=idx[:, 0, 0]), "extra_topk_length given without extra_k_cache"),
    (lambda q, kv, idx: dict(), "q is on cpu; allowed: a CUDA tensor"),
])
def test_flash_mla_names_the_bad_argument(edit, words):
    q, kv, idx = v32_inputs()
    args = dict(q=q, kv=kv, idx=idx)
    changes = edit(q, kv, idx)
    extra = {k: v for k, v in changes.items() if k not in args}
    args.update({k: v for k, v in changes.items() if k in args})
    with pytest.raises(ValueError) as info:
        call(args["q"], args["kv"], args["idx"], **extra)
    assert isinstance(info.value, mlajit.InvalidArgumentError)
    assert words in str(info.value)


def test_metadata_is_flashmlas_shape():
    meta, second = flash_mla.get_mla_metadata(torch.zeros(2, dtype=torch.int32), 16, 1)  # the old arguments
    assert second is None and not meta.have_initialized and meta.config is None
    with pytest.raises(mlajit.InvalidArgumentError, match="tile_scheduler_metadata: object"):
        flash_mla.flash_mla_with_kvcache(*v32_inputs()[:2], None, None, 512, object(), indices=v32_inputs()[2])


def test_the_op_is_registered_with_out_and_lse_mutated():
    import mlajit.ops  # noqa: F401
    schema = str(torch.ops.mlajit.sparse_mla_decode.default._schema)
    assert "Tensor(a3!) out" in schema and "Tensor(a4!)? lse" in schema and schema.endswith("-> ()")


def test_the_op_traces_through_its_fake_implementation():
    import mlajit.ops  # noqa: F401
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(q, kv, idx, out, lse):
        torch.ops.mlajit.sparse_mla_decode(q, kv, idx, out, lse, 0.04)
        return out.float().sum() + lse.sum()

    q, kv, idx = v32_inputs()
    out = torch.empty(2, 1, 16, 512, dtype=torch.bfloat16)
    lse = torch.empty(2, 1, 16)
    graph = make_fx(step, tracing_mode="fake")(q, kv, idx, out, lse)
    assert any(n.target is torch.ops.mlajit.sparse_mla_decode.default for n in graph.graph.nodes)


def test_the_op_on_cpu_tensors_names_the_device():
    import mlajit.ops  # noqa: F401
    q, kv, idx = v32_inputs()
    with pytest.raises(mlajit.InvalidArgumentError, match="q is on cpu"):
        torch.ops.mlajit.sparse_mla_decode(q, kv, idx, torch.empty(2, 1, 16, 512, dtype=torch.bfloat16), None, 0.04)


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(model="v32", num_heads=129, page_size=64, max_batch_size=8, max_topk=64), mlajit.UnsupportedError,
     "spec.h_q = 129"),
    (dict(model="v32", num_heads=16, page_size=64, max_batch_size=65537, max_topk=64), mlajit.UnsupportedError,
     "shape.batch = 65537"),
    (dict(model="v32", num_heads=16, page_size=64, max_batch_size=8, max_topk=64, extra_page_size=64),
     mlajit.InvalidArgumentError, "max_extra_topk = 0 with an extra cache"),
    (dict(model="v5", num_heads=16, page_size=64, max_batch_size=8, max_topk=64), mlajit.InvalidArgumentError,
     "model = 'v5'"),
    (dict(model="v32", num_heads=16, page_size=64, max_batch_size=8, max_topk=64, device="cpu"),
     mlajit.InvalidArgumentError, "device = 'cpu'; allowed: a CUDA device"),
])
def test_the_decoder_refuses_what_it_cannot_serve(kwargs, exc, words):
    model = kwargs.pop("model")
    with pytest.raises(exc, match=words.replace("(", r"\(")):
        mlajit.SparseMLADecoder(model, **kwargs, context=mlajit.Context(no_device=True, no_disk_cache=True))


def test_decoder_warmup_checks_its_lists_against_the_largest_shape():
    dec = mlajit.SparseMLADecoder("v32", 16, 64, max_batch_size=8, max_topk=64, device=0,
                                  context=mlajit.Context(no_device=True, no_disk_cache=True))
    with pytest.raises(mlajit.InvalidArgumentError, match=r"batch_sizes: 9; allowed ints 0\.\.8"):
        dec.warmup([1, 9])
    with pytest.raises(mlajit.InvalidArgumentError, match="topks: 65"):
        dec.warmup([1], topks=[65])
