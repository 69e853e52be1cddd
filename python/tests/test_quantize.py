"""mlajit.quantize_kv (torch; here its CPU path, the GPU's in test_gpu.py)
against the C quantizer byte for byte, and against the golden caches that
FlashMLA's quantizer wrote (kv.source_bf16)."""
import ctypes

import pytest

from conftest import NO_TORCH

torch = pytest.importorskip("torch", reason=NO_TORCH)

import mlajit  # noqa: E402
from mlajit import _capi  # noqa: E402


def c_quantize(values, model, page_size, page_stride):
    """What mlajit_quantize_token writes, token by token, into zeroed pages."""
    tokens = values.reshape(-1, values.shape[-1]).contiguous()
    nb = tokens.shape[0] // page_size
    pages = (ctypes.c_uint8 * (nb * page_stride))()
    m = int(mlajit.models.as_model(model))
    row_bytes = tokens.shape[1] * 2
    for t in range(tokens.shape[0]):
        row = ctypes.cast(tokens.data_ptr() + t * row_bytes, ctypes.POINTER(ctypes.c_uint16))
        page = ctypes.addressof(pages) + (t // page_size) * page_stride
        assert _capi.lib.mlajit_quantize_token(m, row, page, page_size, t % page_size) == 0, _capi.last_error()
    return torch.frombuffer(bytearray(pages), dtype=torch.uint8).reshape(nb, page_stride)


def raw_pages(cache):
    return torch.as_strided(cache, (cache.shape[0], cache.stride(0)), (cache.stride(0), 1))


def values_with_edges(n_tokens, d_qk, seed):
    g = torch.Generator().manual_seed(seed)
    v = (torch.randn(n_tokens, d_qk, generator=g) / 10).clamp(-1, 1)
    v[0] = 0  # all-zero tiles: the scale floor
    if n_tokens > 1:
        v[1] *= 1e-6  # tiny values: fp8 subnormals after the floor scale
    if n_tokens > 2:
        v[2] *= 3000  # large magnitudes
    if n_tokens > 3:
        v[3, ::7] = 448.0 * 2 ** -3  # exact powers of two at the tile max
    return v.to(torch.bfloat16)


@pytest.mark.parametrize("model", ["v32", "dsv4", "glm_nsa", "v32_bf16", "dsv4_bf16"])
@pytest.mark.parametrize("page_size", [1, 3, 64])
def test_quantize_kv_matches_the_c_quantizer_byte_for_byte(model, page_size):
    info = mlajit.model_info(model)
    values = values_with_edges(page_size * 5, info.d_qk, seed=page_size)
    cache = mlajit.quantize_kv(values, model, page_size)
    assert cache.shape == (5, page_size, 1, info.bytes_per_token) and cache.dtype == torch.uint8
    stride = cache.stride(0)
    assert stride % 16 == 0 and stride >= info.min_page_stride(page_size)
    want = c_quantize(values, model, page_size, stride)
    got = raw_pages(cache)
    diff = (got != want).nonzero()
    assert diff.numel() == 0, f"{model} page {page_size}: {diff.shape[0]} bytes differ, first at {diff[:4].tolist()}"


def test_a_page_stride_and_a_3d_input_are_honoured():
    values = values_with_edges(4 * 8, 576, seed=3).reshape(4, 8, 576)
    cache = mlajit.quantize_kv(values, "v32", 8, page_stride=8 * 656 + 64)
    assert cache.stride(0) == 8 * 656 + 64
    assert torch.equal(raw_pages(cache), c_quantize(values, "v32", 8, 8 * 656 + 64))


def test_bad_inputs_name_the_argument():
    with pytest.raises(mlajit.InvalidArgumentError, match="values.dtype = torch.float32; allowed: torch.bfloat16"):
        mlajit.quantize_kv(torch.zeros(64, 576), "v32", 64)
    with pytest.raises(mlajit.InvalidArgumentError, match=r"values.shape = \(64, 512\)"):
        mlajit.quantize_kv(torch.zeros(64, 512, dtype=torch.bfloat16), "v32", 64)
    with pytest.raises(mlajit.InvalidArgumentError, match="not a multiple of page_size 64"):
        mlajit.quantize_kv(torch.zeros(65, 576, dtype=torch.bfloat16), "v32", 64)
    with pytest.raises(mlajit.InvalidArgumentError, match="page_stride = 100; allowed: a multiple of 16 >= 41984"):
        mlajit.quantize_kv(torch.zeros(64, 576, dtype=torch.bfloat16), "v32", 64, page_stride=100)


def _golden_with_sources():
    from golden import cases, load_case
    out = []
    for d in cases():
        c = load_case(d)
        if c["k_source"] is not None:
            out.append(c)
    return out


def test_quantize_kv_reproduces_flashmlas_golden_caches():
    cases = _golden_with_sources()
    if not cases:
        pytest.skip("no golden case with kv.source_bf16 (set MLAJIT_GOLDEN_DIR)")
    for c in cases:
        info = mlajit.model_info(c["model"])
        page = c["page_size"]
        cache = mlajit.quantize_kv(c["k_source"], c["model"], page, page_stride=c["block_stride"])
        got, want = raw_pages(cache), raw_pages(c["k_cache"])
        # every slot an attended index refers to (the rest is poisoned), padding excluded
        slots = c["indices"].flatten()
        if c["topk_length"] is not None:
            keep = torch.arange(c["indices"].shape[-1]).view(1, 1, -1) < c["topk_length"].view(-1, 1, 1)
            slots = c["indices"][keep.expand_as(c["indices"])]
        slots = slots[(slots >= 0) & (slots < c["k_cache"].shape[0] * page)].unique()
        assert slots.numel() > 0
        for s in slots.tolist():
            p, t = divmod(s, page)
            if info.scale_place == _capi.SCALES_INLINE:
                spans = [(t * info.row_bytes, (t + 1) * info.row_bytes)]
            else:
                footer = page * info.row_bytes + t * info.footer_bytes
                spans = [(t * info.row_bytes, (t + 1) * info.row_bytes), (footer, footer + info.num_scales)]
            for lo, hi in spans:
                assert torch.equal(got[p, lo:hi], want[p, lo:hi]), f"{c['name']}: slot {s} bytes {lo}..{hi} differ"


def test_a_cache_quantized_in_chunks_is_the_same(monkeypatch):
    values = values_with_edges(7 * 3, 512, seed=9)
    whole = raw_pages(mlajit.quantize_kv(values, "dsv4", 3)).clone()
    monkeypatch.setattr(mlajit.quantize, "_CHUNK_TOKENS", 5)  # one page of 3 tokens per chunk
    assert torch.equal(raw_pages(mlajit.quantize_kv(values, "dsv4", 3)), whole)


def test_quantize_kv_takes_a_layout():
    """A Layout equal to a named model's quantizes as the model; a custom one as the
    C quantizer writes it (mlajit_quantize_token_layout), its pages padded as asked."""
    values = values_with_edges(6, 576, 3)
    named = mlajit.quantize_kv(values, mlajit.Layout.of("v32"), 3)
    assert torch.equal(raw_pages(named), raw_pages(mlajit.quantize_kv(values, "v32", 3)))
    layout = mlajit.Layout.parse("d_nope=512,d_rope=64,tile=64,scales=ue8m0,place=inline")
    info = mlajit.model_info(layout)
    cache = mlajit.quantize_kv(values, layout, 3, page_stride=3 * info.bytes_per_token + 32)
    assert tuple(cache.shape) == (2, 3, 1, info.bytes_per_token) and cache.stride(0) == 3 * info.bytes_per_token + 32
    pages = raw_pages(cache)
    c_layout = layout._to_c()
    for t in range(6):
        out = (ctypes.c_float * 576)()
        page = pages[t // 3].contiguous()
        assert _capi.lib.mlajit_dequantize_token_layout(ctypes.byref(c_layout), page.data_ptr(), 3, t % 3, out) == 0
        assert torch.allclose(torch.tensor(list(out)), values[t].float(), rtol=0.07, atol=1e-3)
    with pytest.raises(mlajit.InvalidArgumentError, match="values.shape"):
        mlajit.quantize_kv(values[:, :512], layout, 3)
