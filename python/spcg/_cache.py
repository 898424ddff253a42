"""spcg.cg's setup cache: the last setup, reused by a later call with the same matrix.

A setup (the upload, statistics, checks, the kernel auto chose, the preconditioner) costs 17-25 ms for a small
file in a fresh process against a few ms of solve, and code written for scipy.sparse.linalg.cg calls cg again and
again with one matrix. A stale setup would give wrong answers, so the rule is exact, not a guess from the object's
identity: a call reuses the cached setup only when

  - the options that shape a setup are the same: the preconditioner (M), the number of right-hand sides (auto's
    kernel is chosen for it), where the matrix lives (host, or a CuPy / torch device and its id), and rtol when
    M="auto" (auto chooses for it);
  - and the matrix, as converted for the library (canonical CSR, int32 indices, float64 values), holds the same
    entries:
      host (SciPy, NumPy): compared bit for bit with the library's own host copy (memcmp of the three arrays:
          0.02 ms for fv1's 1.06 MB on the 2-core development host, where blake2b of the same arrays took 0.85
          ms and the device hash's code run by NumPy 1.4 ms);
      device (CuPy, torch): a 64-bit hash of each array computed on the device by the library
          (spcg::fingerprint: one kernel for the three arrays and one read of the three sums, on the array
          library's current stream; no CuPy kernel, so nothing for CuPy to compile on a fresh machine), the sizes
          and dtypes beside it. The hash is defined in _device.py, whose NumPy code is its reference: per array
          t (0 indptr, 1 indices, 2 data), the sum mod 2**64 of splitmix64's finaliser of
          w_i + 0x9E3779B97F4A7C15 * (i + t * 2**40), w_i entry i as a 64-bit word (an int32 widened with its
          sign, a float64's bits); a change goes unnoticed with probability about 2**-64.

So a matrix changed in place (A.data[:] = ...) or rebuilt, or a different matrix, sets up again; an equal matrix
in a new object reuses the setup. One setup is kept (its device memory too, until cg.cache_clear() or a call
with another matrix). A call while another thread uses the cached setup sets up a private one instead of waiting.
"""

import collections
import threading
from contextlib import contextmanager

CacheInfo = collections.namedtuple("CacheInfo", "hits misses currsize")


class SetupCache:
    def __init__(self):
        self._lock = threading.Lock()
        self._entry = None  # (key, fingerprint or None for a host matrix, Solver)
        self._hits = self._misses = 0

    def info(self):
        return CacheInfo(self._hits, self._misses, 0 if self._entry is None else 1)

    def clear(self):
        with self._lock:
            self._entry = None
            self._hits = self._misses = 0

    @contextmanager
    def solver(self, matrix, key, make, device_fingerprint=None):
        """Yields a Solver for `matrix` (the front's converted matrix): the cached one when the rule above holds,
        else a new one from make(matrix), which is then cached. `device_fingerprint`: the matrix's hash (device
        matrices), None for host ones. The lock is held while the caller solves, so that no other thread changes
        the stop rule of the setup in between."""
        if not self._lock.acquire(blocking=False):  # another thread is solving with the cached setup
            yield make(matrix)
            return
        try:
            entry = self._entry
            hit = entry is not None and entry[0] == key and (
                entry[1] == device_fingerprint if device_fingerprint is not None
                else entry[2]._native.same_matrix(*matrix.arrays()))
            if hit:
                self._hits += 1
                solver = entry[2]
            else:
                self._misses += 1
                self._entry = None  # the old setup's memory goes back before the new setup asks for its own
                solver = make(matrix)
                self._entry = (key, device_fingerprint, solver)
            yield solver
        finally:
            self._lock.release()
