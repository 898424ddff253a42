#!/usr/bin/env python3
"""Time to solution as a user waits for it: whole processes timed from outside, on the GPU machine.

  scripts/time_to_solution.py --out DIR [--matrix-dir DIR] [--repeats N] [--skip-peer]

Measures, every figure beside its peer and its floor in the same run (issue #22's targets):
  * the CUDA start floor: build/apps/spcg-cuda-floor (cudaFree(0) and exit);
  * `spcg solve p128.mtx` (the 7-point 128^3 Poisson lower triangle written by SciPy's mmwrite, and the same
    written by `spcg generate`) against a Python process doing scipy.io.mmread + cupyx cg on the same file;
  * the reader: `spcg bench read` (1 thread and every core) against scipy.io.mmread in the same run;
  * small files: `spcg solve FILE` over every SPD file of --matrix-dir, wall and wall minus the reported solve;
  * setup (CSR in host memory to the first iteration) from the report of generated problems.
Runs alternate (floor, spcg, peer, floor, ...) and medians are reported. Writes DIR/time_to_solution.json and
prints a summary table last.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SPCG = os.path.join(ROOT, "build", "apps", "spcg")
FLOOR = os.path.join(ROOT, "build", "apps", "spcg-cuda-floor")
PEER = os.path.join(HERE, "peer_scipy_cupy.py")


def wall(cmd, env=None):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return time.perf_counter() - t0, p.returncode, p.stdout


def report_phases(path):
    with open(path) as f:
        r = json.load(f)
    return {p["name"]: p["ms"] for p in r["phases"]}, r


def scipy_poisson_file(path, n):
    import numpy as np
    import scipy.io
    import scipy.sparse as sp
    one = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1], format="csr")
    eye = sp.identity(n, format="csr")
    a = (sp.kron(sp.kron(one, eye), eye) + sp.kron(sp.kron(eye, one), eye) + sp.kron(sp.kron(eye, eye), one)).tocoo()
    scipy.io.mmwrite(path, a, symmetry="symmetric")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--matrix-dir", default=os.path.join(ROOT, ".devdata", "matrices", "spd"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--n", type=int, default=128)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    res = {}
    work = "/tmp/spcg_tts"
    os.makedirs(work, exist_ok=True)

    # The files: SciPy's mmwrite (the p128.mtx) and spcg generate's.
    scipy_file, gen_file = os.path.join(work, "p128_scipy.mtx"), os.path.join(work, "p128_spcg.mtx")
    t0 = time.perf_counter()
    try:
        scipy_poisson_file(scipy_file, args.n)
        res["scipy_write_s"] = time.perf_counter() - t0
    except Exception as e:  # no SciPy: the spcg-written file stands in
        print("SciPy could not write the file:", e)
        scipy_file = None
    subprocess.run([SPCG, "generate", f"poisson3d:{args.n}", "--output", gen_file], check=True, stdout=subprocess.DEVNULL)
    files = [f for f in (scipy_file, gen_file) if f]
    res["file_bytes"] = {f: os.path.getsize(f) for f in files}

    # Whole processes, alternating.
    runs = {"floor": [], "peer": []}
    for f in files:
        runs["spcg:" + f] = []
    rep_path = os.path.join(work, "report.json")
    phases = {}
    peer_out = ""
    for _ in range(args.repeats):
        runs["floor"].append(wall([FLOOR])[0])
        for f in files:
            t, rc, out = wall([SPCG, "solve", "--matrix", f, "--precond", "none", "--report-file", rep_path])
            if rc != 0:
                print(out)
                sys.exit("spcg solve failed")
            runs["spcg:" + f].append(t)
            phases[f], _ = report_phases(rep_path)
        if not args.skip_peer:
            t, rc, peer_out = wall([sys.executable, PEER, files[0]])
            runs["peer"].append(t)
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    res["wall_s_median"] = med
    res["wall_s_all"] = runs
    res["spcg_phases_ms_last"] = phases
    res["peer_output_last"] = peer_out.strip()

    # The reader against scipy.io.mmread, same run.
    t, _, out = wall([SPCG, "bench", "read"] + files + ["--runs", "3"])
    res["bench_read"] = out
    code = ("import scipy.io,time,sys;t=time.perf_counter();scipy.io.mmread(sys.argv[1]);"
            "print(time.perf_counter()-t)")
    mm = []
    for _ in range(3):
        p = subprocess.run([sys.executable, "-c", code, files[0]], stdout=subprocess.PIPE, text=True)
        try:
            mm.append(float(p.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            pass
    res["scipy_mmread_s"] = statistics.median(mm) if mm else None

    # Small files.
    small = []
    if os.path.isdir(args.matrix_dir):
        names = sorted(f for f in os.listdir(args.matrix_dir) if ".mtx" in f)
        floors = []
        for name in names:
            path = os.path.join(args.matrix_dir, name)
            floors.append(wall([FLOOR])[0])
            best = None
            for _ in range(2):
                t, rc, out = wall([SPCG, "solve", "--matrix", path, "--precond", "none", "--report-file", rep_path])
                ph, rep = report_phases(rep_path) if os.path.exists(rep_path) and rc in (0, 3) else ({}, {})
                if best is None or t < best[0]:
                    best = (t, rc, ph.get("solve", 0.0), ph)
            small.append({"file": name, "wall_s": best[0], "rc": best[1], "solve_ms": best[2], "phases": best[3]})
        res["small_floor_s_median"] = statistics.median(floors) if floors else None
        res["small_files"] = small

    # Setup from the report (CSR in host memory to the first iteration).
    setups = {}
    for label, extra in [("poisson3d:128 cg", ["--generate", "poisson3d:128"]),
                         ("poisson3d:200 cg", ["--generate", "poisson3d:200"]),
                         ("poisson3d:128 block-cg k=16", ["--generate", "poisson3d:128", "--solver", "block-cg",
                                                          "--nrhs", "16", "--rhs", "random"])]:
        best = None
        for _ in range(2):
            t, rc, out = wall([SPCG, "solve", *extra, "--precond", "none", "--report-file", rep_path])
            ph, rep = report_phases(rep_path)
            if best is None or ph["setup (total)"] < best["setup (total)"]:
                best = ph
                best["iterations"] = max(c["iterations"] for c in rep["columns"])
                best["kernel"] = rep["kernel"]
        setups[label] = best
    res["setup"] = setups

    with open(os.path.join(args.out, "time_to_solution.json"), "w") as f:
        json.dump(res, f, indent=1)

    # Summary.
    fl = med["floor"]
    print("\n== time to solution (whole processes, median of %d)" % args.repeats)
    print("CUDA start floor            %8.3f s" % fl)
    for f in files:
        s = med["spcg:" + f]
        line = "spcg solve %-16s %8.3f s  (floor + %.0f ms)" % (os.path.basename(f), s, 1e3 * (s - fl))
        if "peer" in med:
            line += "  peer %.3f s = %.2fx spcg" % (med["peer"], med["peer"] / s)
        print(line)
        print("   phases: " + ", ".join("%s %.1f" % (k, v) for k, v in phases[f].items()))
    if not args.skip_peer:
        print("   peer: " + res["peer_output_last"])
    print(res["bench_read"].rstrip())
    if res["scipy_mmread_s"]:
        print("scipy.io.mmread %s: %.3f s" % (os.path.basename(files[0]), res["scipy_mmread_s"]))
    if small:
        walls = sorted(x["wall_s"] for x in small)
        over = [x["wall_s"] - x["solve_ms"] / 1e3 - res["small_floor_s_median"] for x in small]
        print("small files: %d, median wall %.3f s = floor %.3f + %.0f ms; wall - solve - floor: max %.0f ms (%s)" % (
            len(small), statistics.median(walls), res["small_floor_s_median"],
            1e3 * (statistics.median(walls) - res["small_floor_s_median"]), 1e3 * max(over),
            small[over.index(max(over))]["file"]))
    for k, v in setups.items():
        print("setup %-28s %7.1f ms (upload %.1f, statistics %.1f, conversion %.1f, analysis %.1f, vectors %.1f), "
              "solve %.1f ms, %d iterations, %s" % (k, v["setup (total)"], v.get("upload", 0), v.get("statistics", 0),
                                                      v.get("conversion", 0), v.get("analysis", 0), v.get("vectors", 0),
                                                      v["solve"], v["iterations"], v["kernel"]))


if __name__ == "__main__":
    main()
