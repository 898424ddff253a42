"""spcg: conjugate gradients for sparse symmetric positive definite systems, on the GPU (host fallback).

    import spcg
    x, info = spcg.cg(A, b, rtol=1e-8, M="jacobi")        # scipy.sparse.linalg.cg's signature and return
    solver = spcg.Solver(A, precond="auto")                 # keeps the setup (kernel choice, AMG hierarchy, ...)
    x, result = solver.solve(B)                             # B: (n,) or (n, k); result: per column, phases, ...

Matrices: scipy.sparse matrices or arrays of any format (or a dense 2-D NumPy array), converted once to CSR with
sorted indices and duplicates summed, int32 indices and float64 values; on the GPU, cupyx.scipy.sparse matrices
(and 2-D CuPy arrays) and PyTorch CUDA tensors (sparse CSR, sparse COO or dense), converted on the device and read
in place by the library (no copy to the host). Right-hand sides: vectors (n,) or blocks (n, k) in C or Fortran
order, NumPy, CuPy or torch; x comes back in b's kind (NumPy in, NumPy out; CuPy in, CuPy out on the same device;
torch in, torch out), whichever kind A is. Without a usable GPU the library solves on the host (Eigen's CG, with
Jacobi or no preconditioner) and says so once with a HostBackendWarning.

Device arrays: on the current CUDA device (another device is refused), produced on the array library's current
stream: spcg synchronises that stream (cupy.cuda.get_current_stream(), torch.cuda.current_stream()) before the
library reads them, and x is complete when solve returns. Work queued on another stream is the caller's to finish.

Ctrl-C ends a GPU solve at its next residual check (at most ~50 ms later) with KeyboardInterrupt; the Solver
keeps its setup and stays usable. The host backend (Eigen) cannot be interrupted: the KeyboardInterrupt comes when
its solve ends.

Errors are spcg.Error subclasses that are also the built-in a Python user expects: InputError and UsageError are
ValueErrors, CudaError a RuntimeError; MatrixRefusedError (an InputError) when the checks refuse the matrix.
"""

import warnings as _warnings

import numpy as _np

from . import _cache, _common, _spcg
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
_INT32_MAX = _common.INT32_MAX
_DEFAULTS = _spcg.default_options()


class HostBackendWarning(UserWarning):
    """No usable GPU: spcg solves on the host (Eigen's CG; preconditioner none or jacobi, auto takes jacobi)."""


_host_warned = False
_stacklevel = _common.stacklevel


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

    @property
    def nnz(self):
        return int(self.indices.size)

    def arrays(self):
        return self.shape[0], self.shape[1], self.indptr, self.indices, self.data


def _is_sparse(A):
    mod = type(A).__module__ or ""
    if not mod.startswith("scipy."):
        return False
    import scipy.sparse

    return scipy.sparse.issparse(A)


_check_dtype = _common.check_dtype


def _device_kind(obj):
    """'cupy' or 'torch' for an object on a CUDA device, else None; CPU torch tensors are host data. Decided from
    the type's module: cupy and torch are imported only when the object is theirs."""
    top = (type(obj).__module__ or "").split(".", 1)[0]
    if top not in ("cupy", "cupyx", "torch"):
        if hasattr(obj, "__cuda_array_interface__"):
            raise TypeError(f"{type(obj).__module__}.{type(obj).__name__} is a device array spcg does not read "
                            "directly: wrap it with cupy.asarray(obj) (no copy) or torch.as_tensor(obj, device='cuda')")
        return None
    from . import _device

    kind = _device.kind_of(obj)
    return kind if _device.on_device(obj, kind) else None


def _host_view(obj, what):
    """A CPU torch tensor as NumPy / scipy.sparse (a view where torch allows); anything else as it is."""
    if (type(obj).__module__ or "").split(".", 1)[0] == "torch":
        from . import _device

        return _device.torch_to_host(obj, what)
    return obj


def _as_matrix(A, what="A"):
    """A as the library takes it: _Csr for host data, _device.DeviceCsr for a CuPy / torch matrix on the GPU."""
    if isinstance(A, _Csr):
        return A
    if type(A).__name__ == "DeviceCsr" and type(A).__module__ == __name__ + "._device":
        return A
    kind = _device_kind(A)
    if kind is not None:
        from . import _device

        return _device.csr(A, kind, what)
    return _as_csr(A, what=what)


def _refuse_device(A, what, instead):
    if _device_kind(A) is not None:
        raise TypeError(f"{what} is on the GPU: {instead} takes host matrices; pass A.get() (CuPy) or A.cpu() "
                        "(torch) to copy it to the host")


def _as_csr(A, square=True, what="A"):
    """Converts A (scipy.sparse of any format, or a dense 2-D array; host data) to the library's CSR, once."""
    if isinstance(A, _Csr):
        return A
    A = _host_view(A, what)
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
    refusal = _common.size_refusal(what, rows, cols, csr.nnz)
    if refusal:
        raise refusal
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
    """b (host data) as a row-major (n, k) float64 block; also whether it was a vector."""
    b = _host_view(b, what)
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


def _columns(b):
    """The number of right-hand sides in b (its shape only; nothing converted)."""
    shape = getattr(b, "shape", None)
    if shape is None:
        shape = _np.shape(b)
    return int(shape[1]) if len(shape) == 2 else 1


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
    non-finite, preconditioner-not-positive, interrupted, stagnated: restarts from b - A x stopped lowering it
    above the tolerance), iterations, b_norm, recursive_residual (the solver's own ||r||),
    true_residual (||b - A x|| recomputed at the end), relative_residual; columns (ColumnResult each).
    converged: every column converged (or deflated, block CG). solver: the iteration that ran ("cg", "eigen-cg"
    on the host, ...). backend ("gpu" or "host"), kernel and kernel_reason: the solver's. phases: [(name, ms)],
    the setup's phases then "vectors" and "solve"; setup_phases, solve_ms, vectors_ms apart. kernels: the
    per-kernel table (KernelStat each; empty on the host). preconditioner: PreconditionerReport or None (none,
    or the host backend, whose Jacobi has no report). history: per column [(iteration, ||r||)] when
    keep_history=True (the GPU backend; the host backend keeps none). operator_applies, operator_columns,
    used_graph, used_persistent, used_one_reduction, residual_replacements, fallback_columns, fallback_reason, timing_overhead_ms: as in the C++ SolveResult.
    interrupted: the solve ended at Ctrl-C (status "interrupted"; KeyboardInterrupt carries this result).
    call_ms: the wall time of the library's Solver::solve call (what a C++ caller pays; the rest of a
    Python call's time is Python's).
    rtol, atol, maxiter: the stop rule the solve ran with. plot(): the residual history as a picture.
    """

    def __init__(self, d, solver, stop):
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
        self.used_one_reduction = d["used_one_reduction"]
        self.residual_replacements = d["residual_replacements"]
        self.fallback_columns = d["fallback_columns"]
        self.fallback_reason = d["fallback_reason"]
        self.call_ms = d["call_ms"]
        self.history = d["history"]
        self.backend = solver.backend
        k = len(self.columns)
        self.kernel, self.kernel_reason, self.precision, self.setup_phases, self.preconditioner = \
            solver._setup_facts(max(1, k))
        self.phases = list(self.setup_phases) + [("vectors", self.vectors_ms), ("solve", self.solve_ms)]
        self.rtol, self.atol, self.maxiter = stop
        self.interrupted = "interrupted" in self.status

    def plot(self, ax=None, *, relative=True, title=None):
        """Draws the residual history of every column on a log scale: ||r|| / ||b|| (relative=True; ||r|| for a
        zero b) or ||r|| against the iteration, one line per column, the stop target dashed. Returns the
        matplotlib Axes (ax: one to draw into; None: a new figure). Save it with ax.figure.savefig("r.svg").

        The history is there when the Solver was set up with keep_history=True (spcg.Solver(A,
        keep_history=True)); the host backend (Eigen's CG) keeps none. ImportError without matplotlib.
        """
        if not any(len(h) for h in self.history):
            raise ValueError("result.plot(): this result has no residual history; set the Solver up with "
                             "keep_history=True (spcg.Solver(A, keep_history=True)); the host backend keeps none")
        try:
            import matplotlib  # noqa: F401 (the error names matplotlib whether or not pyplot is needed)

            if ax is None:
                import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("result.plot() needs matplotlib (Debian: apt install python3-matplotlib; "
                              "pip install matplotlib)") from e
        if ax is None:
            _, ax = plt.subplots()
        columns = len(self.history)
        for j, h in enumerate(self.history):
            if not h:
                continue
            it = _np.array([p[0] for p in h], dtype=_np.int64)
            r = _np.array([p[1] for p in h], dtype=_np.float64)
            scale = self.b_norm[j] if relative and self.b_norm[j] > 0 else 1.0
            r = r / scale
            r[~(r > 0)] = _np.nan  # no point on a log scale for an exact zero
            ax.plot(it, r, label=f"column {j}" if columns > 1 else "||r||")
        def target(bn):  # the stop rule's ||r|| <= max(rtol ||b||, atol), on the plot's scale
            return max(self.rtol, self.atol / bn) if relative and bn > 0 else max(self.rtol * bn, self.atol)

        targets = {target(bn) for bn in self.b_norm}
        if len(targets) == 1 and next(iter(targets)) > 0:
            ax.axhline(next(iter(targets)), linestyle="--", color="gray", linewidth=1, label="target")
        ax.set_yscale("log")
        ax.set_xlabel("iteration")
        ax.set_ylabel("||r|| / ||b||" if relative else "||r||")
        if title is None:
            p = self.preconditioner
            title = f"{self.solver}" + (f", {p.kind}" if p is not None else "") + f", {columns} column(s)"
        ax.set_title(title)
        if columns <= 10:
            ax.legend()
        return ax

    def __repr__(self):
        worst = float(self.relative_residual.max()) if len(self.columns) else 0.0
        return (f"SolveResult(converged={self.converged}, columns={len(self.columns)}, "
                f"iterations={self.iterations.tolist()}, max_relative_residual={worst:.3g}, "
                f"solver={self.solver!r}, backend={self.backend!r}, solve_ms={self.solve_ms:.3f})")


# ---- the solver ----------------------------------------------------------------------------------------------
_OPTION_NAMES = (
    "backend", "expected_columns", "check_matrix", "name", "timing", "block_size", "cheb_degree", "cheb_ratio",
    "amg_theta", "amg_prolongator", "amg_smoother", "amg_sweeps", "amg_p_smoothings", "amg_omega",
    "amg_coarse_rows", "amg_whole_rows", "fuse_smoothing", "vector_ops", "check_every", "graph", "persistent", "recurrence", "precision", "deterministic",
    "keep_history", "stagnation",
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


def _current_device_if_known():
    """The current CUDA device as CuPy or torch sees it, when either is imported already (spcg imports neither
    for this, and creates no torch CUDA state); None otherwise."""
    import sys

    if "cupy" in sys.modules:
        return sys.modules["cupy"].cuda.runtime.getDevice()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return None


class Solver:
    __doc__ = f"""A matrix set up for solving (the C++ spcg::Solver): the setup is kept between solves.

    Solver(A, solver="cg", precond="auto", kernel="auto", *, rtol=1e-5, atol=0.0, maxiter=None, **options)

    A: square, symmetric positive definite: scipy.sparse (any format) or dense 2-D NumPy; or on the GPU a
    cupyx.scipy.sparse matrix (or 2-D CuPy array) or a CUDA torch tensor (sparse CSR, sparse COO or dense).
    Converted once to canonical CSR (on the device for device inputs: no copy to the host; int64 indices
    narrowed while they fit; float32 promoted with a warning; complex, non-square, or more than 2**31 - 1 rows /
    entries refused). The library keeps its own copy (a device input: copied on the device, the "upload" phase):
    later changes to A do not reach the solver, and a device A may be freed once the Solver exists.
    Device inputs: on the current CUDA device, complete on the array library's current stream (spcg
    synchronises that stream first; work the caller queued on other streams is theirs to finish).

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
      amg_coarse_rows [{_DEFAULTS["amg_coarse_rows"]}], amg_whole_rows [{_DEFAULTS["amg_whole_rows"]}]: smoothed-aggregation AMG (as the
          CLI's --amg-* options; amg_whole_rows: on several GPUs, the coarse levels held whole by every rank).
      fuse_smoothing [{_DEFAULTS["fuse_smoothing"]}]: AMG's and Chebyshev's smoothing steps inside the product where
          its kernel can (the same bits; False runs them apart, as the CLI's --smoothing-apart).
      vector_ops ["{_DEFAULTS["vector_ops"]}"], check_every [{_DEFAULTS["check_every"]}], graph ["{_DEFAULTS["graph"]}"],
      persistent ["{_DEFAULTS["persistent"]}"], recurrence ["{_DEFAULTS["recurrence"]}"], deterministic [{_DEFAULTS["deterministic"]}],
      stagnation [{_DEFAULTS["stagnation"]}]: the iteration (as the CLI's options of the same names; recurrence
          "one-reduction": cg with Jacobi or none sums once an iteration).
      precision ["{_DEFAULTS["precision"]}"]: cg's matrix values in the iteration: "double", "mixed" (the kernel's FP32
          variant, FP64 vectors and true residual) or "auto" (mixed where every value is an FP32 number); the
          result is always judged by the FP64 true residual. With precond="amg" the iteration stays FP64 and
          "mixed" (and "auto") puts FP32 values in the hierarchy's levels whose kernel has the variant.
          .precision and .precision_reason tell the choice.
      keep_history [{_DEFAULTS["keep_history"]}]: keep each column's residual history (result.history, what
          result.plot() draws; the GPU backend keeps one, the host backend none).

    Attributes: rows, backend ("gpu" or "host"), kernel(k) (the kernel at block width k), kernel_reason,
    setup_phases [(name, ms)], update_phases and updates (update_values: new values of the same pattern),
    preconditioner (PreconditionerReport or None), stats (spcg.info's dict),
    device (the CUDA device of the setup where known: a device input's; a host input's once CuPy or torch
    was imported at setup, or after its first device solve; else None), input_kind ("host", "cupy", "torch").
    Without a usable GPU the host backend solves (a HostBackendWarning says so once per process).

    Ctrl-C during a GPU solve raises KeyboardInterrupt at its next residual check (at most ~50 ms later; the
    exception's .spcg_result is the SolveResult, every running column "interrupted", and .spcg_x the last
    iterate); the Solver keeps its setup and solves again. A setup, and a solve on the host backend (Eigen),
    cannot be interrupted: KeyboardInterrupt comes when they end. Only a solve on Python's main thread sees
    Ctrl-C, as Python runs signal handlers there. One solve at a time per Solver: another thread's solve (with
    its own stop rule) waits for it.
    """

    def __init__(self, A, solver="cg", precond="auto", kernel="auto", *, rtol=1e-5, atol=0.0, maxiter=None,
                 **options):
        unknown = sorted(set(options) - set(_OPTION_NAMES))
        if unknown:
            raise TypeError(f"Solver: unknown option(s) {', '.join(unknown)}; options are {', '.join(_OPTION_NAMES)}")
        matrix = _as_matrix(A)
        self._shape, self._nnz = tuple(matrix.shape), int(matrix.nnz)
        self._options = dict(options)
        self._options.setdefault("name", "A")
        self._options.update(solver=solver, precond=precond, kernel=kernel,
                             duplicates_summed=matrix.duplicates_summed)
        self._stop = None
        self._native = None
        self._facts = {}  # block width -> what a result reports of the setup (_setup_facts)
        self.device = None
        self.input_kind = "host" if isinstance(matrix, _Csr) else matrix.kind
        self._set_up(matrix, _tolerances(rtol, atol) + (_maxiter(maxiter, self._shape[0]),))

    def _set_up(self, matrix, stop):
        rtol, atol, maxiter = stop
        opts = dict(self._options, rtol=rtol, atol=atol, maxiter=maxiter)
        if isinstance(matrix, _Csr):
            self._native = _spcg.Solver(*matrix.arrays(), opts)
        else:  # the caller's device arrays, as they are (the library copies them on the device, never to the host)
            from . import _device

            _device.synchronize(matrix.kind, matrix.device)
            self._native = _spcg.Solver.from_device(matrix.shape[0], matrix.shape[1], matrix.nnz,
                                                    *matrix.pointers(), opts)
            self.device = matrix.device
        self._stop = stop
        if self._native.backend == "host":
            _warn_host_backend(self._options.get("backend"))
        elif self.device is None:
            self.device = _current_device_if_known()

    def solve(self, b, x0=None, rtol=None, atol=None, maxiter=None):
        """Solves A x = b: returns (x, result).

        b: (n,) (x is (n,)) or (n, k) in C or Fortran order (x is (n, k), C order): NumPy, or on the GPU a CuPy
        array or a CUDA torch tensor. x comes back in b's kind: NumPy, CuPy on b's device, torch on b's device
        (whichever kind A was; a device b needs the GPU backend). A device b is used in place when it is
        C-contiguous float64, else converted on the device; it must be on the Solver's device, which must be
        the current one, and complete on the array library's current stream (spcg synchronises that stream;
        see spcg.Solver). x0: the initial guess, b's shape and kind (None: zero); never modified.
        rtol, atol, maxiter: None keeps the Solver's; other values become its stop rule for this and later
        solves (the setup stays). result: a SolveResult.

        Ctrl-C: KeyboardInterrupt (its .spcg_result and .spcg_x: the interrupted solve's result and last
        iterate); the Solver stays usable.
        """
        n = self._shape[0]
        kind = _device_kind(b)
        stop = (self._stop[0] if rtol is None else rtol, self._stop[1] if atol is None else atol,
                self._stop[2] if maxiter is None else maxiter)
        stop = _tolerances(stop[0], stop[1]) + (_maxiter(stop[2], n),)
        if kind is None:
            if x0 is not None and _device_kind(x0) is not None:
                raise TypeError("x0 is on the GPU, b on the host: x0 must be of b's kind")
            block, vector = _as_block(b, n, "b")
            if x0 is None:
                x = _np.zeros_like(block)
            else:
                x, _ = _as_block(x0, n, "x0")
                if x.shape != block.shape:
                    raise ValueError(f"x0 has shape {_np.shape(x0)}, b has {_np.shape(b)}")
            xs, d, pending = self._native.solve(block, x, self._new_stop(stop))
            out = xs.reshape(n) if vector else xs
            if (type(b).__module__ or "").split(".", 1)[0] == "torch":  # a CPU tensor in, a CPU tensor out
                import torch

                out = torch.from_numpy(out)
        else:
            from . import _device

            if self.backend != "gpu":
                raise UsageError(f"b is a {kind} array on the GPU, but this Solver runs on the host backend "
                                 "(no usable GPU, or backend='host'); pass b on the host")
            block, vector, device = _device.block(b, n, kind, "b")
            _device.check_device(device, kind, "b", self.device)
            x = _device.initial_guess(x0, block, n, kind, tuple(b.shape), device)
            _device.synchronize(kind, device)
            d, pending = self._native.solve_device(n, int(block.shape[1]), _device.pointer(block, kind),
                                                   _device.pointer(x, kind), self._new_stop(stop))
            if self.device is None:
                self.device = device  # a host matrix set up on the GPU: its device is the current one
            out = x.reshape(n) if vector else x
        result = SolveResult(d, self, stop)
        if kind is not None:  # a device b's entries are first read by the library: ||b_j|| says whether they are finite
            bad = [j for j, v in enumerate(result.b_norm) if not _np.isfinite(v)]
            if bad:
                raise ValueError(f"b holds NaN or Inf (column {bad[0]}{' and more' if len(bad) > 1 else ''})")
        if pending is not None:  # Ctrl-C (or another signal handler's exception) during the solve
            pending.spcg_result, pending.spcg_x = result, out
            raise pending
        return out, result

    def update_values(self, A):
        """New values of the pattern the Solver was set up on (time steps, Newton steps), without a new setup.

        A: as the constructor takes it, with the same sparsity pattern (the same shape, entry count and columns of
        every row once in canonical CSR: a value that became zero must stay stored; a dense A keeps its nonzeros
        only). A host A is checked on the host; a CuPy / torch A on the GPU is checked and copied on the device
        (its arrays complete on the array library's current stream, as for the constructor). What the setup
        decided from the pattern is kept (the kernel: auto's choice is not made again; block-Jacobi's block size;
        AMG's aggregates and levels); what depends on the values is made again (the kernel's layout, Jacobi's
        diagonal, Chebyshev's bound, AMG's prolongators, Galerkin products, smoothers and coarsest factor).
        Another pattern raises InputError naming the first difference ("row 17's pattern differs: ..."); values the
        checks refuse raise MatrixRefusedError (NaN or Inf, not symmetric, a non-positive diagonal). After an
        error the Solver keeps its old values. update_phases gives what the last update spent. Returns self.
        """
        matrix = _as_matrix(A)
        self._facts = {}  # the kernel's layout, the precision and the preconditioner may change
        if isinstance(matrix, _Csr):
            self._native.update_values(*matrix.arrays())
        else:  # the caller's device arrays, as they are: the pattern is compared and the values copied on the device
            from . import _device

            _device.synchronize(matrix.kind, matrix.device)
            self._native.update_values_device(matrix.shape[0], matrix.shape[1], matrix.nnz, *matrix.pointers())
        return self

    def _setup_facts(self, k):
        """(kernel at width k, kernel_reason, precision, setup_phases, preconditioner): what every result reports
        of the setup, read from the library once per width (a small solve's Python cost: ~20 us a call) and again
        after update_values."""
        facts = self._facts.get(k)
        if facts is None:
            facts = (self.kernel(k), self.kernel_reason, self.precision, self._native.setup_phases, self.preconditioner)
            self._facts[k] = facts
        return facts

    def _new_stop(self, stop):
        """The stop rule handed to every native solve, which sets it under the solver's lock (two threads sharing
        a Solver each solve with their own). The setup stays; later solves keep it."""
        self._stop = stop
        return stop

    rows = property(lambda self: self._native.rows, doc="The matrix's rows.")
    backend = property(lambda self: self._native.backend, doc='"gpu" or "host", as resolved at setup.')
    kernel_reason = property(lambda self: self._native.kernel_reason,
                             doc="Why auto chose its kernel (empty for a named kernel and on the host).")
    precision = property(lambda self: self._native.precision,
                         doc='"double" or "mixed" (FP32 matrix values in cg\'s iteration), as resolved at setup.')
    precision_reason = property(lambda self: self._native.precision_reason, doc="Why that precision.")
    setup_phases = property(lambda self: self._native.setup_phases, doc="[(name, ms)]: what the setup spent.")
    update_phases = property(lambda self: self._native.update_phases,
                             doc="[(name, ms)]: what the last update_values spent (empty before one).")
    updates = property(lambda self: self._native.updates, doc="How many update_values calls succeeded.")
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
        n = self._shape[0]
        where = "" if self.device is None else f", device={self.device}"
        return (f"spcg.Solver({n} x {n}, nnz={self._nnz}, solver={self._options['solver']!r}, "
                f"precond={self._options['precond']!r}, backend={self.backend!r}, input={self.input_kind!r}{where})")


# ---- scipy.sparse.linalg.cg ----------------------------------------------------------------------------------
def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
    """Solves A x = b by conjugate gradients: scipy.sparse.linalg.cg's signature and (x, info) return.

    A: symmetric positive definite: scipy.sparse (any format) or dense 2-D NumPy, or on the GPU a
    cupyx.scipy.sparse matrix or a CUDA torch tensor (an operator without entries is refused). b: (n,) or (n, k)
    (k columns solved each on its own; x has b's shape and kind: NumPy, CuPy or torch, whichever kind A is).
    x0: initial guess, b's kind. Device inputs: as spcg.Solver says (current device; spcg synchronises the
    array library's current stream before reading them).
    Stops where ||b - A x|| <= max(rtol ||b||, atol), or after maxiter iterations (None: 10 n).
    M: None (no preconditioner) or a name: "jacobi", "block-jacobi", "chebyshev", "amg", "auto" or "none".
    A matrix or LinearOperator M is refused (TypeError): spcg builds its preconditioners itself. The host
    backend (no GPU) offers "none" and "jacobi" ("auto" takes jacobi); others raise UsageError there.
    callback: called once, callback(x), with the solution when the solve ends (not after each iteration as in
    SciPy: the iteration runs inside the library).

    info: 0 converged; > 0 not converged in maxiter iterations (the iterations run; the largest over the columns);
    < 0 a breakdown (A or M not positive definite, or non-finite values).

    Repeated calls with the same matrix do not set up again: cg keeps its last setup and reuses it while the
    matrix holds the same entries (host: compared bit for bit with the library's copy; device: a 64-bit hash
    computed on the device) and M, the number of columns, where A lives (and rtol, for M="auto") are the same;
    a matrix changed in place sets up again. cg.cache_info() counts hits and misses; cg.cache_clear() drops the
    setup (its GPU memory). A spcg.Solver keeps a setup explicitly. Ctrl-C: KeyboardInterrupt (spcg.Solver).
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
    rtol, atol = _tolerances(rtol, atol)
    matrix = _as_matrix(A)
    k = _columns(b)
    if isinstance(matrix, _Csr):
        where, fingerprint = ("host", None), None
    else:
        where, fingerprint = (matrix.kind, matrix.device), matrix.fingerprint()
    key = (where, tuple(matrix.shape), int(matrix.nnz), matrix.duplicates_summed, precond, k,
           rtol if precond == "auto" else None)

    def make(m):
        return Solver(m, solver="cg", precond=precond, rtol=rtol, atol=atol, maxiter=maxiter, expected_columns=k)

    # the whole stop rule every call: None in Solver.solve would keep the cached setup's earlier rule
    maxiter = _maxiter(maxiter, matrix.shape[0])
    with _cg_cache.solver(matrix, key, make, fingerprint) as solver:
        x, result = solver.solve(b, x0, rtol=rtol, atol=atol, maxiter=maxiter)
    if result.converged:
        info = 0
    elif any(s in ("breakdown", "non-finite", "preconditioner-not-positive") for s in result.status):
        info = -1
    else:
        info = int(max(1, result.iterations.max()))
    if callback is not None:
        callback(x)
    return x, info


_cg_cache = _cache.SetupCache()
cg.cache_info = _cg_cache.info
cg.cache_clear = _cg_cache.clear


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
    _refuse_device(A, "A", "spcg.mmwrite")
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
    _refuse_device(A, "A", "spcg.info")
    csr = _as_csr(A, square=False)
    return _spcg.stats(*csr.arrays(), csr.duplicates_summed)
