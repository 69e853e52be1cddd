#!/usr/bin/env python3
"""Unpack tests/golden's case tarballs into the build directory and check every
file against tests/golden/SHA256SUMS (the sums of the golden cases as FlashMLA
wrote them), so the tests read those bytes and no others.

Usage: unpack_golden.py OUT_DIR STAMP SHA256SUMS CASE.tar.xz...
OUT_DIR is emptied first; STAMP is written last, when every file checked out.
"""
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile


def open_xz_tar(path):
    """The tarball, through Python's lzma where this Python has it, else xz(1)."""
    try:
        import lzma  # noqa: F401 (some Pythons are built without it)
    except ImportError:
        data = subprocess.run(["xz", "-dc", path], check=True, stdout=subprocess.PIPE).stdout
        return tarfile.open(fileobj=io.BytesIO(data))
    return tarfile.open(path, "r:xz")


def main(argv):
    out_dir, stamp, sums_path, tarballs = argv[1], argv[2], argv[3], argv[4:]
    sums = {}
    with open(sums_path) as f:
        for line in f:
            digest, name = line.split()
            sums[name] = digest
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    seen = set()
    for path in tarballs:
        with open_xz_tar(path) as tar:
            for member in tar.getmembers():
                name = os.path.normpath(member.name)
                if member.isdir():
                    continue
                if not member.isfile() or name.startswith(("/", "..")) or name not in sums:
                    sys.exit(f"unpack_golden: {path}: unexpected member {member.name!r} (not in {sums_path})")
                data = tar.extractfile(member).read()
                digest = hashlib.sha256(data).hexdigest()
                if digest != sums[name]:
                    sys.exit(f"unpack_golden: {path}: {name} has sha256 {digest}, {sums_path} says {sums[name]}")
                target = os.path.join(out_dir, name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as out:
                    out.write(data)
                seen.add(name)
    missing = sorted(set(sums) - seen)
    if missing:
        sys.exit(f"unpack_golden: {sums_path} lists files no tarball holds: {', '.join(missing)}")
    with open(stamp, "w") as f:
        f.write(f"{len(seen)} files checked against {os.path.basename(sums_path)}\n")


if __name__ == "__main__":
    main(sys.argv)
