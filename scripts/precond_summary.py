#!/usr/bin/env python3
"""Summarises scripts/precond_targets.sh's JSON reports: one line per run (iterations, preconditioner setup,
whole setup, solve, setup + solve), then issue #24's target ratios.
   scripts/precond_summary.py OUTDIR"""
import glob
import json
import os
import sys

out = sys.argv[1]
runs = {}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    name = os.path.basename(path)[:-5]
    try:
        r = json.load(open(path))
    except Exception:
        continue
    ph = {p["name"]: p["ms"] for p in r["phases"]}
    pc = r.get("preconditioner", {})
    runs[name] = dict(
        its=max(c["iterations"] for c in r["columns"]), converged=r["converged"],
        precond=r["precond"], pc_setup=pc.get("setup_ms", 0.0), setup=ph.get("setup (total)", 0.0),
        solve=r["solve_ms"], levels=len(pc.get("levels", [])), opc=pc.get("operator_complexity", 0.0),
        wall=ph.get("wall (process)", 0.0))
    runs[name]["total"] = runs[name]["setup"] + runs[name]["solve"]

print(f"{'run':52s} {'its':>6s} {'conv':>5s} {'pc ms':>8s} {'setup':>8s} {'solve':>8s} {'set+sol':>8s} {'lev':>3s} {'opc':>5s}")
for name, r in runs.items():
    print(f"{name:52s} {r['its']:6d} {str(r['converged'])[0]:>5s} {r['pc_setup']:8.1f} {r['setup']:8.1f} {r['solve']:8.1f} "
          f"{r['total']:8.1f} {r['levels']:3d} {r['opc']:5.2f}  {r['precond']}")

def get(name):
    return runs.get(name)

print("\n== targets (setup + solve in-process; converged runs only)")
def ratio(a, b, what, target):
    ra, rb = get(a), get(b)
    if not ra or not rb:
        print(f"  {what}: missing runs"); return
    if not (ra["converged"] and rb["converged"]):
        print(f"  {what}: not converged ({a}: {ra['converged']}, {b}: {rb['converged']})"); return
    v = ra["total"] / rb["total"]
    print(f"  {what}: {v:.3f} (target <= {target}) {'reached' if v <= target else 'NOT reached'}  [{ra['total']:.1f} / {rb['total']:.1f} ms]")

r = get("gen_poisson3d_200_cg_amg")
if r:
    print(f"  poisson3d:200 AMG-PCG iterations: {r['its']} (target <= 20)")
    j = get("gen_poisson3d_200_cg_jacobi")
    if j:
        print(f"  poisson3d:200 AMG setup + solve / Jacobi solve: {(r['pc_setup'] + r['solve']) / j['solve']:.3f} "
              f"(target <= 1.0; the preconditioner's setup), {r['total'] / j['solve']:.3f} (the whole setup, "
              f"the matrix's upload and statistics too)")
        print(f"  poisson3d:200 AMG preconditioner setup / Jacobi solve: {r['pc_setup'] / j['solve']:.3f} (target <= 0.5)")
for spec, target in (("poisson2d_1024", 0.3), ("jump3d_128", 0.3), ("aniso3d_128", 0.5)):
    ratio(f"gen_{spec}_cg_amg", f"gen_{spec}_cg_jacobi", f"{spec} AMG / Jacobi", target)
for s in ("block-cg", "multi-cg"):
    ratio(f"rhs16_poisson3d_128_{s}_amg", f"rhs16_poisson3d_128_{s}_jacobi", f"16 RHS poisson3d:128 {s} AMG / Jacobi", 0.5)

files = sorted({n[len("file_"):].rsplit("_", 1)[0] for n in runs if n.startswith("file_")})
if files:
    jac_sum = amg_sum = auto_sum = 0
    hard = []
    worst = (0, "")
    lost = []
    for f in files:
        j, a, au, no = (get(f"file_{f}_{p}") for p in ("jacobi", "amg", "auto", "none"))
        if not j:
            continue
        if j["converged"] and j["its"] >= 1000:
            hard.append(f)
            jac_sum += j["its"]
            amg_sum += a["its"] if a and a["converged"] else 10**9
            auto_sum += au["its"] if au and au["converged"] else 10**9
        if j["converged"] and au and not au["converged"]:
            lost.append(f)
        best = min(x["total"] for x in (j, no) if x and x["converged"]) if (j["converged"] or (no and no["converged"])) else None
        if best and au and au["converged"]:
            v = au["total"] / best
            if v > worst[0]:
                worst = (v, f)
    print(f"  files where Jacobi converges after >= 1000 iterations: {', '.join(hard)}")
    if jac_sum:
        print(f"  sum of iterations, amg / jacobi: {amg_sum} / {jac_sum} = {amg_sum / jac_sum:.3f} (target <= 0.25)")
        print(f"  sum of iterations, auto / jacobi: {auto_sum} / {jac_sum} = {auto_sum / jac_sum:.3f}")
    print(f"  files Jacobi solves but auto does not: {lost or 'none'}")
    print(f"  worst auto time / best of none, jacobi: {worst[0]:.3f} on {worst[1]} (target <= 1.1)")
