"""mlajit.supported(): the envelope query without a GPU, against the CLI's
`mlajit envelope` (the same mlajit_envelope_check, through another front)."""
import os
import subprocess

import pytest

import mlajit
from conftest import build_file

ROWS = [
    # (args, kwargs, ok, words in the reason)
    (("v32", 16, 64, 2048), {}, True, ""),
    (("v32", 1, 1, 1), {}, True, ""),
    (("dsv4", 128, 256, 128), {"extra_page_size": 64, "extra_topk": 512, "features": ["sink", "topk_length"]},
     True, ""),
    (("glm_nsa", 5, 61, 333), {"s_q": 2}, True, ""),
    (("v32", 16, 64, 2048), {"batch_size": 32768}, True, ""),  # an engine's mixed batch as (T, 1)
    (("v32", 16, 64, 2048), {"batch_size": 1024, "s_q": 64}, True, ""),
    (("v32", 129, 64, 2048), {}, False, "spec.h_q = 129; allowed 1..128"),
    (("v32", 16, 1025, 2048), {}, False, "page_size"),
    (("v32", 16, 64, 16385), {}, False, "shape.topk = 16385"),
    (("v32", 16, 64, 64), {"batch_size": 65537}, False, "shape.batch = 65537"),
    (("v32", 16, 64, 64), {"s_q": 65}, False, "shape.s_q = 65"),
    (("v32", 16, 64, 64), {"batch_size": 2048, "s_q": 64}, False, "MLAJIT_MAX_ROWS"),
    (("v32", 16, 64, 64), {"extra_topk": 4}, False, "extra_topk"),
    (("v32", 16, 64, 64), {"features": ["extra_topk_length"]}, False, "extra"),
    (("v32", 16, 64, 64), {"arch": "sm_75"}, False, "sm_75"),
    (("nope", 16, 64, 64), {}, False, "model = 'nope'"),
    (("v32", 16, 64), {}, True, ""),  # spec only
]


@pytest.mark.parametrize("args, kwargs, ok, words", ROWS)
def test_supported_answers_with_the_reason(args, kwargs, ok, words):
    got_ok, reason = mlajit.supported(*args, **kwargs)
    assert got_ok == ok, reason
    assert (reason == "") == ok
    assert words in reason


def _cli():
    return os.environ.get("MLAJIT_CLI") or build_file("mlajit", "MLAJIT_CLI")


@pytest.mark.parametrize("args, kwargs, ok, words", [r for r in ROWS if r[0][0] in ("v32", "dsv4", "glm_nsa")
                                                     and "features" not in r[1] and "arch" not in r[1]])
def test_supported_agrees_with_the_cli(args, kwargs, ok, words):
    cli = _cli()
    if not cli:
        pytest.skip("the mlajit CLI is not built (meson compile -C build)")
    model, heads, page = args[:3]
    spec = f"{model}.h{heads}.p{page}" + (f".e{kwargs['extra_page_size']}" if kwargs.get("extra_page_size") else "")
    spec += ".t0.hc0.auto.sm_90a"
    cmd = [cli, "envelope", spec]
    if len(args) > 3:
        cmd += ["--topk", str(args[3]), "--batch", str(kwargs.get("batch_size", 1)), "--s-q", str(kwargs.get("s_q", 1))]
        if kwargs.get("extra_topk"):
            cmd += ["--extra-topk", str(kwargs["extra_topk"])]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert (run.returncode == 0) == ok, (cmd, run.stdout, run.stderr)


def test_glm53_nope_and_dots3_swa_are_served():
    # GLM53_NOPE: auto's pick on sm_90a is sm90 (sm90-narrow at 16 heads); DOTS3_SWA:
    # sm90-narrow at 16 heads on sm_90a, portable on sm_80
    for model in ("glm53_nope", "dots3_swa"):
        for arch in ("", "sm_80"):
            ok, reason = mlajit.supported(model, 16, 64, 2048, arch=arch)
            assert ok, (model, arch, reason)
        assert mlajit.model_info(model).name == model


def test_dots3_swa_is_refused_where_its_rows_do_not_fit_with_the_reason():
    ok, reason = mlajit.supported("dots3_swa", 16, 64, 2048, arch="sm_86")
    assert not ok
    assert "dots3_swa" in reason and "the least there is" in reason, reason
