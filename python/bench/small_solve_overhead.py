"""Where a small solve's time goes between Python and the library (issue #34: fv1 through Python <= 1.2x the C++
call). For NumPy and CuPy right-hand sides: the whole Solver.solve call, the native call (_spcg's solve /
solve_device), the library's own Solver::solve (call_ms), and Python's result object, as medians of many calls;
then a cProfile of the NumPy path's calls. With CuPy, the same for spcg.cg (the cg rows of bench_python.py: the
tiny files' whole call against cupyx's): spcg.cg whole, its pieces (the matrix's conversion and canonical check,
the cache's device hash, the cached Solver.solve, the library's call), cupyx cg whole, and one CuPy SpMV with its
synchronisation (the peer's unit), then a cProfile of spcg.cg's calls.

    PYTHONPATH=build/python python3 python/bench/small_solve_overhead.py [MATRIX.mtx] [--calls 200] [--rtol 1e-8]
"""
import argparse
import cProfile
import pstats
import statistics
import time

import numpy as np

import spcg


def median_ms(samples):
    return 1e3 * statistics.median(samples)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("matrix", nargs="?", default="inputs/fv1.mtx")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rtol", type=float, default=1e-8, help="spcg.cg's and cupyx cg's (as the cg rows of bench_python.py)")
    args = ap.parse_args()
    A = spcg.mmread(args.matrix)
    n = A.shape[0]
    solver = spcg.Solver(A, precond="jacobi", rtol=1e-8)
    print(f"{args.matrix}: {n} rows, backend {solver.backend}, kernel {solver.kernel() if solver.backend == 'gpu' else '-'}")
    kinds = [("numpy", np.ones(n), None)]
    try:
        import cupy

        kinds.append(("cupy", cupy.ones(n), cupy.cuda.get_current_stream().synchronize))
    except ImportError:
        pass
    native = solver._native
    for kind, b, sync in kinds:
        for _ in range(5):
            solver.solve(b)
        whole, call, result_ms, native_ms = [], [], [], []
        orig_result = spcg.SolveResult
        for _ in range(args.calls):
            t0 = time.perf_counter()
            _, r = solver.solve(b)
            if sync:
                sync()
            whole.append(time.perf_counter() - t0)
            call.append(1e-3 * r.call_ms)
        # the native call alone (the same arguments the front passes), and the result object from its dict
        stop = solver._stop
        if kind == "numpy":
            block = b.reshape(n, 1)
            for _ in range(args.calls):
                x = np.zeros_like(block)
                t0 = time.perf_counter()
                _, d, _ = native.solve(block, x, stop)
                native_ms.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                orig_result(d, solver, stop)
                result_ms.append(time.perf_counter() - t0)
        print(f"{kind}: Solver.solve {median_ms(whole):.3f} ms, library call {median_ms(call):.3f} ms "
              f"({median_ms(whole) / median_ms(call):.2f}x)" +
              (f", native call {median_ms(native_ms):.3f} ms, result object {median_ms(result_ms):.3f} ms"
               if native_ms else ""))
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.calls):
        solver.solve(kinds[-1][1])
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(12)
    if len(kinds) > 1:
        cg_breakdown(A, args.calls, args.rtol)


def cg_breakdown(A, calls, rtol):
    """spcg.cg against cupyx cg with CuPy inputs, the pieces of spcg.cg's call timed one by one."""
    import cupy
    import cupyx.scipy.sparse as csp
    import cupyx.scipy.sparse.linalg as cla

    import inspect

    n = A.shape[0]
    Ad, b = csp.csr_matrix(A), cupy.asarray(np.random.default_rng(1).standard_normal(n))
    tol = {"rtol" if "rtol" in inspect.signature(cla.cg).parameters else "tol": rtol}  # CuPy <= 13 calls it tol
    sync = cupy.cuda.get_current_stream().synchronize

    def timed(fn):
        for _ in range(5):
            fn()
        sync()
        samples = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            sync()
            samples.append(time.perf_counter() - t0)
        return median_ms(samples)

    whole = timed(lambda: spcg.cg(Ad, b, rtol=rtol, atol=0.0))
    solver = spcg._cg_cache._entry[2]
    matrix = spcg._as_matrix(Ad)
    convert = timed(lambda: spcg._as_matrix(Ad))
    hash_ms = timed(matrix.fingerprint)
    solve = timed(lambda: solver.solve(b, rtol=rtol, atol=0.0))
    call = statistics.median(solver.solve(b, rtol=rtol, atol=0.0)[1].call_ms for _ in range(calls))
    _, r = solver.solve(b, rtol=rtol, atol=0.0)
    peer = timed(lambda: cla.cg(Ad, b, atol=0.0, maxiter=10 * n, **tol))
    count = [0]
    cla.cg(Ad, b, atol=0.0, maxiter=10 * n, **tol, callback=lambda xk: count.__setitem__(0, count[0] + 1))
    spmv = timed(lambda: Ad @ b)
    empty = timed(lambda: None)
    print(f"spcg.cg (CuPy A and b, rtol {rtol:g}): whole {whole:.3f} ms = conversion and canonical check {convert:.3f} "
          f"+ device hash {hash_ms:.3f} + Solver.solve {solve:.3f} (library call {call:.3f} ms, {int(r.iterations[0])} "
          f"iterations, kernel {solver.kernel()}) + the rest {whole - convert - hash_ms - solve:.3f}")
    print(f"cupyx cg: whole {peer:.3f} ms, {count[0]} iterations; one CuPy SpMV + sync {spmv:.3f} ms; "
          f"a sync alone {empty:.3f} ms; peer / spcg.cg {peer / whole:.2f}x")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        spcg.cg(Ad, b, rtol=rtol, atol=0.0)
    sync()
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
