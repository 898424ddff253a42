# Solver.update_values: new values on the setup's sparsity pattern give a fresh setup's solution (bit for bit in
# deterministic mode), another pattern or refused values raise the library's errors and leave the Solver as it
# was. Host-backend tests run everywhere; GPU tests skip without a GPU (CuPy / torch ones without those too).
import numpy as np
import pytest
import scipy.sparse as sp
from conftest import gpu_available, relres

import spcg


def perturbed(A, seed=3):
    """A's values changed on its pattern, symmetrically, the diagonal raised: SPD where A is diagonally dominant."""
    A = sp.csr_matrix(A, copy=True)
    coo = A.tocoo()
    lo, hi = np.minimum(coo.row, coo.col), np.maximum(coo.row, coo.col)
    factor = 0.75 + 0.5 * ((lo.astype(np.uint64) * 2654435761 + hi.astype(np.uint64) * (40503 + seed)) % 1000) / 1000.0
    factor[coo.row == coo.col] = 1.5
    A.data = A.data * factor  # tocoo keeps CSR's entry order
    return A


def scaled(A, by):
    A = sp.csr_matrix(A, copy=True)
    A.data *= by
    return A


def solve_random(solver, n, k=1, seed=5):
    b = np.random.default_rng(seed).standard_normal((n, k))
    x, r = solver.solve(b)
    assert r.converged
    return x, r, b


# ---- host backend ----

def test_host_update_equals_a_fresh_setup(poisson):
    B = perturbed(poisson)
    updated = spcg.Solver(poisson, precond="jacobi", backend="host", rtol=1e-10)
    assert updated.update_phases == [] and updated.updates == 0
    x_old, _, _ = solve_random(updated, poisson.shape[0])
    assert updated.update_values(B) is updated
    x_new, _, b = solve_random(updated, poisson.shape[0])
    x_fresh, _, _ = solve_random(spcg.Solver(B, precond="jacobi", backend="host", rtol=1e-10), poisson.shape[0])
    assert np.array_equal(x_new, x_fresh)
    assert np.max(np.abs(x_new - x_old)) > 1e-3 * np.max(np.abs(x_new))
    assert relres(B, x_new, b)[0] <= 20 * 1e-10
    assert updated.updates == 1
    assert updated.update_phases[-1][0] == "update (total)"
    assert [name for name, _ in updated.setup_phases] == ["statistics"]


def test_host_update_refuses_another_pattern_and_bad_values(poisson):
    solver = spcg.Solver(poisson, precond="jacobi", backend="host", rtol=1e-10, name="P")
    x_before, _, _ = solve_random(solver, poisson.shape[0])
    with pytest.raises(spcg.InputError, match="the new matrix is 625 x 625, the solver's 576 x 576"):
        solver.update_values(spcg.generate("poisson2d:25"))
    moved = sp.csr_matrix(poisson, copy=True)
    moved.indices = moved.indices.copy()
    last = moved.indptr[17] - 1  # row 17's (1-based) last entry, one column further
    moved.indices[last] += 1
    with pytest.raises(spcg.InputError, match=r"row 17's pattern differs: its entry \d+ is in column") as e:
        solver.update_values(moved)
    assert e.value.file == "P"
    nan = sp.csr_matrix(poisson, copy=True)
    nan.data[3] = np.nan
    with pytest.raises(spcg.MatrixRefusedError, match="NaN or Inf") as e:
        solver.update_values(nan)
    assert not e.value.overridable
    asymmetric = sp.csr_matrix(poisson, copy=True)
    asymmetric.data[1] *= 2
    with pytest.raises(spcg.MatrixRefusedError, match="not symmetric") as e:
        solver.update_values(asymmetric)
    assert e.value.overridable
    assert solver.updates == 0
    x_after, _, _ = solve_random(solver, poisson.shape[0])
    assert np.array_equal(x_before, x_after)  # the old values kept


def test_host_update_takes_any_host_format(poisson):
    B = scaled(perturbed(poisson), 2.5)
    by_csr = spcg.Solver(poisson, precond="jacobi", backend="host", rtol=1e-10).update_values(B)
    by_coo = spcg.Solver(poisson, precond="jacobi", backend="host", rtol=1e-10).update_values(B.tocoo())
    assert np.array_equal(solve_random(by_csr, B.shape[0])[0], solve_random(by_coo, B.shape[0])[0])


# ---- GPU backend ----

requires_gpu = pytest.mark.skipif(not gpu_available(), reason="spcg sees no usable GPU")


@requires_gpu
@pytest.mark.parametrize("precond", ["none", "jacobi", "block-jacobi", "chebyshev", "amg"])
@pytest.mark.parametrize("kernel", ["csr-vector", "dia", "auto"])
def test_gpu_update_equals_a_fresh_setup(precond, kernel):
    A = spcg.generate("jump3d:16:1")
    B = spcg.generate("jump3d:16:2")  # other jumps on the same grid
    opts = dict(precond=precond, kernel=kernel, rtol=1e-9, deterministic=True, backend="gpu")
    updated = spcg.Solver(A, **opts)
    chosen = updated.kernel(1)
    updated.update_values(B)
    x_new, r_new, b = solve_random(updated, A.shape[0], seed=2)
    x_fresh, r_fresh, _ = solve_random(spcg.Solver(B, **opts), A.shape[0], seed=2)
    assert np.array_equal(x_new, x_fresh)
    assert r_new.iterations == r_fresh.iterations
    assert updated.kernel(1) == chosen
    assert relres(B, x_new, b)[0] <= 20 * 1e-9
    names = [name for name, _ in updated.update_phases]
    assert names[-1] == "update (total)" and "preconditioner" in names


@requires_gpu
def test_gpu_update_of_a_file_with_block_cg():
    import pathlib

    A = spcg.mmread(pathlib.Path(__file__).resolve().parents[2] / "inputs" / "fv1.mtx")
    opts = dict(solver="block-cg", precond="amg", rtol=1e-9, deterministic=True, expected_columns=4, backend="gpu")
    updated = spcg.Solver(A, **opts).update_values(scaled(A, 2.5))
    x_new, _, _ = solve_random(updated, A.shape[0], k=4)
    x_fresh, _, _ = solve_random(spcg.Solver(scaled(A, 2.5), **opts), A.shape[0], k=4)
    assert np.array_equal(x_new, x_fresh)


@requires_gpu
def test_gpu_refusals_keep_the_old_values(poisson):
    solver = spcg.Solver(poisson, precond="amg", rtol=1e-9, deterministic=True, backend="gpu")
    x_before, _, _ = solve_random(solver, poisson.shape[0])
    with pytest.raises(spcg.InputError, match="pattern differs|entries"):
        solver.update_values(poisson + sp.eye(poisson.shape[0], k=3) + sp.eye(poisson.shape[0], k=-3))
    nan = sp.csr_matrix(poisson, copy=True)
    nan.data[0] = np.inf
    with pytest.raises(spcg.MatrixRefusedError, match="NaN or Inf"):
        solver.update_values(nan)
    assert np.array_equal(solve_random(solver, poisson.shape[0])[0], x_before)


@requires_gpu
def test_cupy_update_is_checked_and_copied_on_the_device(poisson):
    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    import cupyx.scipy.sparse as csp

    B = perturbed(poisson)
    opts = dict(precond="chebyshev", rtol=1e-9, deterministic=True)
    on_device = spcg.Solver(csp.csr_matrix(poisson), **opts).update_values(csp.csr_matrix(B))
    on_host = spcg.Solver(poisson, **opts).update_values(B)
    b = cp.asarray(np.random.default_rng(4).standard_normal(poisson.shape[0]))
    x_device, r = on_device.solve(b)
    assert r.converged
    x_host, _ = on_host.solve(cp.asnumpy(b))
    assert np.array_equal(cp.asnumpy(x_device), x_host)
    moved = sp.csr_matrix(poisson, copy=True)
    moved.indices = moved.indices.copy()
    moved.indices[moved.indptr[17] - 1] += 1
    with pytest.raises(spcg.InputError, match="row 17's pattern differs"):
        on_device.update_values(csp.csr_matrix(moved))


@requires_gpu
def test_torch_update(poisson):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    B = perturbed(poisson)

    def tensor(M):
        return torch.sparse_csr_tensor(torch.tensor(M.indptr, dtype=torch.int64), torch.tensor(M.indices, dtype=torch.int64),
                                       torch.tensor(M.data), size=M.shape, device="cuda")

    opts = dict(precond="jacobi", rtol=1e-9, deterministic=True)
    on_device = spcg.Solver(tensor(poisson), **opts).update_values(tensor(B))
    on_host = spcg.Solver(poisson, **opts).update_values(B)
    b = np.random.default_rng(6).standard_normal(poisson.shape[0])
    assert np.array_equal(on_device.solve(b)[0], on_host.solve(b)[0])
