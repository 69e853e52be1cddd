#!/usr/bin/env python3
"""Embed CUDA template files as C string arrays, their comments stripped.

    embed_templates.py OUT.c IN.cu...   write the C file
    embed_templates.py --strip IN.cu    print IN.cu as it would be embedded

Each template becomes `const char mlajit_template_<stem>[]` (NUL-terminated) and
the table `mlajit_templates[]` lists them. The generated source is the cache
key, so what is embedded is the code alone: comments are removed (a
documentation edit then keeps every cached cubin and shipped pack), trailing
blanks are trimmed and blank lines dropped. Anything NVRTC compiles is kept
byte for byte: string and character literals (a // inside one is not a
comment), raw strings, digit separators (1'000), preprocessor lines and line
splices. A construct whose reading depends on the compiler (a backslash with
blanks after it at the end of a line) or an unterminated comment or literal
fails the build, naming the file and line.

Editions: a template may hold blocks `#if MLAJIT_LAYOUTS` ... `#else` ... `#endif`
(the #else part optional; other preprocessor conditionals nest inside). They are
resolved here, not by NVRTC: the template embeds as `stem` with the #else parts
(its text as it was before the block was written, so the keys of the models it
served stay as they were) and as `stem:layouts` with the #if parts, the general
form the generator takes for the layouts the first serves not
(src/codegen/generate.c). `#if MLAJIT_BF16` blocks are the next level the same
way: `stem:bf16` (bf16 NoPE values, scales none) takes the #if parts of both
markers, `stem:layouts` and `stem` their #else parts, so adding one leaves the
other editions' text, hence their keys, as they were. A block nests only inside
the #if part of a lower level's block (a BF16 block inside a LAYOUTS #if part)."""
import os
import sys

IDENTIFIER = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
RAW_PREFIXES = {"R", "u8R", "uR", "UR", "LR"}


class StripError(Exception):
    pass


def _splice_len(s, i):
    """Length of the line splice (backslash-newline) at i, else 0."""
    if s.startswith("\\\n", i):
        return 2
    if s.startswith("\\\r\n", i):
        return 3
    return 0


def _skip_splices(s, i):
    """The first index at or after i that is not inside a line splice."""
    while True:
        n = _splice_len(s, i)
        if not n:
            return i
        i += n


def _trailing_run(out, chars):
    """The longest run at the end of out (a list of 1-char strings) of chars."""
    k = len(out)
    while k > 0 and out[k - 1] in chars:
        k -= 1
    return "".join(out[k:])


def _starts_pp_number(run):
    return bool(run) and (run[0].isdigit() or (run[0] == "." and len(run) > 1 and run[1].isdigit()))


def strip_comments(text, name="<text>"):
    """text with its C/C++ comments removed (see the module's doc)."""
    s, n, out = text, len(text), []
    line = 1  # of the position being read, for messages

    def fail(what):
        raise StripError(f"{name}:{line}: {what}")

    def comment_removed(next_char):
        # The blanks before a comment go with it; a space stays only where the
        # comment separated two tokens on one line ("a/**/b" is "a b").
        while out and out[-1] in " \t":
            out.pop()
        if out and out[-1] != "\n" and next_char not in ("", " ", "\t", "\r", "\n"):
            out.append(" ")

    i = 0
    while i < n:
        c = s[i]
        splice = _splice_len(s, i)
        if splice:
            out.append(s[i:i + splice])
            i += splice
            line += 1
            continue
        if c == "\\" and s[i + 1:i + 2] in (" ", "\t"):
            k = i + 1
            while k < n and s[k] in " \t":
                k += 1
            if k == n or s[k] in "\r\n":
                fail("a backslash followed by blanks ends the line: whether it splices the lines depends "
                     "on the compiler; remove the blanks or the backslash")
        if c == "\n":
            while out and out[-1] in " \t\r":
                out.pop()
            blank = not out or out[-1] == "\n"
            continued = len(out) >= 2 and out[-1] == "\n" and out[-2] == "\\"
            if not blank or continued:
                out.append("\n")
            i += 1
            line += 1
            continue
        if c == "/":
            j = _skip_splices(s, i + 1)
            if j < n and s[j] == "/":
                k = j + 1
                while k < n and s[k] != "\n":
                    if s[k] == "\\":
                        splice = _splice_len(s, k)
                        if splice:  # the comment goes on over the next line
                            line += 1
                            k += splice
                            continue
                        rest = k + 1
                        while rest < n and s[rest] in " \t":
                            rest += 1
                        if rest > k + 1 and (rest == n or s[rest] in "\r\n"):
                            fail("a // comment ends in a backslash followed by blanks: whether the next "
                                 "line is part of the comment depends on the compiler")
                    k += 1
                comment_removed(s[k:k + 1])
                i = k
                continue
            if j < n and s[j] == "*":
                k = j + 1
                while True:
                    if k >= n:
                        fail("a /* comment is not closed")
                    if s[k] == "\n":
                        line += 1
                    if s[k] == "*":
                        after = _skip_splices(s, k + 1)
                        if after < n and s[after] == "/":
                            k = after + 1
                            break
                    k += 1
                comment_removed(s[k:k + 1])
                i = k
                continue
            out.append(c)
            i += 1
            continue
        if c == '"' and _trailing_run(out, IDENTIFIER) in RAW_PREFIXES:
            open_paren = s.find("(", i + 1)
            delimiter = s[i + 1:open_paren] if open_paren >= 0 else None
            if delimiter is None or len(delimiter) > 16 or any(ch in delimiter for ch in ' ()\\\t\n'):
                fail("a raw string literal has no valid delimiter")
            end = s.find(")" + delimiter + '"', open_paren + 1)
            if end < 0:
                fail("a raw string literal is not closed")
            end += len(delimiter) + 2
            out.extend(s[i:end])
            line += s.count("\n", i, end)
            i = end
            continue
        if c == "'" and _starts_pp_number(_trailing_run(out, IDENTIFIER | set(".'"))) and \
                s[i + 1:i + 2] in IDENTIFIER:
            out.append(c)  # a digit separator (1'000), not a character literal
            i += 1
            continue
        if c in "\"'":
            k = i + 1
            while True:
                if k >= n or s[k] == "\n":
                    fail(f"a {'string' if c == chr(34) else 'character'} literal is not closed on its line")
                if s[k] == "\\":
                    if s[k + 1:k + 2] == "\n":
                        line += 1
                    k += 2 if s[k + 1:k + 3] != "\r\n" else 3
                    continue
                if s[k] == c:
                    break
                k += 1
            out.extend(s[i:k + 1])
            i = k + 1
            continue
        out.append(c)
        i += 1
    while out and out[-1] in " \t\r":
        out.pop()
    if out and out[-1] != "\n":
        out.append("\n")
    return "".join(out)


# The edition markers, lowest level first, and the editions' suffixes: edition k
# takes the #if parts of markers 1..k and the #else parts of the others.
MARKERS = [("#if MLAJIT_LAYOUTS", "layouts"), ("#if MLAJIT_BF16", "bf16")]
LAYOUTS_IF = MARKERS[0][0]


def resolve_editions(text, name="<text>"):
    """{suffix: text}: "" (the base text) always, and each marker's edition
    where the text has that marker's blocks (see the module's doc)."""
    present = [k + 1 for k, (marker, _) in enumerate(MARKERS) if marker in text]
    out = {0: []}
    for level in present:
        out[level] = []
    stack = []  # [level, part ("if" / "else"), other conditionals open inside]
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        directive = line.strip()
        word = directive[1:].strip().split(" ")[0] if directive.startswith("#") else ""
        level = next((k + 1 for k, (marker, _) in enumerate(MARKERS) if directive == marker), 0)
        if level:
            if stack and stack[-1][2] == 0 and (stack[-1][0] >= level or stack[-1][1] != "if"):
                raise StripError(f"{name}:{number}: {directive} blocks do not nest" +
                                 ("" if stack[-1][0] >= level else " inside an #else part"))
            if any(frame[0] >= level for frame in stack):
                raise StripError(f"{name}:{number}: {directive} blocks do not nest")
            stack.append([level, "if", 0])
            continue
        if stack:
            top = stack[-1]
            if word in ("if", "ifdef", "ifndef"):
                top[2] += 1
            elif word == "endif" and top[2]:
                top[2] -= 1
            elif word == "endif":
                stack.pop()
                continue
            elif word in ("else", "elif") and not top[2]:
                if word == "elif" or top[1] == "else":
                    raise StripError(f"{name}:{number}: an {MARKERS[top[0] - 1][0]} block takes one #else and "
                                     "no #elif")
                top[1] = "else"
                continue
        for edition, lines in out.items():
            if all((edition >= frame[0]) == (frame[1] == "if") for frame in stack):
                lines.append(line)
    if stack:
        raise StripError(f"{name}: an {MARKERS[stack[-1][0] - 1][0]} block is not closed")
    return {("" if level == 0 else MARKERS[level - 1][1]): "".join(lines) for level, lines in out.items()}


def split_editions(text, name="<text>"):
    """(base, layouts): text with its `#if MLAJIT_LAYOUTS` blocks resolved both
    ways, or (text, None) where it has none."""
    editions = resolve_editions(text, name)
    return editions[""], editions.get("layouts")


def c_array(data: bytes) -> str:
    out = []
    for i in range(0, len(data), 16):
        out.append("    " + ", ".join(str(b) for b in data[i:i + 16]) + ",")
    return "\n".join(out)


def read_stripped(path):
    # latin-1 maps every byte to one character and back: the bytes stay as they are
    with open(path, "rb") as f:
        return strip_comments(f.read().decode("latin-1"), path).encode("latin-1")


def read_editions(path):
    """[(suffix, bytes)]: the template's base text and, where it has a marker's
    blocks, that marker's edition."""
    editions = resolve_editions(read_stripped(path).decode("latin-1"), path)
    return [(suffix, text.encode("latin-1")) for suffix, text in editions.items()]


def main() -> int:
    try:
        if len(sys.argv) == 3 and sys.argv[1] == "--strip":
            sys.stdout.buffer.write(read_stripped(sys.argv[2]))
            return 0
        if len(sys.argv) < 3 or sys.argv[1].startswith("-"):
            sys.stderr.write(__doc__)
            return 2
        out_path, inputs = sys.argv[1], sys.argv[2:]
        parts = ["/* Generated by tools/embed_templates.py from templates/ (comments stripped); do not edit. */",
                 "#include <stddef.h>", '#include "codegen/templates.h"', ""]
        names = []
        for path in inputs:
            stem = os.path.splitext(os.path.basename(path))[0]
            for suffix, data in read_editions(path):
                name = f"{stem}:{suffix}" if suffix else stem
                symbol = f"{stem}_{suffix}" if suffix else stem
                names.append((name, symbol, len(data)))
                parts.append(f"const char mlajit_template_{symbol}[{len(data) + 1}] = {{")
                parts.append(c_array(data + b"\0"))
                parts.append("};\n")
    except StripError as e:
        sys.stderr.write(f"embed_templates.py: {e}\n")
        return 1
    parts.append("const mlajit_template mlajit_templates[] = {")
    for name, symbol, size in names:
        parts.append(f'    {{"{name}", mlajit_template_{symbol}, {size}}},')
    parts.append("};")
    parts.append(f"const size_t mlajit_template_count = {len(names)};")
    with open(out_path, "w") as f:
        f.write("\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
