#!/usr/bin/env python3
"""spcg from Python against what a Python user has today: the timings behind issue #34's targets.

    PYTHONPATH=build/python python3 python/bench/bench_python.py --matrices ../shared/matrices/spd --out py.json

Every comparison runs in a fresh Python process of its own (this script with --child), so that each "first call"
is a first call. Rows:

  cg      spcg.cg(A, b) with CuPy inputs against cupyx.scipy.sparse.linalg.cg (both unpreconditioned CG, the same
          rtol, atol 0, maxiter 10 n): poisson3d:128 and every .mtx / .mtx.gz of --matrices. Each is warmed by one
          call (reported as "first call": in a fresh process, spcg's includes its CUDA start and the setup); then
          the median of --runs whole calls, alternated. spcg.cg's later calls reuse its cached setup (the cache's
          check, a hash of A on the device, is inside the timed call). The true relative residual ||b - A x|| / ||b||
          of each solution is computed on the device by cuSPARSE (CuPy's A @ x).
  solver  spcg.Solver(A, precond="auto").solve(b), setup + solve timed together, against cupyx cg with a Jacobi
          preconditioner as a LinearOperator M (its setup, the inverse diagonal, timed too): jump3d:128 and
          poisson2d:1024, CuPy inputs; warmed by one call each, median of --runs.
  mmread  spcg.mmread against scipy.io.mmread (and scipy.io.mmread(...).tocsr(), since spcg's is CSR) on the
          7-point 128^3 Poisson matrix written by scipy.io.mmwrite into a temporary folder (one read of each
          first, so that both read from the page cache); median of --runs.
  fv1     a small solve through Python against the same solve through the C++ interface: the wall time of
          Solver.solve(b) seen from Python (NumPy b; CuPy b where there is CuPy) against the wall time of the
          library's Solver::solve call it makes (result.call_ms, timed around the C++ call inside the module:
          what a C++ caller pays); the ratio is what Python adds (conversions, checks, the GIL, the result's
          objects). The library's own vectors_ms + solve_ms beside it. Also Solver(A) from Python against the
          setup's phases (its "setup (total)"; the host backend's phases summed). fv1.mtx from --matrices,
          else inputs/fv1.mtx.
  import  `import spcg` in a fresh interpreter: the import alone (timed inside), and the whole `python3 -c
          "import spcg"` less `python3 -c pass`; median of --runs.

Without CuPy, or without a GPU, the rows that need them are skipped with the reason (table and JSON). Output: a
table on stdout and --out FILE.json with every figure. --only, --files and --no-generated pick rows, so that a
long run can be split over several commands (unpreconditioned CG on the stiff bcsstk files runs to its 10 n
iterations in both solvers).
"""

import argparse
import fnmatch
import glob
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


def import_spcg():
    """spcg from PYTHONPATH, else from the build folder of this checkout (build/python)."""
    try:
        import spcg
    except ImportError:
        sys.path.insert(0, str(REPO / "build" / "python"))
        import spcg
    return spcg


def median(xs):
    return statistics.median(xs) if xs else None


def ms(seconds):
    return None if seconds is None else 1e3 * seconds


# ---- the children: one comparison each, printing one JSON line -------------------------------------------------
def need_cupy(spcg):
    """(cupy, cupyx.scipy.sparse, cupyx.scipy.sparse.linalg), or a skip reason."""
    try:
        import cupy
        import cupyx.scipy.sparse as csp
        import cupyx.scipy.sparse.linalg as cla
    except ImportError as e:
        return f"CuPy is not installed ({e})"
    ok, why = spcg._spcg.device_available()
    if not ok:
        return f"spcg sees no usable GPU: {why}"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy sees no CUDA device"
    except Exception as e:  # noqa: BLE001 (CuPy raises its own CUDA error types)
        return f"CuPy cannot reach a device: {e}"
    return cupy, csp, cla


def load(spcg, spec):
    """A host scipy CSR from a generator spec or a Matrix Market file (not timed)."""
    if spcg._spcg.looks_like_generator(spec):
        return spcg.generate(spec)
    return spcg.mmread(spec)


def cupy_cg_tolerance(cla, rtol):
    """cupyx's cg names its relative tolerance tol (CuPy <= 13) or rtol (later, as SciPy does)."""
    import inspect

    params = inspect.signature(cla.cg).parameters
    return {"rtol": rtol} if "rtol" in params else {"tol": rtol}


def device_name(cupy):
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else name


class DeviceProblem:
    """A comparison's inputs on the device: A (cupyx CSR), b (seeded), CuPy's modules, a synchronising timer."""

    def __init__(self, spcg, spec, rtol, seed, got):
        import numpy as np

        self.cupy, self.csp, self.cla = got
        self.A = load(spcg, spec)
        self.n = self.A.shape[0]
        self.Ad = self.csp.csr_matrix(self.A)
        self.b = self.cupy.asarray(np.random.default_rng(seed).standard_normal(self.n))
        self.sync = self.cupy.cuda.Device().synchronize
        self.tol = cupy_cg_tolerance(self.cla, rtol)
        self.sync()

    def timed(self, f):
        t0 = time.perf_counter()
        out = f()
        self.sync()
        return time.perf_counter() - t0, out

    def compare(self, ours, theirs, runs):
        """Both warmed by a first call (its time kept), then `runs` alternated: the first calls' seconds, each side's
        times, each side's last output, and ||b - A x|| / ||b|| of each side's last x."""
        first_ours, out_ours = self.timed(ours)
        first_theirs, out_theirs = self.timed(theirs)
        t_ours, t_theirs = [], []
        for _ in range(runs):
            t, out_ours = self.timed(ours)
            t_ours.append(t)
            t, out_theirs = self.timed(theirs)
            t_theirs.append(t)
        bn = float(self.cupy.linalg.norm(self.b))
        res = [float(self.cupy.linalg.norm(self.b - self.Ad @ out[0])) / bn for out in (out_ours, out_theirs)]
        return first_ours, first_theirs, t_ours, t_theirs, out_ours, out_theirs, res


def child_cg(spcg, spec, runs, rtol):
    got = need_cupy(spcg)
    if isinstance(got, str):
        return {"skipped": got}
    prob = DeviceProblem(spcg, spec, rtol, 1, got)
    cupy, cla, A, n, Ad, b, tol = prob.cupy, prob.cla, prob.A, prob.n, prob.Ad, prob.b, prob.tol

    def ours():
        return spcg.cg(Ad, b, rtol=rtol, atol=0.0)

    def theirs():
        return cla.cg(Ad, b, atol=0.0, **tol)

    first_ours, first_theirs, t_ours, t_theirs, (x, info), (xc, info_c), (res, res_c) = prob.compare(ours, theirs, runs)
    # iterations, outside the timed calls: spcg's from its cached setup's result, cupyx's by its callback
    cached = spcg._cg_cache._entry
    iters = int(cached[2].solve(b, rtol=rtol, atol=0.0)[1].iterations[0]) if cached else None
    count = [None]
    if median(t_theirs) < 2.0:  # one more cupyx run, with a callback: skipped where it would cost device time
        count[0] = 0
        cla.cg(Ad, b, atol=0.0, callback=lambda xk: count.__setitem__(0, count[0] + 1), **tol)
    return {"case": spec, "rows": n, "nnz": int(A.nnz), "device": device_name(cupy), "rtol": rtol,
            "spcg_ms": ms(median(t_ours)), "peer_ms": ms(median(t_theirs)),
            "spcg_first_ms": ms(first_ours), "peer_first_ms": ms(first_theirs),
            "spcg_info": int(info), "peer_info": int(info_c), "spcg_iterations": iters, "peer_iterations": count[0],
            "spcg_true_residual": res, "peer_true_residual": res_c, "cache": spcg.cg.cache_info()._asdict(),
            "peer": "cupyx.scipy.sparse.linalg.cg"}


def child_solver(spcg, spec, runs, rtol):
    got = need_cupy(spcg)
    if isinstance(got, str):
        return {"skipped": got}
    prob = DeviceProblem(spcg, spec, rtol, 2, got)
    cupy, cla, A, n, Ad, b, tol = prob.cupy, prob.cla, prob.A, prob.n, prob.Ad, prob.b, prob.tol
    last = {}

    def ours():
        solver = spcg.Solver(Ad, precond="auto", rtol=rtol)
        x, r = solver.solve(b)
        last.update(solver=solver, result=r)
        return x, r

    def theirs():  # what a CuPy user writes: Jacobi as a LinearOperator
        dinv = 1.0 / Ad.diagonal()
        M = cla.LinearOperator(Ad.shape, matvec=lambda v: dinv * v, dtype=Ad.dtype)
        return cla.cg(Ad, b, M=M, atol=0.0, **tol)

    first_ours, first_theirs, t_ours, t_theirs, _, (xc, info_c), (res, res_c) = prob.compare(ours, theirs, runs)
    r = last["result"]
    p = r.preconditioner
    setup_total = dict(last["solver"].setup_phases).get("setup (total)")
    return {"case": spec, "rows": n, "nnz": int(A.nnz), "device": device_name(cupy), "rtol": rtol,
            "spcg_ms": ms(median(t_ours)), "peer_ms": ms(median(t_theirs)),
            "spcg_first_ms": ms(first_ours), "peer_first_ms": ms(first_theirs),
            "spcg_converged": r.converged, "peer_info": int(info_c), "spcg_iterations": int(r.iterations[0]),
            "spcg_setup_ms": setup_total, "spcg_solve_ms": r.solve_ms,
            "spcg_precond": None if p is None else p.kind, "spcg_precond_reason": None if p is None else p.reason,
            "spcg_true_residual": res, "peer_true_residual": res_c,
            "peer": "cupyx.scipy.sparse.linalg.cg, M = Jacobi LinearOperator"}


def child_mmread(spcg, n, runs):
    import scipy.io

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"poisson3d_{n}.mtx")
        A = spcg.generate(f"poisson3d:{n}")
        t0 = time.perf_counter()
        scipy.io.mmwrite(path, A)
        write_s = time.perf_counter() - t0
        size = os.path.getsize(path)
        spcg.mmread(path)  # both read from the page cache from here on
        t_ours, t_theirs, t_theirs_csr = [], [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            ours = spcg.mmread(path)
            t_ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            theirs = scipy.io.mmread(path)
            t_theirs.append(time.perf_counter() - t0)
            theirs = theirs.tocsr()
            t_theirs_csr.append(time.perf_counter() - t0)
        same = ours.shape == theirs.shape and abs(ours - theirs).max() == 0
        # the floors: the reader's own phases (load, parse, build), the file's bytes copied from the page cache,
        # and one thread's parse: the threads' ideal is one thread's time / the cores
        _, info = spcg.mmread(path, return_info=True)
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
        bytes_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        spcg.mmread(path, threads=1)
        one_thread_s = time.perf_counter() - t0
    cores = len(os.sched_getaffinity(0))
    return {"case": f"poisson3d:{n} written by scipy.io.mmwrite", "bytes": size, "rows": int(A.shape[0]),
            "nnz": int(A.nnz), "scipy_write_ms": ms(write_s), "spcg_ms": ms(median(t_ours)),
            "peer_ms": ms(median(t_theirs)), "peer_csr_ms": ms(median(t_theirs_csr)), "same_matrix": bool(same),
            "spcg_threads": info["threads"], "spcg_load_ms": info["load_ms"], "spcg_parse_ms": info["parse_ms"],
            "spcg_build_ms": info["build_ms"], "page_cache_read_ms": ms(bytes_s), "cores": cores,
            "spcg_one_thread_ms": ms(one_thread_s), "ideal_threads_ms": ms(one_thread_s / cores),
            "peer": f"scipy.io.mmread (SciPy {scipy.__version__})"}


def child_fv1(spcg, path, runs):
    import numpy as np

    A = spcg.mmread(path)
    n = A.shape[0]
    out = {"case": os.path.basename(path), "rows": n, "nnz": int(A.nnz)}
    t_setup, lib_setup = [], []
    for _ in range(runs + 1):  # the first setup warms (CUDA start, first allocations): left out
        t0 = time.perf_counter()
        solver = spcg.Solver(A, precond="jacobi", rtol=1e-8)
        t_setup.append(time.perf_counter() - t0)
        phases = dict(solver.setup_phases)
        lib_setup.append(1e-3 * phases.get("setup (total)", sum(phases.values())))
    out.update(backend=solver.backend, python_setup_ms=ms(median(t_setup[1:])),
               library_setup_ms=ms(median(lib_setup[1:])))
    kinds = [("numpy", np.ones(n), None)]
    got = need_cupy(spcg)
    if isinstance(got, str):
        out["cupy_skipped"] = got
    else:
        cupy = got[0]
        kinds.append(("cupy", cupy.ones(n), cupy.cuda.Device().synchronize))
        out["device"] = device_name(cupy)
    for kind, b, sync in kinds:
        for _ in range(3):  # warm: pools, first launches
            solver.solve(b)
        wall, call, inside = [], [], []
        for _ in range(max(runs, 20)):
            t0 = time.perf_counter()
            _, r = solver.solve(b)
            if sync:
                sync()
            wall.append(time.perf_counter() - t0)
            call.append(1e-3 * r.call_ms)
            inside.append(1e-3 * (r.vectors_ms + r.solve_ms))
        out[f"{kind}_python_solve_ms"] = ms(median(wall))
        out[f"{kind}_cpp_call_ms"] = ms(median(call))
        out[f"{kind}_library_solve_ms"] = ms(median(inside))
        out[f"{kind}_iterations"] = int(r.iterations[0])
    return out


def child_import(runs):
    env = dict(os.environ)
    inside, whole, bare = [], [], []
    code = "import time; t = time.perf_counter(); import spcg; print(time.perf_counter() - t)"
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        whole.append(time.perf_counter() - t0)
        inside.append(float(p.stdout.split()[-1]))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
        bare.append(time.perf_counter() - t0)
    return {"case": "import spcg", "import_ms": ms(median(inside)),
            "process_ms": ms(median(whole) - median(bare)), "interpreter_ms": ms(median(bare))}


def run_child(args):
    spcg = import_spcg()
    spec = json.loads(args.spec)
    kind = args.child
    if kind == "cg":
        out = child_cg(spcg, spec["case"], args.runs, args.rtol)
    elif kind == "solver":
        out = child_solver(spcg, spec["case"], args.runs, args.rtol)
    elif kind == "mmread":
        out = child_mmread(spcg, spec["n"], args.runs)
    elif kind == "fv1":
        out = child_fv1(spcg, spec["path"], args.runs)
    else:
        out = child_import(args.runs)
    print(json.dumps(out))


# ---- the driver ------------------------------------------------------------------------------------------------
def spd_files(folder, pattern):
    """The folder's Matrix Market files whose names match `pattern` (a glob; default every one)."""
    if not folder:
        return []
    names = sorted(glob.glob(os.path.join(folder, "*.mtx")) + glob.glob(os.path.join(folder, "*.mtx.gz")))
    return [f for f in names if fnmatch.fnmatch(os.path.basename(f), pattern)]


def spawn(kind, spec, args):
    """One comparison in a fresh interpreter; its JSON line, or the failure as a skip reason."""
    runs = args.mmread_runs if kind == "mmread" else args.runs
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--spec", json.dumps(spec),
           "--runs", str(runs), "--rtol", repr(args.rtol)]
    env = dict(os.environ)
    spcg = import_spcg()  # children find spcg where this process did
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(spcg.__file__)),
                                                      env.get("PYTHONPATH")]))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"kind": kind, **spec, "skipped": f"timed out after {args.timeout} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"kind": kind, **spec, "skipped": f"failed (exit {p.returncode}): {tail[0]}"}
    return {"kind": kind, **spec, **json.loads(lines[-1])}


def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def table(rows):
    head = ["row", "case", "spcg ms", "peer ms", "peer/spcg", "spcg 1st ms", "peer 1st ms", "spcg res", "peer res",
            "note"]
    lines = [head]
    for r in rows:
        speed = r["peer_ms"] / r["spcg_ms"] if r.get("peer_ms") and r.get("spcg_ms") else None
        note = r.get("skipped", "")
        if r["kind"] == "fv1" and "skipped" not in r:
            parts = [f"setup: python {fmt(r['python_setup_ms'])} / library {fmt(r['library_setup_ms'])} ms"]
            for k in ("numpy", "cupy"):
                if f"{k}_python_solve_ms" in r:
                    ratio = r[f"{k}_python_solve_ms"] / r[f"{k}_cpp_call_ms"]
                    parts.append(f"{k} b: python {fmt(r[f'{k}_python_solve_ms'])} / C++ call "
                                 f"{fmt(r[f'{k}_cpp_call_ms'])} ms = {ratio:.2f}x (vectors + solve "
                                 f"{fmt(r[f'{k}_library_solve_ms'])} ms)")
            note = "; ".join(parts) + f" ({r['backend']})"
        elif r["kind"] == "import" and "skipped" not in r:
            note = (f"import {fmt(r['import_ms'])} ms; whole process less a bare interpreter "
                    f"{fmt(r['process_ms'])} ms")
        elif r["kind"] == "mmread" and "skipped" not in r:
            note = (f"{r['bytes'] / 1e6:.0f} MB; scipy .tocsr() too: {fmt(r['peer_csr_ms'])} ms; "
                    f"same matrix: {r['same_matrix']}; spcg's {r['spcg_threads']} threads: load "
                    f"{fmt(r['spcg_load_ms'])} parse {fmt(r['spcg_parse_ms'])} build {fmt(r['spcg_build_ms'])} ms; "
                    f"page cache {fmt(r['page_cache_read_ms'])} ms; one thread {fmt(r['spcg_one_thread_ms'])} ms "
                    f"/ {r['cores']} cores = {fmt(r['ideal_threads_ms'])} ms")
        elif r["kind"] == "solver" and "skipped" not in r:
            note = f"auto: {r['spcg_precond']}, {r['spcg_iterations']} it"
        elif r["kind"] == "cg" and "skipped" not in r:
            note = f"it {r['spcg_iterations']} / {r['peer_iterations']}; info {r['spcg_info']} / {r['peer_info']}"
        case = str(r.get("case", ""))
        lines.append([r["kind"], os.path.basename(case) if os.sep in case else case, fmt(r.get("spcg_ms")), fmt(r.get("peer_ms")),
                      fmt(speed, 3), fmt(r.get("spcg_first_ms")), fmt(r.get("peer_first_ms")),
                      fmt(r.get("spcg_true_residual"), 2), fmt(r.get("peer_true_residual"), 2), note])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    out = []
    for line in lines:
        out.append("  ".join(c.ljust(w) for c, w in zip(line[:-1], widths)) + "  " + line[-1])
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrices", help="a folder of SPD Matrix Market files (the cg rows; fv1.mtx for the fv1 row)")
    ap.add_argument("--out", required=False, help="write every figure here as JSON")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per figure (the median is reported)")
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per comparison process")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test of this script)")
    ap.add_argument("--only", help="comma-separated rows to run: cg,solver,mmread,fv1,import (default all)")
    ap.add_argument("--files", default="*", help="a glob over --matrices' file names for the cg rows ('nos*')")
    ap.add_argument("--no-generated", action="store_true", help="cg rows of --matrices' files only")
    ap.add_argument("--mmread-runs", type=int, default=3, help="timed reads of each reader (a large file)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return run_child(args)

    only = set(args.only.split(",")) if args.only else {"cg", "solver", "mmread", "fv1", "import"}
    big3d, jump, big2d, mm_n = ("poisson3d:24", "jump3d:16", "poisson2d:64", 32) if args.quick else \
        ("poisson3d:128", "jump3d:128", "poisson2d:1024", 128)
    plan = []
    if "cg" in only:
        plan += [] if args.no_generated else [("cg", {"case": big3d})]
        plan += [("cg", {"case": f}) for f in spd_files(args.matrices, args.files)]
    if "solver" in only:
        plan += [("solver", {"case": jump}), ("solver", {"case": big2d})]
    if "mmread" in only:
        plan.append(("mmread", {"n": mm_n}))
    if "fv1" in only:
        fv1 = os.path.join(args.matrices, "fv1.mtx") if args.matrices else ""
        plan.append(("fv1", {"path": fv1 if os.path.exists(fv1) else str(REPO / "inputs" / "fv1.mtx")}))
    if "import" in only:
        plan.append(("import", {}))
    rows = []
    spcg = import_spcg()
    report = {"spcg": spcg.__version__, "python": sys.version.split()[0], "runs": args.runs, "rtol": args.rtol,
              "when": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}
    for kind, spec in plan:
        print(f"... {kind} {spec.get('case', spec.get('path', spec.get('n', '')))}", file=sys.stderr, flush=True)
        rows.append(spawn(kind, spec, args))
        # each row as it comes, and the JSON so far: a run cut short by a time limit keeps what it measured
        print("    " + json.dumps(rows[-1]), file=sys.stderr, flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=1)
    print(table(rows))
    if args.out:
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
