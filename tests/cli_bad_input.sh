#!/usr/bin/env bash
# The CLI's bad input, one row per case: each call must exit 2 (usage / invalid
# argument) with a message on stderr that names the argument. Then the envelope
# query's three answers: accepted (0), rejected with a reason (1), bad spec (2).
# Usage: cli_bad_input.sh path/to/mlajit
set -u
mlajit=$1
export MLAJIT_CACHE_DIR=$(mktemp -d /tmp/mlajit-cli-XXXXXX)
trap 'rm -rf "$MLAJIT_CACHE_DIR"' EXIT
passed=0 failed=0

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
    failed=$((failed + 1))
    echo "FAIL: mlajit $*: exit $rc (want $want), output should name '$word':"
    head -5 <<<"$out" | sed 's/^/    /'
  fi
}

# ---- the table: arguments | the word the message must hold -----------------
while IFS='|' read -r args word; do
  [ -z "${args// }" ] && continue
  [[ $args == \#* ]] && continue
  word=${word#"${word%%[![:space:]]*}"} # trim the padding around the word
  word=${word%"${word##*[![:space:]]}"}
  # shellcheck disable=SC2086 # the row's arguments split on spaces
  expect 2 "$word" $args
done <<'TABLE'
bogus-command                                              | unknown command 'bogus-command'
compile --heads 16 --page 64                               | --model
compile --model llama --heads 16 --page 64                 | model 'llama' is unknown
compile --model v32 --heads 0 --page 64                    | --heads = '0'
compile --model v32 --heads 129 --page 64                  | --heads = '129'
compile --model v32 --heads x --page 64                    | --heads = 'x'
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
compile --model v32 --heads 16 --page 64 --bogus           | unknown option
compile --model v32 --heads 16 --page 64 --variant fast   | --variant = 'fast'
run-case                                                   | needs a case directory
run-case --bogus dir                                       | '--bogus'
run-case --tile                                            | --tile needs a value
run-case --tile 65 dir                                     | --tile = '65'
run-case --splits 65 dir                                   | --splits = '65'
run-case --heads-per-cta 65 dir                            | --heads-per-cta = '65'
run-case --variant fast dir                                | --variant = 'fast'
run-case dir1 dir2                                         | extra argument 'dir2'
fuzz --seconds 0                                           | --seconds = '0'
fuzz --seconds abc                                         | --seconds = 'abc'
fuzz --seed -1                                             | --seed = '-1'
fuzz --seed 12x                                            | --seed = '12x'
fuzz --call -3                                             | --call = '-3'
fuzz --out=                                                | --out = ''
fuzz leftover                                              | unexpected argument 'leftover'
fuzz --bogus                                               | unknown option
bench --splits 65                                          | --splits = '65'
bench --heads 0                                            | --heads = '0'
bench --batch x                                            | --batch = 'x'
bench --topk                                               | --topk needs a value
bench --variant fast                                       | --variant = 'fast'
bench --bogus                                              | bad argument '--bogus'
bench --model glm_nsa                                      | --model = 'glm_nsa'; allowed: v32, dsv4
bench --model nope                                         | --model = 'nope'; allowed: v32, dsv4
bench --model                                              | bad argument '--model'
envelope garbage                                           | is malformed
envelope v32.h0.p64.t64.hc16.portable.sm_90a               | spec.h_q = 0
envelope v32.h129.p64.t64.hc16.portable.sm_90a             | spec.h_q = 129
envelope v32.h16.p0.t64.hc16.portable.sm_90a               | spec.page_size = 0
envelope v32.h16.p64.t48.hc16.portable.sm_90a              | spec.tile = 48
envelope v32.h16.p64.t64.hc16.portable.sm_70               | spec.arch = 'sm_70'
envelope --topk 5                                          | need a SPEC
envelope v32.h16.p64.t64.hc16.portable.sm_90a extra        | extra argument 'extra'
envelope v32.h16.p64.t64.hc16.portable.sm_90a --topk x     | --topk = 'x'
envelope v32.h16.p64.t64.hc16.portable.sm_90a --bogus 1    | unknown option
TABLE

# ---- the envelope query's answers --------------------------------------------
expect 0 "accepted: v32.h128.p64.t64.hc64.sm90.sm_90a" envelope v32.h128.p64.t0.hc0.auto.sm_90a
expect 0 "accepted: v32.h16.p64.t64.hc16.portable.sm_90a" envelope v32.h16.p64.t0.hc16.auto.sm_90a
expect 0 "accepted: v32.h128.p64.t64.hc32.portable.sm_80" envelope v32.h128.p64.t0.hc0.auto.sm_80
expect 1 "variant sm90 needs spec.arch = sm_90a" compile --model v32 --heads 16 --page 64 --variant sm90 --arch sm_80
expect 0 "accepted: dsv4.h8.p64.e3" envelope dsv4.h8.p64.e3.t0.hc0.auto.any --batch 2 --topk 33 --extra-topk 7
expect 0 "plan on 132 SMs: v32.h64.p64.t64.hc16.sm90-narrow.sm_90a, 4 head groups x 1 rows x 32 splits = 128 CTAs; a CTA walks at most 1 tile of 64" envelope v32.h64.p64.t0.hc0.auto.sm_90a --batch 1 --topk 2048
expect 0 "plan on 132 SMs: v32.h64.p64.t64.hc64.sm90-staged.sm_90a, 1 head groups x 128 rows x 1 splits = 128 CTAs; a CTA walks at most 32 tiles" envelope v32.h64.p64.t0.hc0.auto.sm_90a --batch 128 --topk 2048 --splits 1
expect 1 "shared memory" envelope v32.h128.p64.t64.hc32.portable.sm_86
expect 1 "shape.batch = 65537" envelope v32.h16.p64.t0.hc0.auto.sm_90a --batch 65537
expect 1 "shape.extra_topk" envelope v32.h16.p64.t0.hc0.auto.sm_90a --extra-topk 3
expect 1 "shape.num_splits = 65" envelope v32.h16.p64.t0.hc0.auto.sm_90a --splits 65
expect 0 "arch targets" envelope
# the envelope's table describes every variant a spec can name (MLAJIT_VARIANT_NAMES)
for v in auto portable sm90 sliced sm90-staged sm90-unpaired sm90-narrow; do
  expect 0 "$v (" envelope
done
expect 0 "(and 8, 24 with variant sm90-narrow or sm90-narrow-long)" envelope
expect 0 "fuzz [--seconds N]" --help

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
