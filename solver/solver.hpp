#pragma once
// Solvers over the operator interface: cg, multi-cg (k independent recurrences sharing one SpMM), block-cg
// (breakdown-free block CG). They see only LinearOperator and device blocks, never the storage format.
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/device_array.hpp"
#include "solver/iteration_engine.hpp"
#include "kernels/kernel_timer.hpp"
#include "kernels/linear_operator.hpp"
#include "solver/monitor.hpp"
#include "solver/preconditioner.hpp"
#include "spcg/solve_types.hpp"

namespace spcg {

// Inverse diagonal for Jacobi; throws InputError naming the first zero or negative diagonal entry.
std::vector<double> jacobi_inverse_diagonal(const CsrMatrix& a);

// X holds the initial guess on entry and the solution on exit (n x k, row-major). M: the preconditioner
// (nullptr: none); Jacobi's inverse diagonal goes into the fused kernels, any other M is applied between them. B must be finite (checked by the caller). Each solver runs on a
// stream of its own (the iteration engine): B and X must be complete when it is called (a synchronous copy, or the
// caller's stream synchronised), and X is complete when it returns.
SolveResult solve_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                     const SolveOptions& o);
SolveResult solve_multi_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o);
SolveResult solve_block_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o);
// One of the three, then the true residual ||b_j - A x_j|| of every column.
SolveResult solve(SolverKind solver, const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B,
                  DeviceBlock& X, const SolveOptions& o);

// The fused recurrences on the engine (solver/multi_cg.cpp), k columns of B and X (n x k row-major) for the
// monitor's columns first_column..: Jacobi-preconditioned (dinv: the inverse diagonal) or plain CG, with the
// engine's reductions (summed over the ranks on several GPUs); and PCG with a general preconditioner M applied
// between the fused steps, its sums through the same reductions (M's applies are collective where A's are).
// first_iteration > 0 (k = 1): the column's count goes on from there, from b - A x (taking over from the persistent
// CG where its claim did not stand).
void cg_recurrences(IterationEngine& e, const LinearOperator& A, const double* dinv, const double* B, double* X, int k,
                    int first_column, int first_iteration = 0);
void pcg_general(IterationEngine& e, const LinearOperator& A, const PreconditionerOp& M, const double* B, double* X,
                 int k, int first_column);

// Runs `check` (a rank's own refusal: its rows, its preconditioner) and agrees on the verdict with one sum over
// `ranks` before any rank goes on to a collective: the rank that failed rethrows its error, the others throw
// CommunicationError, so that none is left waiting in a collective a failed peer never calls. One GPU (ranks
// null): just the check.
void agree_over_ranks(Communicator* ranks, const std::function<void()>& check);

// The refusal when a solve on several GPUs meets what is not distributed (the capability in solve_types.hpp).
void require_distributed(IterationEngine& e, const PreconditionerOp* M);

// ||B_j - A X_j|| per column, on the device (one SpMM + column dots), summed over ranks_of(A) on several GPUs.
std::vector<double> true_residual_norms(const LinearOperator& A, const DeviceBlock& B, const DeviceBlock& X,
                                        cudaStream_t s = 0);
ColumnStatus from_device_status(int status);  // CgStatus -> ColumnStatus

}  // namespace spcg
