"""The three entry points' Python paths end to end against the fake CUDA driver,
CPU tensors standing in for device memory (the fake reads no pointer; the
torch-side device, stream, capture and allocation hooks are pointed at the host):
FlashMLA's metadata binding and reuse, SparseMLADecoder's warm-up, plans,
workspace and capture rule, and the torch op's dispatch, each launching the
plan's kernels with the arguments it was given. What the kernels compute is
test_gpu.py's part."""
import ctypes

import pytest

from conftest import NO_TORCH

torch = pytest.importorskip("torch", reason=NO_TORCH)

import mlajit  # noqa: E402
from mlajit import _launch, flash_mla  # noqa: E402

pytestmark = pytest.mark.fake_driver


@pytest.fixture
def host(fake, shared_cache_dir, monkeypatch):
    """The entry points on the host: device -1 (CPU tensors), stream 0, no capture
    unless a test says so, workspaces in host memory, the fake GPU's context."""
    fake.fake_cuda_set_devices(1, None)
    fake.fake_cuda_forget_launches()
    ctx = mlajit.Context(0, cache_dir=shared_cache_dir, packs="")
    state = {"capturing": False, "allocations": 0}

    def allocate(size, device_index):
        state["allocations"] += 1
        return torch.empty(size, dtype=torch.uint8) if size else None

    monkeypatch.setattr(_launch, "_raw_stream", lambda device_index: 0)
    monkeypatch.setattr(_launch, "capturing", lambda: state["capturing"])
    monkeypatch.setattr(_launch, "device_index_of", lambda t, name: t.get_device())
    monkeypatch.setattr(_launch, "context_for", lambda device_index: ctx)
    monkeypatch.setattr(_launch, "allocate_workspace", allocate)
    monkeypatch.setattr(_launch, "plans", _launch.PlanCache())  # this test's plans, on this context
    state["ctx"] = ctx
    yield state
    ctx.close()


def v32(b=2, s_q=1, h=16, topk=64):
    q = torch.zeros(b, s_q, h, 576, dtype=torch.bfloat16)
    kv = mlajit.quantize_kv(torch.zeros(4 * 64, 576, dtype=torch.bfloat16), "v32", 64)
    idx = torch.zeros(b, s_q, topk, dtype=torch.int32)
    return q, kv, idx


def test_flash_mla_binds_its_metadata_once_and_reuses_it(fake, host):
    q, kv, idx = v32()
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, meta, indices=idx)
    assert out.shape == (2, 1, 16, 512) and out.dtype == torch.bfloat16
    assert lse.shape == (2, 16, 1) and lse.stride() == (16, 1, 16)  # FlashMLA's [b, h, s_q] view
    assert meta.have_initialized and meta.config["topk"] == 64 and meta.config["model"] == "v32"
    launches = fake.fake_cuda_counts_get().launches
    assert launches >= 1
    launcher = meta._launcher
    flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, meta, indices=idx)
    assert meta._launcher is launcher and fake.fake_cuda_counts_get().launches == 2 * launches
    with pytest.raises(mlajit.InvalidArgumentError, match=r"q.shape = \(4, 1, 16, 576\)"):
        flash_mla.flash_mla_with_kvcache(torch.zeros(4, 1, 16, 576, dtype=torch.bfloat16), kv, None, None, 512, meta,
                                         indices=idx)
    with pytest.raises(mlajit.InvalidArgumentError, match="causal = True"):
        flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, meta, causal=True, indices=idx)


def test_a_mixed_batch_as_one_row_of_t_tokens_runs_as_t_rows(fake, host):
    """vLLM's (1, T, H, D) with T past the 64 tokens a row may have."""
    t = 1000
    q, kv, idx = v32(b=1, s_q=t, topk=64)
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, meta, indices=idx)
    assert out.shape == (1, t, 16, 512) and lse.shape == (1, 16, t)
    launch = fake.fake_cuda_launch_at(0).contents
    assert launch.grid[0] == t
    with pytest.raises(mlajit.InvalidArgumentError, match="made without them"):
        flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, meta, indices=idx,
                                         topk_length=torch.ones(1, dtype=torch.int32))
    with pytest.raises(mlajit.InvalidArgumentError, match="shape.s_q = 1000"):
        flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, flash_mla.get_mla_metadata()[0], indices=idx,
                                         topk_length=torch.ones(1, dtype=torch.int32))


def test_flash_mla_under_capture_binds_only_where_its_kernel_is_loaded(fake, host):
    q, kv, idx = v32(b=3, h=24, topk=100)
    host["capturing"] = True
    with pytest.raises(mlajit.GraphCaptureError, match="make the same call once before capture"):
        flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, flash_mla.get_mla_metadata()[0], indices=idx)
    assert fake.fake_cuda_counts_get().launches == 0
    host["capturing"] = False
    flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, flash_mla.get_mla_metadata()[0], indices=idx)
    host["capturing"] = True
    out, _ = flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, flash_mla.get_mla_metadata()[0], indices=idx)
    assert out.shape == (3, 1, 24, 512)


def test_the_decoder_warms_up_plans_and_sizes_one_workspace(fake, host):
    dec = mlajit.SparseMLADecoder("v32", 16, 64, max_batch_size=128, max_s_q=2, max_topk=2048,
                                  features=["topk_length"], device=-1, context=host["ctx"])
    report = dec.warmup([1, 2, 4, 128], s_qs=[1, 2], topks=[2048])
    assert report.plans == 8 and report.kernels >= 1 and dec.shapes[0] == (1, 1, 2048, 0)
    sizes = [dec._plan(s).plan.workspace_size for s in dec.shapes]
    assert dec.workspace_bytes == max(sizes) > 0
    compiles = host["ctx"].info().compiles
    q, kv, idx = v32(b=4, s_q=2, topk=2048)
    out = torch.empty(4, 2, 16, 512, dtype=torch.bfloat16)
    lengths = torch.full((4,), 100, dtype=torch.int32)
    fake.fake_cuda_forget_launches()
    assert dec.run(q, kv, idx, out, 0.04, topk_length=lengths) is out
    assert fake.fake_cuda_launch_at(0).contents.grid[0] == 8
    assert host["ctx"].info().compiles == compiles
    # under capture, a shape not warmed up is refused before anything is enqueued
    host["capturing"] = True
    q3, _, idx3 = v32(b=3, s_q=2, topk=2048)
    fake.fake_cuda_forget_launches()
    with pytest.raises(mlajit.GraphCaptureError, match=r"\(3, 2, 2048, 0\), which was not warmed up.*batch_sizes=\[3\]"):
        dec.run(q3, kv, idx3, torch.empty(3, 2, 16, 512, dtype=torch.bfloat16), 0.04,
                topk_length=torch.ones(3, dtype=torch.int32))
    assert fake.fake_cuda_counts_get().launches == 0
    # outside capture it plans now; past the largest shape it is refused
    host["capturing"] = False
    dec.run(q3, kv, idx3, torch.empty(3, 2, 16, 512, dtype=torch.bfloat16), 0.04,
            topk_length=torch.ones(3, dtype=torch.int32))
    assert (3, 2, 2048, 0) in dec.shapes
    with pytest.raises(mlajit.InvalidArgumentError, match="batch .* = 129; allowed up to 128"):
        dec.run(*v32(b=129, topk=2048)[:1], kv, v32(b=129, topk=2048)[2],
                torch.empty(129, 1, 16, 512, dtype=torch.bfloat16), 0.04, topk_length=torch.ones(129, dtype=torch.int32))
    with pytest.raises(mlajit.InvalidArgumentError, match="topk_length is None, but this kernel was made with it"):
        dec.run(q, kv, idx, out, 0.04)


def test_a_grown_workspace_keeps_the_old_one_alive(fake, host):
    """A captured graph may still use the workspace a later, larger plan replaced."""
    dec = mlajit.SparseMLADecoder("v32", 64, 64, max_batch_size=64, max_topk=2048, device=-1, context=host["ctx"])
    sizes = {b: host["ctx"].plan(dec._layout.spec, b, 1, 2048).workspace_size for b in (1, 64)}
    small, large = sorted(sizes, key=sizes.get)
    assert 0 < sizes[small] < sizes[large], sizes
    dec.warmup([small])
    first = dec._workspace
    assert first.numel() == sizes[small]
    dec.warmup([large])
    assert dec._workspace is not first and dec._workspace.numel() == sizes[large]
    assert any(w is first for w in dec._retired)
    assert dec._launchers[(small, 1, 2048, 0)].workspace is first  # its plan (and graphs) keep their memory


def test_the_op_dispatches_to_the_launcher(fake, host):
    q, kv, idx = v32(b=2, s_q=2, h=8, topk=300)
    out = torch.empty(2, 2, 8, 512, dtype=torch.bfloat16)
    lse = torch.empty(2, 8, 2).transpose(1, 2)
    sink = torch.zeros(8)
    fake.fake_cuda_forget_launches()
    torch.ops.mlajit.sparse_mla_decode(q, kv, idx, out, lse, 0.04, None, sink)
    assert fake.fake_cuda_counts_get().launches >= 1
    with pytest.raises(mlajit.InvalidArgumentError, match="kv_scale_format = 'ue8m0' does not fit"):
        torch.ops.mlajit.sparse_mla_decode(q, kv, idx, out, lse, 0.04, kv_scale_format="ue8m0")


def test_the_op_keeps_a_workspace_per_stream_and_takes_a_new_one_under_capture(fake, host, monkeypatch):
    """A split plan's workspace: one per (device, stream) outside capture, grown as
    plans need; under capture one per call (torch's allocator: the graph's pool)."""
    q, kv, idx = v32(b=1, h=16, topk=2048)
    out = torch.empty(1, 1, 16, 512, dtype=torch.bfloat16)
    op = torch.ops.mlajit.sparse_mla_decode
    op(q, kv, idx, out, None, 0.04)
    (launcher,) = _launch.plans.op_launchers.values()
    assert launcher.workspace_size > 0 and host["allocations"] == 1
    workspace = launcher.workspace
    for _ in range(3):
        op(q, kv, idx, out, None, 0.04)
    assert host["allocations"] == 1 and launcher.workspace is workspace
    stream = ctypes.c_void_p()
    assert fake.cuStreamCreate(ctypes.byref(stream), 0) == 0
    monkeypatch.setattr(_launch, "_raw_stream", lambda device_index: stream.value)  # another stream: its own
    op(q, kv, idx, out, None, 0.04)
    assert host["allocations"] == 2 and launcher.workspace is not workspace
    host["capturing"] = True
    op(q, kv, idx, out, None, 0.04)
    op(q, kv, idx, out, None, 0.04)
    assert host["allocations"] == 4
    host["capturing"] = False
    monkeypatch.setattr(_launch, "_raw_stream", lambda device_index: 0)
    op(q, kv, idx, out, None, 0.04)
    assert host["allocations"] == 4 and launcher.workspace is workspace
    assert fake.fake_cuda_launch_at(0).contents.grid[2] > 1  # split: the workspace was needed
    fake.cuStreamDestroy_v2(stream)


def test_the_op_gives_each_thread_its_own_launcher(fake, host):
    """A launcher's argument block is written per call: two threads never share one."""
    import threading
    q, kv, idx = v32()
    out = torch.empty(2, 1, 16, 512, dtype=torch.bfloat16)
    torch.ops.mlajit.sparse_mla_decode(q, kv, idx, out, None, 0.04)
    errors = []

    def other():
        try:
            torch.ops.mlajit.sparse_mla_decode(q, kv, idx, out, None, 0.04)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert not errors
    launchers = list(_launch.plans.op_launchers.values())
    assert len(launchers) == 2 and launchers[0] is not launchers[1]
    assert launchers[0].plan is launchers[1].plan


def test_what_a_launcher_remembers_never_lets_a_bad_tensor_through(fake, host):
    """Stride patterns and cache shapes that passed are remembered per argument;
    each call still checks shape, dtype and device, and a new pattern is checked."""
    dec = mlajit.SparseMLADecoder("v32", 16, 64, max_batch_size=2, max_s_q=2, max_topk=64, device=-1,
                                  context=host["ctx"])
    q, kv, idx = v32(b=2, s_q=2, topk=64)
    padded = torch.zeros(2, 2, 16, 640, dtype=torch.bfloat16)[..., :576]  # rows 640 apart: not contiguous
    out = torch.empty(2, 2, 16, 512, dtype=torch.bfloat16)
    lse = torch.empty(2, 16, 2).transpose(1, 2)  # FlashMLA's order
    for _ in range(2):
        dec.run(padded, kv, idx, out, 0.04, lse=lse)
    with pytest.raises(mlajit.InvalidArgumentError, match=r"q.stride\(\) = .*no broadcast dimension"):
        dec.run(torch.zeros(2, 2, 1, 576, dtype=torch.bfloat16).expand(2, 2, 16, 576), kv, idx, out, 0.04)
    with pytest.raises(mlajit.InvalidArgumentError, match=r"q.dtype = torch.float16"):
        dec.run(padded.half(), kv, idx, out, 0.04, lse=lse)
    with pytest.raises(mlajit.InvalidArgumentError, match=r"lse.stride\(\) = .*no broadcast dimension"):
        dec.run(q, kv, idx, out, 0.04, lse=torch.empty(2, 2, 1).expand(2, 2, 16))
    with pytest.raises(mlajit.InvalidArgumentError, match=r"kv_cache.dtype = torch.float16"):
        dec.run(q, torch.zeros(kv.shape, dtype=torch.float16), idx, out, 0.04)  # the shape seen, another dtype
    with pytest.raises(mlajit.InvalidArgumentError, match=r"indices.stride\(\) = .*last dimension contiguous"):
        dec.run(q, kv, torch.zeros(2, 2, 128, dtype=torch.int32)[..., ::2], out, 0.04)
    with pytest.raises(mlajit.InvalidArgumentError, match=r"out.stride\(\) = .*last dimension contiguous"):
        dec.run(q, kv, idx, torch.empty(2, 2, 16, 1024, dtype=torch.bfloat16)[..., ::2], 0.04)
    fake.fake_cuda_forget_launches()
    dec.run(q, kv[:3], idx, out, 0.04)  # another page count: the shape's tail checked again
    assert fake.fake_cuda_counts_get().launches >= 1
    with pytest.raises(mlajit.InvalidArgumentError, match=r"kv_cache.shape = \(3, 32, 1, 656\)"):
        dec.run(q, kv[:3].view(3, 32, 2, 656)[:, :, :1], idx, out, 0.04)


def test_flash_mla_returns_its_outputs_in_flashmlas_layouts(fake, host):
    q, kv, idx = v32(b=2, s_q=2, h=16)
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, meta, indices=idx)
    assert out.shape == (2, 2, 16, 512) and out.is_contiguous()
    assert lse.shape == (2, 16, 2) and lse.stride() == (32, 1, 16)  # [b, h, s_q] over [b, s_q, h] memory
    mine = torch.empty(2, 2, 16, 512, dtype=torch.bfloat16)
    got, lse2 = flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, meta, indices=idx, out=mine)
    assert got is mine and lse2.shape == (2, 16, 2) and lse2.stride() == (32, 1, 16)
    with pytest.raises(mlajit.InvalidArgumentError, match=r"out.shape = \(2, 2, 16, 256\)"):
        flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, meta, indices=idx,
                                         out=torch.empty(2, 2, 16, 256, dtype=torch.bfloat16))
