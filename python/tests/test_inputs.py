# Input conversions and refusals: dtypes, index widths, shapes, device arrays; errors as typed exceptions.
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import relres

import spcg


def test_float32_is_promoted_with_a_warning(poisson):
    A32 = poisson.astype(np.float32)
    b = np.ones(poisson.shape[0])
    with pytest.warns(UserWarning, match="float32.*promoted to float64"):
        x, info = spcg.cg(A32, b, rtol=1e-10)
    assert info == 0 and x.dtype == np.float64
    assert relres(poisson, x, b) <= 2e-10
    with pytest.warns(UserWarning, match="b is float32"):
        spcg.cg(poisson, b.astype(np.float32))


def test_float64_gives_no_warning(poisson):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", spcg.HostBackendWarning)
        spcg.cg(poisson, np.ones(poisson.shape[0]))


def test_int64_indices_are_accepted(poisson):
    A64 = poisson.copy()  # SciPy's constructor would narrow the indices again: set them afterwards
    A64.indices = A64.indices.astype(np.int64)
    A64.indptr = A64.indptr.astype(np.int64)
    assert A64.indices.dtype == np.int64
    b = np.ones(poisson.shape[0])
    x, info = spcg.cg(A64, b, rtol=1e-10)
    assert info == 0 and relres(poisson, x, b) <= 2e-10
    assert spcg.info(A64)["nnz"] == poisson.nnz


def test_sizes_beyond_int32_are_refused_with_the_sizes():
    A = sp.csr_matrix((3, 3))
    A._shape = (2**31, 2**31)  # only the sizes matter: refused before any array is touched (no memory needed)
    with pytest.raises(ValueError, match=r"2147483648 x 2147483648.*int32"):
        spcg.cg(A, np.ones(3))


def test_integer_matrix_is_converted(poisson):
    A = sp.csr_matrix(np.array([[4, -1], [-1, 4]], dtype=np.int64))
    x, info = spcg.cg(A, np.array([1.0, 2.0]), rtol=1e-12)
    assert info == 0
    np.testing.assert_allclose(A @ x, [1.0, 2.0], rtol=1e-10)


def test_complex_is_refused(poisson):
    b = np.ones(poisson.shape[0])
    with pytest.raises(TypeError, match="complex"):
        spcg.cg(poisson.astype(np.complex128), b)
    with pytest.raises(TypeError, match="complex"):
        spcg.cg(poisson, b.astype(np.complex128))
    with pytest.raises(TypeError, match="complex"):
        spcg.Solver(poisson.astype(np.complex64))


def test_non_square_is_refused():
    A = sp.random(5, 4, density=0.5, format="csr", random_state=1)
    with pytest.raises(ValueError, match="square.*5 x 4"):
        spcg.cg(A, np.ones(5))
    with pytest.raises(ValueError, match="square"):
        spcg.Solver(np.ones((3, 2)))


def test_wrong_lengths_and_shapes_are_refused(poisson):
    n = poisson.shape[0]
    with pytest.raises(ValueError, match=f"b has {n + 1} rows, A has {n}"):
        spcg.cg(poisson, np.ones(n + 1))
    with pytest.raises(ValueError, match="vector"):
        spcg.cg(poisson, np.ones((n, 2, 2)))
    with pytest.raises(ValueError, match="x0"):
        spcg.cg(poisson, np.ones(n), x0=np.ones(n - 1))
    with pytest.raises(ValueError, match="x0 has shape"):
        spcg.cg(poisson, np.ones((n, 2)), x0=np.ones(n))
    with pytest.raises(ValueError):
        spcg.cg(poisson, np.ones(n), rtol=-1)


def test_nan_is_refused(poisson):
    b = np.ones(poisson.shape[0])
    b[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        spcg.cg(poisson, b)
    A = poisson.copy()
    A.data[0] = np.inf
    with pytest.raises(spcg.InputError):
        spcg.cg(A, np.ones(poisson.shape[0]))


def test_operator_without_entries_is_refused(poisson):
    import scipy.sparse.linalg as spla

    op = spla.aslinearoperator(poisson)
    with pytest.raises(TypeError, match="entries"):
        spcg.cg(op, np.ones(poisson.shape[0]))


def test_exception_types():
    assert issubclass(spcg.InputError, ValueError) and issubclass(spcg.InputError, spcg.Error)
    assert issubclass(spcg.UsageError, ValueError) and issubclass(spcg.UsageError, spcg.Error)
    assert issubclass(spcg.CudaError, RuntimeError) and issubclass(spcg.CudaError, spcg.Error)
    assert issubclass(spcg.MatrixRefusedError, spcg.InputError)
    assert issubclass(spcg.DeviceMemoryError, spcg.CudaError)
    with pytest.raises(spcg.InputError, match="unknown generator") as e:
        spcg.generate("nosuch:4")
    assert e.value.file == "nosuch:4"
    with pytest.raises(spcg.UsageError, match="solver 'gmres': expected cg, multi-cg or block-cg"):
        spcg.Solver(spcg.generate("poisson2d:4"), solver="gmres")
    with pytest.raises(spcg.UsageError, match="precond"):
        spcg.Solver(spcg.generate("poisson2d:4"), precond="ilu")
    with pytest.raises(TypeError, match="unknown option"):
        spcg.Solver(spcg.generate("poisson2d:4"), tolerance=1e-3)
    with pytest.raises(spcg.InputError, match="nothere.mtx"):
        spcg.mmread("/nonexistent/nothere.mtx")


def test_not_symmetric_is_refused_and_overridable():
    A = sp.csr_matrix(np.array([[4.0, 1.0], [0.0, 4.0]]))
    with pytest.raises(spcg.MatrixRefusedError, match="symmetric") as e:
        spcg.Solver(A, name="mine")
    assert e.value.overridable
    assert "mine" in str(e.value)
    solver = spcg.Solver(A, check_matrix=False, precond="none")
    assert solver.rows == 2


@pytest.mark.skipif(not __import__("conftest").gpu_available(), reason="the GPU backend needs a CUDA device")
def test_gpu_backend_is_used_where_there_is_a_device(poisson):
    assert spcg.Solver(poisson).backend == "gpu"


def test_gpu_backend_without_a_device_is_a_cuda_error(poisson):
    if __import__("conftest").gpu_available():
        pytest.skip("this machine has a GPU: the refusal needs none")
    with pytest.raises(spcg.CudaError, match="GPU backend"):
        spcg.Solver(poisson, backend="gpu")
    with pytest.raises(spcg.UsageError, match="host backend offers"):
        spcg.cg(poisson, np.ones(poisson.shape[0]), M="amg")


def test_host_backend_warns_once():
    import subprocess
    import sys

    code = ("import warnings, numpy as np, spcg\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    A = spcg.generate('poisson2d:8')\n"
            "    for _ in range(3): spcg.cg(A, np.ones(64))\n"
            "    spcg.Solver(A, backend='host')\n"
            "ok, _ = spcg._spcg.device_available()\n"
            "n = sum(issubclass(x.category, spcg.HostBackendWarning) for x in w)\n"
            "print(n, ok)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == (["0", "True"] if out[1] == "True" else ["1", "False"])
