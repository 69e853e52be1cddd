#!/usr/bin/env bash
# The CLI's conformance, checked for every command (src/cli/cli.h has the rule):
#  - bad input exits 2 with a message on stderr that names the argument;
#  - every command and subcommand takes --help: its own usage on stdout, exit 0,
#    nothing else done (no cache written, no kernel compiled);
#  - unknown options, extra arguments and numbers that overflow exit 2, naming them;
#  - the envelope query's three answers: accepted (0), rejected with a reason (1),
#    a SPEC that does not parse (2), for the canonical and the short spec forms;
#  - case make writes a case that run-case reads, the same for the same seed.
# Usage: cli_bad_input.sh path/to/mlajit
set -u
mlajit=$1
scratch=$(mktemp -d /tmp/mlajit-cli-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
export MLAJIT_CACHE_DIR=$scratch/cache
passed=0 failed=0

fail() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}

# expect STATUS WORD ARGS...: run mlajit ARGS, check the exit status and that
# stdout + stderr contain WORD.
expect() {
  local want=$1 word=$2
  shift 2
  local out rc
  out=$("$mlajit" "$@" 2>&1)
  rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$word" <<<"$out"; then
    passed=$((passed + 1))
  else
    fail "mlajit $*: exit $rc (want $want), output should name '$word':"
    head -5 <<<"$out" | sed 's/^/    /'
  fi
}

# expect_help ARGS...: mlajit ARGS --help prints a usage for that command on
# stdout (its first line names it), nothing on stderr, and exits 0.
expect_help() {
  local out err rc
  out=$("$mlajit" "$@" --help 2>"$scratch/err")
  rc=$?
  err=$(cat "$scratch/err")
  if [ "$rc" -eq 0 ] && [ -z "$err" ] && [[ $(head -1 <<<"$out") == "usage: mlajit $*"* ]]; then
    passed=$((passed + 1))
  else
    fail "mlajit $* --help: exit $rc, first line '$(head -1 <<<"$out")', stderr '$err'"
  fi
}

# ---- the table: arguments | the word the message must hold (all exit 2) ------
while IFS='|' read -r args word; do
  [ -z "${args// }" ] && continue
  [[ $args == \#* ]] && continue
  word=${word#"${word%%[![:space:]]*}"} # trim the padding around the word
  word=${word%"${word##*[![:space:]]}"}
  # shellcheck disable=SC2086 # the row's arguments split on spaces
  expect 2 "$word" $args
done <<'TABLE'
bogus-command                                              | unknown command 'bogus-command'
--bogus                                                    | unknown option '--bogus'
compile --heads 16 --page 64                               | needs --model
compile --model llama --heads 16 --page 64                 | model 'llama' is unknown
compile --model v32 --heads 0 --page 64                    | --heads = '0'
compile --model v32 --heads 129 --page 64                  | --heads = '129'
compile --model v32 --heads x --page 64                    | --heads = 'x'
compile --model v32 --heads 16x --page 64                  | --heads = '16x'
compile --model v32 --heads +16 --page 64                  | --heads = '+16'
compile --model v32 --heads 16 --page 0                    | --page = '0'
compile --model v32 --heads 16 --page 1025                 | --page = '1025'
compile --model v32 --heads 16 --page 64 --extra-page 0    | --extra-page = '0'
compile --model v32 --heads 16 --page 64 --tile 48         | spec.tile = 48
compile --model v32 --heads 16 --page 64 --tile -1         | --tile = '-1'
compile --model v32 --heads 16 --page 64 --heads-per-cta 8 | spec.heads_per_cta = 8
compile --model v32 --heads 16 --page 64 --arch sm_70      | spec.arch = 'sm_70'
compile --model v32 --heads 16 --page 64 --arch sm_9999999999999999 | --arch
compile --model v32 --heads 16 --page 64 --features bogus  | --features: 'bogus' is unknown
compile --model v32 --heads 16 --page 64 --features extra-topk-length | extra_page_size
compile --model v32 --heads 16 --page 64 --variant sm90 --arch sm_80 | variant sm90 needs spec.arch = sm_90a
compile --model v32 --heads 16 --page 64 --bogus           | unknown option '--bogus'
compile --model v32 --heads 16 --page 64 --variant fast    | --variant = 'fast'
compile --model v32 --heads 16 --page 64 --variant sliced  | --variant = 'sliced': variant sliced was retired
compile --model v32 --heads 16 --page 64 --emit-source=1   | --emit-source takes no value
compile --model v32 --heads                                | --heads needs a value
run-case                                                   | needs one case directory DIR
run-case --bogus dir                                       | '--bogus'
run-case --tile                                            | --tile needs a value
run-case --tile 65 dir                                     | --tile = '65'
run-case --splits 65 dir                                   | --splits = '65'
run-case --heads-per-cta 65 dir                            | --heads-per-cta = '65'
run-case --variant fast dir                                | --variant = 'fast'
run-case --variant sm90-unpaired dir                       | variant sm90-unpaired was retired
run-case dir1 dir2                                         | extra argument 'dir2'
fuzz --seconds 0                                           | --seconds = '0'
fuzz --seconds abc                                         | --seconds = 'abc'
fuzz --seed -1                                             | --seed = '-1'
fuzz --seed 12x                                            | --seed = '12x'
fuzz --call -3                                             | --call = '-3'
fuzz --out=                                                | --out = ''
fuzz leftover                                              | extra argument 'leftover'
fuzz --bogus                                               | unknown option '--bogus'
fuzz --model llama                                         | model 'llama' is unknown
fuzz --model v32 --tuned-grid                              | the grid draws its own models
bench --splits 65                                          | --splits = '65'
bench --heads 0                                            | --heads = '0'
bench --batch x                                            | --batch = 'x'
bench --topk                                               | --topk needs a value
bench --variant fast                                       | --variant = 'fast'
bench --variant sm90-unpaired                              | use auto, or force sm90
bench --bogus                                              | unknown option '--bogus'
bench --model glm_nsa                                      | --model = 'glm_nsa'; allowed: v32, dsv4
bench --model nope                                         | model 'nope' is unknown
bench --model                                              | --model needs a value
bench --layouts --model v32                                | --model does not go with --layouts
bench --layouts --quick                                    | --quick does not go with --layouts
bench --layouts --shapes --dry-run                         | --shapes with --dry-run does not go with --layouts
bench --layout glm53_nope --model dsv4                     | --model does not go with --layouts
bench --layout tile=7                                      | --layout = 'tile=7'
bench --layout d_nope=512,tile=7,scales=pow2,place=inline  | layout.quant_tile = 7
bench --layouts --seqlen 1024                              | --seqlen = 1024; allowed at least the rows' topk (2048)
bench --layouts --topk 4096 --seqlen 2048                  | --seqlen = 2048; allowed at least the rows' topk (4096)
bench --layouts --seqlen 0                                 | --seqlen = '0'
bench --seqlen 4096                                        | --seqlen goes with --layouts only
bench --dry-run                                            | --dry-run goes with --layouts only
bench --layout v32 --layout v32 --layout v32 --layout v32 --layout v32 --layout v32 --layout v32 --layout v32 --layout v32 | --layout: at most 8 values
envelope garbage                                           | is malformed
envelope v32.h16.p64.bogus                                 | variant 'bogus' is unknown
envelope v32.h16.p64.t32.hc16.sliced.sm_90a                | variant sliced was retired
envelope v32.h16.p64.t64.hc16.portable.sm_90a.extra        | field 'extra' is out of place
envelope v32.p64.h16                                       | is malformed
envelope --topk 5                                          | need a SPEC
envelope v32.h16.p64.t64.hc16.portable.sm_90a extra        | extra argument 'extra'
envelope v32.h16.p64.t64.hc16.portable.sm_90a --topk x     | --topk = 'x'
envelope v32.h16.p64.t64.hc16.portable.sm_90a --bogus 1    | unknown option '--bogus'
pack                                                       | needs a command: build, ls, verify, merge, bench
pack bogus                                                 | unknown command 'bogus'
pack build                                                 | give a grid
pack build --models v32 --heads 16                         | a grid needs --models, --heads and --pages
pack build --models v32 --heads 16 --pages 64 extra        | extra argument 'extra'
pack build --heads 0,16                                    | --heads: '0' is not a number
pack build --models v32,llama                              | 'llama' is unknown
pack build --spec v32.h0.p64                               | spec.h_q = 0
pack build --spec v32.h128.p64.sm90-unpaired               | variant sm90-unpaired was retired
pack build --jobs 0 --spec v32.h16.p64                     | --jobs = '0'
pack build --tactics-from                                  | --tactics-from needs a value
pack build --spec v32.h16.p64 --tune 5                     | --tune tunes the grid
pack build --models v32 --heads 16 --pages 64 --tune -1    | --tune = '-1'
pack ls                                                    | needs one pack FILE
pack ls a.pack b.pack                                      | extra argument 'b.pack'
pack verify                                                | needs one pack FILE
pack merge out.pack                                        | needs OUT and at least one IN
pack bench a.pack --repeat 0                               | --repeat = '0'
pack bench a.pack b.pack                                   | extra argument 'b.pack'
cache                                                      | needs a command: ls, stats, gc, verify
cache bogus                                                | unknown command 'bogus'
cache ls --bogus                                           | unknown option '--bogus'
cache ls extra                                             | extra argument 'extra'
cache stats --repair                                       | unknown option '--repair'
cache gc                                                   | needs --older-than, --max-bytes or --all
cache gc --tactics                                         | needs --older-than, --max-bytes or --all
cache gc --older-than -1                                   | --older-than = '-1'
cache gc --older-than nan                                  | --older-than = 'nan'
cache gc --older-than 1e3                                  | --older-than = '1e3'
cache gc --max-bytes 5X                                    | --max-bytes = '5X'
cache gc --max-bytes -5M                                   | --max-bytes = '-5M'
cache gc --max-bytes .5M                                   | --max-bytes = '.5M'
cache verify --repair=yes                                  | --repair takes no value
case                                                       | needs a command: make
case bogus                                                 | unknown command 'bogus'
case make --out x                                          | needs one SPEC
case make v32.h16.p64                                      | needs --out DIR
case make v32.h16.p64 v32.h32.p64 --out x                  | extra argument 'v32.h32.p64'
case make garbage --out x                                  | is malformed
case make v32.h0.p64 --out x                               | spec.h_q = 0
case make v32.h16.p64 --out x --topk 0                     | --topk = '0'
case make v32.h16.p64 --out x --extra-topk 8               | --extra-topk needs an extra cache
case make dsv4.h16.p64.e64 --out x --batch 65537           | --batch = '65537'
case make v32.h16.p64 --out x --invalid 2                  | --invalid = '2'
case make v32.h16.p64 --out x --page-pad 8                 | --page-pad = 8; allowed a multiple of 16
case make v32.h16.p64.fx --out x                           | extra_page_size
TABLE

# ---- every command's --help, and nothing done by it -----------------------------
export MLAJIT_CACHE_DIR=$scratch/help-cache
for cmd in info compile run-case demo bench tune fuzz envelope "pack build" "pack ls" "pack verify" "pack merge" \
  "pack bench" "cache ls" "cache stats" "cache gc" "cache verify" "case make" pack cache case; do
  # shellcheck disable=SC2086 # the subcommands split on spaces
  expect_help $cmd
done
# --help wins wherever it stands, over missing or bad arguments
expect 0 "usage: mlajit compile" compile --model nope --help
expect 0 "usage: mlajit run-case" run-case a b c --help
expect 0 "usage: mlajit <command>" --help
expect 0 "usage: mlajit <command>" -h
expect 0 "mlajit 1." --version
if [ -e "$MLAJIT_CACHE_DIR" ]; then
  fail "a --help call touched the cache: $(ls -R "$MLAJIT_CACHE_DIR" | head -5 | tr '\n' ' ')"
else
  passed=$((passed + 1))
fi
export MLAJIT_CACHE_DIR=$scratch/cache

# ---- unknown options and extra arguments, everywhere -------------------------------
for cmd in info compile run-case demo bench tune fuzz envelope "pack build" "pack ls" "pack verify" "pack merge" \
  "pack bench" "cache ls" "cache stats" "cache gc" "cache verify" "case make"; do
  # shellcheck disable=SC2086
  expect 2 "unknown option '--no-such-option'" $cmd --no-such-option
  # shellcheck disable=SC2086
  expect 2 "unknown option '--no-such-option'" $cmd --no-such-option=3
done
for cmd in info demo bench tune fuzz "cache ls" "cache stats" "cache verify"; do
  # shellcheck disable=SC2086
  expect 2 "extra argument 'surplus'" $cmd surplus
done
expect 2 "extra argument 'surplus'" cache gc --all surplus
# (no GPU visible, on the GPU host too)
scratch_pack=$scratch/tuned.pack
out=$(CUDA_VISIBLE_DEVICES= "$mlajit" pack build --models v32 --heads 16 --pages 64 --tune 5 --out "$scratch_pack" 2>&1)
rc=$?
if [ "$rc" -eq 1 ] && grep -qF -- "--tune needs a GPU" <<<"$out" && [ ! -e "$scratch_pack" ]; then
  passed=$((passed + 1))
else
  fail "pack build --tune without a GPU: exit $rc (want 1, naming '--tune needs a GPU', writing nothing): $out"
fi
expect 2 "extra argument 'surplus'" compile --model v32 --heads 16 --page 64 surplus
expect 2 "extra argument 'surplus'" envelope v32.h16.p64 surplus
expect 2 "extra argument 'surplus'" run-case dir surplus
expect 2 "extra argument 'surplus'" case make v32.h16.p64 surplus --out x
# after --, an option-like word is an operand
expect 2 "extra argument '--all'" cache ls -- --all

# ---- numbers that overflow: every numeric option -----------------------------------------
big=99999999999999999999     # past 2^64
past=9223372036854775808     # 2^63
neg=-9223372036854775809     # below -2^63
# each row: the words before the option, the option, the words after it ('_'
# joins words; '-' = none)
while read -r prefix option suffix; do
  [ -z "$prefix" ] && continue
  [ "$suffix" = - ] && suffix=
  for v in $big $past $neg; do
    # shellcheck disable=SC2086 # the prefix and suffix split on spaces
    expect 2 "$option = '$v'" ${prefix//_/ } "$option" "$v" ${suffix//_/ }
  done
done <<'NUMBERS'
compile --heads --model_v32_--page_64
compile --page --model_v32_--heads_16
compile --extra-page -
compile --tile -
compile --heads-per-cta -
run-case --tile dir
run-case --heads-per-cta dir
run-case --splits dir
bench --heads -
bench --batch -
bench --topk -
bench --tile -
bench --heads-per-cta -
bench --splits -
fuzz --seconds -
fuzz --call -
envelope_v32.h16.p64 --batch -
envelope_v32.h16.p64 --s-q -
envelope_v32.h16.p64 --topk -
envelope_v32.h16.p64 --extra-topk -
envelope_v32.h16.p64 --splits -
pack_bench_a.pack --repeat -
pack_build --jobs -
cache_gc --older-than -
cache_gc --max-bytes -
case_make_v32.h16.p64 --batch -
case_make_v32.h16.p64 --s-q -
case_make_v32.h16.p64 --topk -
case_make_v32.h16.p64 --extra-topk -
case_make_v32.h16.p64 --seqlen -
case_make_v32.h16.p64 --extra-seqlen -
case_make_v32.h16.p64 --invalid -
case_make_v32.h16.p64 --page-pad -
NUMBERS
expect 2 "--seed = '18446744073709551616'" fuzz --seed 18446744073709551616
expect 2 "--seed = '18446744073709551616'" case make v32.h16.p64 --out x --seed 18446744073709551616
expect 2 "--heads: '99999999999999999999' is not a number" pack build --heads 99999999999999999999
expect 2 "--max-bytes = '99999999999999999999G'" cache gc --max-bytes 99999999999999999999G
expect 2 "--max-bytes = '9007199254740992K'" cache gc --max-bytes 9007199254740992K # 2^63 bytes
expect 2 "--max-bytes = '8388608T'" cache gc --max-bytes 8388608T                   # 2^63 bytes
# the largest values that fit are taken (the command then fails for want of a cache: 1)
nocache=$scratch/no-cache
expect 1 "holds no cache" cache gc --dir "$nocache" --max-bytes 8388607T
expect 1 "holds no cache" cache gc --dir "$nocache" --max-bytes 9223372036854775807
expect 1 "holds no cache" cache gc --dir "$nocache" --max-bytes 1.5G --older-than 0.5
expect 1 "holds no cache" cache gc --dir="$nocache" --max-bytes=500m

# ---- the envelope query's answers --------------------------------------------
expect 0 "accepted: v32.h128.p64.t64.hc64.sm90.sm_90a" envelope v32.h128.p64.t0.hc0.auto.sm_90a
expect 0 "accepted: v32.h16.p64.t64.hc16.portable.sm_90a" envelope v32.h16.p64.t0.hc16.auto.sm_90a
expect 0 "accepted: v32.h128.p64.t64.hc32.portable.sm_80" envelope v32.h128.p64.t0.hc0.auto.sm_80
expect 0 "accepted: dsv4.h8.p64.e3" envelope dsv4.h8.p64.e3.t0.hc0.auto.any --batch 2 --topk 33 --extra-topk 7
expect 0 "plan on 132 SMs: v32.h64.p64.t64.hc16.sm90-narrow.sm_90a, 4 head groups x 1 rows x 32 splits = 128 CTAs; a CTA walks at most 1 tile of 64" envelope v32.h64.p64.t0.hc0.auto.sm_90a --batch 1 --topk 2048
expect 0 "plan on 132 SMs: v32.h64.p64.t64.hc64.sm90-staged.sm_90a, 1 head groups x 128 rows x 1 splits = 128 CTAs; a CTA walks at most 32 tiles" envelope v32.h64.p64.t0.hc0.auto.sm_90a --batch 128 --topk 2048 --splits 1
expect 1 "shared memory" envelope v32.h128.p64.t64.hc32.portable.sm_86
expect 1 "shape.batch = 65537" envelope v32.h16.p64.t0.hc0.auto.sm_90a --batch 65537
expect 1 "shape.extra_topk" envelope v32.h16.p64.t0.hc0.auto.sm_90a --extra-topk 3
expect 1 "shape.num_splits = 65" envelope v32.h16.p64.t0.hc0.auto.sm_90a --splits 65
# a spec that parses but lies outside the envelope is an answer (1), not a usage error
expect 1 "spec.h_q = 0" envelope v32.h0.p64.t64.hc16.portable.sm_90a
expect 1 "spec.h_q = 129" envelope v32.h129.p64.t64.hc16.portable.sm_90a
expect 1 "spec.page_size = 0" envelope v32.h16.p0.t64.hc16.portable.sm_90a
expect 1 "spec.tile = 48" envelope v32.h16.p64.t48.hc16.portable.sm_90a
expect 1 "spec.arch = 'sm_70'" envelope v32.h16.p64.t64.hc16.portable.sm_70
# the short forms compile's options describe: fields left off take their defaults
expect 0 "accepted: v32.h16.p64.t64.hc16.sm90-narrow.sm_90a" envelope v32.h16.p64
expect 0 "accepted: v32.h128.p64.t64.hc32.portable.sm_80" envelope v32.h128.p64.sm_80
expect 0 "accepted: v32.h16.p64.t64.hc16.portable.sm_90a" envelope v32.h16.p64.portable
expect 0 "accepted: v32.h16.p64.t32.hc16.portable.sm_90a" envelope v32.h16.p64.t32
expect 0 "accepted: dsv4.h64.p256.e64.fs" envelope dsv4.h64.p256.e64.fs --batch 2 --s-q 2 --topk 128 --extra-topk 512
expect 0 "accepted: glm_nsa.h16.p61.t64.hc16" envelope glm_nsa.h16.p61.hc16.any
expect 1 "spec.h_q = 129" envelope v32.h129.p64
expect 1 "extra_page_size" envelope v32.h16.p64.fx
expect 0 "arch targets" envelope
# the envelope's table describes every variant a spec can name (MLAJIT_VARIANT_NAMES):
# auto, then one line per row of the family table, then the retired ones
expect 0 "auto (" envelope
for v in portable sm90 sm90-staged sm90-narrow sm90-narrow-long sm90-narrow-scores sm90-split; do
  expect 0 "   $v " envelope
done
expect 0 "retired (refused; bench/NOTES.md): sliced, sm90-unpaired" envelope
expect 0 "(and 8, 24 with variant sm90-narrow or sm90-narrow-long)" envelope
expect 0 "usage: mlajit fuzz [--seconds N]" fuzz --help
expect 0 "usage: mlajit tune [--models" tune --help
expect 0 "tune [--models M]" --help
expect 2 "--topk" tune --dry-run --topk 2048..128
expect 2 "--heads" tune --dry-run --heads 0
expect 2 "--seconds" tune --seconds -1
expect 0 "1300 buckets, 13520 candidates" tune --dry-run
# the sweep's shapes need no GPU: bench's 63 rows, and the off-grid draw (the same for a seed)
expect 0 "model=dsv4 h_q=128 page=256 b=128 s_q=2 topk=128 extra_topk=1024 extra_page=64 features=sink" bench --shapes
if [ "$("$mlajit" bench --shapes | wc -l)" -eq 63 ] && [ "$("$mlajit" bench --shapes --quick | wc -l)" -eq 27 ] &&
   [ "$("$mlajit" tune --draw-shapes 40 --seed 47 | wc -l)" -eq 40 ] &&
   cmp -s <("$mlajit" tune --draw-shapes 5 --seed 9) <("$mlajit" tune --draw-shapes 5 --seed 9) &&
   ! cmp -s <("$mlajit" tune --draw-shapes 5 --seed 9) <("$mlajit" tune --draw-shapes 5 --seed 10); then
  passed=$((passed + 1))
else
  fail "bench --shapes: 63 lines (27 --quick); tune --draw-shapes: N lines, the same for a seed, another for another"
fi
expect 2 "--draw-shapes" tune --draw-shapes 0
# (no GPU visible, on the GPU host too: there it reads the file and names its lack of shapes)
CUDA_VISIBLE_DEVICES= expect 1 "needs a GPU" tune --sweep /dev/null
expect 0 "fuzz [--seconds N]" --help

# ---- case make: a case run-case reads, reproducible from its seed ------------------------
made=$scratch/made
expect 0 "replay: mlajit run-case" case make dsv4.h16.p64.e32.fsl --out "$made/a" --batch 2 --s-q 2 --topk 100 \
  --extra-topk 40 --seed 7 --invalid 0.1 --page-pad 32
expect 0 "PASS" run-case --cpu "$made/a"
expect 0 "dsv4 b 2 s_q 2 h_q 16 topk 100 extra_topk 40" run-case --cpu "$made/a"
expect 0 "replay" case make dsv4.h16.p64.e32.fsl --out "$made/b" --batch 2 --s-q 2 --topk 100 --extra-topk 40 \
  --seed 7 --invalid 0.1 --page-pad 32
expect 0 "replay" case make dsv4.h16.p64.e32.fsl --out "$made/c" --batch 2 --s-q 2 --topk 100 --extra-topk 40 \
  --seed 8 --invalid 0.1 --page-pad 32
if diff -r "$made/a" "$made/b" >/dev/null; then passed=$((passed + 1)); else fail "case make: the same seed wrote different cases"; fi
if ! cmp -s "$made/a/kv.u8" "$made/c/kv.u8"; then passed=$((passed + 1)); else fail "case make: seeds 7 and 8 wrote the same cache"; fi
for f in case.json q.bf16 kv.u8 indices.i32 topk_length.i32 attn_sink.f32 extra_kv.u8 extra_indices.i32 \
  out_ref.f32 lse_ref.f32; do
  if [ -s "$made/a/$f" ]; then passed=$((passed + 1)); else fail "case make: no $f in the case"; fi
done
expect 0 "PASS" run-case --cpu "$(cd "$made" && pwd)/a"
expect 1 "exists" case make v32.h16.p64 --out "$made/a"
expect 0 "v32 b 3 s_q 1 h_q 128 topk 512 extra_topk 0" case make v32.h128.p61.fs --out "$made/v32" --batch 3 --topk 512
expect 0 "PASS" run-case --cpu "$made/v32"
# a damaged expected output is caught: run-case --cpu fails outside the bar
printf '\x00\x00\xc0\x7f' | dd of="$made/v32/out_ref.f32" bs=1 seek=4096 conv=notrunc 2>/dev/null
expect 1 "FAIL" run-case --cpu "$made/v32"
# GLM53_NOPE and DOTS3_SWA: the portable family serves both, sm90 and sm90-narrow
# GLM53_NOPE (auto's pick on sm_90a: sm90-narrow at 16 heads, sm90 past 32); the families that do not serve one say why (exit 1); case make
# writes their data (synthetic inputs, fp64 expected output) and run-case --cpu
# reads it back
expect 0 "accepted: glm53_nope.h16.p64.t64.hc16.sm90-narrow.sm_90a" envelope glm53_nope.h16.p64
expect 0 "accepted: glm_nsa.h16.p64.t64.hc16.sm90-narrow.sm_90a" envelope glm_nsa.h16.p64
expect 0 "accepted: glm53_nope.h48.p64.t64.hc64.sm90.sm_90a" envelope glm53_nope.h48.p64
expect 0 "accepted: glm53_nope.h16.p64.t64.hc16.portable.sm_80" envelope glm53_nope.h16.p64.portable.sm_80
expect 0 "accepted: dots3_swa.h64.p64.t64.hc64.sm90-split.sm_90a" envelope dots3_swa.h64.p64
expect 0 "accepted: dots3_swa.h128.p64.t64.hc64.sm90-split.sm_90a" envelope dots3_swa.h128.p64.sm90-split
expect 0 "2 head groups (each half of the dims of one group of heads) x 4 rows x 1 splits = 8 CTAs" envelope dots3_swa.h64.p64.sm90-split --batch 4 --topk 2048 --splits 1
expect 0 "accepted: dots3_swa.h32.p64.t64.hc32.portable.sm_90a" envelope dots3_swa.h32.p64
expect 1 "layout.d_nope and d_v must be 1024" envelope v32.h64.p64.sm90-split.sm_90a
expect 0 "accepted: dots3_swa.h16.p64.t32.hc16.portable.sm_80" envelope dots3_swa.h16.p64.portable.sm_80
expect 1 "variant sm90 does not serve model dots3_swa" envelope dots3_swa.h64.p64.sm90.sm_90a
expect 1 "kDV == 512" envelope dots3_swa.h64.p64.sm90.sm_90a
expect 0 "accepted: dots3_swa.h8.p64.t64.hc8.sm90-narrow.sm_90a" envelope dots3_swa.h8.p64.sm90-narrow.sm_90a
expect 1 "holds at most 16 heads per CTA at d_v past 512" envelope dots3_swa.h24.p64.sm90-narrow.sm_90a
expect 0 "accepted: glm53_nope.h8.p64.t64.hc8.sm90-narrow.sm_90a" envelope glm53_nope.h8.p64.sm90-narrow.sm_90a
expect 0 "accepted: glm_nsa.h64.p64.t64.hc64.sm90-staged.sm_90a" envelope glm_nsa.h64.p64.sm90-staged.sm_90a
expect 1 "64 heads per CTA only at d_v <= 512" envelope dots3_swa.h64.p64.hc64.portable.sm_90a
expect 1 "at tile 32 and 16 heads per CTA, the least there is" envelope dots3_swa.h16.p64.portable.sm_86
expect 1 "the least there is" envelope dots3_swa.h128.p64.sm_120a
expect 0 "replay: mlajit run-case" case make glm53_nope.h16.p64.fl --out "$made/glm53" --batch 2 --topk 100 --invalid 0.2
expect 0 "glm53_nope b 2 s_q 1 h_q 16 topk 100" run-case --cpu "$made/glm53"
expect 0 "PASS" run-case --cpu "$made/glm53"
expect 0 "replay: mlajit run-case" case make dots3_swa.h8.p32.e16 --out "$made/dots3" --topk 600 --extra-topk 40
expect 0 "no kernel runs it yet" case make dots3_swa.h8.p32.portable.sm_86 --out "$made/dots3-86" --topk 60
expect 0 "PASS" run-case --cpu "$made/dots3"
if [ "$(stat -c %s "$made/dots3/kv.u8")" -eq $(( $(stat -c %s "$made/dots3/kv.u8") / 37120 * 37120 )) ]; then
  passed=$((passed + 1)); else fail "case make dots3_swa: kv.u8 is not whole 32-token pages of 1160 bytes"; fi
# nothing is written for bad input
if [ ! -e x ] && [ ! -e "$made/none" ]; then passed=$((passed + 1)); else fail "a refused case make wrote something"; fi

# ---- layouts described at run time (--layout, and a layout as a spec's first field) ----
# a bad layout exits 2 naming the key or field and what it allows
expect 2 "layout.quant_tile = 48; allowed a multiple of 16 that divides d_nope 512" compile \
  --layout d_nope=512,d_rope=64,tile=48,scales=pow2,place=inline --heads 16 --page 64
expect 2 "layout key 'colour' is unknown" compile --layout d_nope=512,colour=red --heads 16 --page 64
expect 2 "layout key scales = 'fp16' is unknown; allowed pow2" compile \
  --layout d_nope=512,tile=128,scales=fp16,place=inline --heads 16 --page 64
expect 2 "layout key place is missing" compile --layout d_nope=512,tile=128,scales=pow2 --heads 16 --page 64
expect 2 "layout.row_bytes = 600" compile --layout d_nope=512,d_rope=64,tile=128,scales=pow2,place=inline,row_bytes=600 \
  --heads 16 --page 64
expect 2 "layout.footer_bytes = 4" compile \
  --layout d_nope=448,d_rope=64,v=all,tile=64,scales=ue8m0,place=footer,footer_bytes=4 --heads 16 --page 64
expect 2 "neither a model name" compile --layout llama --heads 16 --page 64
expect 2 "give --model or --layout, not both" compile --model v32 --layout v32 --heads 16 --page 64
expect 2 "layout file $scratch/no-such.json cannot be read" compile --layout "$scratch/no-such.json" --heads 16 --page 64
printf '{"d_nope": 512, "tile": 100' >"$scratch/broken.json"
expect 2 "is not JSON" compile --layout "$scratch/broken.json" --heads 16 --page 64
printf '{"d_nope": 512, "d_rope": 64, "tile": 100, "scales": "pow2", "place": "inline"}' >"$scratch/tile.json"
expect 2 "layout.quant_tile = 100" compile --layout "$scratch/tile.json" --heads 16 --page 64
printf '{"d_nope": 448, "d_rope": 64, "v": "all", "tile": 64, "scales": "ue8m0", "place": "footer"}' >"$scratch/v4.json"
expect 0 'MLAJIT_SPEC "dsv4.h16.p64' compile --layout "$scratch/v4.json" --heads 16 --page 64 --emit-source
expect 0 'MLAJIT_SPEC "nope512-rope64-v512-tile128-fp32-inline-row672.h16.p64' compile \
  --layout d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672 --heads 16 --page 64 --emit-source
expect 0 "constexpr int kRowBytes = 672;" compile --layout nope512-rope64-v512-tile128-fp32-inline-row672 \
  --heads 16 --page 64 --arch sm_80 --emit-source
# the envelope answers for a custom layout as for a named one: accepted, refused with a
# reason (exit 1), or a bad layout (exit 2)
expect 0 "accepted: nope512-rope64-v512-tile128-fp32-inline-row672.h16.p64" envelope \
  "d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672.h16.p64"
expect 0 "accepted: nope448-rope64-v512-tile32-ue8m0-footer16-row576.h16.p64.t64.hc16.portable.sm_80" envelope \
  nope448-rope64-v512-tile32-ue8m0-footer16-row576.h16.p64.portable.sm_80
expect 1 "layout.d_v must be a multiple of 128 and at least 256" envelope "d_nope=512,d_rope=64,v=all,scales=none.h16.p64"
expect 0 "accepted: v32_bf16.h16.p64.t64.hc64.sm90.sm_90a" envelope "d_nope=512,d_rope=64,scales=none.h16.p64"
expect 0 "accepted: v32_bf16.h16.p64.t64.hc64.sm90.sm_90a" envelope "d_nope=512,d_rope=64,scales=none.h16.p64.sm90"
expect 1 "layout.scale_format is none (bf16 NoPE values)" envelope v32_bf16.h16.p64.sm90-staged.sm_90a
expect 0 "accepted: nope256-rope64-v256-tile32-ue8m0-inline-row400.h16.p64" envelope \
  "d_nope=256,d_rope=64,tile=32,scales=ue8m0,place=inline.h16.p64"
expect 1 "layout.d_v must be 512" envelope "d_nope=256,d_rope=64,tile=32,scales=ue8m0,place=inline.h16.p64.sm90.sm_90a"
expect 1 "layout.scale_format and scale_place" envelope \
  "d_nope=512,d_rope=64,tile=64,scales=ue8m0,place=inline.h16.p64.sm90-narrow.sm_90a"
expect 2 "layout key place = 'nowhere' is unknown" envelope "d_nope=512,tile=128,scales=pow2,place=nowhere.h16.p64"
expect 2 "layout.d_v = 1024" envelope "d_nope=512,d_v=1024,tile=128,scales=pow2,place=inline.h16.p64"
# case make writes a custom layout's case (synthetic inputs through the layout's
# quantizer, the fp64 expected output) that run-case --cpu passes, served or not
expect 0 "nope512-rope64-v512-tile128-fp32-inline-row672 b 2 s_q 2 h_q 16 topk 100 extra_topk 40" case make \
  "d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672.h16.p64.e32.fsl" --out "$made/custom" \
  --batch 2 --s-q 2 --topk 100 --extra-topk 40 --invalid 0.1
expect 0 "PASS" run-case --cpu "$made/custom"
if grep -q '"layout": "nope512-rope64-v512-tile128-fp32-inline-row672"' "$made/custom/case.json"; then
  passed=$((passed + 1)); else fail "case make: case.json does not hold the custom layout"; fi
expect 0 "case $made/bf16: v32_bf16" case make "d_nope=512,d_rope=64,scales=none.h8.p16" --out "$made/bf16" \
  --topk 64
expect 0 "PASS" run-case --cpu "$made/bf16"
expect 0 "case $made/dsv4_bf16: dsv4_bf16" case make "dsv4_bf16.h33.p64.e64.fslx" --out "$made/dsv4_bf16" \
  --topk 600 --extra-topk 64 --invalid 0.1
expect 0 "PASS" run-case --cpu "$made/dsv4_bf16"
for layout in "d_nope=256,d_rope=64,d_v=256,tile=32,scales=ue8m0,place=inline" \
  "d_nope=512,tile=128,scales=fp32,place=footer" "d_nope=512,d_rope=64,d_v=256,tile=128,scales=pow2,place=inline"; do
  expect 0 "case $made/served: nope" case make "$layout.h7.p1.e64.fslx" --out "$made/served" --topk 100 --extra-topk 64 --invalid 0.1
  expect 0 "PASS" run-case --cpu "$made/served"
  rm -rf "$made/served"
done
expect 0 "PASS" run-case --cpu "$(cd "$made" && pwd)/custom"
# a case.json whose layout is bad names it
cp -r "$made/custom" "$made/custom-bad"
sed -i 's/"layout": "nope512-rope64-v512-tile128-fp32-inline-row672"/"layout": "nope512-rope64-v512-tile100-fp32-inline-row672"/' \
  "$made/custom-bad/case.json"
expect 1 "case.json: model custom: layout 'nope512-rope64-v512-tile100-fp32-inline-row672': layout.quant_tile = 100" \
  run-case --cpu "$made/custom-bad"
expect 2 "layout key tile is missing" case make "d_nope=512,scales=pow2,place=inline.h16.p64" --out "$made/none"
# pack build takes custom layouts beside its models (--layout, repeatable)
expect 2 "layout.quant_tile = 7" pack build --layout d_nope=512,tile=7,scales=pow2,place=inline --heads 16 --pages 64 \
  --out "$made/none.pack"
expect 2 "a grid needs --models, --heads and --pages together (--layout counts as --models)" pack build \
  --layout nope448-rope64-v512-tile32-ue8m0-footer16-row576 --out "$made/none.pack"
# bench --layouts --shapes: its rows as sweep lines, a custom layout by its canonical string
expect 0 "model=nope512-rope64-v512-tile128-fp32-inline-row672 h_q=16 page=64 b=64 s_q=1 topk=2048" bench \
  --layout d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672 --heads 16 --shapes
# tune takes custom layouts on its model axis (--layout, repeatable), not in a sweep's shape lines
expect 2 "layout.quant_tile = 7" tune --layout d_nope=512,tile=7,scales=pow2,place=inline --dry-run
expect 2 "--layout goes with the grid, not --sweep" tune --layout v32 --sweep "$made/none.txt"
expect 2 "--layout goes with the grid, not --draw-shapes" tune --layout v32 --draw-shapes 2
expect 0 "bucket 1/2: nope512-rope64-v512-tile128-fp32-inline-row672.h16.p64.t0.hc0.auto.sm_90a rows 1 topk 128" \
  tune --layout d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672 --heads 16 --pages 64 \
  --topk 128 --rows 1,2 --dry-run
out=$("$mlajit" tune --layout d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672 --heads 16 \
  --pages 64 --topk 128 --rows 1 --dry-run 2>&1)
if grep -q "^1 buckets" <<<"$out" && ! grep -q "^bucket .*v32\|dsv4" <<<"$out"; then
  passed=$((passed + 1)); else fail "tune --layout without --models: only the layout's buckets expected:"; fi

# bench --layouts --dry-run: issue 49's rows and their work, no GPU. The figures
# are tests/test_case.c's "work" suite's hand counts (GFLOP, MB of rows gathered,
# MB of q + out + lse) and the ceiling's time at 4.25 TB/s or 786 TFLOP/s.
out=$("$mlajit" bench --layouts --dry-run 2>&1)
rows=$(grep -cE '^(v32|glm53_nope|dots3_swa) ' <<<"$out")
if [ "$rows" -eq 18 ] &&
   grep -qE '^v32 +16 +64 +2048 +32768 +4\.563 +85\.983 +2\.232 +memory +20\.76$' <<<"$out" &&
   grep -qE '^glm53_nope +16 +64 +2048 +32768 +4\.295 +85\.983 +2\.101 +memory +20\.73$' <<<"$out" &&
   grep -qE '^dots3_swa +16 +64 +2048 +32768 +8\.858 +152\.044 +4\.329 +memory +36\.79$' <<<"$out" &&
   grep -qE '^v32 +128 +128 +2048 +32768 +73\.014 +171\.966 +35\.717 +compute +92\.89$' <<<"$out"; then
  passed=$((passed + 1))
else
  fail "bench --layouts --dry-run: expected 18 rows with the hand counts, got:"
  head -20 <<<"$out" | sed 's/^/    /'
fi
# a custom layout beside V3.2, one head count and batch: only its row bytes differ
# from V3.2's (a 672-byte row: 131072 x 672 = 88.080 MB)
out=$("$mlajit" bench --layout d_nope=512,d_rope=64,tile=128,scales=fp32,place=inline,row_bytes=672 --heads 16 \
  --batch 64 --dry-run 2>&1)
if [ "$(grep -cE '^(v32|nope512)' <<<"$out")" -eq 2 ] &&
   grep -qE '^nope512-rope64-v512-tile128-fp32-inline-row672 +16 +64 +2048 +32768 +4\.563 +88\.080 +2\.232 ' <<<"$out"; then
  passed=$((passed + 1))
else
  fail "bench --layout CUSTOM --dry-run:"
  head -5 <<<"$out" | sed 's/^/    /'
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
