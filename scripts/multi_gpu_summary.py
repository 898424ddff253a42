#!/usr/bin/env python3
"""The table of scripts/multi_gpu.sh's run: per case and binary, the solve phase, the connect phase, the setup
and the whole process (timed from outside) on 1, 2 and 4 GPUs, and the ratios issue #33 states its targets in:
solve-phase efficiency one GPU's ms / (N x N GPUs' ms), and wall(N) / wall(1).

  scripts/multi_gpu_summary.py OUTDIR            (Python 3 standard library only)
"""
import csv
import json
import os
import sys


def phase(report, name):
    return sum(p["ms"] for p in report.get("phases", []) if p["name"] == name)


def main():
    out = sys.argv[1]
    rows = list(csv.DictReader(open(os.path.join(out, "runs.tsv")), delimiter="\t"))
    runs = {}
    for r in rows:
        path = os.path.join(out, r["report"])
        rep = json.load(open(path)) if r["rc"] in ("0", "3") and os.path.exists(path) else {}
        runs[(r["binary"], r["case"], int(r["gpus"]))] = (r, rep)
    binaries = list(dict.fromkeys(r["binary"] for r in rows))
    cases = list(dict.fromkeys(r["case"] for r in rows))
    print("case | binary | GPUs | rc | iterations | solve ms | efficiency | connect ms | setup ms | wall s | wall / 1 GPU"
          " | GPU B/row (rank 0)")
    print("---|---|---|---|---|---|---|---|---|---|---|---")
    for case in cases:
        for b in binaries:
            one = runs.get((b, case, 1))
            for g in (1, 2, 4):
                if (b, case, g) not in runs:
                    continue
                r, rep = runs[(b, case, g)]
                solve = rep.get("solve_ms", float("nan"))
                its = max((c.get("iterations", 0) for c in rep.get("columns", [])), default=0)
                eff = ""
                if one and one[1] and rep and g > 1:
                    eff = "%.2f" % (one[1]["solve_ms"] / (g * solve))
                # from outside; else (a run without it) the report's own wall, which misses exec and the launcher
                wall = float(r["wall_s"]) or phase(rep, "wall (process)") / 1e3
                one_wall = (float(one[0]["wall_s"]) or phase(one[1], "wall (process)") / 1e3) if one else 0
                wall_ratio = "%.2f" % (wall / one_wall) if one_wall and g > 1 else ""
                ranks = rep.get("ranks", [])
                per_row = "%.0f" % (ranks[0]["gpu_memory_bytes"] / ranks[0]["rows"]) if ranks and ranks[0].get("rows") else ""
                print("%s | %s | %d | %s | %d | %.1f | %s | %.1f | %.1f | %.2f | %s | %s" % (
                    case, b, g, r["rc"], its, solve, eff, phase(rep, "connect"), phase(rep, "setup (total)"), wall,
                    wall_ratio, per_row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
