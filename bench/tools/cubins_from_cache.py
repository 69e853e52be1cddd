#!/usr/bin/env python3
"""Every cubin stored in a kernel cache's data file, written out as OUT/N.cubin for
nvdisasm: no GPU and no LMDB library needed. LMDB keeps a value of more than a page
in consecutive overflow pages, so each cubin is one run of bytes that starts with
the ELF magic; its length is the furthest of its section headers, program headers
and sections' contents. A development aid for reading a kernel's SASS on a machine
without a GPU (loop_census.py); start from an empty cache (MLAJIT_CACHE_DIR) so the
cubins are the ones just compiled, in the order they were stored.

usage: cubins_from_cache.py DATA.MDB OUTDIR"""
import os
import struct
import sys

ELF64_MAGIC = b"\x7fELF\x02"
SHT_NOBITS = 8  # a section that takes no bytes in the file


def elf_length(data, start):
    """The bytes of the ELF64 image at `start`, or 0 where its headers do not fit."""
    if start + 64 > len(data):
        return 0
    phoff, shoff = struct.unpack_from("<QQ", data, start + 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, start + 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    if start + end > len(data):
        return 0
    for k in range(shnum):
        header = start + shoff + k * shentsize
        kind, = struct.unpack_from("<I", data, header + 4)
        offset, size = struct.unpack_from("<QQ", data, header + 0x18)
        if kind != SHT_NOBITS:
            end = max(end, offset + size)
    return end if start + end <= len(data) else 0


def cubins(data):
    """[(offset, image)] of every whole ELF64 image in data."""
    found, at = [], data.find(ELF64_MAGIC)
    while at >= 0:
        length = elf_length(data, at)
        if length:
            found.append((at, data[at:at + length]))
        at = data.find(ELF64_MAGIC, at + max(length, 1))
    return found


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    os.makedirs(sys.argv[2], exist_ok=True)
    for n, (offset, image) in enumerate(cubins(data)):
        path = os.path.join(sys.argv[2], f"{n}.cubin")
        with open(path, "wb") as out:
            out.write(image)
        print(f"{path}: {len(image)} bytes at offset {offset}")


if __name__ == "__main__":
    main()
