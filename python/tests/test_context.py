"""Contexts, plans and counters on a machine without a GPU (no device: the
library generates, compiles and caches; decode calls say why there is no GPU),
and the library's log lines reaching Python's logging."""
import ctypes
import logging

import pytest

import mlajit
from mlajit import _capi


@pytest.fixture
def ctx(cache_dir):
    c = mlajit.Context(no_device=True, cache_dir=cache_dir, packs="")
    yield c


def test_info_without_a_device_says_why(ctx, cache_dir):
    info = ctx.info()
    assert not info.has_device and "MLAJIT_CONTEXT_NO_DEVICE" in info.no_device_reason
    assert info.device_arch == "sm_90a" and info.cache_dir == cache_dir and info.cache_writable
    assert info.compiles == 0 and info.nvrtc_version[0] >= 11


def test_plans_compile_once_and_the_counters_say_so(ctx):
    spec = mlajit.models.make_spec("v32", 16, 64)
    plan = ctx.plan(spec, 1, 1, 2048)
    assert plan.num_splits > 1 and plan.workspace_size > 0
    assert plan.report.spec.startswith("v32.h16.p64") and plan.report.source == "compiled"
    info = ctx.info()
    assert info.compiles == 1 and info.compile_ms > 0
    again = ctx.plan(spec, 1, 1, 2048)
    assert again.workspace_size == plan.workspace_size
    assert ctx.info().compiles == 1 and ctx.info().memory_hits >= 1
    # a second context on the same cache finds it on disk
    other = mlajit.Context(no_device=True, cache_dir=ctx.info().cache_dir, packs="")
    assert other.plan(spec, 1, 1, 2048).report.source == "disk"
    assert other.info().disk_hits == 1 and other.info().compiles == 0


def test_warmup_counts_the_grid(ctx):
    report = ctx.warmup(["v32"], [16, 32], [64], threads=2)
    assert report.kernels >= 2 and report.compiled == report.kernels and report.loaded == 0
    again = ctx.warmup(["v32"], [16, 32], [64], threads=2)
    assert again.from_memory == report.kernels and again.compiled == 0


def test_a_decode_without_a_device_raises_no_device_naming_why(ctx):
    plan = ctx.plan(mlajit.models.make_spec("v32", 16, 64), 1, 1, 64)
    args = _capi.DecodeArgs(q=0x100000, indices=0x300000, sm_scale=0.04, out=0x400000)
    args.kv = _capi.CacheView(0x200000, mlajit.model_info("v32").min_page_stride(64), 4)
    status = _capi.lib.mlajit_decode(plan.handle, ctypes.addressof(args), None)
    with pytest.raises(mlajit.NoDeviceError, match="no GPU .*MLAJIT_CONTEXT_NO_DEVICE"):
        mlajit.errors.check(status)


def test_a_bad_argument_is_refused_before_the_device(ctx):
    plan = ctx.plan(mlajit.models.make_spec("v32", 16, 64), 1, 1, 64)
    args = _capi.DecodeArgs(q=0x100001, indices=0x300000, sm_scale=0.04, out=0x400000)  # q misaligned
    args.kv = _capi.CacheView(0x200000, mlajit.model_info("v32").min_page_stride(64), 4)
    with pytest.raises(mlajit.InvalidArgumentError, match="args.q = .* is not 16-byte aligned"):
        mlajit.errors.check(_capi.lib.mlajit_decode(plan.handle, ctypes.addressof(args), None))


def test_no_jit_and_an_empty_cache_is_not_found_naming_the_spec_and_what_serves_it(cache_dir):
    ctx = mlajit.Context(no_device=True, cache_dir=cache_dir, packs="", no_jit=True)
    with pytest.raises(mlajit.NotFoundError, match=r"no kernel for v32\.h16\.p64\..* MLAJIT_PACKS"):
        ctx.prepare(mlajit.models.make_spec("v32", 16, 64))
    assert ctx.info().jit_refusals == 1


def test_library_warnings_reach_python_logging(caplog):
    with caplog.at_level(logging.WARNING, logger="mlajit"):
        mlajit.Context(no_device=True, cache_dir="/proc/mlajit-cannot-make-this", packs="")
    lines = [r for r in caplog.records if r.name == "mlajit"]
    assert lines and lines[0].levelno == logging.WARNING and "/proc/mlajit-cannot-make-this" in lines[0].getMessage()


def test_compile_lines_reach_python_logging_at_info(caplog, cache_dir):
    ctx = mlajit.Context(no_device=True, cache_dir=cache_dir, packs="")
    with caplog.at_level(logging.INFO, logger="mlajit"):
        ctx.prepare(mlajit.models.make_spec("dsv4", 8, 64))
    infos = [r.getMessage() for r in caplog.records if r.name == "mlajit" and r.levelno == logging.INFO]
    assert any("dsv4.h8" in m for m in infos), infos


def test_the_process_context_is_one_per_device():
    assert mlajit.context(0) is mlajit.context(0)
