#!/usr/bin/env python3
"""The host side of the kernels' parameter block (src/codegen/kernel_abi.h): its
one list of fields carries each field's offset, and _Static_assert checks them.
A copy of the header with two fields swapped must not compile, naming the field;
the header as it is must (the positive control, with the same compiler).

    test_params_abi.py KERNEL_ABI_H CC [CC_ARG...]"""
import os
import re
import subprocess
import sys
import tempfile

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")


def compile_header(cc, header_text, tmp):
    with open(os.path.join(tmp, "kernel_abi.h"), "w") as f:
        f.write(header_text)
    tu = os.path.join(tmp, "use.c")
    with open(tu, "w") as f:
        f.write('#include "kernel_abi.h"\nint main(void) { return (int)sizeof(mlajit_decode_params) % 2; }\n')
    r = subprocess.run(cc + ["-std=c11", "-fsyntax-only", "-I", tmp, tu], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def swapped(text, first, second):
    """text with the list lines of fields first and second exchanged."""
    lines = text.split("\n")
    pattern = r"^\s*X\([^,]+, [^,]+, {}, \d+\)"
    at = [next(i for i, l in enumerate(lines) if re.match(pattern.format(name), l)) for name in (first, second)]
    lines[at[0]], lines[at[1]] = lines[at[1]], lines[at[0]]
    return "\n".join(lines)


def main() -> int:
    header, cc = sys.argv[1], sys.argv[2:]
    with open(header) as f:
        text = f.read()
    with tempfile.TemporaryDirectory(prefix="mlajit-abi-") as tmp:
        rc, out = compile_header(cc, text, tmp)
        check(rc == 0, f"kernel_abi.h as it is compiles: {out}")
        # two fields of one type (what a size check alone lets through), of two
        # sizes, and a pointer with an integer of its size
        for first, second in [("q_stride_b", "q_stride_s"), ("batch", "s_q"), ("sm_scale_log2", "batch"),
                              ("kv", "kv_page_stride"), ("lse", "lse_stride_b"),
                              ("release_dependent_early", "prefetch_evict_last")]:
            copy = swapped(text, first, second)
            check(copy != text, f"the list has fields {first} and {second}")
            rc, out = compile_header(cc, copy, tmp)
            check(rc != 0, f"{first} swapped with {second} must not compile")
            check(f"mlajit_decode_params.{first} is not at byte" in out,
                  f"{first} swapped with {second}: the error names the field:\n{out[:2000]}")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
