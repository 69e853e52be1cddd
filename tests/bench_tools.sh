#!/usr/bin/env bash
# The bench analysis scripts on small hand-made inputs whose answers are known:
# stall_profile.py's per-role barrier waits (samples charged to the wait above
# them) and score_loop_sass.py's instruction counts between the score loop's
# landmarks. Usage: bench_tools.sh PYTHON3 STALL_PROFILE.py SCORE_LOOP_SASS.py
set -euo pipefail
python=$1 stall_profile=$2 score_loop=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Two roles after the prologue; a warp held at a barrier is sampled past it.
cat >"$dir/source.csv" <<'CSV'
"Kernel Name","mlajit_decode_main"
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_barrier","stall_wait","stall_barrier (Not Issued)"
"0x00","LDC R1, c[0x0][0x28]","5","10","0","5","0"
"0x10","USETMAXREG.DEALLOC.CTAPOOL 0xa0","0","4","0","0","0"
"0x20","BAR.SYNC.DEFER_BLOCKING 0x5, 0x100","1","8","0","1","0"
"0x30","ULOP3.LUT UR12, UR20, 0x3fff0, URZ, 0xc0, !UPT","2","8","0","2","0"
"0x40","UMOV UR13, 0x40000040","100","8","100","0","60"
"0x50","FMUL R24, R24, R6","10","8","0","10","0"
"0x60","WARPGROUP.DEPBAR.LE gsb0, 0x0","30","8","30","0","20"
"0x70","USETMAXREG.ALLOC.CTAPOOL 0xd8","0","4","0","0","0"
"0x80","@P3 BAR.SYNC.DEFER_BLOCKING 0x3, 0x180","0","8","0","0","0"
"0x90","BSSY B0, 0x100","50","8","50","0","40"
"0xa0","BAR.SYNC.DEFER_BLOCKING 0x8, 0x80","0","8","0","0","0"
"0xb0","LOP3.LUT R1, R2, R3, RZ, 0xc0, !PT","7","8","0","7","0"
CSV
out=$("$python" "$stall_profile" "$dir/source.csv" 2)
echo "$out"
grep -q "^total samples 205$" <<<"$out" || fail "total samples"
grep -q "setmaxnreg@0x10 0xa0: 143 samples" <<<"$out" || fail "the first role's samples"
grep -qE "^ +100  BAR.SYNC.DEFER_BLOCKING 0x5, 0x100$" <<<"$out" || fail "samples past a named barrier charged to it"
grep -qE "^ +30  WARPGROUP.DEPBAR.LE gsb0, 0x0$" <<<"$out" || fail "a wgmma wait's own samples"
grep -qE "^ +50  @P3 BAR.SYNC.DEFER_BLOCKING 0x3, 0x180$" <<<"$out" || fail "the second role's wait"
! grep -q "0x8, 0x80" <<<"$out" || fail "a wait with no barrier samples is listed"

# The score loop: S (3 HGMMA), 2 to the kBarPFree wait, 3 to P's fence, 1 to the
# kBarPReady arrive, 2 to P V's last HGMMA; another kernel's code is ignored.
cat >"$dir/loop.sass" <<'SASS'
	code for sm_90a
		Function : mlajit_decode_combine
        /*0000*/                   HGMMA.64x64x16.F32.BF16 R0, gdesc[UR4], RZ, !UPT ;
		Function : mlajit_decode_main
        /*0000*/                   HGMMA.64x64x16.F32.BF16 R152, gdesc[UR20], RZ, !UPT ;
        /*0010*/                   HGMMA.64x64x16.F32.BF16 R152, gdesc[UR20], R152 ;
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R152, gdesc[UR20], R152, gsb0 ;
        /*0030*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0040*/                   FMNMX R1, R2, R3, !PT ;
        /*0050*/              @P0  BAR.SYNC.DEFER_BLOCKING 0x6, 0x100 ;
        /*0060*/                   STS [R4], R5 ;
        /*0070*/                   STS [R4+0x4], R6 ;
        /*0080*/                   FENCE.VIEW.ASYNC.S ;
        /*0090*/                   MEMBAR.ALL.CTA ;
        /*00a0*/                   BAR.ARV 0x5, 0x100 ;
        /*00b0*/                   FMUL R24, R24, R7 ;
        /*00c0*/                   HGMMA.64x256x16.F32.BF16 R24, R184, gdesc[UR16].tnspB, R24, gsb0 ;
SASS
out=$("$python" "$score_loop" "$dir/loop.sass")
echo "$out"
grep -q "loop.sass | 2 | 3 | 4 | 1 | 2$" <<<"$out" || fail "landmark counts"
grep -q "S done -> PFree wait: HGMMA 1, WARPGROUP 1, FMNMX 1" <<<"$out" || fail "opcodes between S and the wait"
echo "bench tools: ok"
