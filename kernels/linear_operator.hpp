#pragma once
// The one interface every kernel meets: y = alpha * A * x + beta * y on n x k row-major blocks.
// k = 1 is SpMV. beta == 0 never reads Y (NaN-poisoned Y stays out of the result).
// Solvers, the benchmark and the tests see only this; none of them knows the storage format.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "spcg/csr_matrix.hpp"
#include "kernels/device_array.hpp"

namespace spcg {

struct SetupInfo {
  std::string format;        // storage actually uploaded (csr, ell, sell-32-1, dia, coo, hyb, ...)
  double convert_ms = 0;     // host conversion from CSR
  double upload_ms = 0;      // host -> device copies
  double analysis_ms = 0;    // device-side analysis (cuSPARSE preprocess, auto-tuning trials)
  int64_t device_bytes = 0;  // matrix storage on the device
  std::string reason;        // auto: why this kernel; a named kernel: what its setup chose (e.g. a sub-warp width), or empty
};

struct OperatorOptions {
  bool deterministic = false;  // atomic-free, fixed-order reductions (all of ours are; cuSPARSE ALG1 may not be)
  bool autotune = true;        // auto: time the short-listed candidates once at setup
  int expected_k = 1;          // auto: the block width the solver will use
  // auto: only kernels whose layout is built on the device from the shared CSR (DIA, CSR, the CSR SpMMs), and
  // no persistent-CG layout: for matrices made on the device (AMG's levels), where a host-built layout
  // (SELL, row blocks) would first download the matrix.
  bool device_layouts_only = false;
  // auto: k columns as k single-column SpMVs (no SpMM), so that column j of a block apply has the bits of the
  // single apply of column j: the preconditioners' operators under --deterministic, where a k-column apply must
  // equal k single applies bitwise (an SpMM sums a row in another order than the SpMV).
  bool columnwise = false;
};

// Device buffers for a fused dot product written by a kernel's epilogue: per-block partial sums, reduced in
// block order by the last block to finish (deterministic), into *result. The counter is left at zero.
struct DotSink {
  double* partials = nullptr;
  unsigned int* counter = nullptr;
  double* result = nullptr;
  int capacity = 0;  // max blocks
};

class MatrixSetup;
class PersistentCgMatrix;
class Communicator;

class LinearOperator {
 public:
  virtual ~LinearOperator() = default;

  // Checks shapes, handles degenerate shapes (0 rows, k = 0, nnz = 0) without launching a kernel grid.
  void apply(double alpha, const DeviceBlock& X, double beta, DeviceBlock& Y, cudaStream_t stream = 0) const;
  // Raw form for solvers that keep their own buffers: x is cols x k, y is rows x k, both row-major.
  void apply(double alpha, const double* x, double beta, double* y, int k, cudaStream_t stream = 0) const;

  virtual std::string name() const = 0;
  // The kernel that runs at block width k: name() for a kernel; auto's choice for auto.
  virtual std::string chosen(int /*k*/) const { return name(); }
  virtual double bytes_per_apply(int k) const = 0;  // the format's own bytes model (beta = 0)
  virtual bool deterministic() const { return true; }
  const SetupInfo& setup_info() const { return info_; }
  int32_t rows() const { return rows_; }
  int32_t cols() const { return cols_; }
  int64_t nnz() const { return nnz_; }

 protected:
  LinearOperator(const CsrMatrix& a) : rows_(a.rows), cols_(a.cols), nnz_(a.nnz()) {}
  LinearOperator(int32_t rows, int32_t cols, int64_t nnz) : rows_(rows), cols_(cols), nnz_(nnz) {}  // a wrapper's
  explicit LinearOperator(const MatrixSetup& m);
  // Called only with rows > 0, k > 0, nnz > 0.
  virtual void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const = 0;
  SetupInfo info_;
  int32_t rows_, cols_;
  int64_t nnz_;
  bool collective_ = false;  // every rank calls apply, whatever its shape (a RankShare)
};

// ---- opt-in interfaces: what a solver may ask an operator for beyond apply (Ginkgo's LinOp traits) ----
// The operator stays one job (apply, name, bytes model, setup info); an extra is an interface a kernel also
// implements, and a solver asks for it through the functions below (null or false: not offered).

// y = A x (k = 1) with *sink.result = x . y summed in the product's epilogue. y is always made; returns whether
// the dot was (false: the caller runs a separate dot). Only for square operators.
class FusedDotProduct {
 public:
  virtual ~FusedDotProduct() = default;
  virtual bool apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t stream) const = 0;
};
// One step of a polynomial smoother (solver/preconditioner.hpp: apply_polynomial) in the product's epilogue, k = 1:
//   res <- res - A d_in;   d_out = c1 d_in + c2 S res;   x <- x + d_out
// with the arithmetic of the product (alpha -1, beta 1) and launch_chebyshev_step run apart, so the same bits; it
// saves the step's second pass over res and d (16 bytes a row). d_out must not alias d_in (other rows' products
// read d_in). rows_apart (null: none): rows whose step the caller finishes, where only res is written (a rank's
// rows with halo entries, whose res is final after the halo product). Returns false where the operator offers none
// for this shape (the caller runs the two apart).
class FusedSmoothing {
 public:
  virtual ~FusedSmoothing() = default;
  // res_in (where not null, and the kernel reads_residual_in_place): read in res's place, res = res_in - A d_in (the
  // first step after x = 0 reads b itself: no copy of b into res first)
  virtual bool smoothing_step(const double* d_in, double* d_out, double* res, const double* res_in, double* x,
                              const double* scale, double c1, double c2, cudaStream_t stream,
                              const uint8_t* rows_apart = nullptr) const = 0;
  virtual bool offers_smoothing_step() const { return true; }  // (a wrapper: whether its kernel does)
  // res = b - A x in one launch (b read in res's place, the product's arithmetic: the bits of b copied into res and
  // res -= A x), one column, b and x apart from res; offered with res_in, or not at all
  virtual bool reads_residual_in_place() const { return false; }
  virtual bool residual_step(const double* /*b*/, const double* /*x*/, double* /*res*/, cudaStream_t) const { return false; }
};
// Whether A runs smoothing_step fused (square, with rows and entries).
bool offers_smoothing_step(const LinearOperator& A);
// The step fused where A offers it; returns whether it did (nothing run when not). res_in: see FusedSmoothing
// (only where reads_residual_in_place(A)).
bool smoothing_step(const LinearOperator& A, const double* d_in, double* d_out, double* res, const double* res_in,
                    double* x, const double* scale, double c1, double c2, cudaStream_t stream,
                    const uint8_t* rows_apart = nullptr);
// Whether A's fused steps read a residual in res's place and A offers residual_step.
bool reads_residual_in_place(const LinearOperator& A);
// res = b - A x in one launch where A reads the residual in place; returns whether it did (nothing run when not).
bool residual_step(const LinearOperator& A, const double* b, const double* x, double* res, cudaStream_t stream);

// A's layout for the one-launch persistent CG (cg_persistent.hpp), kept by operators of small systems (auto).
class PersistentCgLayout {
 public:
  virtual ~PersistentCgLayout() = default;
  virtual const PersistentCgMatrix* persistent_cg_matrix() const = 0;  // null when this one keeps none
};
// One rank's rows of a larger A (kernels/distributed_operator.hpp): its applies are collective (every rank calls
// them, even one with no rows), and a solver's sums go over these ranks.
class RankShare {
 public:
  virtual ~RankShare() = default;
  virtual Communicator& communicator() const = 0;
};

// An operator whose choice is more than its registry name (auto: the kernels it picked, its persistent-CG
// layout): made again from new values of the same pattern with that choice kept (registry.hpp: remake_operator).
class KeptChoice {
 public:
  virtual ~KeptChoice() = default;
  virtual std::unique_ptr<LinearOperator> remade(const MatrixSetup& a, const OperatorOptions& o) const = 0;
};

// An operator whose recurrences may run on a cheaper copy of it (mixed precision: FP32 values), itself giving the
// true residual b - A x that judges convergence (solver/cg.cpp puts it back where the copy's recurrence says
// converged).
class IterationCopy {
 public:
  virtual ~IterationCopy() = default;
  virtual const LinearOperator& iteration_copy() const = 0;
  // The copy's products are A's bit for bit (every value an FP32 number): its recurrence needs no FP64 check.
  virtual bool copy_is_exact() const = 0;
};

// Mixed precision's operator for one solve: applies are the FP64 kernel's (the true residual, reports), the
// recurrences' products the FP32 variant's (IterationCopy). Holds neither.
class MixedPrecisionOperator final : public LinearOperator, public FusedDotProduct, public IterationCopy {
 public:
  MixedPrecisionOperator(const LinearOperator& fp64, const LinearOperator& fp32, bool exact)
      : LinearOperator(fp64.rows(), fp64.cols(), fp64.nnz()), fp64_(fp64), fp32_(fp32), exact_(exact) {
    info_ = fp64.setup_info();
  }
  std::string name() const override { return fp64_.name(); }
  std::string chosen(int k) const override { return fp64_.chosen(k) + ", iterating on " + fp32_.chosen(k); }
  double bytes_per_apply(int k) const override { return fp64_.bytes_per_apply(k); }
  bool deterministic() const override { return fp64_.deterministic() && fp32_.deterministic(); }
  bool apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const override;
  const LinearOperator& iteration_copy() const override { return fp32_; }
  bool copy_is_exact() const override { return exact_; }

 protected:
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    fp64_.apply(alpha, x, beta, y, k, s);
  }

 private:
  const LinearOperator& fp64_;
  const LinearOperator& fp32_;
  bool exact_;
};

// y = A x, with x . y fused where A offers it (FusedDotProduct); returns whether it did.
bool apply_with_dot(const LinearOperator& A, const double* x, double* y, const DotSink& sink, cudaStream_t stream);
// The persistent CG's layout of A, or null.
const PersistentCgMatrix* persistent_cg_layout(const LinearOperator& A);
// The ranks A's rows are a share of (several GPUs), or null (one GPU).
Communicator* ranks_of(const LinearOperator& A);
// The operator a recurrence's products run on: A's IterationCopy, or A itself.
const LinearOperator& iteration_operator(const LinearOperator& A);
// Whether a recurrence on iteration_operator(A) needs its convergence confirmed by A's true residual (a copy
// whose values are not A's).
bool iteration_copy_is_inexact(const LinearOperator& A);

// Base for SpMV kernels: a k-column block is applied column by column with stride k (repeated SpMV).
class SpmvOperator : public LinearOperator {
 protected:
  using LinearOperator::LinearOperator;
  virtual void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const = 0;
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    for (int j = 0; j < k; ++j) apply_column(alpha, x + j, beta, y + j, k, s);
  }
};

// CSR bytes model shared by reports: 12 nnz + 4 (n + 1) + 16 n for k = 1; SpMM adds 16 n per extra column.
inline double csr_bytes_model(int64_t rows, int64_t nnz, int k = 1) {
  return 12.0 * nnz + 4.0 * (rows + 1) + 16.0 * rows * k;
}

// Times a host callable that enqueues work on `stream`, in milliseconds (events, synchronised).
double time_on_stream_ms(cudaStream_t stream, const std::function<void()>& work);

}  // namespace spcg
