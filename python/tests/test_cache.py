# spcg.cg's setup cache (python/spcg/_cache.py): reused only for the same entries and the same setup options,
# never stale; and the device fingerprint's hash: its reference code, run here on NumPy (the library's kernel,
# spcg::fingerprint, is compared with it in test_device.py), and the library function's checks.
import threading

import numpy as np
import pytest
from conftest import gpu_available, relres

import spcg
from spcg import _device


@pytest.fixture(autouse=True)
def _empty_cache():
    spcg.cg.cache_clear()
    yield
    spcg.cg.cache_clear()


def native_of_cache():
    entry = spcg._cg_cache._entry
    return None if entry is None else entry[2]._native


def test_repeated_calls_reuse_the_setup(poisson):
    b = np.random.default_rng(1).standard_normal(poisson.shape[0])
    x1, info1 = spcg.cg(poisson, b, rtol=1e-10)
    native = native_of_cache()
    x2, info2 = spcg.cg(poisson, b, rtol=1e-10)
    assert info1 == info2 == 0
    assert native_of_cache() is native
    assert spcg.cg.cache_info() == (1, 1, 1)
    np.testing.assert_array_equal(x1, x2)  # the same setup, the same iteration: the same bits


def test_an_equal_matrix_in_a_new_object_reuses_the_setup(poisson):
    b = np.ones(poisson.shape[0])
    spcg.cg(poisson, b)
    native = native_of_cache()
    spcg.cg(poisson.copy(), b)
    spcg.cg(poisson.tocoo(), b)  # converted to the same canonical CSR
    assert native_of_cache() is native and spcg.cg.cache_info().hits == 2


def test_a_matrix_changed_in_place_sets_up_again(poisson):
    A = poisson.copy()
    n = A.shape[0]
    b = np.random.default_rng(2).standard_normal(n)
    spcg.cg(A, b, rtol=1e-10)
    native = native_of_cache()
    diagonal = A.indptr[7] + np.searchsorted(A.indices[A.indptr[7]:A.indptr[8]], 7)
    A.data[diagonal] *= 1 + 2**-52  # one ulp of one entry (the diagonal: A stays symmetric): another matrix
    x, info = spcg.cg(A, b, rtol=1e-10)
    assert native_of_cache() is not native and spcg.cg.cache_info().misses == 2
    A.data *= 3.0  # the same pattern, other values: the answer must be the new matrix's
    x, info = spcg.cg(A, b, rtol=1e-10)
    assert info == 0 and relres(A, x, b) <= 2e-10
    np.testing.assert_allclose(x, spcg.cg(poisson, b, rtol=1e-12)[0] / 3.0, rtol=1e-7, atol=1e-12)


def test_the_pattern_changed_in_place_sets_up_again(poisson):
    A = poisson.copy()
    b = np.ones(A.shape[0])
    spcg.cg(A, b)
    native = native_of_cache()
    # two column indices of one row swapped with their values: the same matrix, the pattern arrays differ
    lo, hi = A.indptr[10], A.indptr[11]
    A.indices[lo:hi] = A.indices[lo:hi][::-1].copy()
    A.data[lo:hi] = A.data[lo:hi][::-1].copy()
    A.has_sorted_indices = False
    spcg.cg(A, b)
    assert native_of_cache() is native  # canonical again after sorting: equal entries, the setup reused
    A.indices[lo] = (A.indices[lo] + 1) % A.shape[1]  # a different matrix now (a moved entry)
    A.has_sorted_indices = False
    A.has_canonical_format = False
    with pytest.raises(spcg.InputError):  # no longer symmetric: the new setup's checks refuse it
        spcg.cg(A, b)


def test_setup_options_are_part_of_the_key(poisson):
    n = poisson.shape[0]
    b = np.ones(n)
    spcg.cg(poisson, b, M="jacobi", rtol=1e-6)
    native = native_of_cache()
    x, info = spcg.cg(poisson, b, M="jacobi", rtol=1e-10, maxiter=1000)  # the stop rule only: reused
    assert native_of_cache() is native and info == 0 and relres(poisson, x, b) <= 2e-10
    spcg.cg(poisson, b, M="none")  # another preconditioner
    assert native_of_cache() is not native
    native = native_of_cache()
    spcg.cg(poisson, np.ones((n, 2)), M="none")  # another block width (auto's kernel is chosen for it)
    assert native_of_cache() is not native
    spcg.cg(poisson, b, M="auto", rtol=1e-6)
    native = native_of_cache()
    spcg.cg(poisson, b, M="auto", rtol=1e-9)  # auto chooses for its rtol: set up again
    assert native_of_cache() is not native
    assert spcg.cg.cache_info().hits == 1


def test_a_reused_setup_takes_each_calls_stop_rule(poisson):
    b = np.random.default_rng(3).standard_normal(poisson.shape[0])
    _, info = spcg.cg(poisson, b, rtol=1e-12, maxiter=4)
    assert info > 0
    x, info = spcg.cg(poisson, b, rtol=1e-9)  # maxiter None again: 10 n, not the 4 of the call before
    assert info == 0 and relres(poisson, x, b) <= 1.5e-9
    x, info = spcg.cg(poisson, b, rtol=0.0, atol=1e-3)
    assert info == 0 and np.linalg.norm(b - poisson @ x) <= 1.5e-3
    assert spcg.cg.cache_info().hits == 2


def test_a_call_while_another_thread_holds_the_cache_sets_up_its_own(poisson):
    b = np.ones(poisson.shape[0])
    spcg.cg(poisson, b)
    native = native_of_cache()
    with spcg._cg_cache._lock:  # as a solve on another thread holds it
        x, info = spcg.cg(poisson, b, rtol=1e-9)
    assert info == 0 and relres(poisson, x, b) <= 1.5e-9
    assert native_of_cache() is native and spcg.cg.cache_info() == (0, 1, 1)


def test_threads_sharing_a_solver_each_solve_with_their_own_stop_rule(poisson):
    solver = spcg.Solver(poisson, precond="none")
    n = poisson.shape[0]
    rng = np.random.default_rng(4)
    rhs = [rng.standard_normal(n) for _ in range(2)]
    failures = []

    def worker(rtol, b):
        for _ in range(30):
            x, r = solver.solve(b, rtol=rtol)
            if not (r.converged and r.rtol == rtol and relres(poisson, x, b) <= 1.5 * rtol
                    and relres(poisson, x, b) > 1e-4 * rtol):
                failures.append((rtol, relres(poisson, x, b), r.rtol))

    threads = [threading.Thread(target=worker, args=(rtol, b)) for rtol, b in zip((1e-3, 1e-10), rhs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]


# ---- the device fingerprint's hash (NumPy here; CuPy and torch run the same code) ------------------------------
def fp(*arrays):
    return _device.fingerprint(arrays, _device._NumpyOps)


def test_fingerprint_is_equal_for_equal_arrays_and_differs_for_any_change():
    rng = np.random.default_rng(5)
    data = rng.standard_normal(10000)
    idx = rng.integers(0, 1000, 10000).astype(np.int32)
    base = fp(idx, data)
    assert fp(idx.copy(), data.copy()) == base
    for j in (0, 4999, 9999):
        d = data.copy()
        d[j] = np.nextafter(d[j], np.inf)  # one ulp
        assert fp(idx, d) != base
        i = idx.copy()
        i[j] += 1
        assert fp(i, data) != base
    assert fp(idx[:-1], data[:-1]) != base  # lengths
    assert fp(data, idx) != fp(idx, data)  # which array holds what


def test_fingerprint_sees_swaps_a_weighted_sum_misses():
    # 1.0 and 2.0 differ by 2**52 as int64 words; with weights 2 i + 1, entries 2048 apart cancel mod 2**64
    data = np.ones(8192)
    data[100] = 2.0
    swapped = data.copy()
    swapped[100], swapped[100 + 2048] = 1.0, 2.0
    words, words_swapped = data.view(np.int64), swapped.view(np.int64)
    weights = 2 * np.arange(data.size, dtype=np.int64) + 1
    assert (words * weights).sum() == (words_swapped * weights).sum()  # the weighted sum is fooled
    assert fp(data) != fp(swapped)


def test_fingerprint_is_the_same_across_chunk_sizes(monkeypatch):
    rng = np.random.default_rng(6)
    data = rng.standard_normal(5000)
    whole = fp(data)
    monkeypatch.setattr(_device, "_CHUNK", 512)  # ten chunks, the last one short
    assert fp(data) == whole


def test_fingerprint_of_an_empty_array():
    assert fp(np.zeros(0)) == (("float64", 0, 0),)


def test_the_librarys_fingerprint_checks_its_arguments_before_the_device():
    f = spcg._spcg.device_fingerprint
    assert f([]) == () and f([(0, 0, 4), (0, 0, 8), (0, 0, 4)]) == (0, 0, 0)  # empty: nothing launched, no GPU
    a = np.arange(4, dtype=np.int32)
    for arrays, message in (([(0, 0, 2)], "elements of 2 bytes"), ([(0, -1, 4)], "negative count"),
                            ([(0, 3, 4)], "3 elements at null"), ([(0, 0, 4)] * 4, "4 arrays, at most 3"),
                            ([(a.ctypes.data + 2, 1, 4)], "not aligned to its 4-byte elements")):
        with pytest.raises(spcg.UsageError, match=message):
            f(arrays)
    if gpu_available():  # host memory never reaches the kernel (it would fault and take the context with it)
        with pytest.raises(spcg.UsageError, match="not memory CUDA knows"):
            f([(a.ctypes.data, a.size, 4)])
    else:
        with pytest.raises(spcg.CudaError, match="needs a GPU"):
            f([(a.ctypes.data, a.size, 4)])
