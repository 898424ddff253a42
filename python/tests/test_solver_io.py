# spcg.Solver (setup kept, the result's report), mmread / mmwrite against scipy.io, generate, info.
import pathlib

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from conftest import gpu_available, relres

import spcg

INPUTS = pathlib.Path(__file__).resolve().parents[2] / "inputs"
GENERATED = {  # spec: (rows, nnz)
    "poisson2d:16": (256, 5 * 256 - 4 * 16),
    "poisson3d:8": (512, 7 * 512 - 6 * 64),  # a boundary face drops one neighbour
    "poisson2d9:10": (100, (3 * 10 - 2) ** 2),  # sum over offsets (di, dj) of (n - |di|)(n - |dj|)
}


def test_solver_reuse_across_right_hand_sides(poisson):
    solver = spcg.Solver(poisson, precond="auto", rtol=1e-9)
    n = poisson.shape[0]
    assert solver.rows == n
    assert solver.backend in ("gpu", "host")
    rng = np.random.default_rng(11)
    for _ in range(2):
        b = rng.standard_normal(n)
        x, r = solver.solve(b)
        assert x.shape == (n,)
        assert r.converged and r.status == ["converged"]
        assert relres(poisson, x, b) <= 1.5e-9
        np.testing.assert_allclose(r.relative_residual[0], relres(poisson, x, b), rtol=1e-3)
        assert r.b_norm[0] == pytest.approx(np.linalg.norm(b))
        assert r.iterations[0] > 0
    B = rng.standard_normal((n, 4))
    X, r = solver.solve(B)
    assert X.shape == (n, 4) and len(r.columns) == 4 and r.converged
    assert np.all(relres(poisson, X, B) <= 1.5e-9)


def test_result_report(poisson):
    solver = spcg.Solver(poisson, precond="jacobi", rtol=1e-8, keep_history=True)
    x, r = solver.solve(np.ones(poisson.shape[0]))
    assert r.backend == solver.backend
    names = [p[0] for p in r.phases]
    assert names[-2:] == ["vectors", "solve"] and all(ms >= 0 for _, ms in r.phases)
    assert [p[0] for p in solver.setup_phases] == names[:-2]
    assert r.solve_ms >= 0
    assert isinstance(r.kernels, list)
    assert r.kernel == solver.kernel(1)
    assert "converged" in repr(r)
    c = r.columns[0]
    assert c.status == "converged" and c.iterations == r.iterations[0]
    assert c.true_residual == pytest.approx(r.true_residual[0])
    assert c.recursive_residual <= 1e-8 * c.b_norm * 1.0000001
    if solver.backend == "host":
        assert r.solver == "eigen-cg" and solver.kernel(1) == "eigen" and solver.kernel_reason == ""
        assert r.preconditioner is None  # the host's Jacobi has no report
    else:
        assert r.preconditioner.kind == "jacobi"
    stats = solver.stats
    assert stats["rows"] == poisson.shape[0] and stats["numerically_symmetric"]


def test_solve_with_other_tolerances(poisson):
    solver = spcg.Solver(poisson, precond="none", rtol=1e-4)
    native = solver._native
    b = np.ones(poisson.shape[0])
    _, loose = solver.solve(b)
    x, tight = solver.solve(b, rtol=1e-10)
    assert solver._native is native  # the setup stays: only the stop rule changed
    assert tight.iterations[0] > loose.iterations[0]
    assert relres(poisson, x, b) <= 1.5e-10
    assert solver.rtol == 1e-10  # kept for the next solve
    _, limited = solver.solve(b, maxiter=3)
    assert not limited.converged and limited.status == ["max-iterations"] and limited.iterations[0] <= 3


def test_solver_options_reach_the_library(poisson):
    with pytest.raises(spcg.UsageError, match="backend"):
        spcg.Solver(poisson, backend="tpu")
    s = spcg.Solver(poisson, backend="host", precond="none", expected_columns=2, check_every=4)
    assert s.backend == "host"
    assert "backend" in spcg.Solver.__doc__ and "amg_theta" in spcg.Solver.__doc__
    assert spcg.PRECONDITIONERS == ("none", "jacobi", "block-jacobi", "chebyshev", "amg", "auto")


@pytest.mark.parametrize("spec", sorted(GENERATED))
def test_generate(spec):
    A = spcg.generate(spec)
    rows, nnz = GENERATED[spec]
    assert isinstance(A, sp.csr_matrix)
    assert A.shape == (rows, rows) and A.nnz == nnz
    assert A.dtype == np.float64 and A.indices.dtype == np.int32
    assert abs(A - A.T).max() == 0
    assert A.has_canonical_format


def test_info(poisson):
    d = spcg.info(poisson)
    for key in ("rows", "cols", "nnz", "row_min", "row_max", "row_mean", "row_stddev", "row_length_histogram",
                "bandwidth", "distinct_diagonals", "square", "pattern_symmetric", "numerically_symmetric",
                "diagonal_positive", "diagonally_dominant_rows", "explicit_zeros", "duplicates_summed", "ell_fill",
                "dia_fill", "max_abs_value", "non_finite_values"):
        assert key in d, key
    assert (d["rows"], d["cols"], d["nnz"]) == (576, 576, poisson.nnz)
    assert (d["row_min"], d["row_max"]) == (3, 5)
    assert d["bandwidth"] == 24 and d["distinct_diagonals"] == 5
    assert d["square"] and d["numerically_symmetric"] and d["diagonal_positive"]
    assert spcg.info("poisson2d:24") == d
    rect = spcg.info(sp.random(4, 6, density=0.5, random_state=2))
    assert (rect["rows"], rect["cols"], rect["square"]) == (4, 6, False)


def test_mmwrite_then_scipy_reads_it(tmp_path, random_spd):
    path = tmp_path / "a.mtx"
    spcg.mmwrite(path, random_spd, comment="written by spcg")
    ours = random_spd.tocsr()
    theirs = scipy.io.mmread(str(path)).tocsr()
    assert theirs.shape == ours.shape
    assert abs(theirs - ours).max() == 0  # 17 digits: exact
    assert "written by spcg" in path.read_text()
    sym = tmp_path / "sym.mtx"
    spcg.mmwrite(sym, random_spd, symmetric=True)
    assert "symmetric" in sym.read_text().splitlines()[0]
    assert abs(scipy.io.mmread(str(sym)).tocsr() - ours).max() == 0


def test_scipy_writes_then_mmread(tmp_path, random_spd):
    path = tmp_path / "b.mtx"
    scipy.io.mmwrite(str(path), random_spd.tocoo(), symmetry="symmetric")
    A, meta = spcg.mmread(path, return_info=True)
    assert isinstance(A, sp.csr_matrix) and A.indices.dtype == np.int32
    assert meta["symmetry"] == "symmetric" and meta["field"] == "real"
    ref = scipy.io.mmread(str(path)).tocsr()
    assert A.shape == ref.shape and A.nnz == ref.nnz
    assert abs(A - ref).max() == 0
    # the round trip through both writers and readers
    again = tmp_path / "c.mtx"
    spcg.mmwrite(again, A)
    assert abs(spcg.mmread(again) - A).max() == 0


def test_mmread_of_the_inputs_file():
    import pathlib

    fv1 = pathlib.Path(__file__).resolve().parents[2] / "inputs" / "fv1.mtx"
    if not fv1.exists():
        pytest.skip(f"{fv1} is not there")
    A = spcg.mmread(fv1)
    ref = scipy.io.mmread(str(fv1)).tocsr()
    assert A.shape == ref.shape and abs(A - ref).max() == 0
    b = np.ones(A.shape[0])
    x, info = spcg.cg(A, b, rtol=1e-8, M="jacobi")
    assert info == 0 and relres(A, x, b) <= 1.5e-8


def test_mmread_error_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.0\n3 1 2.0\n")
    with pytest.raises(spcg.InputError) as e:
        spcg.mmread(bad)
    assert e.value.file.endswith("bad.mtx") and e.value.line == 4
    assert isinstance(e.value, ValueError)


def test_no_memory_growth_over_many_small_solves():
    import resource

    A = spcg.generate("poisson2d:8")
    b = np.ones(A.shape[0])
    solver = spcg.Solver(A, precond="jacobi")

    def rss_kib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() // 1024

    for _ in range(100):  # warm up: allocator pools, first-call caches
        solver.solve(b)
        spcg.cg(A, b)
    before = rss_kib()
    for _ in range(1000):
        solver.solve(b)
        spcg.cg(A, b)
    grown = rss_kib() - before
    assert grown < 4096, f"resident memory grew by {grown} KiB over 1000 solves and 1000 cg calls"


def test_recurrence_option_is_typed_and_reported(poisson):
    # the one-reduction recurrence by name; a bad name is the library's UsageError listing the names
    with pytest.raises(spcg.UsageError, match="one-reduction"):
        spcg.Solver(poisson, recurrence="pipelined")
    s = spcg.Solver(poisson, precond="jacobi", recurrence="one-reduction")
    b = np.ones(poisson.shape[0])
    x, result = s.solve(b, rtol=1e-10)
    assert result.converged and relres(poisson, x, b) <= 1.5e-10
    # the GPU runs Chronopoulos & Gear's recurrence; the host backend (Eigen's CG) has one recurrence
    assert result.used_one_reduction == (s.backend == "gpu")
    with pytest.raises(spcg.UsageError, match="one-reduction"):
        spcg.Solver(poisson, solver="block-cg", recurrence="one-reduction")
    with pytest.raises(spcg.UsageError, match="not chebyshev"):
        spcg.Solver(poisson, precond="chebyshev", recurrence="one-reduction")


def test_precision_option_and_its_reason(poisson):
    s = spcg.Solver(poisson, precond="jacobi")
    b = np.ones(poisson.shape[0])
    if s.backend == "host":
        assert s.precision == "double" and "host" in s.precision_reason
        with pytest.raises(spcg.UsageError, match="GPU backend"):
            spcg.Solver(poisson, precision="mixed")
        return
    # the GPU: FP32 values of dia in the iteration, judged by the FP64 residual
    # auto: the one-launch persistent CG (FP64) at this size, or mixed on FP32 numbers (poisson's 4 and -1)
    assert (s.precision, "persistent" in s.precision_reason or "FP32 number" in s.precision_reason) in \
        (("double", True), ("mixed", True)), s.precision_reason
    m = spcg.Solver(poisson, precond="jacobi", kernel="dia", precision="mixed")
    assert m.precision == "mixed" and "nothing lost" in m.precision_reason
    x, result = m.solve(b, rtol=1e-10)
    assert result.converged and relres(poisson, x, b) <= 1.5e-10
    with pytest.raises(spcg.UsageError, match="no FP32-values variant"):
        spcg.Solver(poisson, kernel="csr-scalar", precision="mixed")
    # AMG: the hierarchy's dia level in FP32, and cg's products on that copy (poisson's values are FP32 numbers)
    a = spcg.Solver(poisson, precond="amg", kernel="dia", precision="mixed", amg_coarse_rows=50)
    assert a.precision == "mixed" and "dia-f32" in a.precision_reason, a.precision_reason
    assert "iteration on the AMG hierarchy's finest level" in a.precision_reason, a.precision_reason
    x, result = a.solve(b, rtol=1e-10)
    assert result.converged and relres(poisson, x, b) <= 1.5e-10


def test_unreachable_tolerance_stagnates_never_converges():
    # the GPU's general PCG (AMG) and cg confirm a claim by b - A x; a tolerance FP64 cannot reach ends "stagnated"
    # with its true residual, well inside maxiter (the host's Eigen CG has no such check: GPU only)
    if not gpu_available():
        pytest.skip("no GPU: the host backend's Eigen CG runs to maxiter")
    A = spcg.mmread(INPUTS / "nos4.mtx")
    b = np.random.default_rng(5).standard_normal(A.shape[0])
    for precond in ("amg", "jacobi"):
        s = spcg.Solver(A, precond=precond, amg_coarse_rows=20, maxiter=40 * A.shape[0])
        x, result = s.solve(b, rtol=1e-18)
        # (or a breakdown, where the last claim at the floor was one: rounding took p'Ap to 0)
        assert not result.converged and result.status[0] in ("stagnated", "breakdown"), (precond, result.status)
        assert result.iterations[0] < 20 * A.shape[0]
        # at the floor the residual is the rounding of computing it: the device's and the host's agree to that
        true = relres(A, x, b)
        assert true > 1e-18 and abs(result.true_residual[0] / result.b_norm[0] - true) <= 0.5 * true
        x, result = s.solve(b, rtol=1e-10)
        assert result.converged and relres(A, x, b) <= 1.5e-10


def test_fused_smoothing_is_the_same_bits_apart():
    if not gpu_available():
        pytest.skip("no GPU: the fused smoothing step is the DIA kernel's")
    A = spcg.generate("poisson3d:24")
    b = np.ones(A.shape[0])
    xs = []
    for fuse in (True, False):
        s = spcg.Solver(A, precond="amg", kernel="dia", deterministic=True, fuse_smoothing=fuse)
        x, result = s.solve(b, rtol=1e-10)
        assert result.converged
        # (the report names the level whose steps ran fused: the comparison is not of two unfused runs)
        assert ("fused into the product on level(s) 0" in result.preconditioner.detail) == fuse, result.preconditioner.detail
        xs.append(x)
    assert np.array_equal(xs[0].view(np.uint64), xs[1].view(np.uint64))
