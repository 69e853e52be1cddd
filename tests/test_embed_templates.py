#!/usr/bin/env python3
"""The template embedder's comment stripper (tools/embed_templates.py), and what
it is for: the generated source is the cache key, so a comment edit anywhere must
leave every key as it is, while any change to the code must not.

    test_embed_templates.py EMBED_SCRIPT TEMPLATES_DIR MLAJIT_EXE

1. The stripper on constructs of C++ and CUDA: literals (a // or /* inside one
   is not a comment), raw strings, digit separators, line splices, preprocessor
   lines; ambiguous or unterminated input fails, naming the line.
2. Every template: stripping is idempotent, so nothing that looks like a comment
   is left in what is embedded.
3. The templates with their comments edited (words added, comment lines and
   blocks inserted, trailing comments changed) embed to the same bytes; a one
   character change to code does not.
4. The source the generator emits for every kernel family (config block, the
   kernel parameters and the templates) has no comment left to strip."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")


def main() -> int:
    embed_script, templates_dir, mlajit = sys.argv[1:4]
    sys.path.insert(0, os.path.dirname(os.path.abspath(embed_script)))
    from embed_templates import StripError, resolve_editions, split_editions, strip_comments

    # 1. constructs: (input, what is embedded)
    cases = [
        ("int a; // note\n", "int a;\n"),
        ("// a comment line\n\n   \nint a;\n", "int a;\n"),
        ("a/**/b\n", "a b\n"),
        ("a /* x */ b\n", "a b\n"),
        ("f(/* x */ 1);\n", "f( 1);\n"),
        ("x /* two\nlines */ y\n", "x y\n"),
        ("/* // inside a block */ int a;\n", " int a;\n"),
        ("// /* inside a line comment\nint a; // */\n", "int a;\n"),
        ('s = "// not a comment /* nor this */"; // this is\n', 's = "// not a comment /* nor this */";\n'),
        ('s = "quote \\" // still a string"; /**/\n', 's = "quote \\" // still a string";\n'),
        ('s = "*/ in a string";\n', 's = "*/ in a string";\n'),
        ("c = '\"'; // \"\n", "c = '\"';\n"),
        ("c = '\\''; /* ' */\n", "c = '\\'';\n"),
        ("c = '/'; d = '*'; e = '\\\\';\n", "c = '/'; d = '*'; e = '\\\\';\n"),
        ("n = 1'000'000 + 0x7f'ff; // separators, not characters\n", "n = 1'000'000 + 0x7f'ff;\n"),
        ("u8'a' + L'b' + u'c'\n", "u8'a' + L'b' + u'c'\n"),
        ('r = R"x(// kept "/* kept */" )x"; // gone\n', 'r = R"x(// kept "/* kept */" )x";\n'),
        ('r = LR"(two\n// lines)";\n', 'r = LR"(two\n// lines)";\n'),
        ("// a comment \\\nspliced onto the next line\nint b;\n", "int b;\n"),
        ("#define A 1 \\\n  + 2 // two\nint c;\n", "#define A 1 \\\n  + 2\nint c;\n"),
        ("#define B 1 \\\n\nint d;\n", "#define B 1 \\\n\nint d;\n"),
        ("#define M(x) \\\n    // ends the macro\n    x\n", "#define M(x) \\\n\n    x\n"),
        ("#define C 1 /* the\n value */ + 2\n", "#define C 1 + 2\n"),
        ("#if __CUDA_ARCH__ >= 900 // sm_90 on\n#pragma unroll\n#endif\n",
         "#if __CUDA_ARCH__ >= 900\n#pragma unroll\n#endif\n"),
        ("/\\\n/ a comment whose // is spliced\nz\n", "z\n"),
        ("a = b /\\\n* a spliced block *\\\n/ c;\n", "a = b c;\n"),
        ('s = "a spliced \\\nstring // kept";\n', 's = "a spliced \\\nstring // kept";\n'),
        ("a / b / c; d /= 2;\n", "a / b / c; d /= 2;\n"),
        ("trailing blanks   \t\n", "trailing blanks\n"),
        ("no final newline", "no final newline\n"),
        ("// only comments\n", ""),
    ]
    for text, want in cases:
        try:
            got = strip_comments(text)
        except StripError as e:
            got = f"error: {e}"
        check(got == want, f"strip {text!r}: got {got!r}, want {want!r}")
        if got == want:
            check(strip_comments(got) == got, f"strip is idempotent on {text!r}")

    refused = [
        ("int a; /* never closed\n", "not closed"),
        ("c = 'a;\n", "character literal is not closed"),
        ('s = "abc\n";\n', "string literal is not closed"),
        ('r = R"x(never closed)";\n', "raw string literal is not closed"),
        ("int a; // a backslash, then blanks \\  \nint b;\n", "depends on the compiler"),
        ("#define A 1 \\ \n", "depends on the compiler"),
    ]
    for text, words in refused:
        try:
            strip_comments(text, "t.cu")
            check(False, f"strip {text!r} must fail")
        except StripError as e:
            check(words in str(e) and "t.cu:" in str(e), f"strip {text!r}: the error names the file and says why: {e}")

    # 1b. editions: `#if MLAJIT_LAYOUTS` blocks resolved at embed time, the base
    # text (the #else parts) as it was before the block was written
    editions = [
        ("a;\n", ("a;\n", None)),
        ("a;\n#if MLAJIT_LAYOUTS\nb2;\n#else\nb;\n#endif\nc;\n", ("a;\nb;\nc;\n", "a;\nb2;\nc;\n")),
        ("#if MLAJIT_LAYOUTS\nnew;\n#endif\nc;\n", ("c;\n", "new;\nc;\n")),
        ("#if MLAJIT_LAYOUTS\n#if X\nx;\n#else\ny;\n#endif\n#else\nold;\n#endif\n",
         ("old;\n", "#if X\nx;\n#else\ny;\n#endif\n")),
        ("  #if MLAJIT_LAYOUTS\n#pragma unroll\n  #else\n#pragma unroll 2\n  #endif\n", ("#pragma unroll 2\n", "#pragma unroll\n")),
    ]
    for text, want in editions:
        got = split_editions(text)
        check(got == want, f"editions of {text!r}: got {got!r}, want {want!r}")
    for text, words in [("#if MLAJIT_LAYOUTS\na;\n", "not closed"),
                        ("#if MLAJIT_LAYOUTS\n#if MLAJIT_LAYOUTS\n#endif\n#endif\n", "do not nest"),
                        ("#if MLAJIT_LAYOUTS\n#else\n#else\n#endif\n", "one #else")]:
        try:
            split_editions(text, "t.cu")
            check(False, f"editions of {text!r} must fail")
        except StripError as e:
            check(words in str(e) and "t.cu" in str(e), f"editions of {text!r}: the error says why: {e}")
    # `#if MLAJIT_BF16` blocks, the next level: the bf16 edition takes both markers'
    # #if parts, the layouts edition and the base text their #else parts as before
    bf16 = [
        ("a;\n#if MLAJIT_BF16\nb2;\n#else\nb;\n#endif\n", {"": "a;\nb;\n", "bf16": "a;\nb2;\n"}),
        ("#if MLAJIT_LAYOUTS\nl;\n#if MLAJIT_BF16\nh;\n#else\nf;\n#endif\n#else\nold;\n#endif\n#if MLAJIT_BF16\nz;\n#endif\n",
         {"": "old;\n", "layouts": "l;\nf;\n", "bf16": "l;\nh;\nz;\n"}),
    ]
    for text, want in bf16:
        got = resolve_editions(text)
        check(got == want, f"editions of {text!r}: got {got!r}, want {want!r}")
    for text, words in [("#if MLAJIT_BF16\n#if MLAJIT_LAYOUTS\n#endif\n#endif\n", "do not nest"),
                        ("#if MLAJIT_LAYOUTS\n#else\n#if MLAJIT_BF16\n#endif\n#endif\n", "inside an #else part"),
                        ("#if MLAJIT_BF16\na;\n", "not closed")]:
        try:
            resolve_editions(text, "t.cu")
            check(False, f"editions of {text!r} must fail")
        except StripError as e:
            check(words in str(e) and "t.cu" in str(e), f"editions of {text!r}: the error says why: {e}")

    # 2. every template
    names = sorted(f for f in os.listdir(templates_dir) if f.endswith(".cu"))
    check(len(names) >= 8, f"the templates are in {templates_dir}: {names}")
    for name in names:
        with open(os.path.join(templates_dir, name), encoding="latin-1") as f:
            text = f.read()
        once = strip_comments(text, name)
        check(strip_comments(once, name) == once, f"{name}: stripping twice changes it")
        check(len(once) < len(text), f"{name}: comments were removed")

    # 3. comment edits embed to the same bytes; a code edit does not
    with tempfile.TemporaryDirectory(prefix="mlajit-embed-") as tmp:
        edited_dir = os.path.join(tmp, "edited")
        shutil.copytree(templates_dir, edited_dir)
        edits = 0
        for name in names:
            path = os.path.join(edited_dir, name)
            with open(path, encoding="latin-1") as f:
                lines = f.read().split("\n")
            out = ["/* A new block comment", "   over two lines, with a // and a ' in it. */"]
            for line in lines:
                if re.match(r"^\s*//", line):  # a comment line: reworded, and one more after it
                    out.append(line + " (reworded, with an apostrophe's and a \"quote)")
                    out.append("    // an added line of documentation")
                    edits += 2
                elif "//" in line and not re.search(r"['\"].*//", line):  # a trailing comment, no literal before it
                    out.append(line + " and more words")
                    edits += 1
                else:
                    out.append(line)
            out.append("// a closing remark")
            with open(path, "w", encoding="latin-1") as f:
                f.write("\n".join(out))
        check(edits > 1000, f"the edit touched the templates' comments ({edits} edits)")

        def embed(src_dir, out_name):
            out_c = os.path.join(tmp, out_name)
            inputs = [os.path.join(src_dir, n) for n in names]
            r = subprocess.run([sys.executable, embed_script, out_c] + inputs, capture_output=True, text=True)
            check(r.returncode == 0, f"embedding {src_dir}: {r.stderr}")
            with open(out_c, "rb") as f:
                return f.read()

        original = embed(templates_dir, "original.c")
        check(embed(edited_dir, "edited.c") == original, "comment edits must embed to the same bytes")

        code_dir = os.path.join(tmp, "code")
        shutil.copytree(templates_dir, code_dir)
        path = os.path.join(code_dir, "combine.cu")
        with open(path, encoding="latin-1") as f:
            text = f.read()
        changed = re.sub(r"\b(\d+)u\b", lambda m: str(int(m.group(1)) + 1) + "u", text, count=1)
        check(changed != text, "combine.cu has an unsigned literal to change")
        with open(path, "w", encoding="latin-1") as f:
            f.write(changed)
        check(embed(code_dir, "code.c") != original, "a code edit must change what is embedded")

        # a code edit in a layouts part changes that edition, not the base text
        # (the keys of the models the base serves)
        layouts_dir = os.path.join(tmp, "layouts")
        shutil.copytree(templates_dir, layouts_dir)
        path = os.path.join(layouts_dir, "decode_portable.cu")
        with open(path, encoding="latin-1") as f:
            text = f.read()
        changed = text.replace("#if MLAJIT_LAYOUTS\n", "#if MLAJIT_LAYOUTS\nconstexpr int kAnEdit = 1;\n", 1)
        check(changed != text, "decode_portable.cu has a layouts part")
        with open(path, "w", encoding="latin-1") as f:
            f.write(changed)
        edited = embed(layouts_dir, "layouts.c")
        base_of = lambda c: c.split(b"mlajit_template_decode_portable_layouts")[0]
        check(edited != original and base_of(edited) == base_of(original),
              "a layouts edit changes the layouts edition alone")

        # 4. what the generator emits, per family
        families = [
            ["--model", "v32", "--heads", "16", "--page", "64", "--variant", "portable", "--arch", "sm_80"],
            ["--model", "dsv4", "--heads", "128", "--page", "256", "--extra-page", "64", "--features",
             "sink,topk-length,extra-topk-length", "--variant", "sm90", "--arch", "sm_90a"],
            ["--model", "v32", "--heads", "64", "--page", "64", "--variant", "sm90-staged", "--arch", "sm_90a"],
            ["--model", "dsv4", "--heads", "16", "--page", "64", "--variant", "sm90-narrow", "--arch", "sm_90a"],
            ["--model", "v32", "--heads", "8", "--page", "64", "--variant", "sm90-narrow-long", "--arch", "sm_90a"],
            ["--model", "v32", "--heads", "4", "--page", "64", "--variant", "sm90-narrow-scores", "--arch", "sm_90a"],
            ["--model", "glm53_nope", "--heads", "128", "--page", "64", "--variant", "sm90", "--arch", "sm_90a"],
            ["--model", "dots3_swa", "--heads", "16", "--page", "64", "--variant", "portable", "--arch", "sm_80"],
            ["--model", "v32_bf16", "--heads", "64", "--page", "64", "--variant", "portable", "--arch", "sm_90a"],
        ]
        env = dict(os.environ, MLAJIT_CACHE_DIR=os.path.join(tmp, "cache"), MLAJIT_LOG="quiet")
        for args in families:
            r = subprocess.run([mlajit, "compile"] + args + ["--emit-source"], capture_output=True, text=True,
                               env=env, encoding="latin-1")
            check(r.returncode == 0 and "mlajit_decode_main" in r.stdout, f"compile {args} --emit-source: {r.stderr}")
            check(strip_comments(r.stdout) == r.stdout, f"{args}: the generated source has comments or blank lines")
            check("MLAJIT_LAYOUTS" not in r.stdout and "MLAJIT_BF16" not in r.stdout,
                  f"{args}: an edition block reached the generated source")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
