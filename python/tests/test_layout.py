"""mlajit.Layout: layouts described at run time, accepted where a model is
(supported(), model_info(), quantize_kv), with the C library's checks."""
import pytest

import mlajit


def test_named_models_are_layouts():
    for name in ("v32", "dsv4", "glm_nsa", "glm53_nope", "dots3_swa"):
        layout = mlajit.Layout.of(name)
        assert mlajit.Layout.parse(str(layout)) == layout
        assert mlajit.Layout.parse(name) == layout
        # a layout equal to a named model's is that model
        assert mlajit.model_info(layout) == mlajit.model_info(name)
    assert str(mlajit.Layout.of("v32")) == "nope512-rope64-v512-tile128-pow2-inline-row656"


def test_a_custom_layout_has_its_numbers():
    layout = mlajit.Layout.parse("d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672")
    assert str(layout) == "nope512-rope64-v512-tile128-fp32-inline-row672"
    info = mlajit.model_info(layout)
    assert info.is_custom and info.model == layout
    assert (info.d_qk, info.d_v, info.num_scales, info.bytes_per_token) == (576, 512, 4, 672)
    assert (info.scale_offset, info.rope_offset) == (512, 528)
    assert info.min_page_stride(64) == 64 * 672
    assert info.name == str(layout)


def test_bad_layouts_name_the_field():
    with pytest.raises(mlajit.InvalidArgumentError, match="layout.quant_tile = 48"):
        mlajit.Layout.parse("d_nope=512,d_rope=64,tile=48,scales=pow2,place=inline")
    with pytest.raises(mlajit.InvalidArgumentError, match="layout key 'colour' is unknown"):
        mlajit.Layout.parse("d_nope=512,colour=red")
    bad = mlajit.Layout(512, 64, 512, 128, 1, 1, 600, 0)
    with pytest.raises(mlajit.InvalidArgumentError, match="layout.row_bytes = 600"):
        bad.validate()
    with pytest.raises(mlajit.InvalidArgumentError, match="layout.row_bytes = 600"):
        mlajit.model_info(bad)
    with pytest.raises(mlajit.InvalidArgumentError, match="layout.d_v = 9999"):
        str(mlajit.Layout(512, 64, 9999, 128, 1, 1, 656, 0))


def test_supported_takes_a_layout():
    served = mlajit.Layout.parse("d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672")
    assert mlajit.supported(served, 64, 64, 2048) == (True, "")
    portable_only = mlajit.Layout.parse("d_nope=448,d_rope=64,v=all,tile=32,scales=ue8m0,place=footer")
    assert mlajit.supported(portable_only, 16, 64, 512, arch="sm_80") == (True, "")
    assert mlajit.supported(portable_only, 16, 64, 512) == (True, "")  # auto runs portable on sm_90a
    # bf16 (scales none) and d_v 256: the portable family, auto's kernel on sm_90a too
    assert mlajit.supported(mlajit.Layout.parse("d_nope=512,d_rope=64,scales=none"), 64, 64) == (True, "")
    assert mlajit.supported(mlajit.Layout.parse("d_nope=256,d_rope=64,tile=32,scales=ue8m0,place=inline"),
                            16, 64) == (True, "")
    ok, reason = mlajit.supported(mlajit.Layout.parse("d_nope=512,d_rope=64,v=all,scales=none"), 16, 64)
    assert not ok and "layout.d_v must be a multiple of 128" in reason
