"""Model types (KV-cache layouts) and optional features, named as the C library
names them; every number comes from the C library's descriptor table."""
from __future__ import annotations

import ctypes
import dataclasses
import enum
from typing import Iterable, Union

from . import _capi
from .errors import InvalidArgumentError


class Model(enum.IntEnum):
    """The KV-cache layouts (SPEC.md): V32 = DeepSeek-V3.2 (656 B/token, power-of-two
    fp32 scales inline), DSV4 = DeepSeek-V4 (584 B/token, ue8m0 scales in a page
    footer), GLM_NSA = V3.2's layout with arbitrary fp32 scales, GLM53_NOPE = 512
    NoPE dims and no RoPE (656-byte rows, 528 used, arbitrary fp32 scales inline),
    DOTS3_SWA = 1024 NoPE + 64 RoPE dims, d_v 1024 (1160 B/token, ue8m0 scales in
    a page footer). GLM53_NOPE runs on the sm90 and portable kernels, DOTS3_SWA
    on the portable kernel (sm_80, sm_90a, sm_100a) and on sm_90a's sm90-narrow
    (at most 16 heads per CTA) and sm90-split (past 32 heads). V32_BF16 and DSV4_BF16 are V3.2's and V4's dims as
    bf16 values (no scales; 1152 and 1024 B/token), on the portable kernel;
    supported() says why where not."""

    V32 = _capi.MODEL_V32
    DSV4 = _capi.MODEL_DSV4
    GLM_NSA = _capi.MODEL_GLM_NSA
    GLM53_NOPE = _capi.MODEL_GLM53_NOPE
    DOTS3_SWA = _capi.MODEL_DOTS3_SWA
    V32_BF16 = _capi.MODEL_V32_BF16
    DSV4_BF16 = _capi.MODEL_DSV4_BF16


@dataclasses.dataclass(frozen=True)
class Layout:
    """A KV-cache layout described by its numbers (docs/layouts.md), accepted
    wherever a model is. Make one with Layout.parse (inline keys, the canonical
    string or a model's name) or Layout.of(model); str() is its canonical string.
    Every field is checked by the C library (mlajit_layout_validate), whose message
    names the field."""

    d_nope: int
    d_rope: int
    d_v: int
    quant_tile: int
    scale_format: int
    scale_place: int
    row_bytes: int
    footer_bytes: int

    @classmethod
    def parse(cls, text: str) -> "Layout":
        """From "d_nope=256,d_rope=64,d_v=256,tile=32,scales=ue8m0,place=inline"
        (plus row_bytes=, footer_bytes=, v=nope|all), a canonical string or a model name."""
        if not isinstance(text, str):
            raise InvalidArgumentError(f"layout = {text!r}; allowed: a str")
        c = _capi.Layout()
        from .errors import check
        check(_capi.lib.mlajit_layout_parse(text.encode(), ctypes.byref(c)))
        return cls._from_c(c)

    @classmethod
    def of(cls, model: "ModelLike") -> "Layout":
        """A named model's layout."""
        c = _capi.Layout()
        from .errors import check
        check(_capi.lib.mlajit_model_layout(int(as_model(model)), ctypes.byref(c)))
        return cls._from_c(c)

    @classmethod
    def _from_c(cls, c: _capi.Layout) -> "Layout":
        return cls(c.d_nope, c.d_rope, c.d_v, c.quant_tile, c.scale_format, c.scale_place, c.row_bytes,
                   c.footer_bytes)

    def _to_c(self) -> _capi.Layout:
        c = _capi.Layout()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or not -2**31 <= value < 2**31:
                raise InvalidArgumentError(f"layout.{f.name} = {value!r}; allowed: an int")
            setattr(c, f.name, value)
        return c

    def validate(self) -> None:
        """Raise InvalidArgumentError naming the field when the layout is not valid."""
        from .errors import check
        check(_capi.lib.mlajit_layout_validate(ctypes.byref(self._to_c())))

    def __str__(self) -> str:
        buf = ctypes.create_string_buffer(_capi.LAYOUT_STRING_LEN)
        from .errors import check
        check(_capi.lib.mlajit_layout_string(ctypes.byref(self._to_c()), buf, len(buf)))
        return buf.value.decode()


ModelLike = Union[Model, str, int, Layout]


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    model: Union[Model, Layout]  # the named model, or the custom layout
    name: str
    d_qk: int
    d_nope: int
    d_rope: int
    d_v: int
    quant_tile: int
    num_scales: int
    scale_format: int
    scale_place: int
    row_bytes: int
    footer_bytes: int
    bytes_per_token: int

    scale_offset: int = 0
    rope_offset: int = 0

    @property
    def is_custom(self) -> bool:
        return isinstance(self.model, Layout)

    def min_page_stride(self, page_size: int) -> int:
        """The smallest page stride in bytes for page_size tokens (larger ones must be multiples of 16)."""
        if isinstance(self.model, Layout):
            return int(_capi.lib.mlajit_layout_min_page_stride(ctypes.byref(self.model._to_c()), page_size))
        return int(_capi.lib.mlajit_min_page_stride(int(self.model), page_size))


_MODEL_NAMES = "v32, dsv4, glm_nsa, glm53_nope, dots3_swa, v32_bf16, dsv4_bf16"


def as_model_or_layout(model: ModelLike, argument: str = "model") -> Union[Model, Layout]:
    """A Model, or a Layout where the value is one (a layout equal to a named
    model's is that model, as in the C library)."""
    if isinstance(model, Layout):
        named = _named_model_of(model)
        return named if named is not None else model
    return as_model(model, argument)


def _named_model_of(layout: Layout):
    d = _capi.lib.mlajit_layout_describe(ctypes.byref(layout._to_c()))
    if not d:
        layout.validate()  # raises, naming the field
        raise InvalidArgumentError(f"layout {layout!r} has no descriptor")
    return Model(d.contents.model) if d.contents.model != _capi.MODEL_CUSTOM else None


def as_model(model: ModelLike, argument: str = "model") -> Model:
    if isinstance(model, Layout):
        named = _named_model_of(model)
        if named is None:
            raise InvalidArgumentError(f"{argument} = {model}: a custom layout, where a named model is needed")
        return named
    if isinstance(model, Model):
        return model
    if isinstance(model, str):
        out = ctypes.c_int()
        if _capi.lib.mlajit_model_from_name(model.encode(), ctypes.byref(out)):
            raise InvalidArgumentError(f"{argument} = {model!r} is unknown; allowed: {_MODEL_NAMES}")
        return Model(out.value)
    if isinstance(model, int) and not isinstance(model, bool):
        try:
            return Model(model)
        except ValueError:
            pass
    raise InvalidArgumentError(f"{argument} = {model!r}; allowed: {_MODEL_NAMES} (a name or mlajit.Model)")


_INFO_CACHE = {}


def model_info(model: ModelLike) -> ModelInfo:
    """The model's (or a Layout's) numbers (mlajit_model_describe, mlajit_layout_describe)."""
    m = as_model_or_layout(model)
    info = _INFO_CACHE.get(m)
    if info is None:
        if isinstance(m, Layout):
            d = _capi.lib.mlajit_layout_describe(ctypes.byref(m._to_c())).contents
        else:
            d = _capi.lib.mlajit_model_describe(int(m)).contents
        info = ModelInfo(model=m, name=d.name.decode(), d_qk=d.d_qk, d_nope=d.d_nope, d_rope=d.d_rope, d_v=d.d_v,
                         quant_tile=d.quant_tile, num_scales=d.num_scales, scale_format=d.scale_format,
                         scale_place=d.scale_place, row_bytes=d.row_bytes, footer_bytes=d.footer_bytes,
                         bytes_per_token=d.bytes_per_token, scale_offset=d.scale_offset, rope_offset=d.rope_offset)
        _INFO_CACHE[m] = info
    return info


FEATURES = {
    "sink": _capi.FEATURE_SINK,
    "topk_length": _capi.FEATURE_TOPK_LENGTH,
    "extra_topk_length": _capi.FEATURE_EXTRA_TOPK_LENGTH,
}

FeaturesLike = Union[int, Iterable[str], None]


def as_features(features: FeaturesLike, argument: str = "features") -> int:
    """Feature bits from names ("sink", "topk_length", "extra_topk_length"; '-' and
    '_' alike) or the MLAJIT_FEATURE_* bits."""
    if features is None:
        return 0
    if isinstance(features, int) and not isinstance(features, bool):
        if features & ~_capi.FEATURE_ALL or features < 0:
            raise InvalidArgumentError(f"{argument} = {features:#x}; allowed bits {_capi.FEATURE_ALL:#x}")
        return features
    if isinstance(features, str):
        features = [features]
    bits = 0
    for name in features:
        key = str(name).replace("-", "_")
        if key not in FEATURES:
            raise InvalidArgumentError(f"{argument}: {name!r} is unknown; allowed: {', '.join(FEATURES)}")
        bits |= FEATURES[key]
    return bits


def make_spec(model: ModelLike, heads: int, page_size: int, *, extra_page_size: int = 0, features: FeaturesLike = 0,
              arch: str = "") -> _capi.KernelSpec:
    """A kernel spec with the generator's choices left to it (mlajit_spec_init).
    Ranges are checked by the library's own validation, which names the field."""
    spec = _capi.KernelSpec()
    m = as_model_or_layout(model)
    for name, value in (("heads", heads), ("page_size", page_size), ("extra_page_size", extra_page_size)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgumentError(f"{name} = {value!r}; allowed: an int")
    from .errors import check
    if isinstance(m, Layout):
        check(_capi.lib.mlajit_spec_init_layout(ctypes.byref(spec), ctypes.byref(m._to_c()), heads, page_size))
    else:
        check(_capi.lib.mlajit_spec_init(ctypes.byref(spec), int(m), heads, page_size))
    spec.extra_page_size = extra_page_size
    spec.features = as_features(features)
    if arch:
        if len(arch.encode()) >= _capi.ARCH_LEN:
            raise InvalidArgumentError(f"arch = {arch!r} is too long; allowed e.g. 'sm_90a'")
        spec.arch = arch.encode()
    return spec


def spec_string(spec: _capi.KernelSpec) -> str:
    buf = ctypes.create_string_buffer(128)
    from .errors import check
    check(_capi.lib.mlajit_spec_string(ctypes.byref(spec), buf, len(buf)))
    return buf.value.decode()
