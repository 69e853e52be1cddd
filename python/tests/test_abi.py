"""The ctypes mirror of include/mlajit.h (mlajit/_capi.py) against the
compiler's layout of the header (tests/abi_layout.c, built by meson): every
public struct's size, alignment and field offsets, and the constants. A change
to a struct in one place and not the other fails here, naming the field."""
import ctypes
import json
import subprocess

import pytest

from conftest import build_file
from mlajit import _capi


@pytest.fixture(scope="module")
def layout():
    program = build_file("tests/abi_layout", "MLAJIT_ABI_LAYOUT")
    if not program:
        pytest.skip("tests/abi_layout is not built (meson compile -C build; meson test sets MLAJIT_ABI_LAYOUT)")
    lines = subprocess.run([program], check=True, capture_output=True, text=True).stdout.splitlines()
    records = [json.loads(line) for line in lines]
    structs = {r["struct"]: r for r in records if "struct" in r}
    constants = next(r["constants"] for r in records if "constants" in r)
    return structs, constants


def test_every_public_struct_is_mirrored(layout):
    structs, _ = layout
    assert sorted(structs) == sorted(_capi.STRUCTS)


@pytest.mark.parametrize("name", sorted(_capi.STRUCTS))
def test_struct_size_alignment_and_fields_match_the_header(layout, name):
    structs, _ = layout
    c = structs[name]
    py = _capi.STRUCTS[name]
    py_fields = [(f[0], getattr(py, f[0]).offset, getattr(py, f[0]).size) for f in py._fields_]
    c_fields = [tuple(f) for f in c["fields"]]
    assert py_fields == c_fields, f"{name}: ctypes fields {py_fields} != header {c_fields}"
    assert ctypes.sizeof(py) == c["size"], f"{name}: ctypes size {ctypes.sizeof(py)} != sizeof {c['size']}"
    assert ctypes.alignment(py) == c["align"], f"{name}: alignment {ctypes.alignment(py)} != {c['align']}"


def test_constants_match_the_header(layout):
    _, constants = layout
    mismatched = {name: (getattr(_capi, name[len("MLAJIT_"):], None), value) for name, value in constants.items()
                  if getattr(_capi, name[len("MLAJIT_"):], None) != value}
    assert not mismatched, f"(ctypes, header) differ: {mismatched}"


def test_the_library_exports_every_prototype():
    for name in _capi._PROTOTYPES:
        assert hasattr(_capi.lib, name), name


def test_every_struct_the_library_takes_starts_with_struct_size_set_to_its_size():
    for name, cls in _capi.STRUCTS.items():
        if name in ("mlajit_cache_view", "mlajit_layout"):  # embedded by value, never grow
            assert cls._fields_[0][0] != "struct_size"
            continue
        assert cls._fields_[0] == ("struct_size", ctypes.c_size_t), name
        if issubclass(cls, _capi.SizedStructure):
            assert cls().struct_size == ctypes.sizeof(cls), name
    shape = _capi.DecodeShape(3, 1, 64, 0, 0)  # positional fields are the ones after struct_size
    assert (shape.struct_size, shape.batch, shape.topk) == (ctypes.sizeof(_capi.DecodeShape), 3, 64)


def test_the_package_version_is_the_librarys():
    import mlajit
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    text = _capi.lib.mlajit_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch)).decode()
    assert text == f"{major.value}.{minor.value}.{patch.value}"
    assert mlajit.__version__ == text
