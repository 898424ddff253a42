#!/usr/bin/env python3
"""The peer a user would run instead of spcg: scipy.io.mmread + cupyx.scipy.sparse.linalg.cg, b = ones,
rtol 1e-8, as one whole process. scripts/time_to_solution.py times it from outside beside spcg solve.
  peer_scipy_cupy.py FILE.mtx   prints read, upload and solve times (ms) and the iteration count."""
import sys
import time

import numpy as np
import scipy.io

t0 = time.perf_counter()
A = scipy.io.mmread(sys.argv[1]).tocsr()
t1 = time.perf_counter()
import cupy as cp  # noqa: E402  (imported after the read, as a script would; the import starts CUDA)
import cupyx.scipy.sparse as csp  # noqa: E402
import cupyx.scipy.sparse.linalg as cla  # noqa: E402

Ad = csp.csr_matrix(A)
b = cp.ones(A.shape[0])
cp.cuda.Device().synchronize()
t2 = time.perf_counter()
iterations = [0]


def count(_):
    iterations[0] += 1


try:
    x, info = cla.cg(Ad, b, rtol=1e-8, maxiter=10000, callback=count)
except TypeError:  # older CuPy: tol
    x, info = cla.cg(Ad, b, tol=1e-8, maxiter=10000, callback=count)
cp.cuda.Device().synchronize()
t3 = time.perf_counter()
r = float(cp.linalg.norm(b - Ad @ x) / cp.linalg.norm(b))
print(f"read_ms {1e3 * (t1 - t0):.1f} upload_ms {1e3 * (t2 - t1):.1f} solve_ms {1e3 * (t3 - t2):.1f} "
      f"iterations {iterations[0]} info {info} relres {r:.2e}")
