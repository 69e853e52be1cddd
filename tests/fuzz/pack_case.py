#!/usr/bin/env python3
"""Pack a small case directory into one input for fuzz_case_json (see its header):
case.json, a 0 byte, then a record per other file: name length, name, size (u16
little-endian), fill byte. File contents are not kept (the harness fills them).
Usage: pack_case.py CASE_DIR OUTPUT_FILE"""
import os
import sys

src, dst = sys.argv[1], sys.argv[2]
out = bytearray(open(os.path.join(src, "case.json"), "rb").read())
out.append(0)
for name in sorted(os.listdir(src)):
    if name == "case.json":
        continue
    size = os.path.getsize(os.path.join(src, name))
    if size > 0xFFFF:
        sys.exit(f"{name} has {size} bytes; the format holds files up to 65535 bytes")
    raw = name.encode()
    out += bytes([len(raw)]) + raw + size.to_bytes(2, "little") + bytes([0x3C])
open(dst, "wb").write(out)
