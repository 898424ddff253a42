# spcg.cg against scipy.sparse.linalg.cg and spsolve: the same signature, the same (x, info), the stop rule
# recomputed in NumPy. On this machine the library solves on the host backend; the tests hold on either.
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import inspect

from conftest import relres

import spcg


def scipy_rtol(value):
    # SciPy's cg took `tol` until 1.12 and takes only `rtol` from 1.14 (Debian 12 has 1.10, the GPU machine 1.16)
    return {"rtol" if "rtol" in inspect.signature(spla.cg).parameters else "tol": value}


@pytest.mark.parametrize("matrix", ["poisson", "random_spd"])
def test_cg_matches_scipy(matrix, request):
    A = request.getfixturevalue(matrix)
    n = A.shape[0]
    b = np.random.default_rng(1).standard_normal(n)
    x, info = spcg.cg(A, b, rtol=1e-10)
    assert info == 0
    assert x.shape == (n,) and x.dtype == np.float64
    assert relres(A, x, b) <= 2e-10
    x_direct = spla.spsolve(sp.csc_matrix(A), b)
    np.testing.assert_allclose(x, x_direct, rtol=1e-6, atol=1e-8 * np.abs(x_direct).max())
    x_scipy, info_scipy = spla.cg(A, b, **scipy_rtol(1e-10), atol=0.0)
    assert info_scipy == 0
    np.testing.assert_allclose(x, x_scipy, rtol=1e-6, atol=1e-8 * np.abs(x_direct).max())


@pytest.mark.parametrize("rtol", [1e-3, 1e-6, 1e-9])
def test_rtol_is_honoured(poisson, rtol):
    b = np.random.default_rng(2).standard_normal(poisson.shape[0])
    x, info = spcg.cg(poisson, b, rtol=rtol)
    assert info == 0
    res = relres(poisson, x, b)
    assert res <= 1.5 * rtol  # recursive and true residual differ by rounding
    assert res > 1e-3 * rtol  # and it stopped near the target, not far past it


def test_atol_is_honoured(poisson):
    b = np.ones(poisson.shape[0])
    atol = 1e-4 * np.linalg.norm(b)
    x, info = spcg.cg(poisson, b, rtol=0.0, atol=atol)
    assert info == 0
    assert np.linalg.norm(b - poisson @ x) <= 1.5 * atol
    # atol above rtol's target: the larger one decides, as in SciPy
    x2, info2 = spcg.cg(poisson, b, rtol=1e-12, atol=atol)
    assert info2 == 0 and np.linalg.norm(b - poisson @ x2) <= 1.5 * atol


def test_maxiter_reached_gives_positive_info(poisson):
    b = np.ones(poisson.shape[0])
    x, info = spcg.cg(poisson, b, rtol=1e-12, maxiter=5)
    assert info > 0
    assert info <= 5
    assert relres(poisson, x, b) > 1e-12
    _, info_scipy = spla.cg(poisson, b, **scipy_rtol(1e-12), atol=0.0, maxiter=5)
    assert info_scipy > 0  # the same verdict as SciPy's


def test_x0_is_used(poisson):
    b = np.random.default_rng(3).standard_normal(poisson.shape[0])
    x, _ = spcg.cg(poisson, b, rtol=1e-10)
    # the solution as the initial guess: nothing left to do
    x2, info = spcg.cg(poisson, b, x0=x, rtol=1e-8)
    assert info == 0
    solver = spcg.Solver(poisson, precond="none", rtol=1e-8)
    _, r = solver.solve(b, x0=x)
    assert r.iterations[0] == 0
    # a near guess takes fewer iterations than zero
    _, r0 = solver.solve(b)
    _, r1 = solver.solve(b, x0=x + 1e-6)
    assert r1.iterations[0] < r0.iterations[0]
    # x0 is not modified
    x_copy = x.copy()
    spcg.cg(poisson, b, x0=x, rtol=1e-12)
    np.testing.assert_array_equal(x, x_copy)


@pytest.mark.parametrize("order", ["C", "F"])
def test_block_right_hand_sides(poisson, order):
    n = poisson.shape[0]
    B = np.asarray(np.random.default_rng(4).standard_normal((n, 3)), order=order)
    X, info = spcg.cg(poisson, B, rtol=1e-9)
    assert info == 0
    assert X.shape == (n, 3)
    assert np.all(relres(poisson, X, B) <= 1.5e-9)
    for j in range(3):  # each column as its own solve
        xj, _ = spcg.cg(poisson, np.ascontiguousarray(B[:, j]), rtol=1e-9)
        np.testing.assert_allclose(X[:, j], xj, rtol=1e-10, atol=1e-12)


def test_block_with_x0_in_fortran_order(poisson):
    n = poisson.shape[0]
    B = np.asfortranarray(np.random.default_rng(5).standard_normal((n, 2)))
    X, _ = spcg.cg(poisson, B, rtol=1e-10)
    X0 = np.asfortranarray(X)
    _, r = spcg.Solver(poisson, precond="none", rtol=1e-8).solve(B, X0)
    assert r.converged and list(r.iterations) == [0, 0]


def test_jacobi_and_auto_names(random_spd):
    b = np.ones(random_spd.shape[0])
    for M in ("jacobi", "auto", "none"):
        x, info = spcg.cg(random_spd, b, rtol=1e-10, M=M)
        assert info == 0, M
        assert relres(random_spd, x, b) <= 2e-10, M


def test_callable_M_is_refused(poisson):
    b = np.ones(poisson.shape[0])
    M = spla.LinearOperator(poisson.shape, matvec=lambda v: v)
    with pytest.raises(TypeError, match="name"):
        spcg.cg(poisson, b, M=M)
    with pytest.raises(TypeError, match="name"):
        spcg.cg(poisson, b, M=sp.identity(poisson.shape[0]))
    with pytest.raises(ValueError, match="jacobi"):
        spcg.cg(poisson, b, M="ilu")


def test_callback_gets_the_solution_once(poisson):
    b = np.ones(poisson.shape[0])
    seen = []
    x, info = spcg.cg(poisson, b, callback=lambda xk: seen.append(xk.copy()))
    assert info == 0 and len(seen) == 1
    np.testing.assert_array_equal(seen[0], x)


def test_zero_right_hand_side(poisson):
    x, info = spcg.cg(poisson, np.zeros(poisson.shape[0]))
    assert info == 0
    assert not np.any(x)


def test_dense_input_and_formats(poisson):
    b = np.ones(poisson.shape[0])
    x_ref, _ = spcg.cg(poisson, b, rtol=1e-10)
    for A in (poisson.tocoo(), poisson.tocsc(), poisson.todok(), poisson.tolil(), sp.csr_array(poisson),
              sp.bsr_matrix(poisson), poisson.toarray()):
        x, info = spcg.cg(A, b, rtol=1e-10)
        assert info == 0, type(A)
        np.testing.assert_allclose(x, x_ref, rtol=1e-12, atol=1e-14)


def test_duplicates_are_summed(poisson):
    coo = poisson.tocoo()
    # every entry split in two halves: the sum is the matrix
    doubled = sp.coo_matrix((np.concatenate([coo.data / 2, coo.data / 2]),
                             (np.concatenate([coo.row, coo.row]), np.concatenate([coo.col, coo.col]))),
                            shape=coo.shape)
    b = np.ones(poisson.shape[0])
    x, info = spcg.cg(doubled, b, rtol=1e-10)
    assert info == 0 and relres(poisson, x, b) <= 2e-10
    csr = doubled.tocsr()  # not canonical: the caller's copy is left as it was
    nnz = csr.nnz
    spcg.cg(csr, b)
    assert csr.nnz == nnz


def test_non_positive_definite_is_not_converged():
    # symmetric, positive diagonal, indefinite: CG breaks down or does not converge; never info 0
    A = sp.csr_matrix(np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
    x, info = spcg.cg(A, np.array([1.0, -1.0, 1.0]), maxiter=50, rtol=1e-12)
    if info == 0:  # CG may still find the solution of a small indefinite system
        assert relres(A, x, np.array([1.0, -1.0, 1.0])) <= 1e-10
