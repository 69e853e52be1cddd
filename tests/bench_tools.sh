#!/usr/bin/env bash
# The bench analysis scripts on small hand-made inputs whose answers are known:
# stall_profile.py's per-role barrier waits (samples charged to the wait above
# them), score_loop_sass.py's instruction counts between the score loop's
# landmarks, loop_census.py's loops per role (both disassemblers' formats) and
# cubins_from_cache.py's images found in a data file.
# Usage: bench_tools.sh PYTHON3 STALL_PROFILE.py SCORE_LOOP_SASS.py LOOP_CENSUS.py CUBINS_FROM_CACHE.py
set -euo pipefail
python=$1 stall_profile=$2 score_loop=$3 loop_census=$4 cubins_from_cache=$5
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
# Loops per role: nvdisasm's labels and cuobjdump's addresses give the same census;
# a loop shorter than the minimum and another function's loop are left out.
cat >"$dir/nvdisasm.sass" <<'SASS'
//--------------------- .text.other_kernel --------------------------
.L_x_0:
        /*0000*/                   FADD R1, R1, R2 ;
        /*0010*/                   BRA `(.L_x_0) ;
//--------------------- .text.mlajit_decode_main  --------------------------
        /*0000*/                   USETMAXREG.DEALLOC.CTAPOOL 0xa0 ;
.L_x_1:
        /*0010*/                   FMUL R1, R1, R2 ;
        /*0020*/                   FMUL R3, R3, R2 ;
        /*0030*/               @P0 LDC R4, c[0x0][0x2f8] ;
        /*0040*/              @!P1 BRA `(.L_x_1) ;
        /*0050*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xd0 ;
.L_x_2:
        /*0060*/                   HGMMA.64x64x16.F32.BF16 R152, gdesc[UR24], R152 ;
        /*0070*/                   BRA `(.L_x_2) ;
SASS
sed -E -e 's#^//-+ \.text\.(\S+)\s+-+$#\t\tFunction : \1#' -e '/^\.L_x_/d' \
    -e 's#`\(\.L_x_1\)#0x10#; s#`\(\.L_x_2\)#0x60#; s#`\(\.L_x_0\)#0x0#' \
    -e 's#;$#; /* 0x0000000000000000 */#' "$dir/nvdisasm.sass" >"$dir/cuobjdump.sass"
for f in nvdisasm cuobjdump; do
  out=$("$python" "$loop_census" "$dir/$f.sass" mlajit_decode_main 2)
  echo "$out"
  grep -q "^8 instructions; roles (SETMAXREG) at 0 0xa0, 5 0xd0$" <<<"$out" || fail "$f: instructions and roles"
  grep -q "^role 1 loop 1-4 (4 instructions): FMUL:2 LDC:1 BRA:1$" <<<"$out" || fail "$f: the first role's loop"
  grep -q "^role 2 loop 6-7 (2 instructions): HGMMA:1 BRA:1$" <<<"$out" || fail "$f: the second role's loop"
  [ "$(wc -l <<<"$out")" = 3 ] || fail "$f: another function's loop is listed"
  out=$("$python" "$loop_census" "$dir/$f.sass" mlajit_decode_main 3)
  ! grep -q "^role 2" <<<"$out" || fail "$f: a loop under the minimum is listed"
done
! "$python" "$loop_census" "$dir/nvdisasm.sass" no_such_kernel 2>/dev/null || fail "a missing function is not an error"

# Cubins in a data file: two ELF64 images (header, one section's bytes, the section
# headers after them) among other bytes, and a truncated one at the end.
"$python" - "$dir/data.mdb" <<'PY'
import struct, sys
def image(payload):
    body = payload + bytes(-len(payload) % 8)
    shoff = 64 + len(body)
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    struct.pack_into("<QQ", header, 0x20, 0, shoff)          # no program headers
    struct.pack_into("<HHHH", header, 0x36, 56, 0, 64, 2)   # two section headers
    null = bytes(64)
    text = bytearray(64)
    struct.pack_into("<I", text, 4, 1)                       # SHT_PROGBITS
    struct.pack_into("<QQ", text, 0x18, 64, len(payload))
    return bytes(header) + body + null + bytes(text)
a, b = image(b"A" * 100), image(b"B" * 3000)
with open(sys.argv[1], "wb") as f:
    f.write(b"\0" * 4096 + a + b"\x7fELF\x01 not ours" + bytes(500) + b + bytes(64) + a[:80])
PY
out=$("$python" "$cubins_from_cache" "$dir/data.mdb" "$dir/cubins")
echo "$out"
[ "$(wc -l <<<"$out")" = 2 ] || fail "two whole images"
grep -q "0.cubin: 296 bytes at offset 4096$" <<<"$out" || fail "the first image's length"
grep -q "1.cubin: 3192 bytes at offset" <<<"$out" || fail "the second image's length"
cmp -s <(head -c 296 "$dir/cubins/0.cubin") <(tail -c +4097 "$dir/data.mdb" | head -c 296) || fail "the first image's bytes"

echo "bench tools: ok"
