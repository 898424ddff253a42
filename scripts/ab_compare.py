#!/usr/bin/env python3
"""Before/after: the same solves with two spcg binaries, alternated in one run on one machine.

  scripts/ab_compare.py BEFORE AFTER [--runs 3] [--out DIR] [--quick]

Each case runs `spcg solve ... --report-file` with either binary in turn (before, after, before, ...), and the
table gives per binary the median solve phase, the iterations, the median per iteration and after/before.
Iterations must agree (a refactor that changes them is not within noise); the script exits 1 when they do not.
Python 3 standard library only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CASES = [
    # (label, arguments): the solver paths a refactor of the iteration code touches
    ("cg jacobi poisson3d:200 (fused, graph)", "--generate poisson3d:200 --precond jacobi --timing phases"),
    ("cg none poisson3d:128 (fused, DIA)", "--generate poisson3d:128 --precond none --timing phases"),
    ("cg jacobi fv1 (persistent)", "--matrix inputs/fv1.mtx --precond jacobi --timing phases"),
    ("cg none poisson2d:200 (persistent)", "--generate poisson2d:200 --precond none --timing phases"),
    ("multi-cg jacobi poisson3d:128 k=8", "--generate poisson3d:128 --solver multi-cg --nrhs 8 --precond jacobi --timing phases"),
    ("block-cg jacobi poisson3d:64 k=16", "--generate poisson3d:64 --solver block-cg --nrhs 16 --precond jacobi --timing phases"),
    ("block-cg none poisson3d:128 k=16", "--generate poisson3d:128 --solver block-cg --nrhs 16 --precond none --timing phases"),
    ("cg amg poisson3d:200", "--generate poisson3d:200 --precond amg --timing phases"),
    ("cg amg jump3d:128", "--generate jump3d:128 --precond amg --timing phases"),
    ("cg chebyshev poisson3d:128", "--generate poisson3d:128 --precond chebyshev --timing phases"),
    ("cg auto poisson2d:1024 (trial, then AMG)", "--generate poisson2d:1024 --precond auto --timing phases"),
]


def run(binary, args, report):
    cmd = [binary, "solve", *args.split(), "--report-file", report]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        return None, p.stdout[-400:]
    with open(report) as f:
        return json.load(f), ""


def phase(rep, name):
    for p in rep.get("phases", []):
        if p["name"] == name:
            return p["ms"]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="the first four cases only")
    ap.add_argument("--only", default=None, help="the cases whose label contains this text")
    a = ap.parse_args()
    cases = CASES[:4] if a.quick else CASES
    if a.only:
        cases = [c for c in CASES if a.only in c[0]]
    tmp = tempfile.mkdtemp(prefix="spcg-ab-")
    rows, mismatch = [], False
    for label, args in cases:
        got = {"before": [], "after": []}
        its = {"before": set(), "after": set()}
        err = ""
        for r in range(a.runs):
            for which, binary in (("before", a.before), ("after", a.after)):
                rep, e = run(binary, args, os.path.join(tmp, f"{which}.json"))
                if rep is None:
                    err = f"{which}: {e}"
                    continue
                got[which].append(rep["solve_ms"])
                its[which].add(tuple(c["iterations"] for c in rep["columns"]))
        if not got["before"] or not got["after"]:
            rows.append((label, "failed", err.strip().replace("\n", " ")[-200:]))
            mismatch = True
            continue
        mb, ma = statistics.median(got["before"]), statistics.median(got["after"])
        ib, ia = sorted(its["before"]), sorted(its["after"])
        same = ib == ia
        mismatch |= not same
        it = max(ib[0]) if ib and ib[0] else 1
        rows.append((label, f"{mb:9.2f} {ma:9.2f} ms  {mb / max(it, 1):8.4f} {ma / max(it, 1):8.4f} ms/it  "
                            f"after/before {ma / mb:5.3f}  iterations {ib[0] if len(ib) == 1 else ib} "
                            f"{'=' if same else '!= ' + str(ia)}", ""))
    lines = [f"{'case':45s} {'before':>9s} {'after':>9s}", *[f"{l:45s} {v} {e}" for l, v, e in rows]]
    text = "\n".join(lines)
    print(text)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "ab_compare.txt"), "w") as f:
            f.write(text + "\n")
    sys.exit(1 if mismatch else 0)


if __name__ == "__main__":
    main()
