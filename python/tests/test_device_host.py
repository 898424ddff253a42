# The device path's conversions, checked on the host: CuPy through a NumPy stand-in (fake_cupy.py), PyTorch on
# CPU tensors (the same torch calls run on CUDA tensors). Where no GPU is usable the library refuses a device
# input before reading any pointer (CudaError): these tests reach that refusal with everything converted, and
# check what was converted. The real device tests are test_device.py's.
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import duplicated, gpu_available, unchecked_torch_csr

import spcg
from spcg import _device


@pytest.fixture
def fake(monkeypatch):
    if gpu_available():
        pytest.skip("a GPU is usable: the stand-in's host pointers must not reach it (test_device.py runs instead)")
    import fake_cupy

    for name, module in fake_cupy.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    fake_cupy.state.__init__()
    return fake_cupy


def test_a_canonical_int32_float64_matrix_is_passed_as_it_is(fake, poisson):
    Ad = fake.csr_matrix(poisson)
    m = _device.csr(Ad, "cupy")
    assert (m.kind, m.shape, m.nnz, m.device, m.duplicates_summed) == ("cupy", poisson.shape, poisson.nnz, 0, 0)
    # no conversion: the pointers handed over are the caller's arrays' own
    assert m.pointers() == (Ad.indptr.data.ptr, Ad.indices.data.ptr, Ad.data.data.ptr)


def test_conversions_on_the_device(fake, poisson):
    A64 = poisson.copy()
    A64.indices, A64.indptr = A64.indices.astype(np.int64), A64.indptr.astype(np.int64)
    m = _device.csr(fake.csr_matrix(A64), "cupy")
    assert m.indptr.dtype == np.int32 and m.indices.dtype == np.int32 and m.indptr.flags.c_contiguous
    np.testing.assert_array_equal(m.indices, poisson.indices)
    with pytest.warns(UserWarning, match="float32.*promoted to float64"):
        m = _device.csr(fake.csr_matrix(poisson.astype(np.float32)), "cupy")
    assert m.data.dtype == np.float64
    m = _device.csr(fake.coo_matrix(poisson), "cupy")  # another format: to CSR
    np.testing.assert_array_equal(m.indptr, poisson.indptr)
    m = _device.csr(fake.asarray(poisson.toarray()), "cupy")  # dense: to CSR
    np.testing.assert_array_equal(m.data, poisson.data)
    with pytest.raises(TypeError, match="complex"):
        _device.csr(fake.csr_matrix(poisson.astype(np.complex128)), "cupy")
    with pytest.raises(ValueError, match="square"):
        _device.csr(fake.csr_matrix(sp.random(5, 4, density=0.5, format="csr", random_state=1)), "cupy")


def test_duplicates_are_summed_in_a_copy(fake, poisson):
    Ad = fake.csr_matrix(duplicated(poisson), shape=poisson.shape)
    assert not Ad.has_canonical_format
    m = _device.csr(Ad, "cupy")
    assert m.duplicates_summed == poisson.nnz and m.nnz == poisson.nnz
    assert abs(sp.csr_matrix((m.data, m.indices, m.indptr), shape=poisson.shape) - poisson).max() == 0
    assert Ad.nnz == 2 * poisson.nnz  # the caller's matrix as it was


def test_blocks(fake):
    n = 50
    B = fake.asfortranarray(np.arange(3 * n, dtype=np.float32).reshape(n, 3))
    with pytest.warns(UserWarning, match="b is float32"):
        blk, vector, device = _device.block(B, n, "cupy")
    assert isinstance(blk, fake.ndarray) and blk.flags.c_contiguous and blk.dtype == np.float64
    assert not vector and device == 0
    np.testing.assert_array_equal(blk, np.asarray(B, dtype=np.float64))
    v = fake.asarray(np.ones(n))
    blk, vector, _ = _device.block(v, n, "cupy")
    assert vector and blk.shape == (n, 1) and blk.data.ptr == v.data.ptr  # a C-contiguous float64 b: in place
    x = _device.initial_guess(v, blk, n, "cupy", (n,), 0)
    assert x.data.ptr != v.data.ptr  # the library writes into a copy, never into the caller's x0
    with pytest.raises(ValueError, match="b has 49 rows, A has 50"):
        _device.block(fake.asarray(np.ones(n - 1)), n, "cupy")
    bad = np.ones(n)
    bad[7] = np.inf
    blk, _, _ = _device.block(fake.asarray(bad), n, "cupy")  # not read here: refused after the solve (test_device.py)
    assert np.isinf(blk[7, 0])
    with pytest.raises(TypeError, match="x0 must be of b's kind"):
        _device.initial_guess(np.ones(n), blk, n, "cupy", (n,), 0)


def test_the_producers_stream_is_synchronised_and_no_gpu_is_the_librarys_refusal(fake, poisson):
    n = poisson.shape[0]
    with pytest.raises(spcg.CudaError, match="a matrix on the device needs a GPU"):
        spcg.Solver(fake.csr_matrix(poisson))
    assert fake.state.synchronized >= 1  # before the library was handed the pointers
    with pytest.raises(spcg.CudaError, match="a matrix on the device needs a GPU"):
        spcg.cg(fake.csr_matrix(poisson), fake.asarray(np.ones(n)))
    with pytest.raises(spcg.UsageError, match="host backend"):  # a device b on a host setup
        spcg.Solver(poisson, backend="host").solve(fake.asarray(np.ones(n)))


def test_another_device_is_refused(fake, poisson):
    fake.state.current_device, fake.state.array_device = 0, 1
    with pytest.raises(spcg.UsageError, match=r"A is on CUDA device 1, but the current device is 0.*Device\(1\)"):
        spcg.Solver(fake.csr_matrix(poisson))


def test_device_objects_are_refused_where_host_data_is_needed(fake, poisson):
    with pytest.raises(TypeError, match="spcg.info takes host matrices"):
        spcg.info(fake.csr_matrix(poisson))
    with pytest.raises(TypeError, match="spcg.mmwrite takes host matrices"):
        spcg.mmwrite("/nonexistent/never.mtx", fake.csr_matrix(poisson))


def test_fingerprint_is_the_same_on_every_array_library(fake):
    rng = np.random.default_rng(9)
    data, idx = rng.standard_normal(3000), rng.integers(0, 99, 3000).astype(np.int32)
    ref = _device.fingerprint((idx, data), _device._NumpyOps)
    assert _device.fingerprint((fake.asarray(idx), fake.asarray(data)), _device._CupyOps) == ref


def test_without_a_gpu_the_matrix_is_hashed_by_the_reference_code(fake, poisson):
    # the library sees no GPU: its kernel is not asked (the stand-in's pointers are host memory), the reference
    # code gives the same hashes the kernel gives on a GPU (test_device.py)
    m = _device.csr(fake.csr_matrix(poisson), "cupy")
    assert _device.native_hashes((m.indptr, m.indices, m.data), "cupy") is None
    assert m.fingerprint() == _device.fingerprint((poisson.indptr, poisson.indices, poisson.data), _device._NumpyOps)


# ---- torch: the real library, on CPU tensors (the CUDA path makes the same calls) ------------------------------
@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def test_torch_sparse_csr_conversions(torch, poisson):
    n = poisson.shape[0]
    crow, col = torch.tensor(poisson.indptr, dtype=torch.int64), torch.tensor(poisson.indices, dtype=torch.int64)
    At = torch.sparse_csr_tensor(crow, col, torch.tensor(poisson.data, dtype=torch.float32), (n, n))
    with pytest.warns(UserWarning, match="A is float32"):
        m = _device._torch_csr(At, "A", True)
    assert m.indptr.dtype == torch.int32 and m.indices.dtype == torch.int32 and m.data.dtype == torch.float64
    assert m.duplicates_summed == 0 and m.shape == (n, n)
    np.testing.assert_array_equal(m.indices.numpy(), poisson.indices)
    coo = poisson.tocoo()
    Acoo = torch.sparse_coo_tensor(torch.tensor(np.vstack([coo.row, coo.col])), torch.tensor(coo.data), (n, n))
    np.testing.assert_array_equal(_device._torch_csr(Acoo, "A", True).indptr.numpy(), poisson.indptr)
    dense = _device._torch_csr(torch.tensor(poisson.toarray()), "A", True)
    np.testing.assert_array_equal(dense.data.numpy(), poisson.data)
    with pytest.raises(TypeError, match="complex"):
        _device._torch_csr(torch.zeros(3, 3, dtype=torch.complex128), "A", True)


def test_torch_unsorted_rows_and_duplicates_are_fixed_in_a_copy(torch, poisson):
    n = poisson.shape[0]
    cols, vals, counts = [], [], []
    for i in range(n):  # each row reversed, its diagonal split in two entries
        lo, hi = poisson.indptr[i], poisson.indptr[i + 1]
        c, v = list(poisson.indices[lo:hi][::-1]), list(poisson.data[lo:hi][::-1])
        d = c.index(i)
        v[d] /= 2
        c.append(i)
        v.append(v[d])
        cols += c
        vals += v
        counts.append(len(c))
    crow = torch.tensor(np.concatenate([[0], np.cumsum(counts)]))
    At = unchecked_torch_csr(torch, crow, torch.tensor(cols), torch.tensor(vals), (n, n))
    assert not _device._torch_rows_canonical(At.crow_indices(), At.col_indices(), n, len(cols))
    m = _device._torch_csr(At, "A", True)
    assert m.duplicates_summed == n
    got = sp.csr_matrix((m.data.numpy(), m.indices.numpy(), m.indptr.numpy()), shape=(n, n))
    assert got.has_canonical_format and abs(got - poisson).max() <= 4 * np.finfo(float).eps * abs(poisson).max()
    assert len(At.col_indices()) == len(cols)  # the caller's tensor as it was
    ok = sp.csr_matrix(poisson)
    assert _device._torch_rows_canonical(torch.tensor(ok.indptr), torch.tensor(ok.indices), n, ok.nnz)


def test_torch_blocks(torch, monkeypatch):
    n = 40
    B = torch.arange(3 * n, dtype=torch.float64).reshape(3, n).T  # a transposed view: not C-contiguous
    blk, vector, _ = _device.block(B, n, "torch")
    assert blk.is_contiguous() and not vector and blk.dtype == torch.float64
    np.testing.assert_array_equal(blk.numpy(), B.numpy())
    v = torch.ones(n, dtype=torch.float64)
    blk, vector, _ = _device.block(v, n, "torch")
    assert vector and tuple(blk.shape) == (n, 1) and blk.data_ptr() == v.data_ptr()
    monkeypatch.setattr(_device, "on_device", lambda obj, kind: True)  # CPU tensors stand in for CUDA ones here
    assert _device.initial_guess(v, blk, n, "torch", (n,), None).data_ptr() != v.data_ptr()


def test_fingerprint_on_torch_matches_numpy(torch):
    rng = np.random.default_rng(10)
    data, idx = rng.standard_normal(3000), rng.integers(0, 99, 3000).astype(np.int32)
    ref = _device.fingerprint((idx, data), _device._NumpyOps)
    got = _device.fingerprint((torch.from_numpy(idx), torch.from_numpy(data)), _device._TorchOps)
    assert [g[1:] for g in got] == [r[1:] for r in ref]  # the same hashes (dtype names differ: torch.int32)
