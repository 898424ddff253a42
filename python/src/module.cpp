// _spcg: the Python module's native half, over spcg's public C++ interface only (spcg/spcg.hpp). It takes and
// gives plain arrays (CSR as int32 row pointers / column indices and float64 values, blocks as row-major n x k
// float64); the pure-Python front (python/spcg/__init__.py) converts SciPy / NumPy inputs to them, checks them and
// carries the docstrings. The GIL is released during setup, solves, reads and writes. Results come back as
// dicts; arrays the library made (a matrix read or generated, a solution) are handed to NumPy without a copy.
// Device arrays (CuPy, PyTorch) arrive as raw device pointers the front read from the array library, after it
// checked their device, dtype and layout and synchronised the producer's stream: they reach the library's
// DeviceCsrRef / DeviceBlockRef as they are. Ctrl-C: a solve asks Python for pending signals at the monitor's
// residual checks (SolveOptions::interrupted) and hands back the exception a handler raised.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <pythread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "spcg/spcg.hpp"

namespace py = pybind11;
using namespace spcg;

namespace {

using IndexArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using ValueArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

// ---- exceptions: spcg.Error and its kinds, each also the built-in a Python user expects ----------------------
struct PyErrors {
  py::handle error, input, matrix_refused, usage, cuda, device_memory, communication;
};
PyErrors& errors() {
  static PyErrors e;  // the classes live as long as the module (leaked on purpose: no destructor at exit)
  return e;
}

py::handle new_exception(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string full = std::string("spcg.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // add_object keeps a reference of its own
  return py::handle(cls);
}

// Raises `cls(message)` with attributes the C++ error carries.
void raise(py::handle cls, const std::string& message, const InputError* input = nullptr, const MatrixRefusedError* refused = nullptr) {
  py::object exc = py::reinterpret_borrow<py::object>(cls)(message);
  if (input) {
    exc.attr("file") = input->file();
    exc.attr("line") = input->line();
    exc.attr("problem") = input->problem();
  }
  if (refused) exc.attr("overridable") = refused->overridable();
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

void translate(std::exception_ptr p) {
  const PyErrors& e = errors();
  try {
    if (p) std::rethrow_exception(p);
  } catch (const MatrixRefusedError& x) {
    raise(e.matrix_refused, x.what(), &x, &x);
  } catch (const InputError& x) {
    raise(e.input, x.what(), &x);
  } catch (const UsageError& x) {
    raise(e.usage, x.what());
  } catch (const DeviceMemoryError& x) {
    raise(e.device_memory, x.what());
  } catch (const CudaError& x) {
    raise(e.cuda, x.what());
  } catch (const CommunicationError& x) {
    raise(e.communication, x.what());
  } catch (const Error& x) {
    raise(e.error, x.what());
  }
}

// ---- conversions -------------------------------------------------------------------------------------------
CsrMatrix csr_from_arrays(int64_t rows, int64_t cols, const IndexArray& indptr, const IndexArray& indices,
                          const ValueArray& data) {
  if (rows < 0 || cols < 0 || rows > std::numeric_limits<int32_t>::max() || cols > std::numeric_limits<int32_t>::max())
    throw UsageError("CSR: " + std::to_string(rows) + " x " + std::to_string(cols) + " is outside int32's range");
  if (indptr.ndim() != 1 || indices.ndim() != 1 || data.ndim() != 1)
    throw UsageError("CSR: indptr, indices and data must be 1-D arrays");
  if (indptr.shape(0) != rows + 1)
    throw UsageError("CSR: indptr has " + std::to_string(indptr.shape(0)) + " entries, expected rows + 1 = " +
                     std::to_string(rows + 1));
  if (indices.shape(0) != data.shape(0))
    throw UsageError("CSR: " + std::to_string(indices.shape(0)) + " column indices but " +
                     std::to_string(data.shape(0)) + " values");
  CsrMatrix a;
  a.rows = static_cast<int32_t>(rows);
  a.cols = static_cast<int32_t>(cols);
  const int32_t* p = indptr.data();
  a.row_ptr.assign(p, p + indptr.shape(0));
  a.col_idx.assign(indices.data(), indices.data() + indices.shape(0));
  a.values.assign(data.data(), data.data() + data.shape(0));
  if (a.row_ptr.front() != 0 || a.row_ptr.back() != static_cast<int64_t>(a.col_idx.size()))
    throw UsageError("CSR: indptr must start at 0 and end at nnz (" + std::to_string(a.col_idx.size()) + ")");
  return a;
}

DenseBlock block_from_array(const ValueArray& b, const char* what) {
  if (b.ndim() != 2) throw UsageError(std::string(what) + " must be a 2-D (n, k) array");
  if (b.shape(0) > std::numeric_limits<int32_t>::max() || b.shape(1) > std::numeric_limits<int32_t>::max())
    throw UsageError(std::string(what) + " is outside int32's range");
  DenseBlock d;
  d.rows = static_cast<int32_t>(b.shape(0));
  d.cols = static_cast<int32_t>(b.shape(1));
  d.data.assign(b.data(), b.data() + b.size());
  return d;
}

// A NumPy array over a vector the capsule owns (no copy).
template <class Vec>
py::array owned_array(Vec&& v, std::vector<py::ssize_t> shape) {
  using T = typename std::decay_t<Vec>::value_type;
  auto* held = new std::decay_t<Vec>(std::forward<Vec>(v));
  py::capsule owner(held, [](void* p) { delete static_cast<std::decay_t<Vec>*>(p); });
  return py::array_t<T>(shape, held->data(), owner);
}

// (rows, cols, indptr, indices, data) of a matrix the library made, handed over without a copy.
py::tuple csr_to_python(CsrMatrix&& a) {
  const int32_t rows = a.rows, cols = a.cols;
  const py::ssize_t nnz = static_cast<py::ssize_t>(a.col_idx.size());
  // int32 offsets (a file's or a generator's one-GPU matrix fits them), as SciPy keeps them with int32 indices
  py::array indptr = owned_array(row_offsets32(a), {static_cast<py::ssize_t>(rows) + 1});
  a.row_ptr = HostVector<RowOffset>();
  py::array indices = owned_array(std::move(a.col_idx), {nnz});
  py::array data = owned_array(std::move(a.values), {nnz});
  return py::make_tuple(rows, cols, indptr, indices, data);
}

py::list phases_to_python(const std::vector<Phase>& phases) {
  py::list l;
  for (const Phase& p : phases) l.append(py::make_tuple(p.name, p.ms));
  return l;
}

py::dict stats_to_python(const MatrixStats& s) {
  py::dict d;
  d["rows"] = s.rows, d["cols"] = s.cols, d["nnz"] = s.nnz;
  d["row_min"] = s.row_min, d["row_max"] = s.row_max, d["row_mean"] = s.row_mean, d["row_stddev"] = s.row_stddev;
  py::list hist;
  for (const auto& b : s.histogram) hist.append(py::make_tuple(b.lo, b.hi, b.rows));
  d["row_length_histogram"] = hist;
  d["empty_rows"] = s.empty_rows, d["bandwidth"] = s.bandwidth, d["distinct_diagonals"] = s.distinct_diagonals;
  d["square"] = s.square, d["pattern_symmetric"] = s.pattern_symmetric;
  d["numerically_symmetric"] = s.numerically_symmetric, d["max_asymmetry"] = s.max_asymmetry;
  d["missing_diagonal"] = s.missing_diagonal, d["nonpositive_diagonal"] = s.nonpositive_diagonal;
  d["first_nonpositive_row"] = s.first_nonpositive_row, d["first_nonpositive_value"] = s.first_nonpositive_value;
  d["diagonal_positive"] = s.diagonal_positive;
  d["diagonally_dominant_rows"] = s.diagonally_dominant_rows, d["strictly_dominant_rows"] = s.strictly_dominant_rows;
  d["explicit_zeros"] = s.explicit_zeros, d["duplicates_summed"] = s.duplicates_summed;
  d["ell_fill"] = s.ell_fill, d["dia_fill"] = s.dia_fill, d["max_abs_value"] = s.max_abs_value;
  d["non_finite_values"] = s.non_finite_values;
  return d;
}

py::object precond_to_python(const PreconditionerReport* p) {
  if (!p) return py::none();
  py::dict d;
  d["kind"] = name_of(p->kind);
  d["reason"] = p->reason;
  d["detail"] = p->detail;
  d["phases"] = phases_to_python(p->phases);
  d["setup_ms"] = p->setup_ms;
  d["lambda_min"] = p->lambda_min, d["lambda_max"] = p->lambda_max;
  d["block_size"] = p->block_size;
  py::list levels;
  for (const AmgLevelReport& l : p->levels) {
    py::dict ld;
    ld["rows"] = l.rows, ld["nnz"] = l.nnz, ld["kernel"] = l.kernel, ld["smoother_lambda_max"] = l.smoother_lambda_max;
    if (l.global_rows > 0) ld["global_rows"] = l.global_rows, ld["halo"] = l.halo, ld["held_whole"] = l.held_whole;
    levels.append(ld);
  }
  d["levels"] = levels;
  d["operator_complexity"] = p->operator_complexity;
  d["grid_complexity"] = p->grid_complexity;
  return std::move(d);
}

py::dict result_to_python(const SolveResult& r) {
  py::dict d;
  d["solver"] = r.solver;
  py::list columns;
  for (const ColumnResult& c : r.columns) {
    py::dict cd;
    cd["status"] = to_string(c.status);
    cd["iterations"] = c.iterations;
    cd["b_norm"] = c.b_norm;
    cd["recursive_residual"] = c.recursive_residual;
    cd["true_residual"] = c.true_residual;
    columns.append(cd);
  }
  d["columns"] = columns;
  py::list kernels;
  for (const KernelStat& k : r.kernels) {
    py::dict kd;
    kd["name"] = k.name, kd["calls"] = k.calls, kd["total_ms"] = k.total_ms;
    kd["bytes_per_call"] = k.bytes_per_call, kd["total_bytes"] = k.total_bytes;
    kernels.append(kd);
  }
  d["kernels"] = kernels;
  d["solve_ms"] = r.solve_ms, d["vectors_ms"] = r.vectors_ms, d["timing_overhead_ms"] = r.timing_overhead_ms;
  d["operator_applies"] = r.operator_applies, d["operator_columns"] = r.operator_columns;
  d["used_graph"] = r.used_graph, d["used_persistent"] = r.used_persistent;
  d["used_one_reduction"] = r.used_one_reduction, d["residual_replacements"] = r.residual_replacements;
  d["fallback_columns"] = r.fallback_columns, d["fallback_reason"] = r.fallback_reason;
  d["history"] = r.history;
  d["all_converged"] = r.all_converged();
  return d;
}

// ---- options: a dict of Python values (names as the CLI spells them) onto SolverOptions --------------------
template <class E>
E option_value(const py::handle& v, const char* what) {
  const std::string name = py::str(v);
  const std::optional<E> e = parse_option<E>(name);
  if (!e) throw UsageError(std::string(what) + " '" + name + "': expected " + option_names<E>());
  return *e;
}

SolverOptions options_from_python(const py::dict& d) {
  SolverOptions o;
  for (const auto& [key_h, v] : d) {
    const std::string key = py::str(key_h);
    if (v.is_none()) continue;  // the library's default
    PreconditionerOptions& p = o.precond_options;
    SolveOptions& it = o.iteration;
    if (key == "solver") o.solver = option_value<SolverKind>(v, "solver");
    else if (key == "precond") o.precond = option_value<Preconditioner>(v, "precond");
    else if (key == "kernel") o.kernel = KernelChoice(std::string(py::str(v)));
    else if (key == "backend") o.backend = option_value<Backend>(v, "backend");
    else if (key == "timing") o.timing = option_value<KernelTiming>(v, "timing");
    else if (key == "expected_columns") o.expected_columns = v.cast<int>();
    else if (key == "check_matrix") o.check_matrix = v.cast<bool>();
    else if (key == "name") o.matrix_name = py::str(v);
    else if (key == "duplicates_summed") o.duplicates_summed = v.cast<int64_t>();
    else if (key == "rtol") it.stop.rtol = v.cast<double>();
    else if (key == "atol") it.stop.atol = v.cast<double>();
    else if (key == "maxiter") it.stop.max_iterations = v.cast<int>();
    else if (key == "vector_ops") it.vector_ops = option_value<VectorOps>(v, "vector_ops");
    else if (key == "check_every") it.check_every = v.cast<int>();
    else if (key == "graph") it.graph = option_value<Switch>(v, "graph");
    else if (key == "persistent") it.persistent = option_value<Switch>(v, "persistent");
    else if (key == "recurrence") it.recurrence = option_value<CgRecurrence>(v, "recurrence");
    else if (key == "precision") o.precision = option_value<Precision>(v, "precision");
    else if (key == "deterministic") it.deterministic = v.cast<bool>();
    else if (key == "keep_history") it.keep_history = v.cast<bool>();
    else if (key == "stagnation") it.stagnation_window = v.cast<int>();
    else if (key == "block_size") p.block_size = v.cast<int>();
    else if (key == "cheb_degree") p.chebyshev_degree = v.cast<int>();
    else if (key == "cheb_ratio") p.chebyshev_ratio = v.cast<double>();
    else if (key == "amg_theta") p.strength_theta = v.cast<double>();
    else if (key == "amg_prolongator") p.prolongator = option_value<AmgProlongator>(v, "amg_prolongator");
    else if (key == "amg_smoother") p.smoother = option_value<AmgSmoother>(v, "amg_smoother");
    else if (key == "amg_sweeps") p.smoother_degree = v.cast<int>();
    else if (key == "amg_p_smoothings") p.prolongator_smoothings = v.cast<int>();
    else if (key == "amg_omega") p.prolongator_omega = v.cast<double>();
    else if (key == "amg_coarse_rows") p.coarse_rows = v.cast<int>();
    else if (key == "amg_whole_rows") p.whole_level_rows = v.cast<int64_t>();
    else if (key == "fuse_smoothing") p.fuse_smoothing = v.cast<bool>();
    else throw UsageError("unknown option '" + key + "'");
  }
  return o;
}

// The library's defaults under the same names (the front's docstrings quote them).
py::dict default_options() {
  const SolverOptions o;
  const PreconditionerOptions& p = o.precond_options;
  const SolveOptions& it = o.iteration;
  py::dict d;
  d["solver"] = name_of(o.solver), d["precond"] = name_of(o.precond), d["kernel"] = o.kernel.name();
  d["backend"] = name_of(o.backend), d["timing"] = name_of(o.timing);
  d["expected_columns"] = o.expected_columns, d["check_matrix"] = o.check_matrix;
  d["rtol"] = it.stop.rtol, d["atol"] = it.stop.atol, d["maxiter"] = it.stop.max_iterations;
  d["vector_ops"] = name_of(it.vector_ops), d["check_every"] = it.check_every;
  d["graph"] = name_of(it.graph), d["persistent"] = name_of(it.persistent), d["recurrence"] = name_of(it.recurrence);
  d["precision"] = name_of(o.precision);
  d["deterministic"] = it.deterministic, d["keep_history"] = it.keep_history, d["stagnation"] = it.stagnation_window;
  d["block_size"] = p.block_size, d["cheb_degree"] = p.chebyshev_degree, d["cheb_ratio"] = p.chebyshev_ratio;
  d["amg_theta"] = p.strength_theta, d["amg_prolongator"] = name_of(p.prolongator);
  d["amg_smoother"] = name_of(p.smoother), d["amg_sweeps"] = p.smoother_degree;
  d["amg_p_smoothings"] = p.prolongator_smoothings, d["amg_omega"] = p.prolongator_omega;
  d["amg_coarse_rows"] = p.coarse_rows;
  d["amg_whole_rows"] = p.whole_level_rows;
  d["fuse_smoothing"] = p.fuse_smoothing;
  return d;
}

template <class E>
py::list names() {
  py::list l;
  for (const auto& [v, n] : OptionNames<E>::list) l.append(n);
  return l;
}

}  // namespace

// A stop rule arrives as (rtol, atol, maxiter).
namespace pybind11::detail {
template <>
struct type_caster<spcg::StopRule> {
  PYBIND11_TYPE_CASTER(spcg::StopRule, const_name("tuple[float, float, int]"));
  bool load(handle src, bool) {
    if (!isinstance<tuple>(src)) return false;
    const auto t = reinterpret_borrow<tuple>(src);
    if (t.size() != 3) return false;
    value = spcg::StopRule{t[0].cast<double>(), t[1].cast<double>(), t[2].cast<int>()};
    return true;
  }
};
}  // namespace pybind11::detail

namespace {

// ---- Ctrl-C --------------------------------------------------------------------------------------------------
// Python runs signal handlers on its main thread only: a solve on another thread never takes the GIL to ask.
unsigned long& main_thread_ident() {
  static unsigned long ident = 0;  // threading.main_thread().ident, set when the module is imported
  return ident;
}

// What the interrupt hook found: the exception a signal handler raised (KeyboardInterrupt for Ctrl-C), kept
// until the solve returns. Written and read with the GIL held.
struct InterruptState {
  py::object pending;
};

// Fetches the error indicator as one exception object (its traceback attached) and clears it.
py::object fetch_exception() {
#if PY_VERSION_HEX >= 0x030C0000
  return py::reinterpret_steal<py::object>(PyErr_GetRaisedException());
#else
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  PyErr_NormalizeException(&type, &value, &trace);
  if (value && trace) PyException_SetTraceback(value, trace);
  Py_XDECREF(type);
  Py_XDECREF(trace);
  return py::reinterpret_steal<py::object>(value);
#endif
}

// SolveOptions::interrupted: the monitor asks it at most every 50 ms while the GIL is released. A handler that
// raises (Python's default for SIGINT raises KeyboardInterrupt) ends the solve; one that does not lets it go on.
std::function<bool()> interrupt_hook(const std::shared_ptr<InterruptState>& state) {
  return [state]() {
    if (PyThread_get_thread_ident() != main_thread_ident()) return false;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return false;
    state->pending = fetch_exception();
    return true;
  };
}

// ---- the solver ---------------------------------------------------------------------------------------------
class PySolver {
 public:
  PySolver(int64_t rows, int64_t cols, const IndexArray& indptr, const IndexArray& indices, const ValueArray& data,
           const py::dict& options) {
    const SolverOptions o = options_with_hook(options);
    CsrMatrix a = csr_from_arrays(rows, cols, indptr, indices, data);
    {
      py::gil_scoped_release unlocked;
      solver_ = std::make_unique<Solver>(std::move(a), o);
    }
    raise_if_interrupted();
  }

  // A CSR matrix in device memory (the caller's arrays, on the current device, the producer's stream
  // synchronised): the library copies it on the device and never to the host.
  static std::unique_ptr<PySolver> from_device(int64_t rows, int64_t cols, int64_t nnz, uintptr_t row_ptr,
                                               uintptr_t col_idx, uintptr_t values, const py::dict& options) {
    if (rows < 0 || cols < 0 || nnz < 0 || rows > std::numeric_limits<int32_t>::max() ||
        cols > std::numeric_limits<int32_t>::max() || nnz > std::numeric_limits<int32_t>::max())
      throw UsageError("device CSR: " + std::to_string(rows) + " x " + std::to_string(cols) + " with " +
                       std::to_string(nnz) + " entries is outside int32's range");
    std::unique_ptr<PySolver> s(new PySolver());
    const SolverOptions o = s->options_with_hook(options);
    const DeviceCsrRef a{static_cast<int32_t>(rows), static_cast<int32_t>(cols), nnz,
                         reinterpret_cast<const int32_t*>(row_ptr), reinterpret_cast<const int32_t*>(col_idx),
                         reinterpret_cast<const double*>(values)};
    {
      py::gil_scoped_release unlocked;
      s->solver_ = std::make_unique<Solver>(a, o);
    }
    s->raise_if_interrupted();
    py::dict p;  // what reached the library: the zero-copy tests compare them with the arrays' own pointers
    p["row_ptr"] = row_ptr, p["col_idx"] = col_idx, p["values"] = values;
    s->device_input_ = p;
    return s;
  }

  // b and x0: n x k row-major; stop: the stop rule from this solve on (None: the one in force), set under the
  // same lock as the solve, so that two threads sharing the solver each solve with their own. Returns (x as an
  // n x k array, the result as a dict, the exception a signal handler raised during the solve or None).
  py::tuple solve(const ValueArray& b, const ValueArray& x0, const std::optional<StopRule>& stop) {
    const DenseBlock bb = block_from_array(b, "b");
    DenseBlock x = block_from_array(x0, "x0");
    auto [r, pending] = run(stop, [&] { return solver_->solve(bb, x); });
    const py::ssize_t n = x.rows, k = x.cols;
    return py::make_tuple(owned_array(std::move(x.data), {n, k}), r, pending);
  }

  // b and x: n x k row-major float64 blocks in device memory (x: the initial guess in, the solution out).
  // Returns (the result as a dict, the exception a signal handler raised or None).
  py::tuple solve_device(int64_t rows, int64_t cols, uintptr_t b, uintptr_t x, const std::optional<StopRule>& stop) {
    if (rows < 0 || cols < 0 || rows > std::numeric_limits<int32_t>::max() || cols > std::numeric_limits<int32_t>::max())
      throw UsageError("device block: " + std::to_string(rows) + " x " + std::to_string(cols) +
                       " is outside int32's range");
    const DeviceBlockRef bb{static_cast<int32_t>(rows), static_cast<int32_t>(cols), reinterpret_cast<double*>(b)};
    const DeviceBlockRef xx{static_cast<int32_t>(rows), static_cast<int32_t>(cols), reinterpret_cast<double*>(x)};
    auto [r, pending] = run(stop, [&] { return solver_->solve(bb, xx); });
    return py::make_tuple(r, pending);
  }

  // Whether these arrays are, bit for bit, the matrix the library holds (spcg.cg's cache: an exact test, no
  // hash). False for a matrix set up from device arrays, whose host copy the library would have to download.
  bool same_matrix(int64_t rows, int64_t cols, const IndexArray& indptr, const IndexArray& indices,
                   const ValueArray& data) const {
    if (!device_input_.is_none()) return false;
    py::gil_scoped_release unlocked;  // the arrays stay referenced by the arguments
    std::lock_guard<std::mutex> one_at_a_time(mutex_);  // (an update swaps the matrix)
    const CsrMatrix& a = solver_->matrix();
    if (a.rows != rows || a.cols != cols || indptr.ndim() != 1 || indices.ndim() != 1 || data.ndim() != 1 ||
        static_cast<size_t>(indptr.shape(0)) != a.row_ptr.size() ||
        static_cast<size_t>(indices.shape(0)) != a.col_idx.size() || static_cast<size_t>(data.shape(0)) != a.values.size())
      return false;
    return std::equal(a.row_ptr.begin(), a.row_ptr.end(), indptr.data()) &&
           std::memcmp(a.col_idx.data(), indices.data(), a.col_idx.size() * sizeof(int32_t)) == 0 &&
           std::memcmp(a.values.data(), data.data(), a.values.size() * sizeof(double)) == 0;
  }

  // New values on the solver's pattern (Solver::update_values): a host CSR, or a CSR in device memory (the
  // caller's arrays, the producer's stream synchronised), whose pattern the library checks on the device. Under
  // the solve lock: an update never runs beside a solve of this solver.
  void update_values(int64_t rows, int64_t cols, const IndexArray& indptr, const IndexArray& indices,
                     const ValueArray& data) {
    CsrMatrix a = csr_from_arrays(rows, cols, indptr, indices, data);
    py::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> one_at_a_time(mutex_);
    solver_->update_values(std::move(a));
  }
  void update_values_device(int64_t rows, int64_t cols, int64_t nnz, uintptr_t row_ptr, uintptr_t col_idx,
                            uintptr_t values) {
    if (rows < 0 || cols < 0 || nnz < 0 || rows > std::numeric_limits<int32_t>::max() ||
        cols > std::numeric_limits<int32_t>::max() || nnz > std::numeric_limits<int32_t>::max())
      throw UsageError("device CSR: " + std::to_string(rows) + " x " + std::to_string(cols) + " with " +
                       std::to_string(nnz) + " entries is outside int32's range");
    const DeviceCsrRef a{static_cast<int32_t>(rows), static_cast<int32_t>(cols), nnz,
                         reinterpret_cast<const int32_t*>(row_ptr), reinterpret_cast<const int32_t*>(col_idx),
                         reinterpret_cast<const double*>(values)};
    py::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> one_at_a_time(mutex_);
    solver_->update_values(a);
  }
  // What an update swaps is read under the solve lock, the GIL released meanwhile (a solve holding the lock may
  // need the GIL for its interrupt hook).
  template <class F>
  auto locked(F read) const {
    py::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> one_at_a_time(mutex_);
    return read();
  }
  py::list update_phases() const { return phases_to_python(locked([&] { return solver_->update_phases(); })); }
  int updates() const { return locked([&] { return solver_->updates(); }); }

  int32_t rows() const { return solver_->rows(); }
  std::string backend() const { return name_of(solver_->backend()); }
  std::string kernel(int k) const { return locked([&] { return solver_->kernel(k); }); }
  std::string kernel_reason() const { return locked([&] { return solver_->kernel_reason(); }); }
  std::string precision() const { return locked([&] { return std::string(name_of(solver_->precision())); }); }
  std::string precision_reason() const { return locked([&] { return solver_->precision_reason(); }); }
  py::list setup_phases() const { return phases_to_python(solver_->setup_phases()); }
  py::object preconditioner() const {
    const std::optional<PreconditionerReport> report = locked([&] {
      const PreconditionerReport* p = solver_->preconditioner();
      return p ? std::optional<PreconditionerReport>(*p) : std::nullopt;
    });
    return precond_to_python(report ? &*report : nullptr);
  }
  py::dict stats() const { return stats_to_python(locked([&] { return solver_->stats(); })); }
  py::object device_input() const { return device_input_; }

  // For the tests (the host backend never asks the hook): waits wait_ms with the GIL released, so that a signal
  // can arrive meanwhile, then asks the interrupt hook as the monitor does. Returns (its answer, the exception it
  // kept or None).
  py::tuple poll_interrupt(double wait_ms) {
    bool asked = false;
    {
      py::gil_scoped_release unlocked;
      std::lock_guard<std::mutex> one_at_a_time(mutex_);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wait_ms));
      asked = solver_->options().iteration.interrupted();
    }
    py::object kept = interrupt_->pending ? std::move(interrupt_->pending) : py::none();
    interrupt_->pending = py::object();
    return py::make_tuple(asked, kept);
  }

 private:
  PySolver() = default;

  // The setup asks the hook only if it runs solves with the solver's own options (today it does not: auto's
  // trial has its own); should it, a Ctrl-C there ends the construction with the handler's exception.
  void raise_if_interrupted() {
    if (!interrupt_->pending) return;
    py::object e = std::move(interrupt_->pending);
    interrupt_->pending = py::object();
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.ptr())), e.ptr());
    throw py::error_already_set();
  }

  SolverOptions options_with_hook(const py::dict& options) {
    SolverOptions o = options_from_python(options);
    o.iteration.interrupted = interrupt_hook(interrupt_);
    return o;
  }

  // One solve at a time on this solver (the C++ Solver is not for concurrent solves), the GIL released first
  // so that a thread waiting here never holds it; the hook's exception taken before the next solve may start.
  // Returns the result as a dict (with call_ms: the Solver::solve call's wall time, what a C++ caller pays for
  // it, so that Python's own cost can be told apart) and the pending exception or None.
  template <class F>
  std::pair<py::dict, py::object> run(const std::optional<StopRule>& stop, F&& f) {
    SolveResult r;
    double call_ms = 0;
    py::object pending = py::none();
    {
      py::gil_scoped_release unlocked;
      std::lock_guard<std::mutex> one_at_a_time(mutex_);
      try {
        if (stop) solver_->set_stop_rule(*stop);
        const auto t0 = std::chrono::steady_clock::now();
        r = f();
        call_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      } catch (...) {
        py::gil_scoped_acquire gil;
        interrupt_->pending = py::object();  // the library's error is what the caller sees
        throw;
      }
      py::gil_scoped_acquire gil;
      if (interrupt_->pending) pending = std::move(interrupt_->pending);
      interrupt_->pending = py::object();
    }
    py::dict d = result_to_python(r);
    d["call_ms"] = call_ms;
    return {std::move(d), std::move(pending)};
  }

  std::shared_ptr<InterruptState> interrupt_ = std::make_shared<InterruptState>();
  std::unique_ptr<Solver> solver_;
  mutable std::mutex mutex_;
  py::object device_input_ = py::none();
};

py::tuple read_file(const std::string& path, int threads) {
  MatrixFile f;
  {
    py::gil_scoped_release unlocked;
    ReadOptions o;
    o.threads = threads;
    f = read_matrix_market(path, o);
  }
  py::dict info;
  const MatrixMarketInfo& i = f.info;
  info["source"] = i.source, info["format"] = i.format, info["field"] = i.field, info["symmetry"] = i.symmetry;
  info["comments"] = i.comments, info["name"] = i.name, info["kind"] = i.kind;
  info["declared_entries"] = i.declared_entries, info["duplicates_summed"] = i.duplicates_summed;
  info["explicit_zeros"] = i.explicit_zeros;
  info["threads"] = i.read.threads, info["access"] = i.read.access, info["method"] = i.read.method;
  info["load_ms"] = i.read.load_ms, info["parse_ms"] = i.read.parse_ms, info["build_ms"] = i.read.build_ms;
  return py::make_tuple(csr_to_python(std::move(f.matrix)), info);
}

void write_file(const std::string& path, int64_t rows, int64_t cols, const IndexArray& indptr, const IndexArray& indices,
           const ValueArray& data, const std::vector<std::string>& comments, const std::string& storage,
           const std::string& values, int threads) {
  const CsrMatrix a = csr_from_arrays(rows, cols, indptr, indices, data);
  WriteOptions o;
  if (storage == "general") o.storage = MatrixStorage::general;
  else if (storage == "symmetric") o.storage = MatrixStorage::symmetric_lower;
  else throw UsageError("storage '" + storage + "': expected general or symmetric");
  if (values == "g17") o.values = ValueFormat::g17;
  else if (values == "e16") o.values = ValueFormat::e16;
  else throw UsageError("values '" + values + "': expected g17 or e16");
  o.threads = threads;
  py::gil_scoped_release unlocked;
  write_matrix_market(path, a, comments, o);
}

py::tuple generate_matrix(const std::string& spec) {
  CsrMatrix a;
  {
    py::gil_scoped_release unlocked;
    a = generate(spec);
  }
  return csr_to_python(std::move(a));
}

py::dict stats(int64_t rows, int64_t cols, const IndexArray& indptr, const IndexArray& indices, const ValueArray& data,
               int64_t duplicates_summed) {
  const CsrMatrix a = csr_from_arrays(rows, cols, indptr, indices, data);
  MatrixStats s;
  {
    py::gil_scoped_release unlocked;
    s = compute_stats(a, duplicates_summed);
  }
  return stats_to_python(s);
}

// spcg.cg's test of "the same matrix" for device inputs (python/spcg/_device.py defines the hash and keeps its
// NumPy reference): arrays as (device pointer, count, element bytes: 4 int32, 8 int64 / float64), at most three,
// hashed on `stream` (the array library's current stream, a cudaStream_t as an integer), which is synchronised
// before the hashes return. One kernel and one read of the sums; the GIL is released meanwhile.
py::tuple device_fingerprint(const std::vector<std::tuple<uintptr_t, int64_t, int>>& arrays, uintptr_t stream) {
  std::vector<DeviceWordsRef> refs;
  refs.reserve(arrays.size());
  for (const auto& [pointer, count, element_bytes] : arrays)
    refs.push_back(DeviceWordsRef{reinterpret_cast<const void*>(pointer), count, element_bytes});
  std::vector<uint64_t> hashes;
  {
    py::gil_scoped_release unlocked;
    hashes = fingerprint(refs, reinterpret_cast<CUstream_st*>(stream));
  }
  py::tuple out(hashes.size());
  for (size_t t = 0; t < hashes.size(); ++t) out[t] = py::int_(hashes[t]);
  return out;
}

// The rows of a CSR in device memory (int32 arrays at these addresses) checked for strictly increasing columns, on
// `stream` (synchronised), the GIL released meanwhile.
bool device_is_canonical(int32_t rows, uintptr_t row_ptr, uintptr_t col_idx, uintptr_t stream) {
  const DeviceCsrRef a{rows, rows, 0, reinterpret_cast<const int32_t*>(row_ptr), reinterpret_cast<const int32_t*>(col_idx),
                       nullptr};
  py::gil_scoped_release unlocked;
  return is_canonical(a, reinterpret_cast<CUstream_st*>(stream));
}

// Its canonical copy into the caller's arrays (spcg::canonical_copy); returns the entries kept.
int64_t device_canonical_copy(int32_t rows, int64_t nnz, uintptr_t row_ptr, uintptr_t col_idx, uintptr_t values,
                              uintptr_t out_row_ptr, uintptr_t out_col_idx, uintptr_t out_values, uintptr_t stream) {
  const DeviceCsrRef a{rows, rows, nnz, reinterpret_cast<const int32_t*>(row_ptr), reinterpret_cast<const int32_t*>(col_idx),
                       reinterpret_cast<const double*>(values)};
  py::gil_scoped_release unlocked;
  return canonical_copy(a, reinterpret_cast<int32_t*>(out_row_ptr), reinterpret_cast<int32_t*>(out_col_idx),
                        reinterpret_cast<double*>(out_values), reinterpret_cast<CUstream_st*>(stream));
}

py::tuple device_available() {
  std::string why;
  const bool ok = cuda_device_available(&why);
  return py::make_tuple(ok, why);
}

}  // namespace

PYBIND11_MODULE(_spcg, m) {
  m.doc() = "spcg's native half (pybind11 over spcg/spcg.hpp); use the package spcg, not this module";
  m.attr("__version__") = SPCG_PROJECT_VERSION;

  PyErrors& e = errors();
  e.error = new_exception(m, "Error", py::make_tuple(py::handle(PyExc_Exception)),
                          "Every error spcg's library raises.");
  e.input = new_exception(m, "InputError", py::make_tuple(e.error, py::handle(PyExc_ValueError)),
                          "Bad input data (a file, a generator spec, a matrix): .file, .line (0: none), .problem.");
  e.matrix_refused = new_exception(m, "MatrixRefusedError", py::make_tuple(e.input),
                                   "The solver's checks refused the matrix; .overridable: check_matrix=False lets "
                                   "it through (not symmetric, or a non-positive diagonal).");
  e.usage = new_exception(m, "UsageError", py::make_tuple(e.error, py::handle(PyExc_ValueError)),
                          "A bad option or argument (an unknown name, a preconditioner the backend lacks, ...).");
  e.cuda = new_exception(m, "CudaError", py::make_tuple(e.error, py::handle(PyExc_RuntimeError)),
                         "A CUDA, cuSPARSE or cuBLAS call failed, or no device is usable.");
  e.device_memory = new_exception(m, "DeviceMemoryError", py::make_tuple(e.cuda, py::handle(PyExc_MemoryError)),
                                  "Not enough GPU memory (the message says how much was asked for and is free).");
  e.communication = new_exception(m, "CommunicationError", py::make_tuple(e.error, py::handle(PyExc_RuntimeError)),
                                  "The ranks of a multi-GPU solve could not communicate.");
  py::register_exception_translator(&translate);
  main_thread_ident() = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();

  py::class_<PySolver>(m, "Solver")
      .def(py::init<int64_t, int64_t, const IndexArray&, const IndexArray&, const ValueArray&, const py::dict&>(),
           py::arg("rows"), py::arg("cols"), py::arg("indptr"), py::arg("indices"), py::arg("data"), py::arg("options"))
      .def_static("from_device", &PySolver::from_device, py::arg("rows"), py::arg("cols"), py::arg("nnz"),
                  py::arg("row_ptr"), py::arg("col_idx"), py::arg("values"), py::arg("options"))
      .def("solve", &PySolver::solve, py::arg("b"), py::arg("x0"), py::arg("stop") = py::none())
      .def("solve_device", &PySolver::solve_device, py::arg("rows"), py::arg("cols"), py::arg("b"), py::arg("x"),
           py::arg("stop") = py::none())
      .def("same_matrix", &PySolver::same_matrix, py::arg("rows"), py::arg("cols"), py::arg("indptr"),
           py::arg("indices"), py::arg("data"))
      .def("update_values", &PySolver::update_values, py::arg("rows"), py::arg("cols"), py::arg("indptr"),
           py::arg("indices"), py::arg("data"))
      .def("update_values_device", &PySolver::update_values_device, py::arg("rows"), py::arg("cols"), py::arg("nnz"),
           py::arg("row_ptr"), py::arg("col_idx"), py::arg("values"))
      .def_property_readonly("update_phases", &PySolver::update_phases)
      .def_property_readonly("updates", &PySolver::updates)
      .def_property_readonly("device_input", &PySolver::device_input)
      .def("_poll_interrupt", &PySolver::poll_interrupt, py::arg("wait_ms"))

      .def_property_readonly("rows", &PySolver::rows)
      .def_property_readonly("backend", &PySolver::backend)
      .def("kernel", &PySolver::kernel, py::arg("k") = 1)
      .def_property_readonly("kernel_reason", &PySolver::kernel_reason)
      .def_property_readonly("precision", &PySolver::precision)
      .def_property_readonly("precision_reason", &PySolver::precision_reason)
      .def_property_readonly("setup_phases", &PySolver::setup_phases)
      .def_property_readonly("preconditioner", &PySolver::preconditioner)
      .def_property_readonly("stats", &PySolver::stats);

  m.def("read", &read_file, py::arg("path"), py::arg("threads") = 0);
  m.def("write", &write_file, py::arg("path"), py::arg("rows"), py::arg("cols"), py::arg("indptr"), py::arg("indices"),
        py::arg("data"), py::arg("comments"), py::arg("storage"), py::arg("values"), py::arg("threads") = 0);
  m.def("generate", &generate_matrix, py::arg("spec"));
  m.def("generator_help", &generator_help);
  m.def("looks_like_generator", &looks_like_generator, py::arg("spec"));
  m.def("stats", &stats, py::arg("rows"), py::arg("cols"), py::arg("indptr"), py::arg("indices"), py::arg("data"),
        py::arg("duplicates_summed") = 0);
  m.def("device_available", &device_available);
  m.def("device_fingerprint", &device_fingerprint, py::arg("arrays"), py::arg("stream") = 0);
  m.def("device_is_canonical", &device_is_canonical, py::arg("rows"), py::arg("row_ptr"), py::arg("col_idx"),
        py::arg("stream") = 0);
  m.def("device_canonical_copy", &device_canonical_copy, py::arg("rows"), py::arg("nnz"), py::arg("row_ptr"),
        py::arg("col_idx"), py::arg("values"), py::arg("out_row_ptr"), py::arg("out_col_idx"), py::arg("out_values"),
        py::arg("stream") = 0);
  m.def("default_options", &default_options);
  m.attr("solver_names") = names<SolverKind>();
  m.attr("precond_names") = names<Preconditioner>();
  m.attr("backend_names") = names<Backend>();
}
