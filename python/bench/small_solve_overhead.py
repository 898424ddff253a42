"""Where a small solve's time goes between Python and the library (issue #34: fv1 through Python <= 1.2x the C++
call). For NumPy and CuPy right-hand sides: the whole Solver.solve call, the native call (_spcg's solve /
solve_device), the library's own Solver::solve (call_ms), and Python's result object, as medians of many calls;
then a cProfile of the NumPy path's calls.

    PYTHONPATH=build/python python3 python/bench/small_solve_overhead.py [MATRIX.mtx] [--calls 200]
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


if __name__ == "__main__":
    main()
