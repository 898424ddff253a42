#pragma once
// M^-1 for the solvers: one interface for every preconditioner, as LinearOperator is for every kernel. cg,
// multi-cg and block-cg call apply() on n x k blocks and never know which preconditioner it is; Jacobi also
// hands out its inverse diagonal, which the fused solver kernels apply in the same pass as their updates.
// On several GPUs a preconditioner works on the rank's rows: Jacobi and block-Jacobi from the rank's diagonal
// block alone (their applies are local), Chebyshev through the distributed product (its applies are collective,
// as A's are) with the rank's inverse diagonal; AMG on ranks: solver/amg.cpp.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/device_array.hpp"
#include "kernels/device_formats.hpp"
#include "kernels/linear_operator.hpp"
#include "spcg/solve_types.hpp"

namespace spcg {

class MatrixSetup;

class PreconditionerOp {
 public:
  virtual ~PreconditionerOp() = default;
  // Z = M^-1 R for n x k row-major blocks; Z must not alias R. Only enqueues work on `stream` (no
  // synchronisation, no allocation after reserve(k)), so a CUDA graph may capture it.
  virtual void apply(const double* R, double* Z, int k, cudaStream_t stream) const = 0;
  // Allocates the workspaces apply needs for blocks of up to k columns (call before apply, outside a capture).
  virtual void reserve(int /*k*/) const {}
  // Jacobi: D^-1 on the device, for the fused paths; others: null.
  virtual const double* inverse_diagonal() const { return nullptr; }
  // Device bytes one apply moves at width k (the kernel table's bandwidth column).
  virtual double bytes_per_apply(int k) const = 0;
  // The bytes of each launch of one apply, in order (spcg bench's floor of moving them in as many launches at their
  // sizes, ramps and tails included): one launch unless the preconditioner says otherwise.
  virtual std::vector<double> bytes_per_launch(int k) const { return {bytes_per_apply(k)}; }
  const PreconditionerReport& report() const { return report_; }
  void set_reason(std::string reason) { report_.reason = std::move(reason); }  // auto's
  int64_t rows() const { return rows_; }

 protected:
  explicit PreconditionerOp(int64_t rows) : rows_(rows) {}
  PreconditionerReport report_;
  int64_t rows_;
};

// Opt-in (asked for by dynamic_cast): a preconditioner that holds its own FP32-values copy of the solver's product
// (AMG's finest level on one GPU). Where every value is an FP32 number the copy's products are the product's, bit
// for bit, and the iteration may read it rather than a second copy of its own.
class HoldsFp32Copy {
 public:
  virtual ~HoldsFp32Copy() = default;
  // The copy over the product's rows and columns, or null where it holds none.
  virtual const LinearOperator* fp32_copy_of_product() const = 0;
};

// Jacobi from a host inverse diagonal (tests, the benchmark).
std::unique_ptr<PreconditionerOp> make_jacobi(const std::vector<double>& inverse_diagonal);

// What a preconditioner is built from: this GPU's rows of A (their device CSR and statistics), A's product as
// the solver applies it, the options for the operators it builds itself (AMG's levels), and the matrix's name
// for errors. On one GPU the two are the whole matrix and its operator; on a rank of several, the rank's
// diagonal block (where the diagonal and block-Jacobi's blocks come from) and the distributed operator, whose
// applies and whose sums (ranks_of) span every rank. The product must outlive the preconditioner.
struct PreconditionerInputs {
  const MatrixSetup& matrix;       // this GPU's rows: the whole matrix, or a rank's diagonal block (local columns)
  const LinearOperator& product;   // y = A x over those rows: the solver's operator (collective on several GPUs)
  OperatorOptions operator_options;
  std::string matrix_name = "matrix";
  int expected_columns = 1;
  double rtol = 1e-8;  // auto: the tolerance its iteration estimate is for
  // the index of matrix's first row in A (a rank's first row; 0 on one GPU): random vectors are the whole
  // system's draws on any rank count, and block-Jacobi's blocks are aligned to A's rows, not the rank's
  int64_t first_row = 0;
  // the solver's precision option: AMG's levels take their kernels' FP32-values variants unless double
  Precision precision = Precision::double_precision;
};

// The preconditioner `kind` (automatic resolves by choose_preconditioner), set up on the device; none gives
// a null pointer. Throws InputError for a matrix it cannot precondition (a non-positive diagonal or block, an
// indefinite coarsest level), DeviceMemoryError when the hierarchy does not fit.
std::unique_ptr<PreconditionerOp> make_preconditioner(Preconditioner kind, const PreconditionerOptions& options,
                                                      const PreconditionerInputs& inputs);

// New values on the pattern `kept` was set up on (Solver::update_values): the same kind (auto's choice kept, with
// its reason) made again from `inputs`, keeping what the first setup decided from the pattern: block-Jacobi's
// block size, AMG's aggregates, levels and level kernels (amg.hpp: update_amg). What depends on the values is
// computed again: Jacobi's diagonal, Chebyshev's eigenvalue bound, the blocks' inverses, AMG's prolongators,
// Galerkin products, smoother bounds and coarsest factorisation. Throws as make_preconditioner does.
std::unique_ptr<PreconditionerOp> update_preconditioner(const PreconditionerOp& kept, const PreconditionerOptions& options,
                                                        const PreconditionerInputs& inputs);

// auto: the preconditioner for this matrix, with the reason (printed like kernel auto's). The rule (measured:
// docs/perf-notes.md, "AMG's setup and auto's trial"): below min_rows_for_amg rows an iteration of Jacobi-CG is a
// few microseconds of launch latency and an AMG setup (tens of milliseconds) cannot pay back. Above, AMG when
// the diagonal spans coefficient_contrast or more (coefficient jumps), or when a short Jacobi-CG trial
// (trial_iterations on a random right-hand side, its second half's rate extrapolated to rtol) predicts at
// least amg_min_jacobi_iterations. Otherwise Jacobi, or none when the diagonal is constant (Jacobi would be a
// scaling that changes no iterate). A Lanczos estimate of kappa could not separate the cases: after 20 steps
// it saw kappa >= ~160 on every 3D problem, from 319 Jacobi-CG iterations to 1206.
// On several GPUs the same measurements are the whole system's (the diagonal's span and the row count gathered
// over the ranks, the trial run over them on the iteration engine), so every rank decides alike and as one GPU
// would; where that is AMG, Chebyshev instead (AMG on ranks couples them on its finest level only: 3.3x one GPU's
// iterations on poisson3d:600 over 4 H100s, docs/perf-notes.md; Chebyshev's side not yet measured there): its polynomial in D^-1 A cuts Jacobi-CG's iterations, and with them the sums over the ranks that
// each iteration waits for, at the price of degree - 1 more products whose exchanges overlap the local product.
// Block-Jacobi is distributed but not auto's: applied between the fused steps, it adds a sum over the ranks to
// every iteration (r'z on its own), and what it saves over Jacobi has not been measured.
struct AutoPreconditionerRule {
  static constexpr int32_t min_rows_for_amg = 100000;
  // AMG where the trial predicts at least this many Jacobi-CG iterations. Measured (H100, 2026-11-25, commit a3da456, setup +
  // solve): AMG beat the better of none and Jacobi on aniso3d:128 (0.89; 750 iterations, the trial predicted
  // 422), poisson3d:200 (0.83; 494, predicted 409), poisson2d:1024 (0.61; 1898, predicted 882) and lost on
  // poisson3d:128 (1.27; 319, predicted 320): the break-even lies near 400 taken, the trial under-predicts
  // the harder problems, and 380 splits 320 from 409
  static constexpr double amg_min_jacobi_iterations = 380;
  static constexpr int trial_iterations = 40;     // the short Jacobi-CG trial (2-5 % of the AMG solve it decides)
  static constexpr uint64_t trial_seed = 7;
  static constexpr double coefficient_contrast = 1e3;  // max / min of the diagonal from which AMG is taken outright
  static constexpr double constant_diagonal = 1e-12;  // max / min - 1 below this: constant
  // On several GPUs auto takes AMG where one GPU does: its levels over the ranks take one GPU's iterations (27
  // against 26 on poisson3d:600 over 4 H100s) and its setup + solve 0.53x Jacobi-CG's there (docs/perf-notes.md)
};
struct PreconditionerChoice {
  Preconditioner kind = Preconditioner::jacobi;
  std::string reason;
};
PreconditionerChoice choose_preconditioner(const PreconditionerInputs& in);

// The inverse diagonal on the device, checked: InputError naming the first row with a_ii <= 0 (as a row of the
// whole system: a's first row is its row first_row, a rank's first). `diagonal` (when not null) takes a_ii too.
DeviceArray<double> checked_inverse_diagonal(const DeviceCsr& a, const std::string& matrix_name, const char* who,
                                             cudaStream_t stream, int64_t first_row = 0, double* diagonal = nullptr);

// A polynomial smoother x <- x + q(S A)(b - A x) in steps (solver/preconditioner.cpp): each step d = c1 d + c2 S res,
// x += d, res -= A d, with S a diagonal scaling. Chebyshev on [lambda_max / ratio, lambda_max] of S A when
// S = D^-1; l1-Jacobi sweeps (c1 = 0, c2 = 1) when S is the l1 scaling. The same coefficients before and after
// a coarse correction keep a V-cycle symmetric.
struct PolynomialSteps {
  std::vector<double> c1, c2;  // per step
  static PolynomialSteps chebyshev(double lambda_min, double lambda_max, int degree);
  static PolynomialSteps jacobi_sweeps(int sweeps);
  int size() const { return static_cast<int>(c1.size()); }
};
// x = q(S A) S b (x_is_zero: x is written, not read) or x += q(S A) S (b - A x). res, d: n x k workspaces (res is
// not the returned x's residual; where A reads the residual in place, one step from x = 0 leaves it unwritten);
// d_next (n, or null): a second d, where A fuses a step into its product (FusedSmoothing, k = 1) the steps after
// the first run so, alternating d and d_next, with the same bits as apart. Enqueues only (capturable).
void apply_polynomial(const LinearOperator& A, const double* scale, const PolynomialSteps& steps, const double* b,
                      double* x, bool x_is_zero, double* res, double* d, int k, cudaStream_t s, double* d_next = nullptr);

}  // namespace spcg
