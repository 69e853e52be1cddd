#!/usr/bin/env python3
"""A kernel's loops in SASS, by role: reads `nvdisasm -c` (or `cuobjdump -sass`)
output, takes the function whose name contains FUNC (default mlajit_decode_main),
splits it into roles at each SETMAXREG (the sm90 roles set their register counts
first thing; FlashMLA's kernel does too) and lists every loop of at least MIN
instructions (a backward branch and its target) with its length and its most
frequent opcodes. Two kernels' censuses side by side show where one loop spends
instructions the other does not (bench/HISTORY.md, "The loops' bookkeeping,
trimmed").

Without a GPU: compile the kernel into an empty cache (`MLAJIT_CACHE_DIR=D mlajit
compile ... --arch sm_90a`), take its cubin out (cubins_from_cache.py D/data.mdb
OUT), and disassemble it with nvdisasm (the `nvidia-cuda-nvdisasm` wheel on PyPI).

usage: loop_census.py FILE.sass [FUNC] [MIN]"""
import collections
import re
import sys

INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"^\s*(\.L_x_\d+):")
FUNCTION_HEADER = re.compile(r"^(?://-+ \.text\.(\S+)\s+-+|\s*Function : (\S+))")
BRANCH_TO_LABEL = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")
BRANCH_TO_ADDRESS = re.compile(r"\bBRA\b[^`]*\s(0x[0-9a-f]+)\s*$")


def opcode(text):
    """The opcode of one instruction, without its predicate and modifiers."""
    words = text.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def read(path, function):
    """The function's instructions [(address, text)] and its labels {label: index}."""
    instructions, labels, pending, inside = [], {}, [], False
    with open(path) as f:
        for line in f:
            header = FUNCTION_HEADER.match(line)
            if header:
                inside = function in (header.group(1) or header.group(2))
                continue
            if not inside:
                continue
            label = LABEL.match(line)
            if label:
                pending.append(label.group(1))
                continue
            m = INSTRUCTION.match(line)
            if m:
                for name in pending:
                    labels[name] = len(instructions)
                pending = []
                instructions.append((int(m.group(1), 16), m.group(2)))
    return instructions, labels


def census(path, function="mlajit_decode_main", minimum=40):
    instructions, labels = read(path, function)
    if not instructions:
        raise SystemExit(f"{path}: no function whose name contains {function!r}")
    at_address = {address: i for i, (address, _) in enumerate(instructions)}
    roles = [i for i, (_, text) in enumerate(instructions) if "SETMAXREG" in text]
    loops = set()
    for i, (_, text) in enumerate(instructions):
        m = BRANCH_TO_LABEL.search(text)
        target = labels.get(m.group(1)) if m else None
        if target is None:
            m = BRANCH_TO_ADDRESS.search(text)
            target = at_address.get(int(m.group(1), 16)) if m else None
        if target is not None and target <= i:
            loops.add((target, i))
    lines = [f"{len(instructions)} instructions; roles (SETMAXREG) at "
             + (", ".join(f"{i} {instructions[i][1].split()[-1]}" for i in roles) or "none")]
    for first, last in sorted(loops):
        if last - first + 1 < minimum:
            continue
        role = sum(1 for r in roles if r <= first)
        counts = collections.Counter(opcode(text) for _, text in instructions[first:last + 1])
        top = " ".join(f"{name}:{n}" for name, n in counts.most_common(12))
        lines.append(f"role {role} loop {first}-{last} ({last - first + 1} instructions): {top}")
    return lines


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    function = sys.argv[2] if len(sys.argv) > 2 else "mlajit_decode_main"
    minimum = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    print("\n".join(census(sys.argv[1], function, minimum)))


if __name__ == "__main__":
    main()
