#!/usr/bin/env bash
# The install, as a user gets it: `meson install --destdir` into a scratch
# folder, then
#  - pkg-config: --libs is -lmlajit alone, --static adds what libmlajit.a needs,
#    and neither names NVRTC or CUDA; nothing installed links libnvrtc;
#  - examples/embed.c built with its documented line (taken from its comment)
#    against the installed mlajit.pc, shared and static, and run;
#  - the installed CLI's `mlajit info` with a loader that has no ld.so.cache
#    (ld.so --inhibit-cache: CUDA's folder, which ld.so.conf may list, is gone)
#    and an LD_LIBRARY_PATH with the CLI's own libraries' folders, none holding NVRTC: it finds NVRTC through the build's
#    toolkit, CUDA_HOME, the pip wheels' folder, LD_LIBRARY_PATH or MLAJIT_NVRTC
#    (src/runtime/nvrtc.c), and says so; without any NVRTC it still runs and a
#    compile says what to install.
# Usage: install.sh BUILD_DIR SOURCE_DIR CUDA_ROOT SANITIZE
set -u
build=$1 source=$2 cuda=$3 sanitize=$4
if [ "$sanitize" != none ]; then
  echo "skipped: a sanitizer build ($sanitize): its library needs the sanitizer runtime to link; the plain build runs this test"
  exit 77
fi
scratch=$(mktemp -d /tmp/mlajit-install-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); }
fail() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}
# check WHAT COMMAND...: the command succeeds
check() {
  local what=$1
  shift
  if "$@" >"$scratch/out" 2>&1; then ok; else
    fail "$what: $* (exit $?):"
    head -12 "$scratch/out" | sed 's/^/    /'
  fi
}

dest=$scratch/root
if ! meson install -C "$build" --no-rebuild --destdir "$dest" >"$scratch/install.log" 2>&1; then
  echo "FAIL: meson install --destdir:"
  tail -20 "$scratch/install.log"
  exit 1
fi
cli=$(find "$dest" -path '*/bin/mlajit' -type f | head -1)
pc=$(find "$dest" -name mlajit.pc | head -1)
shared=$(find "$dest" -name 'libmlajit.so.*.*' -type f | head -1)
archive=$(find "$dest" -name libmlajit.a | head -1)
header=$(find "$dest" -name mlajit.h | head -1)
for f in "$cli" "$pc" "$shared" "$archive" "$header"; do
  if [ -n "$f" ] && [ -f "$f" ]; then ok; else fail "meson install left out a file (cli, .pc, .so, .a, header): '$f'"; fi
done
[ "$failed" -eq 0 ] || exit 1
libdir=$(dirname "$shared")

# ---- pkg-config ------------------------------------------------------------------
# (the host's own PKG_CONFIG_PATH stays after it: where LMDB and xxHash live outside
# the system folders, as on the GPU host, mlajit.pc's Requires.private are found there)
export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} PKG_CONFIG_SYSROOT_DIR=$dest
libs=$(pkg-config --libs mlajit) static_libs=$(pkg-config --static --libs mlajit)
[[ " $libs " == *" -lmlajit "* ]] && ok || fail "pkg-config --libs mlajit: '$libs' lacks -lmlajit"
for want in -lmlajit -llmdb -lxxhash -ldl -lm; do
  [[ " $static_libs " == *" $want "* ]] && ok || fail "pkg-config --static --libs mlajit: '$static_libs' lacks $want"
done
[[ "$static_libs" == *pthread* ]] && ok || fail "pkg-config --static --libs mlajit: '$static_libs' lacks -pthread"
if grep -qiE 'nvrtc|cuda' <<<"$libs $static_libs $(pkg-config --cflags mlajit)"; then
  fail "mlajit.pc names NVRTC or CUDA: $libs | $static_libs"
else ok; fi
for f in "$cli" "$shared"; do
  if readelf -d "$f" | grep -qiE 'NEEDED.*(nvrtc|libcuda)'; then fail "$f links NVRTC or libcuda: $(readelf -d "$f" | grep NEEDED)"; else ok; fi
  if readelf -d "$f" | grep -qE 'R(UN)?PATH'; then fail "$f carries a run path: $(readelf -d "$f" | grep -E 'R(UN)?PATH')"; else ok; fi
done

# ---- examples/embed.c with its documented line, shared and static -----------------
export MLAJIT_CACHE_DIR=$scratch/cache MLAJIT_LOG=quiet
mkdir -p "$scratch/embed"
cp "$source/examples/embed.c" "$scratch/embed/"
# the comment's two lines that start with "cuda=" and "cc embed.c", continuation joined
doc_line=$(sed -n 's/^ \*   //p' "$source/examples/embed.c" | sed -n '/^cuda=/,/-o embed/p' | sed -e ':a' -e '/\\$/N; s/\\\n *//; ta')
if grep -q '^cuda=' <<<"$doc_line" && grep -q 'cc embed.c' <<<"$doc_line"; then ok; else
  fail "examples/embed.c's comment has no build line starting 'cuda=' and 'cc embed.c': '$doc_line'"
fi
static_line=$(sed 's/ -o embed.*/ -o embed_static/; s/--cflags --libs mlajit/--cflags --static --libs mlajit/' <<<"$doc_line")
if [ -f "$cuda/include/cuda_runtime_api.h" ]; then
  (cd "$scratch/embed" && CUDA_HOME=$cuda eval "${doc_line%% && *}") >"$scratch/out" 2>&1 && ok ||
    { fail "embed.c's build line: $doc_line"; head -12 "$scratch/out" | sed 's/^/    /'; }
  # static: the same line with --static and libmlajit.a by name
  static_line=$(sed 's/--libs mlajit)/--libs mlajit | sed "s|-lmlajit|-l:libmlajit.a|")/' <<<"$static_line")
  (cd "$scratch/embed" && CUDA_HOME=$cuda eval "${static_line%% && *}") >"$scratch/out" 2>&1 && ok ||
    { fail "embed.c's build line, static: $static_line"; head -12 "$scratch/out" | sed 's/^/    /'; }
  if [ -x "$scratch/embed/embed" ]; then
    readelf -d "$scratch/embed/embed_static" 2>/dev/null | grep -q 'NEEDED.*libmlajit' &&
      fail "embed_static links libmlajit.so" || ok
    check "embed (shared) runs" env LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$scratch/embed/embed"
    grep -qE "kernel v32.h16.p64.* \((compiled now|cache hit)\)" "$scratch/out" && ok ||
      fail "embed printed no kernel line: $(head -3 "$scratch/out")"
    check "embed (static) runs" "$scratch/embed/embed_static"
    grep -q "cache hit" "$scratch/out" && ok || fail "embed_static: the shared run's kernel was no cache hit: $(head -3 "$scratch/out")"
  fi
else
  echo "note: no $cuda/include/cuda_runtime_api.h: embed.c (a CUDA runtime program) not built"
fi

# ---- the installed CLI finds NVRTC without the loader's configuration ------------------
loader=$(readelf -l "$cli" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
nvrtc=$(ls "$cuda"/lib64/libnvrtc.so.[0-9]* "$cuda"/lib/libnvrtc.so.[0-9]* 2>/dev/null | grep -E 'libnvrtc\.so\.[0-9.]+$' | head -1)
# The folders of the CLI's own libraries (LMDB, xxHash, libc) as the loader finds
# them now, less any that holds NVRTC: with no ld.so.cache, a host that has them
# outside the system folders (the H200's /opt/devdeps) still starts the CLI.
deps=$(ldd "$cli" | awk '/=> \//{print $3}' | xargs -r -n1 dirname | sort -u |
  while read -r d; do ls "$d"/libnvrtc.so* >/dev/null 2>&1 || echo "$d"; done | paste -sd:)
# info ENV...: the installed CLI's `mlajit info` with no ld.so.cache and only ENV
info() {
  env -i PATH=/usr/bin:/bin HOME="$scratch" MLAJIT_CACHE_DIR="$scratch/cache" LD_LIBRARY_PATH="$deps" "$@" \
    "$loader" --inhibit-cache "$cli" info >"$scratch/out" 2>&1
}
# expect_nvrtc WHERE ENV...: info exits 0 and names NVRTC in WHERE (a path prefix)
expect_nvrtc() {
  local where=$1
  shift
  info "$@"
  local rc=$? line
  line=$(grep '^nvrtc' "$scratch/out")
  if [ "$rc" -eq 0 ] && [[ $line =~ ^nvrtc\ +[0-9]+\.[0-9]+\ \(${where} ]]; then ok; else
    fail "mlajit info with $* (no ld.so.cache): exit $rc, want NVRTC from $where:"
    head -8 "$scratch/out" | sed 's/^/    /'
  fi
}
if [ -z "$nvrtc" ] || [ -z "$loader" ]; then
  fail "no libnvrtc.so.N under $cuda (lib64, lib) or no program interpreter in $cli"
else
  soname=$(basename "$nvrtc" | grep -oE '^libnvrtc\.so\.[0-9]+')
  # the build's toolkit, with nothing set
  expect_nvrtc "$cuda/lib"
  # CUDA_HOME first
  mkdir -p "$scratch/home/lib64" && ln -s "$nvrtc" "$scratch/home/lib64/$soname"
  expect_nvrtc "$scratch/home/lib64/$soname" CUDA_HOME="$scratch/home"
  # LD_LIBRARY_PATH (the loader's search) before the build's toolkit
  mkdir -p "$scratch/ldpath" && ln -s "$nvrtc" "$scratch/ldpath/$soname"
  expect_nvrtc "$scratch/ldpath/$soname" LD_LIBRARY_PATH="$scratch/ldpath${deps:+:$deps}"
  # a pip install: site-packages/nvidia/cuda_nvrtc/lib beside the package holding the library
  mkdir -p "$scratch/site/mlajit" "$scratch/site/nvidia/cuda_nvrtc/lib"
  cp "$cli" "$scratch/site/mlajit/mlajit" && ln -s "$nvrtc" "$scratch/site/nvidia/cuda_nvrtc/lib/$soname"
  installed_cli=$cli cli=$scratch/site/mlajit/mlajit
  expect_nvrtc "$scratch/site/nvidia/cuda_nvrtc/lib/$soname"
  cli=$installed_cli
  # MLAJIT_NVRTC names the file itself, before everything else
  expect_nvrtc "$scratch/ldpath/$soname" MLAJIT_NVRTC="$scratch/ldpath/$soname" CUDA_HOME="$scratch/home"
  # no NVRTC at all: info still runs and says what to do; a compile fails (1) saying it; the envelope answers
  info MLAJIT_NVRTC="$scratch/nowhere/libnvrtc.so.13"
  rc=$?
  if [ "$rc" -eq 0 ] && grep -q "^nvrtc *none: MLAJIT_NVRTC=$scratch/nowhere/libnvrtc.so.13 is not a usable NVRTC" "$scratch/out"; then ok; else
    fail "mlajit info without NVRTC: exit $rc:"; head -5 "$scratch/out" | sed 's/^/    /'
  fi
  env -i PATH=/usr/bin:/bin HOME="$scratch" MLAJIT_CACHE_DIR="$scratch/cache2" LD_LIBRARY_PATH="$deps" \
    MLAJIT_NVRTC=/nonexistent/libnvrtc.so "$loader" --inhibit-cache "$cli" compile --model v32 --heads 8 --page 64 \
    >"$scratch/out" 2>&1
  rc=$?
  if [ "$rc" -eq 1 ] && grep -q "MLAJIT_NVRTC=/nonexistent/libnvrtc.so is not a usable NVRTC" "$scratch/out"; then ok; else
    fail "compile without NVRTC: exit $rc (want 1 and the reason):"; head -5 "$scratch/out" | sed 's/^/    /'
  fi
  # ... but a pack made where NVRTC is serves there (looked up under its own NVRTC's keys)
  env -i PATH=/usr/bin:/bin HOME="$scratch" MLAJIT_CACHE_DIR="$scratch/cache3" LD_LIBRARY_PATH="$deps" \
    "$loader" --inhibit-cache "$cli" pack build --spec v32.h8.p64.t64.hc8.sm90-narrow.sm_90a \
    --out "$scratch/h8.pack" >"$scratch/out" 2>&1 &&
    env -i PATH=/usr/bin:/bin HOME="$scratch" MLAJIT_CACHE_DIR="$scratch/cache4" LD_LIBRARY_PATH="$deps" \
      MLAJIT_NVRTC=/nonexistent/libnvrtc.so MLAJIT_PACKS="$scratch/h8.pack" "$loader" --inhibit-cache "$cli" \
      compile --model v32 --heads 8 --page 64 --variant sm90-narrow >"$scratch/out" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ] && grep -q "^cache  *hit in a pack" "$scratch/out"; then ok; else
    fail "a pack without NVRTC: exit $rc (want 0, served from the pack):"; cat "$scratch/out" | sed 's/^/    /'
  fi
  env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$deps" MLAJIT_NVRTC=/nonexistent/libnvrtc.so "$loader" \
    --inhibit-cache "$cli" envelope v32.h16.p64 >"$scratch/out" 2>&1
  rc=$?
  if [ "$rc" -eq 1 ] && grep -q "NVRTC" "$scratch/out"; then ok; else
    fail "envelope without NVRTC: exit $rc (want 1: no compiler can target the arch):"; head -5 "$scratch/out" | sed 's/^/    /'
  fi
fi

echo "install: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
