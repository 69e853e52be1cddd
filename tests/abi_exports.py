#!/usr/bin/env python3
"""The shared library's ABI against the header: libmlajit.so exports exactly the
functions include/mlajit.h declares (no more, no fewer), every one of them is
marked MLAJIT_API, the header declares no exported data, and the version the
header states is meson's project version with the major as the SONAME.

Usage: abi_exports.py HEADER LIBRARY PROJECT_VERSION
The library's symbols are read from its ELF dynamic symbol table here (a small
reader below), so the test needs no binutils.
"""
import re
import struct
import sys

# Symbols a linker or a sanitizer adds to every shared object: not the library's.
TOOLCHAIN = {"_init", "_fini", "_edata", "_end", "__bss_start"}
TOOLCHAIN_PREFIXES = ("__asan", "__ubsan", "__sanitizer", "__sancov", "__lsan", "___asan", "__odr_asan")


def header_functions(text):
    """(marked, unmarked): the functions the header declares with and without MLAJIT_API."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"\\\n", " ", text)  # macro continuations, then every preprocessor line
    text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
    if re.search(r'\bextern\b(?!\s*"C")', text):
        raise SystemExit("FAIL: the header declares extern data; the ABI is functions only")
    marked, unmarked = set(), set()
    for m in re.finditer(r"\b(mlajit_\w+)\s*\(", text):
        start = max(text.rfind(c, 0, m.start()) for c in ";{}") + 1
        statement = text[start:m.start()].split()
        if statement and statement[0] == "typedef":
            continue
        (marked if statement and statement[0] == "MLAJIT_API" else unmarked).add(m.group(1))
    return marked, unmarked


def header_version(text):
    nums = {}
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"#define MLAJIT_VERSION_%s (\d+)" % part, text)
        nums[part] = int(m.group(1)) if m else None
    m = re.search(r'#define MLAJIT_VERSION_STRING "([^"]*)"', text)
    return nums, m.group(1) if m else None


def elf_dynamic(path):
    """(exported names, SONAME) of an ELF64 little-endian shared object."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SystemExit("FAIL: %s is not a 64-bit little-endian ELF file" % path)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def strtab(index, offset):
        base = sections[index][4] + offset
        return data[base:data.index(b"\0", base)].decode()

    exported, soname = set(), None
    for name, stype, flags, addr, off, size, link, info, align, entsize in sections:
        if stype == 11:  # SHT_DYNSYM
            for i in range(1, size // entsize):
                st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from(
                    "<IBBHQQ", data, off + i * entsize)
                binding, visibility = st_info >> 4, st_other & 3
                if st_shndx != 0 and binding in (1, 2) and visibility in (0, 3):  # defined, global/weak, default/protected
                    exported.add(strtab(link, st_name))
        elif stype == 6:  # SHT_DYNAMIC
            for i in range(size // entsize):
                tag, value = struct.unpack_from("<qQ", data, off + i * entsize)
                if tag == 14:  # DT_SONAME
                    soname = strtab(link, value)
    return exported, soname


def main():
    header_path, library, project_version = sys.argv[1:4]
    text = open(header_path).read()
    failures = []
    marked, unmarked = header_functions(text)
    if not marked:
        failures.append("no MLAJIT_API function found in %s" % header_path)
    for name in sorted(unmarked):
        failures.append("%s is declared in the header without MLAJIT_API (it would not be exported)" % name)
    exported, soname = elf_dynamic(library)
    exported = {s for s in exported if s not in TOOLCHAIN and not s.startswith(TOOLCHAIN_PREFIXES)}
    declared = marked | unmarked
    for name in sorted(exported - declared):
        failures.append("%s is exported by %s but not declared in the header" % (name, library))
    for name in sorted(declared - exported):
        failures.append("%s is declared in the header but not exported by %s" % (name, library))

    nums, string = header_version(text)
    want = project_version.split(".")
    if [str(nums[p]) for p in ("MAJOR", "MINOR", "PATCH")] != want or string != project_version:
        failures.append("the header's MLAJIT_VERSION_* (%s, \"%s\") is not meson's project version %s"
                        % (nums, string, project_version))
    if soname != "libmlajit.so.%s" % want[0]:
        failures.append("SONAME is %s; the major version %s wants libmlajit.so.%s" % (soname, want[0], want[0]))

    for f in failures:
        print("FAIL:", f)
    print("abi_exports: %d functions declared, %d exported, SONAME %s, version %s: %s"
          % (len(declared), len(exported), soname, project_version, "FAILED" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
