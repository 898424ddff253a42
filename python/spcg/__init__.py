"""spcg: conjugate gradients for sparse symmetric positive definite systems, on the GPU (host fallback).

    import spcg
    x, info = spcg.cg(A, b, rtol=1e-8, M="jacobi")        # scipy.sparse.linalg.cg's signature and return
    solver = spcg.Solver(A, precond="auto")                 # keeps the setup (kernel choice, AMG hierarchy, ...)
    x, result = solver.solve(B)                             # B: (n,) or (n, k); result: per column, phases, ...

Matrices: scipy.sparse matrices or arrays of any format (or a dense 2-D NumPy array), converted once to CSR with
sorted indices and duplicates summed, int32 indices and float64 values. Right-hand sides: NumPy vectors (n,) or
blocks (n, k) in C or Fortran order. NumPy in, NumPy out. Without a usable GPU the library solves on the host
(Eigen's CG, with Jacobi or no preconditioner) and says so once with a HostBackendWarning.

Errors are spcg.Error subclasses that are also the built-in a Python user expects: InputError and UsageError are
ValueErrors, CudaError a RuntimeError; MatrixRefusedError (an InputError) when the checks refuse the matrix.

Not there yet: CuPy / PyTorch device arrays (zero-copy through __cuda_array_interface__ / DLPack), Ctrl-C
between checks, result.plot().
"""

import warnings as _warnings

import numpy as _np

from . import _spcg
from ._spcg import (  # noqa: F401 (re-exported)
    CommunicationError,
    CudaError,
    DeviceMemoryError,
    Error,
    InputError,
    MatrixRefusedError,
    UsageError,
)

__version__ = _spcg.__version__
__all__ = [
    "cg", "Solver", "SolveResult", "ColumnResult", "KernelStat", "PreconditionerReport", "mmread", "mmwrite",
    "generate", "info", "Error", "InputError", "UsageError", "CudaError", "MatrixRefusedError", "DeviceMemoryError",
    "CommunicationError", "HostBackendWarning", "PRECONDITIONERS", "SOLVERS",
]

SOLVERS = tuple(_spcg.solver_names)          # cg, multi-cg, block-cg
PRECONDITIONERS = tuple(_spcg.precond_names)  # none, jacobi, block-jacobi, chebyshev, amg, auto
_INT32_MAX = 2**31 - 1
_DEFAULTS = _spcg.default_options()


class HostBackendWarning(UserWarning):
    """No usable GPU: spcg solves on the host (Eigen's CG; preconditioner none or jacobi, auto takes jacobi)."""


_host_warned = False
_PACKAGE_DIR = __file__.rsplit("/", 1)[0]


def _stacklevel():
    """The stacklevel of the first frame outside this package (a warning points at the caller's line)."""
    import sys

    level, f = 1, sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, f = level + 1, f.f_back
    return level


def _warn_host_backend(backend_option):
    global _host_warned
    if _host_warned or backend_option == "host":
        return
    _host_warned = True
    _, why = _spcg.device_available()
    _warnings.warn(f"spcg: {why or 'no usable GPU'}: solving on the host (Eigen's CG)", HostBackendWarning,
                   stacklevel=_stacklevel())


# ---- conversions ---------------------------------------------------------------------------------------------
class _Csr:
    """A matrix as the library takes it: int32 indptr / indices, float64 data, canonical (sorted, summed)."""

    __slots__ = ("shape", "indptr", "indices", "data", "duplicates_summed")

    def __init__(self, shape, indptr, indices, data, duplicates_summed=0):
        self.shape, self.indptr, self.indices, self.data = shape, indptr, indices, data
        self.duplicates_summed = duplicates_summed

    def arrays(self):
        return self.shape[0], self.shape[1], self.indptr, self.indices, self.data


def _is_sparse(A):
    mod = type(A).__module__ or ""
    if not mod.startswith("scipy."):
        return False
    import scipy.sparse

    return scipy.sparse.issparse(A)


def _check_dtype(dtype, what):
    if _np.issubdtype(dtype, _np.complexfloating):
        raise TypeError(f"{what} is complex ({dtype}): spcg solves real symmetric positive definite systems only")
    if dtype == _np.float64:
        return
    if _np.issubdtype(dtype, _np.floating):
        _warnings.warn(f"spcg: {what} is {dtype}: promoted to float64 (spcg computes in float64)", UserWarning,
                       stacklevel=_stacklevel())
    elif not (_np.issubdtype(dtype, _np.integer) or dtype == _np.bool_):
        raise TypeError(f"{what} has dtype {dtype}: expected real numbers (float64, or one promoted to it)")


def _as_csr(A, square=True, what="A"):
    """Converts A (scipy.sparse of any format, or a dense 2-D array) to the library's CSR, once."""
    if isinstance(A, _Csr):
        return A
    if hasattr(A, "__cuda_array_interface__") or type(A).__module__.split(".")[0] in ("cupy", "cupyx", "torch"):
        raise TypeError(f"{what}: device arrays (CuPy, PyTorch) are not supported yet; pass a scipy.sparse matrix")
    if _is_sparse(A):
        shape = tuple(A.shape)
        if len(shape) != 2:
            raise ValueError(f"{what} must be 2-D, got shape {shape}")
        _check_dtype(A.dtype, what)
        if square and shape[0] != shape[1]:
            raise ValueError(f"{what} must be square, got shape {shape[0]} x {shape[1]}")
        csr = A.tocsr()
        if A.format != "csr" and csr is A:  # pragma: no cover (tocsr of another format always copies)
            csr = csr.copy()
    elif callable(getattr(A, "matvec", None)) or callable(A):
        raise TypeError(f"{what} is a {type(A).__name__}: spcg needs the matrix's entries "
                        "(a scipy.sparse matrix or a dense 2-D NumPy array), not an operator")
    else:
        import scipy.sparse

        arr = _np.asarray(A)
        if arr.ndim != 2:
            raise ValueError(f"{what} must be 2-D, got shape {arr.shape}")
        _check_dtype(arr.dtype, what)
        if square and arr.shape[0] != arr.shape[1]:
            raise ValueError(f"{what} must be square, got shape {arr.shape[0]} x {arr.shape[1]}")
        csr = scipy.sparse.csr_matrix(arr)
    rows, cols = csr.shape
    if rows > _INT32_MAX or cols > _INT32_MAX or csr.nnz > _INT32_MAX:
        raise ValueError(f"{what} is {rows} x {cols} with {csr.nnz} stored entries: spcg's indices are int32, "
                         f"so rows, columns and entries must each be at most {_INT32_MAX}")
    duplicates = 0
    if not csr.has_canonical_format:  # unsorted or duplicate column indices: fix a copy, never the caller's matrix
        before = csr.nnz
        csr = csr.copy()
        csr.sum_duplicates()  # sorts as well
        duplicates = before - csr.nnz
    # int64 indices fit once the sizes do (every index is below rows, cols or nnz)
    indptr = _np.ascontiguousarray(csr.indptr, dtype=_np.int32)
    indices = _np.ascontiguousarray(csr.indices, dtype=_np.int32)
    data = _np.ascontiguousarray(csr.data, dtype=_np.float64)
    return _Csr((rows, cols), indptr, indices, data, duplicates)


def _as_block(b, n, what="b"):
    """b as a row-major (n, k) float64 block; also whether it was a vector."""
    if hasattr(b, "__cuda_array_interface__") or type(b).__module__.split(".")[0] in ("cupy", "torch"):
        raise TypeError(f"{what}: device arrays (CuPy, PyTorch) are not supported yet; pass a NumPy array")
    if _is_sparse(b):
        b = b.toarray()
    arr = _np.asarray(b)
    _check_dtype(arr.dtype, what)
    if arr.ndim == 1:
        vector = True
        arr = arr.reshape(-1, 1)
    elif arr.ndim == 2:
        vector = False
    else:
        raise ValueError(f"{what} must be a vector (n,) or a block (n, k), got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"{what} has {arr.shape[0]} rows, A has {n}")
    if arr.shape[1] == 0:
        raise ValueError(f"{what} has no columns")
    block = _np.ascontiguousarray(arr, dtype=_np.float64)  # Fortran order or a view: one row-major copy
    if not _np.isfinite(block).all():
        raise ValueError(f"{what} holds NaN or Inf")
    return block, vector


def _csr_matrix(t):
    import scipy.sparse

    rows, cols, indptr, indices, data = t
    A = scipy.sparse.csr_matrix((data, indices, indptr), shape=(rows, cols), copy=False)
    A.has_sorted_indices = True  # the library's CSR is canonical
    return A


# ---- results -------------------------------------------------------------------------------------------------
class ColumnResult:
    """One column's outcome: status, iterations, ||b||, the solver's recursive ||r|| and the true ||b - A x||."""

    __slots__ = ("status", "iterations", "b_norm", "recursive_residual", "true_residual")

    def __init__(self, status, iterations, b_norm, recursive_residual, true_residual):
        self.status, self.iterations, self.b_norm = status, iterations, b_norm
        self.recursive_residual, self.true_residual = recursive_residual, true_residual

    @property
    def relative_residual(self):
        """||b - A x|| / ||b|| (||b - A x|| when b is zero)."""
        return self.true_residual / self.b_norm if self.b_norm > 0 else self.true_residual

    def __repr__(self):
        return (f"ColumnResult(status={self.status!r}, iterations={self.iterations}, "
                f"relative_residual={self.relative_residual:.3g})")


class KernelStat:
    """One row of the per-kernel table: name, calls, total_ms, bytes_per_call, total_bytes."""

    __slots__ = ("name", "calls", "total_ms", "bytes_per_call", "total_bytes")

    def __init__(self, name, calls, total_ms, bytes_per_call, total_bytes):
        self.name, self.calls, self.total_ms = name, calls, total_ms
        self.bytes_per_call, self.total_bytes = bytes_per_call, total_bytes

    @property
    def gbps(self):
        """Bytes moved per second over the kernel's time, in GB/s (0 when not timed)."""
        return self.total_bytes / (self.total_ms * 1e6) if self.total_ms > 0 else 0.0

    def __repr__(self):
        return f"KernelStat({self.name!r}, calls={self.calls}, total_ms={self.total_ms:.3f})"


class PreconditionerReport:
    """What the preconditioner's setup did: kind, reason (auto: why this one), detail, phases [(name, ms)],
    setup_ms, lambda_min / lambda_max (chebyshev), block_size (block-jacobi), levels (amg: a dict per level with
    rows, nnz, kernel, smoother_lambda_max), operator_complexity and grid_complexity (amg)."""

    def __init__(self, d):
        self.__dict__.update(d)

    def __repr__(self):
        extra = f", levels={len(self.levels)}" if self.levels else ""
        return f"PreconditionerReport(kind={self.kind!r}, reason={self.reason!r}{extra})"


class SolveResult:
    """What a solve reports, as the CLI prints it.

    Per column (arrays / lists of length k): status (str: converged, deflated, max-iterations, breakdown,
    non-finite, preconditioner-not-positive), iterations, b_norm, recursive_residual (the solver's own ||r||),
    true_residual (||b - A x|| recomputed at the end), relative_residual; columns (ColumnResult each).
    converged: every column converged (or deflated, block CG). solver: the iteration that ran ("cg", "eigen-cg"
    on the host, ...). backend ("gpu" or "host"), kernel and kernel_reason: the solver's. phases: [(name, ms)],
    the setup's phases then "vectors" and "solve"; setup_phases, solve_ms, vectors_ms apart. kernels: the
    per-kernel table (KernelStat each; empty on the host). preconditioner: PreconditionerReport or None (none,
    or the host backend, whose Jacobi has no report). history: per column [(iteration, ||r||)] when
    keep_history=True. operator_applies, operator_columns, used_graph, used_persistent, fallback_columns,
    fallback_reason, timing_overhead_ms: as in the C++ SolveResult.
    """

    def __init__(self, d, solver):
        self.columns = [ColumnResult(**c) for c in d["columns"]]
        self.status = [c.status for c in self.columns]
        self.iterations = _np.array([c.iterations for c in self.columns], dtype=_np.int64)
        self.b_norm = _np.array([c.b_norm for c in self.columns])
        self.recursive_residual = _np.array([c.recursive_residual for c in self.columns])
        self.true_residual = _np.array([c.true_residual for c in self.columns])
        self.relative_residual = _np.array([c.relative_residual for c in self.columns])
        self.converged = bool(d["all_converged"])
        self.solver = d["solver"]
        self.kernels = [KernelStat(**k) for k in d["kernels"]]
        self.solve_ms = d["solve_ms"]
        self.vectors_ms = d["vectors_ms"]
        self.timing_overhead_ms = d["timing_overhead_ms"]
        self.operator_applies = d["operator_applies"]
        self.operator_columns = d["operator_columns"]
        self.used_graph = d["used_graph"]
        self.used_persistent = d["used_persistent"]
        self.fallback_columns = d["fallback_columns"]
        self.fallback_reason = d["fallback_reason"]
        self.history = d["history"]
        self.backend = solver.backend
        k = len(self.columns)
        self.kernel = solver.kernel(max(1, k))
        self.kernel_reason = solver.kernel_reason
        self.setup_phases = solver._native.setup_phases
        self.phases = list(self.setup_phases) + [("vectors", self.vectors_ms), ("solve", self.solve_ms)]
        self.preconditioner = solver.preconditioner

    def __repr__(self):
        worst = float(self.relative_residual.max()) if len(self.columns) else 0.0
        return (f"SolveResult(converged={self.converged}, columns={len(self.columns)}, "
                f"iterations={self.iterations.tolist()}, max_relative_residual={worst:.3g}, "
                f"solver={self.solver!r}, backend={self.backend!r}, solve_ms={self.solve_ms:.3f})")


# ---- the solver ----------------------------------------------------------------------------------------------
_OPTION_NAMES = (
    "backend", "expected_columns", "check_matrix", "name", "timing", "block_size", "cheb_degree", "cheb_ratio",
    "amg_theta", "amg_prolongator", "amg_smoother", "amg_sweeps", "amg_p_smoothings", "amg_omega",
    "amg_coarse_rows", "vector_ops", "check_every", "graph", "persistent", "deterministic", "keep_history",
    "stagnation",
)


def _maxiter(maxiter, n):
    if maxiter is None:
        return min(_INT32_MAX, 10 * max(1, n))  # scipy.sparse.linalg.cg's default
    maxiter = int(maxiter)
    if maxiter < 0:
        raise ValueError(f"maxiter must be >= 0, got {maxiter}")
    return min(maxiter, _INT32_MAX)


def _tolerances(rtol, atol):
    rtol, atol = float(rtol), float(atol)
    if not (rtol >= 0 and atol >= 0):
        raise ValueError(f"rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    return rtol, atol


class Solver:
    __doc__ = f"""A matrix set up for solving (the C++ spcg::Solver): the setup is kept between solves.

    Solver(A, solver="cg", precond="auto", kernel="auto", *, rtol=1e-5, atol=0.0, maxiter=None, **options)

    A: scipy.sparse (any format) or dense 2-D, square, symmetric positive definite; converted once to CSR
    (float32 promoted with a warning; complex, non-square, or more than 2**31 - 1 rows / entries refused).
    The library copies it: later changes to A do not reach the solver.

    solver: {", ".join(SOLVERS)} (block-cg and multi-cg solve the k columns of a block together).
    precond: {", ".join(PRECONDITIONERS)}. auto picks none, Jacobi or AMG from the matrix
        (the reason is in result.preconditioner.reason). The host backend offers none and jacobi (auto: jacobi).
    kernel: "auto" (chosen from the matrix, the reason in .kernel_reason) or a kernel's name (spcg bench --list).
    rtol, atol, maxiter: the stop rule ||b - A x|| <= max(rtol ||b||, atol) per column, at most maxiter
        iterations (None: 10 n); a solve() may change it (the setup stays).

    options (keyword only; None or absent: the library's default, shown in brackets):
      backend ["{_DEFAULTS["backend"]}"]: auto (the GPU when usable, else the host), gpu, host.
      expected_columns [{_DEFAULTS["expected_columns"]}]: the block width the solves will use (auto's SpMM choice).
      check_matrix [{_DEFAULTS["check_matrix"]}]: refuse a matrix that is not symmetric or has a non-positive diagonal
          (MatrixRefusedError); False lets those through.
      name ["A"]: names the matrix in error messages.
      timing ["{_DEFAULTS["timing"]}"]: auto, kernels (per-kernel events), phases.
      block_size [{_DEFAULTS["block_size"]}]: block-jacobi's block size (0: detected).
      cheb_degree [{_DEFAULTS["cheb_degree"]}], cheb_ratio [{_DEFAULTS["cheb_ratio"]}]: the Chebyshev polynomial.
      amg_theta [{_DEFAULTS["amg_theta"]}], amg_prolongator ["{_DEFAULTS["amg_prolongator"]}"], amg_smoother ["{_DEFAULTS["amg_smoother"]}"],
      amg_sweeps [{_DEFAULTS["amg_sweeps"]}], amg_p_smoothings [{_DEFAULTS["amg_p_smoothings"]}], amg_omega [{_DEFAULTS["amg_omega"]:.4g}],
      amg_coarse_rows [{_DEFAULTS["amg_coarse_rows"]}]: smoothed-aggregation AMG (as the CLI's --amg-* options).
      vector_ops ["{_DEFAULTS["vector_ops"]}"], check_every [{_DEFAULTS["check_every"]}], graph ["{_DEFAULTS["graph"]}"],
      persistent ["{_DEFAULTS["persistent"]}"], deterministic [{_DEFAULTS["deterministic"]}], stagnation [{_DEFAULTS["stagnation"]}]:
          the iteration (as the CLI's options of the same names).
      keep_history [{_DEFAULTS["keep_history"]}]: keep each column's residual history (result.history).

    Attributes: rows, backend ("gpu" or "host"), kernel(k) (the kernel at block width k), kernel_reason,
    setup_phases [(name, ms)], preconditioner (PreconditionerReport or None), stats (spcg.info's dict).
    Without a usable GPU the host backend solves (a HostBackendWarning says so once per process).
    """

    def __init__(self, A, solver="cg", precond="auto", kernel="auto", *, rtol=1e-5, atol=0.0, maxiter=None,
                 **options):
        unknown = sorted(set(options) - set(_OPTION_NAMES))
        if unknown:
            raise TypeError(f"Solver: unknown option(s) {', '.join(unknown)}; options are {', '.join(_OPTION_NAMES)}")
        self._csr = _as_csr(A)
        self._options = dict(options)
        self._options.setdefault("name", "A")
        self._options.update(solver=solver, precond=precond, kernel=kernel,
                             duplicates_summed=self._csr.duplicates_summed)
        self._stop = None
        self._native = None
        self._set_up(_tolerances(rtol, atol) + (_maxiter(maxiter, self._csr.shape[0]),))

    def _set_up(self, stop):
        rtol, atol, maxiter = stop
        opts = dict(self._options, rtol=rtol, atol=atol, maxiter=maxiter)
        self._native = _spcg.Solver(*self._csr.arrays(), opts)
        self._stop = stop
        if self._native.backend == "host":
            _warn_host_backend(self._options.get("backend"))

    def solve(self, b, x0=None, rtol=None, atol=None, maxiter=None):
        """Solves A x = b: returns (x, result).

        b: (n,) (x is (n,)) or (n, k) in C or Fortran order (x is (n, k), C order). x0: the initial guess, b's
        shape (None: zero). rtol, atol, maxiter: None keeps the Solver's; other values become its stop rule for
        this and later solves (the setup stays). result: a SolveResult.
        """
        n = self._csr.shape[0]
        block, vector = _as_block(b, n, "b")
        if x0 is None:
            x = _np.zeros_like(block)
        else:
            x, x_vector = _as_block(x0, n, "x0")
            if x.shape != block.shape:
                raise ValueError(f"x0 has shape {_np.shape(x0)}, b has {_np.shape(b)}")
        stop = (self._stop[0] if rtol is None else rtol, self._stop[1] if atol is None else atol,
                self._stop[2] if maxiter is None else maxiter)
        stop = _tolerances(stop[0], stop[1]) + (_maxiter(stop[2], n),)
        if stop != self._stop:  # the setup stays; later solves keep the new rule
            self._native.set_stop_rule(*stop)
            self._stop = stop
        xs, d = self._native.solve(block, x)
        result = SolveResult(d, self)
        return (xs.reshape(n) if vector else xs), result

    rows = property(lambda self: self._native.rows, doc="The matrix's rows.")
    backend = property(lambda self: self._native.backend, doc='"gpu" or "host", as resolved at setup.')
    kernel_reason = property(lambda self: self._native.kernel_reason,
                             doc="Why auto chose its kernel (empty for a named kernel and on the host).")
    setup_phases = property(lambda self: self._native.setup_phases, doc="[(name, ms)]: what the setup spent.")
    stats = property(lambda self: self._native.stats, doc="The matrix's statistics (spcg.info's dict).")
    rtol = property(lambda self: self._stop[0], doc="The stop rule's relative tolerance.")
    atol = property(lambda self: self._stop[1], doc="The stop rule's absolute tolerance.")
    maxiter = property(lambda self: self._stop[2], doc="The stop rule's iteration limit.")

    @property
    def preconditioner(self):
        """What the preconditioner's setup did (PreconditionerReport), or None (none; the host backend)."""
        p = self._native.preconditioner
        return None if p is None else PreconditionerReport(p)

    def kernel(self, k=1):
        """The kernel that runs at block width k ("eigen" on the host; "auto -> NAME" when auto chose)."""
        return self._native.kernel(int(k))

    def __repr__(self):
        n = self._csr.shape[0]
        return (f"spcg.Solver({n} x {n}, nnz={self._csr.indices.size}, solver={self._options['solver']!r}, "
                f"precond={self._options['precond']!r}, backend={self.backend!r})")


# ---- scipy.sparse.linalg.cg ----------------------------------------------------------------------------------
def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
    """Solves A x = b by conjugate gradients: scipy.sparse.linalg.cg's signature and (x, info) return.

    A: scipy.sparse (any format) or dense 2-D, symmetric positive definite (an operator without entries is
    refused). b: (n,) or (n, k) (k columns solved each on its own; x has b's shape). x0: initial guess.
    Stops where ||b - A x|| <= max(rtol ||b||, atol), or after maxiter iterations (None: 10 n).
    M: None (no preconditioner) or a name: "jacobi", "block-jacobi", "chebyshev", "amg", "auto" or "none".
    A matrix or LinearOperator M is refused (TypeError): spcg builds its preconditioners itself. The host
    backend (no GPU) offers "none" and "jacobi" ("auto" takes jacobi); others raise UsageError there.
    callback: called once, callback(x), with the solution when the solve ends (not after each iteration as in
    SciPy: the iteration runs inside the library).

    info: 0 converged; > 0 not converged in maxiter iterations (the iterations run; the largest over the columns);
    < 0 a breakdown (A or M not positive definite, or non-finite values).
    Each call sets up again; keep a spcg.Solver to reuse the setup.
    """
    if M is None:
        precond = "none"
    elif isinstance(M, str):
        precond = M
        if precond not in PRECONDITIONERS:
            raise ValueError(f"M={M!r}: expected None or one of {', '.join(PRECONDITIONERS)}")
    else:
        raise TypeError(f"M is a {type(M).__name__}: spcg.cg takes M=None or a preconditioner's name "
                        f"({', '.join(PRECONDITIONERS)}), not a matrix or LinearOperator")
    if callback is not None and not callable(callback):
        raise TypeError("callback must be callable")
    csr = _as_csr(A)
    n = csr.shape[0]
    block, _ = _as_block(b, n, "b")
    solver = Solver(csr, solver="cg", precond=precond, rtol=rtol, atol=atol, maxiter=maxiter,
                    expected_columns=block.shape[1])
    x, result = solver.solve(b, x0)
    if result.converged:
        info = 0
    elif any(s in ("breakdown", "non-finite", "preconditioner-not-positive") for s in result.status):
        info = -1
    else:
        info = int(max(1, result.iterations.max()))
    if callback is not None:
        callback(x)
    return x, info


# ---- files, generators, statistics ---------------------------------------------------------------------------
def mmread(path, *, threads=0, return_info=False):
    """Reads a Matrix Market file (.mtx, .mtx.gz) with spcg's parallel reader: a scipy.sparse.csr_matrix
    (float64, int32 indices; symmetric storage expanded, duplicates summed, explicit zeros kept).

    threads: 0 every core. return_info=True: (A, info) with the header's fields and the read's timings.
    Raises InputError naming the file and line of a malformed input.
    """
    (t, meta) = _spcg.read(str(path), int(threads))
    A = _csr_matrix(t)
    return (A, meta) if return_info else A


def mmwrite(path, A, *, comment=None, symmetric=False, values="g17", threads=0):
    """Writes A (scipy.sparse or dense 2-D, real) as a Matrix Market coordinate file, 17 significant digits.

    symmetric=True writes the lower triangle with a symmetric header (A must be symmetric: the upper triangle is
    not written). values: "g17" (%.17g, SciPy's form) or "e16" (%.16e, SuiteSparse's). comment: a string (lines).
    """
    csr = _as_csr(A, square=symmetric)
    comments = [] if comment is None else str(comment).splitlines()
    _spcg.write(str(path), *csr.arrays(), comments, "symmetric" if symmetric else "general", values, int(threads))


def generate(spec):
    """A generated SPD test matrix as a scipy.sparse.csr_matrix: "poisson2d:N", "poisson2d9:N", "poisson3d:N",
    "poisson3d27:N", "aniso3d:N", "jump3d:N[:seed]", "powerlaw:N[:seed]" (the CLI's --generate)."""
    return _csr_matrix(_spcg.generate(str(spec)))


def info(A):
    """The matrix's statistics as a dict (what the CLI's `spcg info` prints): rows, cols, nnz, row lengths
    (min, max, mean, stddev, histogram), bandwidth, diagonals, symmetry, diagonal, dominance, fills, ...

    A: scipy.sparse or dense 2-D (not necessarily square), a Matrix Market path, or a generator spec.
    """
    if isinstance(A, str) or hasattr(A, "__fspath__"):
        spec = str(A)
        if _spcg.looks_like_generator(spec):
            return _spcg.stats(*_spcg.generate(spec))
        t, meta = _spcg.read(spec, 0)
        return _spcg.stats(*t, meta["duplicates_summed"])
    csr = _as_csr(A, square=False)
    return _spcg.stats(*csr.arrays(), csr.duplicates_summed)
