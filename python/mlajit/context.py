"""Contexts (one per GPU: the kernel map, the caches, the counters), kernel
warm-up and plans, over mlajit_context_* / mlajit_warmup / mlajit_plan_*."""
from __future__ import annotations

import ctypes
import dataclasses
import sys
import threading
from typing import Dict, Iterable, Optional, Sequence

from . import _capi
from .errors import InvalidArgumentError, check
from .models import FeaturesLike, Layout, ModelLike, as_features, as_model, as_model_or_layout

_lib = _capi.lib


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


@dataclasses.dataclass(frozen=True)
class ContextInfo:
    """mlajit_context_get_info: the GPU, the compiler, the cache and packs, and how
    kernels were found since the context was made (``compiles`` after warm-up
    should stay 0 while serving)."""

    has_device: bool
    device_name: str
    device_arch: str
    sm_count: int
    driver_version: int
    nvrtc_version: tuple
    cache_dir: str
    cache_bytes: int
    cache_entries: int
    cache_writable: bool
    pack_count: int
    jit_disabled: bool
    memory_hits: int
    pack_hits: int
    disk_hits: int
    compiles: int
    corrupt: int
    jit_refusals: int
    compile_ms: float
    l2_bytes: int
    no_device_reason: str
    stale: int  # stored entries refused as stale (another format, or a launch record not expected), recompiled


@dataclasses.dataclass(frozen=True)
class KernelReport:
    """What preparing one kernel did (mlajit_kernel_report)."""

    spec: str
    key: str
    cache_hit: bool
    loaded: bool
    generate_ms: float
    compile_ms: float
    lookup_ms: float
    registers: int
    shared_bytes: int
    spill_bytes: int
    cubin_bytes: int
    source: str

    @staticmethod
    def from_c(r: _capi.KernelReport) -> "KernelReport":
        sources = {_capi.SOURCE_COMPILED: "compiled", _capi.SOURCE_MEMORY: "memory", _capi.SOURCE_PACK: "pack",
                   _capi.SOURCE_DISK: "disk"}
        return KernelReport(spec=_text(r.spec), key=_text(r.key), cache_hit=bool(r.cache_hit), loaded=bool(r.loaded),
                            generate_ms=r.generate_ms, compile_ms=r.compile_ms, lookup_ms=r.lookup_ms,
                            registers=r.registers, shared_bytes=r.shared_bytes, spill_bytes=r.spill_bytes,
                            cubin_bytes=r.cubin_bytes, source=sources.get(r.source, str(r.source)))


@dataclasses.dataclass(frozen=True)
class WarmupReport:
    kernels: int
    from_memory: int
    from_packs: int
    from_disk: int
    compiled: int
    loaded: int
    wall_ms: float
    compile_ms: float


@dataclasses.dataclass(frozen=True)
class TuneReport:
    """mlajit_tune: the buckets of the grid, those tuned to the end, the tactic
    records stored, and the candidates timed, dropped early and not timed."""

    buckets: int
    buckets_done: int
    stored: int
    timed: int
    dropped: int
    pruned: int
    failed_checks: int
    deadline_hit: bool
    seconds: float


def _ints(name: str, values, ctype=ctypes.c_int):
    """A ctypes array of ints (and its length) from an iterable; None: (None, 0)."""
    if values is None:
        return None, 0
    values = list(values)
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool):
            raise InvalidArgumentError(f"{name}: {v!r} is not an int")
    return (ctype * len(values))(*values), len(values)


class Plan:
    """A decode geometry planned on a kernel (mlajit_plan_create): the kernel is
    loaded, the split count and workspace size are fixed. ``handle`` is what
    mlajit_decode takes."""

    __slots__ = ("handle", "context", "workspace_size", "num_splits", "shape", "__weakref__")

    def __init__(self, context: "Context", spec: _capi.KernelSpec, shape: _capi.DecodeShape):
        handle = ctypes.c_void_p()
        check(_lib.mlajit_plan_create(context.handle, ctypes.byref(spec), ctypes.byref(shape), ctypes.byref(handle)))
        self.handle = handle.value
        self.context = context  # the plan must not outlive its context
        self.workspace_size = int(_lib.mlajit_plan_workspace_size(self.handle))
        self.num_splits = int(_lib.mlajit_plan_num_splits(self.handle))
        self.shape = (shape.batch, shape.s_q, shape.topk, shape.extra_topk)

    @property
    def report(self) -> KernelReport:
        return KernelReport.from_c(_lib.mlajit_plan_report(self.handle).contents)

    def __del__(self):
        handle, self.handle = getattr(self, "handle", None), None
        if handle and not sys.is_finalizing():  # at exit the process's memory goes anyway
            _lib.mlajit_plan_destroy(handle)


class Context:
    """A mlajit context: kernels are looked up in its own map, then the packs, the
    disk cache, then compiled. Thread-safe; one per GPU is enough (``context()``
    gives the process's). Without a GPU it still generates, compiles and caches,
    and decode calls raise NoDeviceError naming why."""

    def __init__(self, device: int = 0, *, cache_dir: Optional[str] = None, packs: Optional[str] = None,
                 no_device: bool = False, no_disk_cache: bool = False, no_jit: bool = False):
        if not isinstance(device, int) or isinstance(device, bool) or device < 0:
            raise InvalidArgumentError(f"device = {device!r}; allowed: a CUDA device ordinal >= 0")
        self._cache_dir = cache_dir.encode() if cache_dir is not None else None
        self._packs = packs.encode() if packs is not None else None
        opts = _capi.ContextOptions(device=device, cache_dir=self._cache_dir, packs=self._packs,
                                    flags=(_capi.CONTEXT_NO_DEVICE if no_device else 0) |
                                    (_capi.CONTEXT_NO_DISK_CACHE if no_disk_cache else 0) |
                                    (_capi.CONTEXT_NO_JIT if no_jit else 0))
        handle = ctypes.c_void_p()
        check(_lib.mlajit_context_create(ctypes.byref(opts), ctypes.byref(handle)))
        self.handle = handle.value
        self.device = device

    def close(self) -> None:
        """Destroy the context now (its plans must be gone first)."""
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            _lib.mlajit_context_destroy(handle)

    def __del__(self):
        if not sys.is_finalizing():  # plans may still point at it while the interpreter tears down
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def info(self) -> ContextInfo:
        i = _capi.ContextInfo()
        check(_lib.mlajit_context_get_info(self.handle, ctypes.byref(i)))
        return ContextInfo(
            has_device=bool(i.has_device), device_name=_text(i.device_name), device_arch=_text(i.device_arch),
            sm_count=i.sm_count, driver_version=i.driver_version, nvrtc_version=(i.nvrtc_major, i.nvrtc_minor),
            cache_dir=_text(i.cache_dir), cache_bytes=i.cache_bytes, cache_entries=i.cache_entries,
            cache_writable=bool(i.cache_writable), pack_count=i.pack_count, jit_disabled=bool(i.jit_disabled),
            memory_hits=i.memory_hits, pack_hits=i.pack_hits, disk_hits=i.disk_hits, compiles=i.compiles,
            corrupt=i.corrupt, jit_refusals=i.jit_refusals, compile_ms=i.compile_ms, l2_bytes=i.l2_bytes,
            no_device_reason=_text(i.no_device_reason), stale=i.stale)

    def prepare(self, spec: _capi.KernelSpec) -> KernelReport:
        """Look up or compile one kernel, and load it when the context has a GPU."""
        report = _capi.KernelReport()
        check(_lib.mlajit_kernel_prepare(self.handle, ctypes.byref(spec), ctypes.byref(report)))
        return KernelReport.from_c(report)

    def warmup(self, models: Iterable[ModelLike], head_counts: Iterable[int], page_sizes: Iterable[int], *,
               extra_page_sizes: Sequence[int] = (0,), feature_sets: Sequence[FeaturesLike] = (0,),
               archs: Sequence[str] = ("",), threads: int = 0) -> WarmupReport:
        """Make every kernel of the grid (the product of the lists, with the kernels
        plans switch to by their walk) ready before serving (mlajit_warmup):
        looked up or compiled on `threads` workers (0: one per CPU), and loaded."""
        m, nm = _ints("models", [int(as_model(x)) for x in models])
        h, nh = _ints("head_counts", head_counts)
        p, np_ = _ints("page_sizes", page_sizes)
        e, ne = _ints("extra_page_sizes", extra_page_sizes)
        f, nf = _ints("feature_sets", [as_features(x) for x in feature_sets], ctypes.c_uint)
        arch_bytes = [a.encode() for a in archs]
        a = (ctypes.c_char_p * len(arch_bytes))(*arch_bytes)
        grid = _capi.KernelGrid(m, nm, h, nh, p, np_, e, ne, f, nf, a, len(arch_bytes))
        report = _capi.WarmupReport()
        check(_lib.mlajit_warmup(self.handle, ctypes.byref(grid), threads, ctypes.byref(report)), "warmup")
        return WarmupReport(kernels=report.kernels, from_memory=report.from_memory, from_packs=report.from_packs,
                            from_disk=report.from_disk, compiled=report.compiled, loaded=report.loaded,
                            wall_ms=report.wall_ms, compile_ms=report.compile_ms)

    def tune(self, seconds: float, *, models: Optional[Iterable[ModelLike]] = None,
             head_counts: Optional[Iterable[int]] = None, page_sizes: Optional[Iterable[int]] = None,
             feature_sets: Optional[Sequence[FeaturesLike]] = None, topks: Optional[Iterable[int]] = None,
             rows: Optional[Iterable[int]] = None, extra_topks: Optional[Iterable[int]] = None,
             extra_page_size: int = 0) -> TuneReport:
        """Measure on this context's GPU which kernel and split count serve each
        bucket of the grid fastest, and store the winners in its writable cache,
        where plans take them (mlajit_tune; docs/tuning.md). A list left None is
        the production grid's; models may hold custom Layouts (the grid's layouts:
        with only Layouts, no named model is tuned). No candidate starts after
        `seconds`. Progress goes to the "mlajit" logger at INFO. Minutes for the
        default grid; never under CUDA graph capture."""
        named, custom = None, []
        if models is not None:  # a custom Layout goes on the grid's layouts axis
            named = []
            for x in models:
                v = as_model_or_layout(x, "models")
                if isinstance(v, Layout):
                    custom.append(v)
                else:
                    named.append(int(v))
        m, nm = _ints("models", named if named or not custom else None)
        lays = (_capi.Layout * len(custom))(*[x._to_c() for x in custom]) if custom else None
        h, nh = _ints("head_counts", head_counts)
        p, np_ = _ints("page_sizes", page_sizes)
        f, nf = _ints("feature_sets", None if feature_sets is None else [as_features(x) for x in feature_sets],
                      ctypes.c_uint)
        t, nt = _ints("topks", topks)
        r, nr = _ints("rows", rows)
        e, ne = _ints("extra_topks", extra_topks)
        grid = _capi.TuneGrid(m, nm, h, nh, p, np_, f, nf, t, nt, r, nr, e, ne, extra_page_size, lays, len(custom))
        report = _capi.TuneReport()
        check(_lib.mlajit_tune(self.handle, ctypes.byref(grid), float(seconds), ctypes.byref(report)), "tune")
        return TuneReport(buckets=report.buckets, buckets_done=report.buckets_done, stored=report.stored,
                          timed=report.timed, dropped=report.dropped, pruned=report.pruned,
                          failed_checks=report.failed_checks, deadline_hit=bool(report.deadline_hit),
                          seconds=report.seconds)

    def plan(self, spec: _capi.KernelSpec, batch: int, s_q: int, topk: int, extra_topk: int = 0,
             num_splits: int = 0) -> Plan:
        """Plan a decode geometry (compiles or loads its kernel when needed)."""
        return Plan(self, spec, _capi.DecodeShape(batch, s_q, topk, extra_topk, num_splits))


_contexts: Dict[int, Context] = {}
_contexts_lock = threading.Lock()


def context(device: Optional[int] = None) -> Context:
    """The process's context for a CUDA device (default: torch's current device
    when torch is loaded and has CUDA, else 0), made on first use with the
    defaults (MLAJIT_CACHE_DIR, MLAJIT_PACKS, MLAJIT_DISABLE_JIT apply)."""
    if device is None:
        device = 0
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            device = torch.cuda.current_device()
    ctx = _contexts.get(device)
    if ctx is None:
        with _contexts_lock:
            ctx = _contexts.get(device)
            if ctx is None:
                ctx = _contexts[device] = Context(device)
    return ctx
