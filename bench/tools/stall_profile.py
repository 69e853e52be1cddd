#!/usr/bin/env python3
"""Where the warps of a kernel wait, by role: reads the SASS source page that
`ncu -i REPORT --page source --csv --print-source sass` prints and splits the
instructions into regions at each USETMAXREG (the sm90 roles set their register
counts first thing), then prints per region the stall samples by reason and the
instructions that collect the most, and then the role's barrier waits: each named
barrier sync (`BAR.SYNC`) and wgmma wait (`WARPGROUP.DEPBAR`) with the "barrier"
samples charged to it. A warp held at a barrier is sampled a few instructions past it
(ptxas slips uniform-datapath instructions in between), so every "barrier" sample is
charged to the closest such wait at or above it in the region. Two builds' reports side
by side show which wait moved (bench/HISTORY.md, "Why P V in flight loses").

usage: stall_profile.py SOURCE.csv [TOP]"""
import csv
import sys


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    cols = rows[header]
    data = [dict(zip(cols, r)) for r in rows[header + 1:] if len(r) == len(cols)]
    stall_cols = [c for c in cols if c.startswith("stall_") and "Not Issued" not in c]

    def num(x):
        try:
            return float(x.replace(",", ""))
        except ValueError:
            return 0.0

    region, regions = "prologue", {}
    for r in data:
        src = r["Source"]
        if "USETMAXREG" in src:
            region = "setmaxnreg@" + r["Address"] + " " + src.split()[-1].rstrip(";")
        regions.setdefault(region, []).append(r)
    total = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in data)
    print(f"total samples {total:.0f}")
    for name, rs in regions.items():
        samples = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in rs)
        executed = sum(num(r["Instructions Executed"]) for r in rs)
        print(f"\n== {name}: {samples:.0f} samples ({100 * samples / max(total, 1):.1f}%), {executed:.0f} warp instructions")
        by_reason = {c: sum(num(r[c]) for r in rs) for c in stall_cols}
        print("   " + ", ".join(f"{c[6:]} {100 * v / max(samples, 1):.0f}%" for c, v in
                                sorted(by_reason.items(), key=lambda kv: -kv[1]) if v >= 0.02 * samples))
        for r in sorted(rs, key=lambda r: -num(r["Warp Stall Sampling (All Samples)"]))[:top]:
            s = num(r["Warp Stall Sampling (All Samples)"])
            why = max(stall_cols, key=lambda c: num(r[c]))
            print(f"   {r['Address']:>6} {s:7.0f} {why[6:]:<12} {r['Source'][:90]}")
        waits, last = {}, None
        for r in rs:
            if is_barrier_wait(r["Source"]):
                last = r["Address"]
                waits.setdefault(last, [r["Source"].strip(), 0.0])
            if last is not None:
                waits[last][1] += num(r.get("stall_barrier", "0"))
        shown = [w for w in waits.values() if w[1] >= 0.005 * max(samples, 1)]
        if shown:
            print("   barrier waits (\"barrier\" samples charged to the wait above them):")
            for src, n in shown:
                print(f"   {n:7.0f}  {src[:90]}")


def is_barrier_wait(source):
    """A named barrier sync or a wgmma group wait."""
    return "BAR.SYNC" in source or "WARPGROUP.DEPBAR" in source


if __name__ == "__main__":
    main()
