#!/usr/bin/env python3
"""A clone's documents point only at what a clone has: every repository path the
README, docs/ and tests/golden/README.md name (markdown links and `code` spans
that start with a top-level folder of the repository) exists, and no document
sends a reader to the maintainers' shared folder (shared/SPEC.md, shared/BENCH.md,
shared/device, shared/golden) except where the tests look for the optional full
golden set (../shared/golden).

Usage: docs_paths.py SOURCE_ROOT
"""
import glob
import os
import re
import sys

TOP = ("docs/", "tests/", "tools/", "src/", "examples/", "bench/", "include/", "cache/", "templates/", ".ci/")


def main(root):
    docs = [d for d in ("README.md", "tests/golden/README.md") if os.path.exists(os.path.join(root, d))] + sorted(
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    problems, checked = [], 0
    for doc in docs:
        text = open(os.path.join(root, doc)).read()
        here = os.path.dirname(doc)
        targets = [(m, os.path.normpath(os.path.join(here, m))) for m in re.findall(r"\]\(([^)#\s]+)\)", text)
                   if not re.match(r"[a-z]+:", m)]
        for span in re.findall(r"`([^`\s]+)`", text):
            span = span.rstrip(".,;:")
            if span.startswith(TOP) and not re.search(r"[<>*{}$]|\.\.\.", span):
                targets.append((span, os.path.normpath(span.split(":")[0])))
        for shown, path in targets:
            checked += 1
            if not os.path.exists(os.path.join(root, path)):
                problems.append(f"{doc}: names {shown}, which the repository does not have")
        for m in re.finditer(r"(\.\./)?shared/[\w./-]*", text):
            if m.group(0).rstrip(".,;:`") != "../shared/golden":
                problems.append(f"{doc}: sends the reader to {m.group(0)}, which a clone does not have")
    for p in problems:
        print("FAIL:", p)
    print(f"docs: {checked} paths checked in {len(docs)} documents, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main(sys.argv[1])
