# Device inputs: CuPy and PyTorch arrays read in place on the GPU (no copy to the host), x in b's kind, the stream
# rule, Ctrl-C between residual checks. The GPU tests skip with the reason where CuPy / torch or a usable GPU is
# missing; the first tests (import, detection, refusals) run everywhere.
import os
import pathlib
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from conftest import duplicated, relres, unchecked_torch_csr

import spcg

INPUTS = pathlib.Path(__file__).resolve().parents[2] / "inputs"


# ---- everywhere -----------------------------------------------------------------------------------------------
def test_import_spcg_starts_no_cuda_and_imports_no_array_library():
    code = ("import sys, spcg\n"
            "maps = open('/proc/self/maps').read()\n"
            "print('libcuda.so' in maps, sorted(m for m in sys.modules if m.split('.')[0] in "
            "('cupy', 'cupyx', 'torch', 'matplotlib')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "[]"]  # the driver is not even loaded: no CUDA context


class ForeignDeviceArray:
    """Another library's device array (numba, JAX, ...): only the CUDA array interface."""

    def __init__(self, shape):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f8", "data": (0, False), "version": 3}


def test_other_device_arrays_are_refused_with_the_way_in(poisson):
    with pytest.raises(TypeError, match=r"cupy\.asarray"):
        spcg.cg(poisson, ForeignDeviceArray((poisson.shape[0],)))
    with pytest.raises(TypeError, match=r"cupy\.asarray"):
        spcg.Solver(ForeignDeviceArray((4, 4)))


def test_cpu_torch_tensors_take_the_host_path(poisson):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    n = poisson.shape[0]
    coo = poisson.tocoo()
    At = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, coo.shape)
    b = torch.ones(n, dtype=torch.float64)
    x, info = spcg.cg(At, b, rtol=1e-10)
    assert isinstance(x, torch.Tensor) and x.device.type == "cpu" and info == 0
    assert relres(poisson, x.numpy(), np.ones(n)) <= 1.5e-10
    x2, _ = spcg.cg(At.to_sparse_csr(), b, rtol=1e-10)
    np.testing.assert_allclose(x2.numpy(), x.numpy(), rtol=1e-12, atol=1e-14)


# ---- the GPU ---------------------------------------------------------------------------------------------------
def require_gpu():
    ok, why = spcg._spcg.device_available()
    if not ok:
        pytest.skip(f"spcg sees no usable GPU: {why}")


@pytest.fixture
def cp():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    require_gpu()
    if cupy.cuda.runtime.getDeviceCount() < 1:
        pytest.skip("CuPy sees no CUDA device")
    return cupy


@pytest.fixture
def csp(cp):
    import cupyx.scipy.sparse

    return cupyx.scipy.sparse


@pytest.fixture
def torch():
    t = pytest.importorskip("torch", reason="PyTorch is not installed")
    require_gpu()
    if not t.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return t


@pytest.fixture(autouse=True)
def _empty_cg_cache():
    spcg.cg.cache_clear()  # no setup (and its GPU memory) carried from one test to the next
    yield
    spcg.cg.cache_clear()


def host_matrices():
    """(name, scipy CSR): generated ones and the SPD files of inputs/."""
    out = [(s, spcg.generate(s)) for s in ("poisson2d:40", "poisson3d:12", "jump3d:10")]
    for f in ("nos4.mtx", "fv1.mtx", "lap2D_5pt_n100.mtx", "bcsstk01.mtx"):
        if (INPUTS / f).exists():
            out.append((f, spcg.mmread(INPUTS / f)))
    return out


def direct_error_bound(A, rtol):
    """||x - x*|| / ||x*|| <= kappa(A) ||b - A x|| / ||b||: kappa from the dense spectrum for small A (None for
    large, where only the residual is checked)."""
    if A.shape[0] > 2000:
        return None
    ev = np.linalg.eigvalsh(A.toarray())
    return 2 * (ev[-1] / ev[0]) * rtol


def device_of(x, kind):
    return x.device.id if kind == "cupy" else x.device.index


@pytest.mark.parametrize("name,A", host_matrices(), ids=lambda v: v if isinstance(v, str) else "")
def test_cupy_cg_matches_spsolve(cp, csp, name, A):
    n = A.shape[0]
    rng = np.random.default_rng(11)
    b = rng.standard_normal(n)
    Ad, bd = csp.csr_matrix(A), cp.asarray(b)
    rtol = 1e-10
    x, info = spcg.cg(Ad, bd, rtol=rtol, M="jacobi", maxiter=20 * n)
    assert isinstance(x, cp.ndarray) and x.dtype == np.float64 and x.shape == (n,)
    assert x.device.id == cp.cuda.runtime.getDevice()
    assert info == 0, name
    xh = x.get()
    assert relres(A, xh, b) <= 1.5 * rtol
    bound = direct_error_bound(A, rtol)
    if bound is not None:
        x_direct = spla.spsolve(sp.csc_matrix(A), b)
        assert np.linalg.norm(xh - x_direct) <= bound * np.linalg.norm(x_direct)


@pytest.mark.parametrize("layout", ["csr", "csr-int32", "coo", "dense"])
def test_torch_inputs(torch, poisson, layout):
    n = poisson.shape[0]
    dev = torch.device("cuda", torch.cuda.current_device())
    index_dtype = torch.int32 if layout == "csr-int32" else torch.int64  # torch's own default is int64
    if layout.startswith("csr"):
        At = torch.sparse_csr_tensor(torch.tensor(poisson.indptr, dtype=index_dtype),
                                     torch.tensor(poisson.indices, dtype=index_dtype),
                                     torch.tensor(poisson.data), poisson.shape, device=dev)
    elif layout == "coo":
        coo = poisson.tocoo()
        At = torch.sparse_coo_tensor(torch.tensor(np.vstack([coo.row, coo.col])), torch.tensor(coo.data),
                                     coo.shape, device=dev)
    else:
        At = torch.tensor(poisson.toarray(), device=dev)
    B = torch.randn(n, 3, dtype=torch.float64, device=dev)
    for b in (B[:, 0], B):
        x, info = spcg.cg(At, b, rtol=1e-10)
        assert isinstance(x, torch.Tensor) and x.device == dev and x.dtype == torch.float64
        assert tuple(x.shape) == tuple(b.shape) and info == 0
        assert np.all(relres(poisson, x.cpu().numpy(), b.cpu().numpy()) <= 1.5e-10)


def test_zero_copy_cupy(cp, csp, poisson):
    Ad = csp.csr_matrix(poisson)  # canonical, int32 indices, float64: nothing to convert
    assert Ad.indices.dtype == np.int32 and Ad.data.dtype == np.float64
    solver = spcg.Solver(Ad, precond="jacobi", rtol=1e-10)
    # the caller's device pointers reached the library as they are (no conversion, no host round trip) ...
    assert solver._native.device_input == {"row_ptr": Ad.indptr.data.ptr, "col_idx": Ad.indices.data.ptr,
                                           "values": Ad.data.data.ptr}
    # ... and its "upload" is the device-to-device copy of a device input
    assert [p[0] for p in solver.setup_phases][0] == "upload"
    assert solver.input_kind == "cupy" and solver.device == cp.cuda.runtime.getDevice()
    b = cp.asarray(np.random.default_rng(12).standard_normal(poisson.shape[0]))
    x, r = solver.solve(b)
    attrs = cp.cuda.runtime.pointerGetAttributes(x.data.ptr)
    assert attrs.type == 2 and attrs.device == b.device.id  # cudaMemoryTypeDevice, b's device
    assert r.converged and relres(poisson, x.get(), b.get()) <= 1.5e-10
    del Ad  # the library keeps its own device copy: the caller may free the matrix
    cp.get_default_memory_pool().free_all_blocks()
    x2, r2 = solver.solve(b)
    assert r2.converged and relres(poisson, x2.get(), b.get()) <= 1.5e-10


def test_zero_copy_torch(torch, poisson):
    dev = torch.device("cuda", torch.cuda.current_device())
    crow = torch.tensor(poisson.indptr, dtype=torch.int32, device=dev)
    col = torch.tensor(poisson.indices, dtype=torch.int32, device=dev)
    val = torch.tensor(poisson.data, device=dev)
    solver = spcg.Solver(torch.sparse_csr_tensor(crow, col, val, poisson.shape), precond="jacobi")
    assert solver._native.device_input == {"row_ptr": crow.data_ptr(), "col_idx": col.data_ptr(),
                                           "values": val.data_ptr()}
    assert solver.input_kind == "torch" and solver.device == dev.index


def test_block_cg_from_a_16_column_cupy_block(cp, csp):
    A = spcg.generate("poisson3d:16")
    n = A.shape[0]
    B = cp.asfortranarray(cp.asarray(np.random.default_rng(13).standard_normal((n, 16))))  # made C order on device
    solver = spcg.Solver(csp.csr_matrix(A), solver="block-cg", precond="jacobi", expected_columns=16, rtol=1e-8)
    X, r = solver.solve(B)
    assert isinstance(X, cp.ndarray) and X.shape == (n, 16) and X.flags.c_contiguous
    assert r.converged and len(r.columns) == 16 and r.solver == "block-cg"
    assert set(r.status) <= {"converged", "deflated"}
    assert np.all(relres(A, X.get(), B.get()) <= 2e-8)
    # each column as its own CG solve: the same solutions to the tolerance
    for j in (0, 15):
        xj, _ = spcg.cg(A, B[:, j].get(), rtol=1e-12)
        np.testing.assert_allclose(X[:, j].get(), xj, rtol=0, atol=1e-6 * np.abs(xj).max())


SPIN_THEN_FILL = r'''
extern "C" __global__ void spin_then_fill(double* b, int n, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) b[i] = 1.0 + (i % 7);
}
'''


def test_stream_rule_cupy(cp, csp):
    # b is written by a kernel that first spins ~0.1 s on a non-blocking stream (no implicit order with the
    # legacy stream the library copies on); cg is called at once, with that stream current: spcg synchronises it
    A = spcg.generate("poisson2d:256")
    n = A.shape[0]
    Ad = csp.csr_matrix(A)
    expected_b = 1.0 + (np.arange(n) % 7)
    kernel = cp.RawKernel(SPIN_THEN_FILL, "spin_then_fill")
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        b = cp.zeros(n)
        kernel((32,), (256,), (b, np.int32(n), np.int64(200_000_000)))
        x, info = spcg.cg(Ad, b, rtol=1e-10)
        y = x * 2.0  # x is complete when cg returns: usable on any stream at once
    stream.synchronize()
    assert info == 0
    assert relres(A, x.get(), expected_b) <= 1.5e-10
    np.testing.assert_array_equal(y.get(), 2.0 * x.get())


def test_stream_rule_torch(torch):
    A = spcg.generate("poisson2d:256")
    n = A.shape[0]
    dev = torch.device("cuda", torch.cuda.current_device())
    At = torch.sparse_csr_tensor(torch.tensor(A.indptr), torch.tensor(A.indices), torch.tensor(A.data), A.shape,
                                 device=dev)
    stream = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)  # spins on the current (side) stream
        b = 1.0 + (torch.arange(n, device=dev, dtype=torch.float64) % 7)
        x, info = spcg.cg(At, b, rtol=1e-10)
    torch.cuda.synchronize()
    assert info == 0
    assert relres(A, x.cpu().numpy(), 1.0 + (np.arange(n) % 7)) <= 1.5e-10


def test_ctrl_c_interrupts_a_gpu_solve_and_the_solver_stays_usable(cp, csp):
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default handler here")
    A = spcg.generate("poisson2d:300")
    Ad = csp.csr_matrix(A)
    b = cp.ones(A.shape[0])
    solver = spcg.Solver(Ad, precond="none", rtol=1e-300)  # unreachable: only Ctrl-C or maxiter ends it
    maxiter = 2_000_000  # tens of seconds: ends the test should Ctrl-C not reach the solve
    timer = threading.Timer(0.3, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            solver.solve(b, maxiter=maxiter)
    finally:
        timer.cancel()
    r = getattr(e.value, "spcg_result", None)
    assert r is not None, "KeyboardInterrupt came after the solve, not from its residual checks"
    assert r.interrupted and r.status == ["interrupted"] and 0 < r.iterations[0] < maxiter
    assert isinstance(e.value.spcg_x, cp.ndarray)
    x, r2 = solver.solve(b, rtol=1e-8, maxiter=100_000)  # the setup kept
    assert r2.converged and relres(A, x.get(), b.get()) <= 1.5e-8


def test_mixed_kinds_x_follows_b(cp, csp, poisson):
    n = poisson.shape[0]
    b = np.random.default_rng(14).standard_normal(n)
    x, info = spcg.cg(csp.csr_matrix(poisson), b, rtol=1e-10)  # device A, host b: host x
    assert isinstance(x, np.ndarray) and info == 0 and relres(poisson, x, b) <= 1.5e-10
    x, info = spcg.cg(poisson, cp.asarray(b), rtol=1e-10)  # host A, device b: device x
    assert isinstance(x, cp.ndarray) and info == 0 and relres(poisson, x.get(), b) <= 1.5e-10
    with pytest.raises(TypeError, match="x0 must be of b's kind"):
        spcg.cg(poisson, cp.asarray(b), x0=np.zeros(n))
    with pytest.raises(TypeError, match="x0 must be of b's kind"):
        spcg.cg(poisson, b, x0=cp.zeros(n))
    host_solver = spcg.Solver(poisson, backend="host")
    with pytest.raises(spcg.UsageError, match="host backend"):
        host_solver.solve(cp.asarray(b))


def test_x0_on_the_device_is_used_and_left_alone(cp, csp, poisson):
    n = poisson.shape[0]
    b = cp.asarray(np.random.default_rng(15).standard_normal(n))
    solver = spcg.Solver(csp.csr_matrix(poisson), precond="none", rtol=1e-10)
    x, _ = solver.solve(b)
    x0 = x.copy()
    _, r = solver.solve(b, x0=x0)
    assert r.iterations[0] == 0 and r.converged
    cp.testing.assert_array_equal(x0, x)  # the library wrote into its own copy


def test_device_conversions(cp, csp, poisson):
    n = poisson.shape[0]
    b = np.ones(n)
    with pytest.warns(UserWarning, match="float32.*promoted to float64"):
        x, info = spcg.cg(csp.csr_matrix(poisson.astype(np.float32)), cp.asarray(b), rtol=1e-10)
    assert info == 0 and relres(poisson, x.get(), b) <= 1.5e-10
    with pytest.warns(UserWarning, match="b is float32"):
        spcg.cg(csp.csr_matrix(poisson), cp.asarray(b, dtype=cp.float32))
    with pytest.raises(TypeError, match="complex"):
        spcg.cg(csp.csr_matrix(poisson.astype(np.complex128)), cp.asarray(b))
    with pytest.raises(ValueError, match="square"):
        spcg.Solver(csp.csr_matrix(sp.random(5, 4, density=0.5, format="csr", random_state=1)))
    with pytest.raises(ValueError, match=f"b has {n + 1} rows, A has {n}"):
        spcg.cg(csp.csr_matrix(poisson), cp.ones(n + 1))
    bad = cp.ones(n)
    bad[3] = cp.nan
    with pytest.raises(ValueError, match="NaN"):
        spcg.cg(csp.csr_matrix(poisson), bad)
    block = cp.ones((n, 3))
    block[5, 1] = cp.inf  # refused after the solve, from the library's ||b_j||, naming the column
    solver = spcg.Solver(csp.csr_matrix(poisson), solver="multi-cg")
    with pytest.raises(ValueError, match=r"NaN or Inf \(column 1\)"):
        solver.solve(block)
    x, r = solver.solve(cp.ones((n, 3)))  # and the Solver goes on
    assert r.converged and relres(poisson, x.get(), np.ones((n, 3))).max() <= 1.5e-5
    dense = cp.asarray(poisson.toarray())  # a 2-D CuPy array: to CSR on the device
    x, info = spcg.cg(dense, cp.asarray(b), rtol=1e-10)
    assert info == 0 and relres(poisson, x.get(), b) <= 1.5e-10


def test_duplicates_in_a_device_matrix_are_summed_in_a_copy(cp, csp, poisson):
    n = poisson.shape[0]
    data, indices, indptr = duplicated(poisson)
    Ad = csp.csr_matrix((cp.asarray(data), cp.asarray(indices), cp.asarray(indptr)), shape=(n, n))
    assert not Ad.has_canonical_format
    solver = spcg.Solver(Ad, precond="jacobi", rtol=1e-10)
    assert solver.stats["duplicates_summed"] == poisson.nnz and solver.stats["nnz"] == poisson.nnz
    assert Ad.nnz == 2 * poisson.nnz  # the caller's matrix as it was
    x, r = solver.solve(cp.ones(n))
    assert r.converged and relres(poisson, x.get(), np.ones(n)) <= 1.5e-10


def test_unsorted_torch_csr_is_sorted_and_summed(torch, poisson):
    n = poisson.shape[0]
    dev = torch.device("cuda", torch.cuda.current_device())
    crow, cols, vals = [], [], []
    for i in range(n):  # each row's entries reversed, the diagonal split in two
        lo, hi = poisson.indptr[i], poisson.indptr[i + 1]
        c = list(poisson.indices[lo:hi][::-1])
        v = list(poisson.data[lo:hi][::-1])
        d = c.index(i)
        c.append(i)
        v[d] /= 2
        v.append(v[d])
        cols += c
        vals += v
    counts = np.diff(poisson.indptr) + 1
    crow = np.concatenate([[0], np.cumsum(counts)])
    At = unchecked_torch_csr(torch, torch.tensor(crow), torch.tensor(cols), torch.tensor(vals), (n, n), device=dev)
    solver = spcg.Solver(At, precond="jacobi", rtol=1e-10)
    assert solver.stats["duplicates_summed"] == n and solver.stats["nnz"] == poisson.nnz
    x, r = solver.solve(torch.ones(n, dtype=torch.float64, device=dev))
    assert r.converged and relres(poisson, x.cpu().numpy(), np.ones(n)) <= 1.5e-10


def test_cg_cache_on_the_device(cp, csp, poisson):
    Ad = csp.csr_matrix(poisson)
    b = cp.asarray(np.random.default_rng(16).standard_normal(poisson.shape[0]))
    x1, _ = spcg.cg(Ad, b, rtol=1e-10)
    x2, _ = spcg.cg(Ad, b, rtol=1e-10)
    assert spcg.cg.cache_info() == (1, 1, 1)
    cp.testing.assert_array_equal(x1, x2)
    Ad.data *= 2.0  # changed in place on the device: set up again, the new matrix's answer
    x3, info = spcg.cg(Ad, b, rtol=1e-10)
    assert spcg.cg.cache_info().misses == 2 and info == 0
    assert relres(2.0 * poisson, x3.get(), b.get()) <= 1.5e-10


def test_another_device_is_refused(cp, csp, poisson):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two CUDA devices")
    current = cp.cuda.runtime.getDevice()
    other = 1 - current if current in (0, 1) else 0
    with cp.cuda.Device(other):
        A_other = csp.csr_matrix(poisson)
        b_other = cp.ones(poisson.shape[0])
    with pytest.raises(spcg.UsageError, match=f"on CUDA device {other}, but the current device is {current}"):
        spcg.Solver(A_other)
    solver = spcg.Solver(csp.csr_matrix(poisson))
    with pytest.raises(spcg.UsageError, match=f"device {other}"):
        solver.solve(b_other)


# ---- the device fingerprint (spcg.cg's cache): the library's kernel against the NumPy reference ----------------
FINGERPRINT_LENGTHS = (0, 1, 2, 31, 257, 10007, (1 << 23) + 5)  # the last: past 2^23 words, many grid strides


def random_words(rng, dtype, n):
    """n random entries of dtype over its whole range (int32's negative ones included: widened with the sign)."""
    if dtype == np.float64:
        return rng.standard_normal(n) * 10.0 ** rng.integers(-300, 300, n)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)


def reference_hashes(*arrays):
    from spcg import _device

    return tuple(h for _, _, h in _device.fingerprint(arrays, _device._NumpyOps))


def library_hashes(cp, *host_arrays):
    """spcg::fingerprint of the arrays uploaded with CuPy (the module function the front calls)."""
    device = [cp.asarray(a) for a in host_arrays]  # kept alive until the hashes are back
    described = [(d.data.ptr, d.size, d.itemsize) for d in device]
    return spcg._spcg.device_fingerprint(described, cp.cuda.get_current_stream().ptr)


def test_the_librarys_fingerprint_is_the_numpy_reference(cp):
    # int32, int64 and float64 arrays of every length, each at every position (the tag enters the index)
    rng = np.random.default_rng(34)
    for n in FINGERPRINT_LENGTHS:
        arrays = [random_words(rng, dt, n) for dt in (np.int32, np.int64, np.float64)]
        orders = ((0, 1, 2),) if n > 1 << 20 else ((0, 1, 2), (1, 2, 0), (2, 0, 1))
        for order in orders:
            host = [arrays[k] for k in order]
            assert library_hashes(cp, *host) == reference_hashes(*host), (n, order)
        assert library_hashes(cp, arrays[2]) == reference_hashes(arrays[2]), n  # one array: tag 0
    assert spcg._spcg.device_fingerprint([], 0) == ()
    # torn sizes: an empty array beside full ones hashes to 0 and leaves the others' hashes as they are
    a = random_words(rng, np.int32, 1000)
    assert library_hashes(cp, a, a[:0], a) == reference_hashes(a, a[:0], a)


def test_the_librarys_fingerprint_sees_one_changed_entry(cp):
    rng = np.random.default_rng(35)
    n = 100003
    arrays = [random_words(rng, dt, n) for dt in (np.int32, np.int64, np.float64)]
    base = library_hashes(cp, *arrays)
    for t in range(3):
        for j in (0, n // 2, n - 1):
            changed = [a.copy() for a in arrays]
            if changed[t].dtype == np.float64:
                changed[t][j] = np.nextafter(changed[t][j], np.inf)  # one ulp
            else:
                changed[t][j] ^= 1  # one bit
            got = library_hashes(cp, *changed)
            assert got[t] != base[t] and got == reference_hashes(*changed), (t, j)
            assert [g for k, g in enumerate(got) if k != t] == [b for k, b in enumerate(base) if k != t]
    swapped = arrays[2].copy()
    swapped[[5, 5 + 2048]] = swapped[[5 + 2048, 5]]
    assert library_hashes(cp, arrays[0], arrays[1], swapped)[2] != base[2]


def test_the_librarys_fingerprint_waits_for_the_current_stream(cp):
    # the arrays are written by a kernel that first spins ~0.1 s on a non-blocking stream: the hash, taken on that
    # (current) stream, is the written values'
    from spcg import _device

    n = 50000
    kernel = cp.RawKernel(SPIN_THEN_FILL, "spin_then_fill")
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        b = cp.zeros(n)
        kernel((32,), (256,), (b, np.int32(n), np.int64(200_000_000)))
        got = _device.native_hashes((b,), "cupy")
    assert got == reference_hashes(1.0 + (np.arange(n) % 7))


def test_cg_hashes_device_matrices_in_the_library(cp, csp, poisson, monkeypatch):
    # spcg.cg's cache test of a CuPy matrix runs no CuPy kernel: the reference code is never called
    from spcg import _device

    def refused(*args, **kwargs):
        raise AssertionError("the reference fingerprint ran on a device matrix")

    hashes = reference_hashes(poisson.indptr, poisson.indices, poisson.data)
    monkeypatch.setattr(_device, "fingerprint", refused)
    Ad = csp.csr_matrix(poisson)
    m = _device.csr(Ad, "cupy")
    assert m.fingerprint() == (("int32", poisson.shape[0] + 1, hashes[0]), ("int32", poisson.nnz, hashes[1]),
                               ("float64", poisson.nnz, hashes[2]))
    b = cp.ones(poisson.shape[0])
    spcg.cg(Ad, b)
    spcg.cg(csp.csr_matrix(poisson), b)  # an equal matrix in a new object: the setup is reused
    assert spcg.cg.cache_info() == (1, 1, 1)


def test_torch_fingerprint_is_the_numpy_reference(torch, poisson, monkeypatch):
    from spcg import _device

    dev = torch.device("cuda", torch.cuda.current_device())
    rng = np.random.default_rng(36)
    for n in (0, 1, 10007):
        arrays = [random_words(rng, dt, n) for dt in (np.int32, np.int64, np.float64)]
        tensors = [torch.from_numpy(a).to(dev) for a in arrays]
        assert _device.native_hashes(tensors, "torch") == reference_hashes(*arrays), n
    At = torch.sparse_csr_tensor(torch.tensor(poisson.indptr), torch.tensor(poisson.indices),
                                 torch.tensor(poisson.data), poisson.shape, device=dev)
    m = _device.csr(At, "torch")
    hashes = reference_hashes(poisson.indptr, poisson.indices, poisson.data)
    monkeypatch.setattr(_device, "fingerprint", None)  # the library's hashes only
    assert m.fingerprint() == (("torch.int32", poisson.shape[0] + 1, hashes[0]),
                               ("torch.int32", poisson.nnz, hashes[1]), ("torch.float64", poisson.nnz, hashes[2]))
