"""The torch launcher (mlajit/_launch.py) against the fake CUDA driver, with
CPU tensors standing in for device memory (the fake reads no pointer): every
entry point's tensors reach the C argument block as the same call made
through the C API with explicit pointers and strides would, byte for byte
in the kernels' parameter block. Runs where torch is (suite python_fake_gpu
on a machine with torch; CI has none and skips)."""
import ctypes

import pytest

from conftest import NO_TORCH

torch = pytest.importorskip("torch", reason=NO_TORCH)

import fake_driver  # noqa: E402
import mlajit  # noqa: E402
from mlajit import _capi, _launch  # noqa: E402

pytestmark = pytest.mark.fake_driver


@pytest.fixture
def ctx(fake, shared_cache_dir, monkeypatch):
    fake.fake_cuda_set_devices(1, None)
    fake.fake_cuda_set_param_bytes(fake_driver.PARAM_PREFIX)
    fake.fake_cuda_forget_launches()
    monkeypatch.setattr(_launch, "_raw_stream", lambda device_index: 0)
    c = mlajit.Context(0, cache_dir=shared_cache_dir, packs="")
    yield c
    c.close()


def cpu_launcher(ctx, model, heads, page, b, s_q, topk, extra_page=0, extra_topk=0, features=0):
    layout = _launch.Layout(mlajit.models.as_model(model), heads, page, extra_page, mlajit.models.as_features(features))
    plan = ctx.plan(layout.spec, b, s_q, topk, extra_topk)
    launcher = _launch.Launcher(layout, plan, -1)  # CPU tensors: get_device() is -1
    ws = torch.empty(plan.workspace_size, dtype=torch.uint8) if plan.workspace_size else None
    launcher.set_workspace(ws)
    return launcher, plan, ws


def c_call(fake, plan, **fields):
    """The same call through the C API: explicit pointers and strides."""
    a = _capi.DecodeArgs()
    for k, v in fields.items():
        if k in ("kv", "extra_kv"):
            setattr(a, k, _capi.CacheView(*v))
        else:
            setattr(a, k, v)
    fake.fake_cuda_forget_launches()
    mlajit.errors.check(_capi.lib.mlajit_decode(plan.handle, ctypes.addressof(a), None))
    return fake_driver.params(fake, 0)


def test_a_flashmla_shaped_call_fills_the_block_as_the_c_api_does(fake, ctx):
    b, s_q, h, topk = 3, 2, 16, 100
    launcher, plan, ws = cpu_launcher(ctx, "v32", h, 64, b, s_q, topk, features=["sink", "topk_length"])
    q_full = torch.zeros(b, s_q, h, 640, dtype=torch.bfloat16)
    q = q_full[..., :576]  # padded rows: stride_h 640
    kv = mlajit.quantize_kv(torch.zeros(5 * 64, 576, dtype=torch.bfloat16), "v32", 64, page_stride=64 * 656 + 32)
    idx_full = torch.zeros(b, s_q, 128, dtype=torch.int32)
    idx = idx_full[..., :topk]
    lengths = torch.full((b,), 50, dtype=torch.int32)
    sink = torch.zeros(h)
    out = torch.empty(b, s_q, h, 512, dtype=torch.bfloat16)
    lse = torch.empty(b, h, s_q).transpose(1, 2)  # FlashMLA's lse order, through strides
    fake.fake_cuda_forget_launches()
    launcher(q, kv, idx, out, lse, 0.05, lengths, sink, None, None, None, _launch.Names(*[n for n in _launch.Names._fields]))
    got = fake_driver.params(fake, 0)
    want = c_call(fake, plan, q=q.data_ptr(), q_stride_b=s_q * h * 640, q_stride_s=h * 640, q_stride_h=640,
                  kv=(kv.data_ptr(), 64 * 656 + 32, 5), indices=idx.data_ptr(), indices_stride_b=s_q * 128,
                  indices_stride_s=128, topk_length=lengths.data_ptr(), attn_sink=sink.data_ptr(), sm_scale=0.05,
                  out=out.data_ptr(), lse=lse.data_ptr(), lse_stride_b=h * s_q, lse_stride_s=1, lse_stride_h=s_q,
                  workspace=ws.data_ptr() if ws is not None else None, workspace_size=plan.workspace_size)
    assert got == want


def test_the_dual_cache_reaches_the_block(fake, ctx):
    b, s_q, h = 2, 1, 8
    launcher, plan, ws = cpu_launcher(ctx, "dsv4", h, 256, b, s_q, 128, extra_page=64, extra_topk=256,
                                      features=["sink", "topk_length", "extra_topk_length"])
    q = torch.zeros(b, s_q, h, 512, dtype=torch.bfloat16)
    kv = mlajit.quantize_kv(torch.zeros(3 * 256, 512, dtype=torch.bfloat16), "dsv4", 256)
    ekv = mlajit.quantize_kv(torch.zeros(7 * 64, 512, dtype=torch.bfloat16), "dsv4", 64)[..., 0, :]  # 3-D cache
    idx = torch.zeros(b, s_q, 128, dtype=torch.int32)
    eidx = torch.zeros(b, s_q, 256, dtype=torch.int32)
    lengths, elengths, sink = torch.ones(b, dtype=torch.int32), torch.ones(b, dtype=torch.int32), torch.zeros(h)
    out = torch.empty(b, s_q, h, 512, dtype=torch.bfloat16)
    fake.fake_cuda_forget_launches()
    launcher(q, kv, idx, out, None, 0.04, lengths, sink, ekv, eidx, elengths, _launch.Names(*_launch.Names._fields))
    got = fake_driver.params(fake, 0)
    want = c_call(fake, plan, q=q.data_ptr(), kv=(kv.data_ptr(), kv.stride(0), 3), indices=idx.data_ptr(),
                  topk_length=lengths.data_ptr(), attn_sink=sink.data_ptr(), extra_kv=(ekv.data_ptr(), ekv.stride(0), 7),
                  extra_indices=eidx.data_ptr(), extra_topk_length=elengths.data_ptr(), sm_scale=0.04,
                  out=out.data_ptr(), workspace=ws.data_ptr() if ws is not None else None,
                  workspace_size=plan.workspace_size)
    assert got == want


def test_a_mixed_batch_as_t_rows(fake, ctx):
    t = 32768
    launcher, plan, ws = cpu_launcher(ctx, "v32", 16, 64, t, 1, 64)
    q = torch.zeros(t, 1, 16, 576, dtype=torch.bfloat16)
    kv = mlajit.quantize_kv(torch.zeros(2 * 64, 576, dtype=torch.bfloat16), "v32", 64)
    idx = torch.zeros(t, 1, 64, dtype=torch.int32)
    out = torch.empty(t, 1, 16, 512, dtype=torch.bfloat16)
    fake.fake_cuda_forget_launches()
    launcher(q, kv, idx, out, None, 0.04, None, None, None, None, None, _launch.Names(*_launch.Names._fields))
    assert fake.fake_cuda_launch_at(0).contents.grid[0] == t
    assert fake_driver.params(fake, 0) == c_call(fake, plan, q=q.data_ptr(), kv=(kv.data_ptr(), kv.stride(0), 2),
                                                 indices=idx.data_ptr(), sm_scale=0.04, out=out.data_ptr())


NAMES = _launch.Names(q="q", kv="k_cache", indices="indices", out="out", lse="lse", topk_length="topk_length",
                      attn_sink="attn_sink", extra_kv="extra_k_cache", extra_indices="extra_indices_in_kvcache",
                      extra_topk_length="extra_topk_length", sm_scale="softmax_scale")


@pytest.mark.parametrize("edit, words", [
    ("q_misaligned", "q = 0x"),
    ("q_dtype", "q.dtype = torch.float16; allowed: torch.bfloat16"),
    ("q_batch", "q.shape = (3, 1, 16, 576); allowed: (2, 1, 16, 576)"),
    ("q_last_stride", "q.stride() = "),
    ("kv_page", "k_cache.shape = (4, 32, 1, 656); allowed: [num_blocks, 64, 1, 656]"),
    ("kv_stride", "k_cache.page_stride = 41968; allowed: a multiple of 16 >= 41984"),
    ("kv_rows", "each page's tokens contiguous"),
    ("idx_topk", "indices.shape = (2, 1, 63)"),
    ("out_overlap", "out strides"),
    ("out_broadcast", "out.stride() = (512, 512, 0, 1); allowed: no broadcast dimension"),
    ("q_broadcast", "q.stride() = (576, 576, 0, 1); allowed: no broadcast dimension"),
    ("q_rank", "q.shape = (2, 16, 576); allowed: (2, 1, 16, 576)"),
    ("idx_broadcast", "indices.stride() = (0, 64, 1); allowed: no broadcast dimension"),
    ("kv_broadcast", "(0, a broadcast over pages, is not a cache)"),
    ("sink_unwanted", "attn_sink was given, but this kernel was made without it"),
    ("scale", "softmax_scale = -1"),
    ("lse_dtype", "lse.dtype = torch.float64"),
])
def test_a_bad_tensor_names_the_argument_and_launches_nothing(fake, ctx, edit, words):
    launcher, plan, ws = cpu_launcher(ctx, "v32", 16, 64, 2, 1, 64)
    base = torch.zeros(2 * 1 * 16 * 576 + 8, dtype=torch.bfloat16)
    q = base[:2 * 16 * 576].view(2, 1, 16, 576)
    kv = mlajit.quantize_kv(torch.zeros(4 * 64, 576, dtype=torch.bfloat16), "v32", 64)
    idx = torch.zeros(2, 1, 64, dtype=torch.int32)
    out = torch.empty(2, 1, 16, 512, dtype=torch.bfloat16)
    lse, sink, scale = None, None, 0.04
    if edit == "q_misaligned":
        q = base[1:1 + 2 * 16 * 576].view(2, 1, 16, 576)
    elif edit == "q_dtype":
        q = q.half()
    elif edit == "q_batch":
        q = torch.zeros(3, 1, 16, 576, dtype=torch.bfloat16)
    elif edit == "q_last_stride":
        q = torch.zeros(2, 1, 16, 576 * 2, dtype=torch.bfloat16)[..., ::2]
    elif edit == "kv_page":
        kv = mlajit.quantize_kv(torch.zeros(4 * 32, 576, dtype=torch.bfloat16), "v32", 32)
    elif edit == "kv_stride":
        kv = kv.as_strided(kv.shape, (656 * 64 - 16,) + kv.stride()[1:])  # pages overlap: below the minimum
    elif edit == "kv_rows":
        wide = mlajit.quantize_kv(torch.zeros(4 * 64, 576, dtype=torch.bfloat16), "v32", 64, page_stride=64 * 672)
        kv = wide.as_strided(kv.shape, (64 * 672, 672, 672, 1))
    elif edit == "idx_topk":
        idx = idx[..., :63]
    elif edit == "out_overlap":  # rows one head apart: the second row's heads overwrite the first's
        out = torch.empty(17 * 512, dtype=torch.bfloat16).as_strided((2, 1, 16, 512), (512, 512, 512, 1))
    elif edit == "out_broadcast":
        out = torch.empty(2, 1, 1, 512, dtype=torch.bfloat16).expand(2, 1, 16, 512)
    elif edit == "q_broadcast":
        q = torch.zeros(2, 1, 1, 576, dtype=torch.bfloat16).expand(2, 1, 16, 576)
    elif edit == "q_rank":
        q = q.view(2, 16, 576)
    elif edit == "idx_broadcast":
        idx = torch.zeros(1, 1, 64, dtype=torch.int32).expand(2, 1, 64)
    elif edit == "kv_broadcast":
        kv = kv[:1].expand(4, *kv.shape[1:])
    elif edit == "sink_unwanted":
        sink = torch.zeros(16)
    elif edit == "scale":
        scale = -1.0
    elif edit == "lse_dtype":
        lse = torch.empty(2, 1, 16, dtype=torch.float64)
    fake.fake_cuda_forget_launches()
    with pytest.raises(mlajit.InvalidArgumentError) as info:
        launcher(q, kv, idx, out, lse, scale, None, sink, None, None, None, NAMES)
    assert words in str(info.value)
    assert fake.fake_cuda_counts_get().launches == 0
