#pragma once
// spcg's public interface: conjugate gradients on the GPU for sparse symmetric positive definite systems.
//
//   #include <spcg/spcg.hpp>
//   spcg::CsrMatrix a = spcg::read_matrix_market("A.mtx").matrix;    // or spcg::generate("poisson3d:64")
//   spcg::SolverOptions o;
//   o.solver = spcg::SolverKind::block_cg, o.expected_columns = 8, o.precond = spcg::Preconditioner::jacobi;
//   spcg::Solver solver(std::move(a), o);       // setup once: upload, statistics, checks, kernel choice
//   spcg::DenseBlock b(solver.rows(), 8, 1.0), x(solver.rows(), 8, 0.0);
//   spcg::SolveResult r = solver.solve(b, x);   // as often as needed: the setup is kept
//   if (!r.all_converged()) ...                 // per column: r.columns[j].status, iterations, residuals
//
// Matrices and blocks may live in host memory (CsrMatrix, DenseBlock: n x k, row-major) or on the device
// (DeviceCsrRef, DeviceBlockRef: arrays the caller owns). Errors are exceptions of the hierarchy in error.hpp
// (InputError names the matrix and the problem, UsageError a bad option, CudaError a failed call or no device);
// nothing here prints or exits. The host backend (Eigen's CG) needs no GPU. relative_residuals (csr_matrix.hpp)
// checks a solution on the host.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spcg/csr_matrix.hpp"
#include "spcg/cuda_start.hpp"
#include "spcg/error.hpp"
#include "spcg/generators.hpp"
#include "spcg/matrix_market.hpp"
#include "spcg/partition.hpp"
#include "spcg/solve_types.hpp"
#include "spcg/stats.hpp"

struct CUstream_st;  // a cudaStream_t is a CUstream_st* (no CUDA header here)

namespace spcg {

// A matrix the checks refused (SolverOptions::check_matrix). `overridable`: not symmetric, or a non-positive
// diagonal, which check_matrix = false lets through (the solve then reports what happens); not square and
// non-finite values never pass.
class MatrixRefusedError : public InputError {
 public:
  MatrixRefusedError(const std::string& matrix, const std::string& problem, bool overridable)
      : InputError(matrix, 0, problem), overridable_(overridable) {}
  bool overridable() const { return overridable_; }

 private:
  bool overridable_;
};

// A CSR matrix in device memory the caller owns (0-based, rows sorted by column, no duplicates). The solver
// copies it on the device once; the caller's arrays may be freed after the constructor returns.
struct DeviceCsrRef {
  int32_t rows = 0, cols = 0;
  int64_t nnz = 0;
  const int32_t* row_ptr = nullptr;  // rows + 1
  const int32_t* col_idx = nullptr;  // nnz
  const double* values = nullptr;    // nnz
};

// An n x k row-major block in device memory the caller owns.
struct DeviceBlockRef {
  int32_t rows = 0, cols = 0;
  double* data = nullptr;
};

// New values in device memory the caller owns: nnz doubles in the CSR order of the solver's pattern
// (Solver::update_values). Copied on the device; the caller's array may be freed once the call returns.
struct DeviceValuesRef {
  int64_t nnz = 0;
  const double* values = nullptr;
};

// An array in device memory for fingerprint(): `count` elements of `element_bytes` bytes each, 4 (int32: each
// widened with its sign to 64 bits) or 8 (int64, float64 or any 64-bit word: its bits), aligned to their size.
struct DeviceWordsRef {
  const void* data = nullptr;
  int64_t count = 0;
  int element_bytes = 8;
};

// A 64-bit hash of each of up to three device arrays: a cache's test of "the same arrays" without a copy to the
// host (the Python module's spcg.cg keeps its setup while a CuPy / torch matrix hashes the same). For the array
// at position t (0, 1, 2: a CSR's row_ptr, col_idx, values) with elements w_0, w_1, ... as 64-bit words,
//   hash_t = sum over i of mix(w_i + 0x9E3779B97F4A7C15 * (i + t * 2^40)) mod 2^64,
//   mix(z): z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31
// (splitmix64's finaliser, every output bit depending on every input bit): changed entries (a swap of two
// included) change the hash but with probability about 2^-64. An empty array hashes to 0. One kernel over all
// the arrays and one copy of the sums to the host, on `stream` (a cudaStream_t; nullptr: the legacy default
// stream), which is synchronised before the call returns: the arrays must be complete on that stream (work
// queued on it before the call is). The arrays must be device (or managed, or pinned host) memory of the
// current device. UsageError for bad arguments (a host or another device's pointer included), CudaError without
// a GPU (unless every array is empty: then nothing touches the device).
std::vector<uint64_t> fingerprint(const std::vector<DeviceWordsRef>& arrays, CUstream_st* stream = nullptr);
// A device CSR's arrays hashed as above: row_ptr (rows + 1 int32; may be null for 0 rows, hashed as {0}),
// col_idx (nnz int32), values (nnz float64), tags 0, 1, 2.
std::array<uint64_t, 3> fingerprint(const DeviceCsrRef& a, CUstream_st* stream = nullptr);

// Whether every row of a device CSR holds strictly increasing columns (sorted, no duplicates), checked on the
// device on `stream` (synchronised). A Solver takes canonical rows; canonical_copy makes them.
bool is_canonical(const DeviceCsrRef& a, CUstream_st* stream = nullptr);
// a with each row sorted by column (stably) and each column's duplicates summed in their order, written into the
// caller's device arrays: out_row_ptr (rows + 1), out_col_idx and out_values (room for a.nnz each). Returns the
// entries kept (a.nnz less the duplicates summed). On `stream`, synchronised; a is not changed.
int64_t canonical_copy(const DeviceCsrRef& a, int32_t* out_row_ptr, int32_t* out_col_idx, double* out_values,
                       CUstream_st* stream = nullptr);

// Everything a solver is set up with. The iteration's own options are in `iteration`.
struct SolverOptions {
  SolverKind solver = SolverKind::cg;
  KernelChoice kernel;           // auto (chosen with a printed reason), or a registry kernel: o.kernel = "dia"
  Preconditioner precond = Preconditioner::none;
  PreconditionerOptions precond_options;  // block size, Chebyshev degree, AMG's theta, smoother, ...
  Backend backend = Backend::automatic;         // automatic: the GPU when one is usable, else the host
  KernelTiming timing = KernelTiming::automatic;  // automatic: per-kernel events for n >= 200000
  int expected_columns = 1;     // the block width the solves will use: auto picks the SpMM kernel for it
  Precision precision = Precision::automatic;  // cg's matrix values in the iteration (solve_types.hpp)
  bool check_matrix = true;     // refuse a matrix that is not symmetric or has a non-positive diagonal
  std::string matrix_name = "matrix";  // names the matrix in error messages (a path, a generator spec)
  int64_t duplicates_summed = 0;       // from the reader: for the statistics
  bool profile_solves = false;  // bracket each solve's iteration with cudaProfilerStart/Stop (ncu/nsys capture)
  SolveOptions iteration;       // stop rule, vector ops, graph, persistent, deterministic, monitor, ...
};

// Why these options cannot run on several GPUs (the capabilities in solve_types.hpp; kernel auto, since each
// rank picks its local block's kernel; the gpu backend): the one refusal the CLI and a rank's Solver give.
// Empty when they can.
std::string several_gpus_refusal(const SolverOptions& options);

// Right-hand sides the solver makes itself, on the device: all ones, or uniform in [-1, 1) from a seed (the
// same values make_rhs gives on the host).
enum class RhsKind { ones, random };

class Communicator;  // the ranks of a solve on several GPUs (spcg/distributed.hpp makes one)

// A matrix set up for solving: the operator (kernel), its workspaces and the preconditioner, kept between
// solves. On one GPU (or the host) from the whole matrix; on several GPUs, one Solver per rank from that rank's
// share over a communicator (spcg/distributed.hpp): the same setup, checks and solves, with every rank calling
// every method together. Movable, not copyable.
class Solver {
 public:
  explicit Solver(CsrMatrix a, const SolverOptions& options = {});
  Solver(const DeviceCsrRef& a, const SolverOptions& options = {});
  // This rank's share of a system of `global_rows` rows (partition.hpp: rank_share, rank_blocks_from_rows), taken
  // over (a share of a large system is not copied). The options must run on several GPUs (several_gpus_refusal:
  // UsageError otherwise). Checks this rank's rows (finite values; unless check_matrix is off, a symmetric
  // diagonal block and a positive diagonal) and throws InputError naming the global row: a caller ends the other
  // ranks (the launcher of spcg solve --gpus does). The setup ends by connecting the ranks (a "connect" phase).
  Solver(RankBlocks share, GlobalIndex global_rows, Communicator& comm, const SolverOptions& options);
  ~Solver();
  Solver(Solver&&) noexcept;
  Solver& operator=(Solver&&) noexcept;

  int32_t rows() const;         // this rank's (on one GPU: all of them)
  GlobalIndex row_begin() const;    // this rank's first row (0 on one GPU)
  GlobalIndex global_rows() const;  // the whole system's (on several GPUs it may pass 2^31)
  int ranks() const;            // 1 on one GPU
  int64_t halo_entries() const;  // x entries this rank receives per column and apply (0 on one GPU)
  int64_t send_entries() const;  // x entries it sends
  // GPU memory in use on this process's device now (context, NCCL's buffers, the pool included), bytes.
  int64_t device_memory_in_use() const;
  Backend backend() const;  // gpu or host, as resolved at setup
  const SolverOptions& options() const;
  // The stop rule of later solves; the setup stays (auto's preconditioner was chosen for the rtol given at
  // setup). UsageError for a negative or non-finite tolerance or a negative iteration limit.
  void set_stop_rule(const StopRule& rule);
  const MatrixStats& stats() const;  // the statistics the checks used (a rank: of its diagonal block)
  // The kernel that runs at block width k ("dia"; auto's choice), and auto's reason (empty for a named kernel).
  std::string kernel(int k) const;
  const std::string& kernel_reason() const;
  // The precision the solves run in (double or mixed, as resolved at setup) and why.
  Precision precision() const;
  const std::string& precision_reason() const;
  // upload, statistics, conversion, analysis, setup (total): what the setup spent.
  const std::vector<Phase>& setup_phases() const;
  // What the preconditioner's setup did (levels, phases, auto's reason; after update_values, the update's); null
  // without one.
  const PreconditionerReport* preconditioner() const;
  // The matrix on the host (for a device matrix: downloaded on the first call; a rank: UsageError).
  const CsrMatrix& matrix() const;

  // New values on the same sparsity pattern (time steps, Newton steps), without a new setup: what the first setup
  // decided from the pattern is kept (the kernel: auto's choice is not made again; the layouts' structure;
  // block-Jacobi's block size; AMG's aggregates, levels and level kernels), and what depends on the values is made
  // again (the kernel's layout values, Jacobi's diagonal, Chebyshev's eigenvalue bound, the block inverses, AMG's
  // smoothed prolongators, Galerkin products, smoother bounds and coarsest factorisation). The matrix checks run
  // on the new values with the setup's errors (MatrixRefusedError: not symmetric, a non-positive diagonal, NaN or
  // Inf). Another pattern (size, entry count, a row's columns) is refused with InputError naming the first
  // difference ("row 17's pattern differs: ..."). All or nothing: on any error the solver keeps its old values
  // (the GPU holds the old setup and the new one while an update runs). update_phases() tells what it spent.
  // The host backend takes the new matrix (its statistics and checks; Jacobi stays as chosen).
  // A rank's Solver (several GPUs) refuses with UsageError: its distributed operator is not remade yet (set up
  // a new one).
  void update_values(CsrMatrix a);
  // The values alone: nnz doubles in host memory, in the CSR order of the solver's pattern. On the GPU backend
  // they go up alone, beside the pattern the solver keeps on the device (matrix() then downloads the host copy
  // when asked, as for values on the device); a CSR goes up the same way once its pattern is checked.
  void update_values(const double* values, int64_t nnz);
  // A CSR in device memory the caller owns (GPU backend: UsageError on the host backend): its pattern is
  // checked on the device, then its values are taken as update_values(DeviceValuesRef) takes them.
  void update_values(const DeviceCsrRef& a);
  // The values alone in device memory the caller owns (GPU backend: UsageError on the host backend).
  void update_values(const DeviceValuesRef& values);
  // The last update's phases, named as the setup's (upload, statistics, conversion, analysis, preconditioner),
  // after "pattern check" where a whole CSR came, ending with kUpdateTotalPhase (the whole call); empty before
  // the first update. setup_phases() stays the first setup's.
  const std::vector<Phase>& update_phases() const;
  int updates() const;  // update_values calls that succeeded

  // X holds the initial guess on entry (n x k, n = rows(): a rank's own rows) and the solution on exit; B is n x k.
  SolveResult solve(const DenseBlock& b, DenseBlock& x);
  SolveResult solve(const DeviceBlockRef& b, const DeviceBlockRef& x);
  // B made by the solver (k columns of `kind`; random: these rows of the whole system's make_rhs block, the same
  // bits on any rank count); x0: initial guess (zero when null). x: the solution.
  SolveResult solve(RhsKind kind, int k, uint64_t seed, DenseBlock& x, const DenseBlock* x0 = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Systems of at most this many rows run CG as one cooperative launch (kernel auto, Switch persistent).
int32_t persistent_cg_max_rows();

// An NVTX range of this name around a scope (Nsight Systems shows the report's phases by name).
class ScopedRange {
 public:
  explicit ScopedRange(const char* name);
  ~ScopedRange();
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;
};

}  // namespace spcg
