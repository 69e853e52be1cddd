"""quantize_kv: bf16 key rows into a paged FP8 cache, SPEC.md's rule, on the
tensors' device (a GPU fills large caches fast; the CPU path is the same code).

Byte for byte what the C quantizer (mlajit_quantize_token) writes for finite
inputs, padding bytes zero:
  - per token and tile, s = amax(|x|) / 448 in fp32, at least 1e-4; the
    power-of-two formats round s up to a power of two from its bits (as the C
    code), so no log2 rounding enters;
  - the codes are float8_e4m3fn(x / s), x / s in fp32, rounded to nearest even
    (torch's cast; with these scales |x / s| <= 448, so its lack of saturation
    never shows);
  - the scales are stored as fp32 (V3.2, GLM-NSA) or as the biased exponent
    byte (DeepSeek-V4's ue8m0); the RoPE dims verbatim.
"""
from __future__ import annotations

import ctypes
from typing import Optional

import torch

from .errors import InvalidArgumentError, check
from .models import ModelLike, model_info
from . import _capi

__all__ = ["quantize_kv"]

_FP8_MAX = 448.0
_SCALE_FLOOR = 1e-4
_CHUNK_TOKENS = 1 << 16


def _pow2_ceil(s: torch.Tensor) -> torch.Tensor:
    # the smallest power of two >= s (s positive, normal): from the bits
    bits = s.view(torch.int32)
    up = (bits & 0x7F800000) + (1 << 23)
    return torch.where((bits & 0x007FFFFF) == 0, bits, up).view(torch.float32)


def _e4m3_round(v: torch.Tensor) -> torch.Tensor:
    """fp32 values rounded to nearest even on e4m3's grid (|v| <= 448), in fp32.

    The cast to float8_e4m3fn then only re-encodes an exact value. torch's own
    cast is not the same on every device: on the GPU an fp32 quotient of 24
    significant bits (arbitrary scales) near a tie came out one code away from
    the CPU's (and the C quantizer's), as rounding through a wider format
    first would do; a bf16 value over a power of two never reaches that.
    """
    bits = v.view(torch.int32)
    # normal codes (|v| >= 2^-6): keep 3 of fp32's 23 mantissa bits, ties to even
    # (a carry into the exponent is the next binade's first value, as it should be)
    lsb = (bits >> 20) & 1
    normal = ((bits + 0x7FFFF + lsb) & ~0xFFFFF).view(torch.float32)
    # subnormal codes: multiples of 2^-9 (v * 512 is exact; round() ties to even)
    subnormal = torch.round(v * 512.0) / 512.0
    return torch.where(v.abs() < 2.0 ** -6, subnormal, normal)


def _quantize_pages(info, tokens: torch.Tensor, page_size: int, pages: torch.Tensor) -> None:
    """Quantize whole pages of tokens [n_pages * page_size, d_qk] into pages [n_pages, page_stride]."""
    num_blocks = pages.shape[0]
    if info.scale_format == _capi.SCALE_NONE:
        # bf16 values (v32_bf16, dsv4_bf16): a row is the token's bf16 bytes as they
        # are, then zero padding up to row_bytes
        rows = torch.zeros((tokens.shape[0], info.row_bytes), dtype=torch.uint8, device=tokens.device)
        rows[:, :2 * info.d_qk] = tokens.contiguous().view(torch.uint8)
        pages[:, :page_size * info.row_bytes] = rows.reshape(num_blocks, page_size * info.row_bytes)
        return
    nope = tokens[:, :info.d_nope].float().reshape(-1, info.num_scales, info.quant_tile)
    amax = nope.abs().amax(dim=-1)
    # amax / 448 correctly rounded (in fp64, then to fp32): a CUDA tensor divided
    # by a Python number is multiplied by its reciprocal, one ulp off at times,
    # which GLM-NSA's stored fp32 scales show
    scales = torch.clamp_min((amax.double() / _FP8_MAX).float(), _SCALE_FLOOR)
    if info.scale_format != _capi.SCALE_FP32:
        scales = _pow2_ceil(scales)
    # x / s correctly rounded to fp32 whatever the device's division does: the
    # quotient in fp64 (53 bits >= 2 x 24 + 2, so its rounding to fp32 is the
    # IEEE fp32 division the C quantizer does)
    ratio = (nope.double() / scales.double().unsqueeze(-1)).float()
    codes = _e4m3_round(ratio).to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1, info.d_nope)
    rope = tokens[:, info.d_nope:].contiguous().view(torch.uint8)  # bf16 bytes, as stored
    if info.scale_place == _capi.SCALES_INLINE:
        record = torch.cat([codes, scales.view(torch.uint8).reshape(-1, info.num_scales * 4), rope], dim=1)
        pages[:, :page_size * info.row_bytes] = record.reshape(num_blocks, page_size * info.row_bytes)
    else:
        # rows [codes | RoPE] for every token of the page, then the footer: per
        # token its ue8m0 scale bytes (the fp32 exponent), then padding
        rows = torch.cat([codes, rope], dim=1).reshape(num_blocks, page_size * info.row_bytes)
        exponents = ((scales.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
        footer = torch.zeros((tokens.shape[0], info.footer_bytes), dtype=torch.uint8, device=tokens.device)
        footer[:, :info.num_scales] = exponents
        data = page_size * info.row_bytes
        pages[:, :data] = rows
        pages[:, data:data + page_size * info.footer_bytes] = footer.reshape(num_blocks, -1)


def _quantize_pages_c(info, tokens: torch.Tensor, page_size: int, pages: torch.Tensor) -> None:
    """A custom layout's pages, token by token through the C quantizer
    (mlajit_quantize_token_layout: the one that follows any layout), on the host."""
    layout = info.model._to_c()
    host_tokens = tokens.detach().to("cpu").contiguous()
    host_pages = torch.zeros(tuple(pages.shape), dtype=torch.uint8)
    stride = pages.shape[1]
    row_bytes = host_tokens.shape[1] * 2
    base = host_pages.data_ptr()
    for t in range(host_tokens.shape[0]):
        row = ctypes.cast(host_tokens.data_ptr() + t * row_bytes, ctypes.POINTER(ctypes.c_uint16))
        check(_capi.lib.mlajit_quantize_token_layout(ctypes.byref(layout), row, base + (t // page_size) * stride,
                                                      page_size, t % page_size))
    pages.copy_(host_pages)


def quantize_kv(values: torch.Tensor, model: ModelLike, page_size: int, *,
                page_stride: Optional[int] = None) -> torch.Tensor:
    """Quantize bf16 key rows into a cache.

    values: bf16 [num_blocks, page_size, d_qk] or [num_tokens, d_qk] (token t in
        slot t: page t // page_size, offset t % page_size; num_tokens a multiple of
        page_size), on any device.
    model: "v32", "dsv4", "glm_nsa", "glm53_nope", "dots3_swa", "v32_bf16", "dsv4_bf16" (bf16
        values, copied as they are; or mlajit.Model), or
        an mlajit.Layout (a custom layout: quantized on the host by the C quantizer).
    page_stride: bytes from one page to the next (default: the layout's minimum
        rounded up to 16; at least that, a multiple of 16).

    Returns a uint8 tensor [num_blocks, page_size, 1, bytes_per_token] on values'
    device (FlashMLA's k_cache layout; ``.view(torch.float8_e4m3fn)`` works too),
    a view whose stride(0) is the page stride.
    """
    info = model_info(model)
    if not isinstance(values, torch.Tensor):
        raise InvalidArgumentError(f"values: {type(values).__name__}; allowed: a bf16 torch.Tensor")
    if values.dtype is not torch.bfloat16:
        raise InvalidArgumentError(f"values.dtype = {values.dtype}; allowed: torch.bfloat16")
    if not isinstance(page_size, int) or isinstance(page_size, bool) or not 1 <= page_size <= _capi.MAX_PAGE_SIZE:
        raise InvalidArgumentError(f"page_size = {page_size!r}; allowed 1..{_capi.MAX_PAGE_SIZE}")
    if values.dim() not in (2, 3) or values.shape[-1] != info.d_qk or (values.dim() == 3 and
                                                                       values.shape[1] != page_size):
        raise InvalidArgumentError(f"values.shape = {tuple(values.shape)}; allowed: [num_blocks, {page_size}, "
                                   f"{info.d_qk}] or [num_tokens, {info.d_qk}] ({info.name})")
    tokens = values.reshape(-1, info.d_qk)
    if tokens.shape[0] % page_size:
        raise InvalidArgumentError(f"values holds {tokens.shape[0]} tokens, not a multiple of page_size {page_size}")
    num_blocks = tokens.shape[0] // page_size
    min_stride = info.min_page_stride(page_size)
    if page_stride is None:
        page_stride = (min_stride + 15) // 16 * 16
    elif not isinstance(page_stride, int) or page_stride < min_stride or page_stride % 16:
        raise InvalidArgumentError(f"page_stride = {page_stride!r}; allowed: a multiple of 16 >= {min_stride} "
                                   f"({info.name}, page size {page_size})")

    pages = torch.zeros((num_blocks, page_stride), dtype=torch.uint8, device=values.device)
    if info.is_custom:
        _quantize_pages_c(info, tokens, page_size, pages)
    else:
        # a chunk of pages at a time, so a large cache needs a bounded fp32 copy
        per_chunk = max(1, _CHUNK_TOKENS // page_size)
        for first in range(0, num_blocks, per_chunk):
            last = min(num_blocks, first + per_chunk)
            _quantize_pages(info, tokens[first * page_size:last * page_size], page_size, pages[first:last])
    return pages.as_strided((num_blocks, page_size, 1, info.bytes_per_token),
                            (page_stride, info.bytes_per_token, info.bytes_per_token, 1))
