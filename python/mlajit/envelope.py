"""Capability queries without a GPU (mlajit_envelope_check): would this
configuration compile and run? An engine asks at start-up."""
from __future__ import annotations

import ctypes
from typing import Optional, Tuple

from . import _capi
from .errors import MlajitError
from .models import FeaturesLike, ModelLike, make_spec


def supported(model: ModelLike, heads: int, page_size: int, topk: Optional[int] = None, *,
              extra_page_size: int = 0, extra_topk: int = 0, features: FeaturesLike = None, batch_size: int = 1,
              s_q: int = 1, arch: str = "") -> Tuple[bool, str]:
    """(True, "") when a decode of this model, head count, page size(s) and
    features (and, with topk, this geometry: batch_size x s_q rows of topk +
    extra_topk candidates) is inside the envelope for arch ("" = sm_90a) and the
    installed NVRTC can target it; else (False, the reason, naming the field and
    what is allowed). Answered without CUDA and without compiling."""
    try:
        spec = make_spec(model, heads, page_size, extra_page_size=extra_page_size, features=features, arch=arch)
    except MlajitError as e:
        return False, str(e)
    shape = None
    if topk is not None:
        for name, value in (("topk", topk), ("extra_topk", extra_topk), ("batch_size", batch_size), ("s_q", s_q)):
            if not isinstance(value, int) or isinstance(value, bool):
                return False, f"{name} = {value!r}; allowed: an int"
        shape = _capi.DecodeShape(batch_size, s_q, topk, extra_topk, 0)
    status = _capi.lib.mlajit_envelope_check(ctypes.byref(spec), ctypes.byref(shape) if shape is not None else None)
    if status:
        return False, _capi.last_error() or _capi.status_string(status)
    return True, ""
