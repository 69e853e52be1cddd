#!/usr/bin/env python3
"""Write the header of a pretend next minor version: include/mlajit.h with a
field appended to every struct that starts with `size_t struct_size` (64 bytes,
so each sizeof grows whatever the padding). tests/abi_next builds the library
against it, and the abi suite, compiled against the real header, runs as a
program built with the older header would: its structs are smaller than the
library's.

Usage: abi_grow_header.py IN_HEADER OUT_HEADER
"""
import re
import sys

GROWN = "    unsigned char next_minor_fields[64]; /* tests/abi_grow_header.py */\n"


def grow(text):
    out, grown = [], 0
    in_sized = False
    for line in text.splitlines(keepends=True):
        if re.match(r"typedef struct \w+ \{", line):
            in_sized = None  # decided by the first member
        elif in_sized is None and line.strip():
            in_sized = line.strip().startswith("size_t struct_size;")
        if re.match(r"\} mlajit_\w+;", line) and in_sized:
            out.append(GROWN)
            grown += 1
            in_sized = False
        out.append(line)
    return "".join(out), grown


def main():
    src, dst = sys.argv[1:3]
    text, grown = grow(open(src).read())
    if grown < 9:
        raise SystemExit("abi_grow_header.py: grew %d structs; the header has at least 9 with struct_size" % grown)
    open(dst, "w").write(text)


if __name__ == "__main__":
    main()
