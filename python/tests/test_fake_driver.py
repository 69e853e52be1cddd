"""The ctypes layer's device paths against the project's fake CUDA driver
(tests/fake_cuda: launches are recorded and checked, not run), so a machine
without a GPU tests them: device discovery, loads, launches at the geometry
engines send, argument refusals, driver failures as CudaError, counters.

Run by `meson test python_fake_gpu` (LD_LIBRARY_PATH puts the fake first and
MLAJIT_FAKE_CUDA names it); elsewhere these skip."""
import ctypes

import pytest

import mlajit
from mlajit import _capi

pytestmark = pytest.mark.fake_driver


@pytest.fixture
def ctx(fake, shared_cache_dir):
    fake.fake_cuda_set_devices(1, None)
    fake.fake_cuda_forget_launches()
    c = mlajit.Context(0, cache_dir=shared_cache_dir, packs="")
    yield c
    for entry in (b"cuLaunchKernelEx", b"cuLaunchKernel"):
        fake.fake_cuda_fail(entry, 0, 0)
    c.close()


def v32_args(plan, **fields):
    a = _capi.DecodeArgs(q=0x100000, indices=0x300000, sm_scale=0.0625, out=0x400000, lse=0x500000,
                         workspace=0x600000 if plan.workspace_size else None, workspace_size=plan.workspace_size)
    a.kv = _capi.CacheView(0x200000, mlajit.model_info("v32").min_page_stride(64), 1024)
    for k, v in fields.items():
        setattr(a, k, v)
    return a


def decode(plan, args):
    mlajit.errors.check(_capi.lib.mlajit_decode(plan.handle, ctypes.addressof(args), None), "decode")


def test_the_context_sees_the_fake_gpu(ctx):
    info = ctx.info()
    assert info.has_device and info.device_name == "Fake NVIDIA H200" and info.device_arch == "sm_90a"
    assert info.sm_count == 132 and info.l2_bytes == 50 << 20 and info.no_device_reason == ""


@pytest.mark.parametrize("batch, s_q", [(1, 1), (32768, 1), (1024, 64), (1, 64), (65536, 1)])
def test_a_decode_launches_a_cta_row_per_token(fake, ctx, batch, s_q):
    plan = ctx.plan(mlajit.models.make_spec("v32", 16, 64), batch, s_q, 2048)
    decode(plan, v32_args(plan))
    counts = fake.fake_cuda_counts_get()
    assert counts.launches == (2 if plan.num_splits > 1 else 1)
    main = fake.fake_cuda_launch_at(0).contents
    assert main.function == b"mlajit_decode_main" and main.grid[0] == batch * s_q and main.grid[2] == plan.num_splits
    assert main.programmatic == 1


def test_the_library_refuses_a_short_workspace_naming_it(fake, ctx):
    plan = ctx.plan(mlajit.models.make_spec("v32", 64, 64), 1, 1, 2048)
    assert plan.workspace_size > 0
    with pytest.raises(mlajit.InvalidArgumentError, match="args.workspace: .* needs %d bytes" % plan.workspace_size):
        decode(plan, v32_args(plan, workspace_size=plan.workspace_size - 16))
    assert fake.fake_cuda_counts_get().launches == 0


def test_a_failed_launch_is_a_cuda_error_naming_the_call(fake, ctx):
    plan = ctx.plan(mlajit.models.make_spec("v32", 16, 64), 64, 1, 2048)
    fake.fake_cuda_fail(b"cuLaunchKernelEx", 700, 0)
    fake.fake_cuda_fail(b"cuLaunchKernel", 700, 0)
    with pytest.raises(mlajit.CudaError, match="cuLaunchKernel.*illegal memory access") as info:
        decode(plan, v32_args(plan))
    assert isinstance(info.value, RuntimeError) and info.value.status == _capi.ERR_CUDA


def test_warmup_loads_every_kernel_and_later_plans_compile_nothing(ctx):
    report = ctx.warmup(["dsv4"], [8, 64], [256], extra_page_sizes=[64], feature_sets=[["sink", "topk_length"]])
    assert report.loaded == report.kernels and report.kernels >= 2
    before = ctx.info().compiles
    spec = mlajit.models.make_spec("dsv4", 8, 256, extra_page_size=64, features=["sink", "topk_length"])
    ctx.plan(spec, 2, 2, 128, 512)
    assert ctx.info().compiles == before


def test_no_devices_leaves_a_context_that_raises_no_device(fake, cache_dir):
    fake.fake_cuda_set_devices(0, None)
    try:
        c = mlajit.Context(0, cache_dir=cache_dir, packs="")
        assert "reports no device" in c.info().no_device_reason
        plan = c.plan(mlajit.models.make_spec("v32", 16, 64), 1, 1, 64)
        with pytest.raises(mlajit.NoDeviceError, match="reports no device"):
            decode(plan, v32_args(plan))
    finally:
        fake.fake_cuda_set_devices(1, None)


def test_tune_times_every_bucket_and_stores_what_passes_its_check(ctx, caplog):
    # The fake driver runs no kernel, so no candidate passes the fp64 check: every
    # bucket is tuned to the end and nothing is stored; progress reaches logging.
    with caplog.at_level("INFO", logger="mlajit"):
        report = ctx.tune(600, models=["v32"], head_counts=[16], page_sizes=[64], topks=[128, 256], rows=[1, 2])
    assert report.buckets == 4 and report.buckets_done == 4 and not report.deadline_hit
    assert report.stored == 0 and report.failed_checks > 0 and report.timed >= 4
    assert any("tune: 4/4" in r.getMessage() for r in caplog.records)


def test_tune_takes_custom_layouts_in_models(ctx):
    # zero seconds: the buckets are counted, none is timed. A custom Layout is the
    # grid's layouts axis (alone, no named model is added); v32's own layout is v32.
    custom = mlajit.Layout.parse("d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672")
    grid = dict(head_counts=[16], page_sizes=[64], topks=[128], rows=[1, 2])
    assert ctx.tune(0, models=[custom], **grid).buckets == 2
    assert ctx.tune(0, models=["v32", custom], **grid).buckets == 4
    assert ctx.tune(0, models=["v32", mlajit.Layout.of("v32")], **grid).buckets == 2


def test_tune_refuses_a_bad_grid_naming_the_list(ctx):
    with pytest.raises(mlajit.InvalidArgumentError, match=r"grid.head_counts\[1\] = 0; allowed 1\.\.128"):
        ctx.tune(10, head_counts=[16, 0])
    with pytest.raises(mlajit.InvalidArgumentError, match="seconds = -1"):
        ctx.tune(-1)
    report = ctx.tune(0, models=["v32"], head_counts=[16], page_sizes=[64], topks=[128], rows=[1])
    assert report.buckets == 1 and report.buckets_done == 0 and report.deadline_hit and report.stored == 0
