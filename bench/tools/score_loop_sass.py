#!/usr/bin/env python3
"""The sm90 score group's loop in SASS, by landmark: reads `cuobjdump -sass` output
of a decode cubin (decode_sm90.cu) and counts the instructions between the points
that order the score group against the value group: S issued (the HGMMA m64n64 run,
the first one zero-initialised), S's last HGMMA, the kBarPFree wait (named barrier
6), the fence before P is published (MEMBAR.ALL.CTA), the kBarPReady arrive (named
barrier 5) and P V's last HGMMA m64n256. With the top opcodes of the two middle
stretches, so a build whose compiler moved the softmax or O's rescale across a
barrier shows it (bench/HISTORY.md, "P V in flight"). Barrier ids follow the
template's NamedBarrier enum; change BAR_PFREE / BAR_PREADY if it changes.

usage: score_loop_sass.py FILE.sass [FILE.sass ...]"""
import re
import sys

BAR_PFREE, BAR_PREADY = 6, 5
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def instructions(path):
    """The main entry's instructions, in order, without addresses or encodings."""
    out, in_main = [], False
    with open(path) as f:
        for line in f:
            if "Function :" in line:
                in_main = "mlajit_decode_main" in line
                continue
            m = INSTRUCTION.match(line)
            if in_main and m:
                out.append(m.group(1))
    return out


def opcode(ins):
    words = ins.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def find(ins, pattern, start):
    rx = re.compile(pattern)
    for i in range(start, len(ins)):
        if rx.search(ins[i]):
            return i
    raise LookupError(pattern)


def top_opcodes(stretch, n=5):
    counts = {}
    for ins in stretch:
        counts[opcode(ins)] = counts.get(opcode(ins), 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:n])


def landmarks(ins):
    s_first = find(ins, r"HGMMA\.64x64x16.*RZ, !UPT", 0)
    s_last = find(ins, r"HGMMA\.64x64x16.*gsb0", s_first)
    p_free = find(ins, rf"BAR\.SYNC\S* {BAR_PFREE:#x},", s_last)
    fence = find(ins, r"MEMBAR\.ALL\.CTA", p_free)
    p_ready = find(ins, rf"BAR\.ARV {BAR_PREADY:#x},", fence)
    pv_last = find(ins, r"HGMMA\.64x256x16.*gsb0", p_ready)
    return s_first, s_last, p_free, fence, p_ready, pv_last


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print("file | S issued | S done -> PFree wait | PFree -> fence | fence -> PReady | PReady -> P V issued")
    for path in sys.argv[1:]:
        ins = instructions(path)
        try:
            a, b, c, d, e, f = landmarks(ins)
        except LookupError as missing:
            print(f"{path}: no score loop found (missing {missing})")
            continue
        print(f"{path} | {b - a} | {c - b} | {d - c} | {e - d} | {f - e}")
        print(f"    S done -> PFree wait: {top_opcodes(ins[b:c])}")
        print(f"    PFree -> PReady: {top_opcodes(ins[c:e])}")


if __name__ == "__main__":
    main()
