#pragma once
// Smoothed-aggregation AMG as a preconditioner (solver/amg.cpp).
#include <memory>

#include "solver/preconditioner.hpp"

namespace spcg {
std::unique_ptr<PreconditionerOp> make_amg(const PreconditionerOptions& options, const PreconditionerInputs& inputs);
// kept's hierarchy on new values of its finest level's pattern (inputs): kept's aggregates (so its tentative
// prolongators, its levels' patterns and count) and level kernels; the diagonals, smoother bounds, smoothed
// prolongators, Galerkin products and the coarsest factorisation from the new values. `kept` must be make_amg's.
std::unique_ptr<PreconditionerOp> update_amg(const PreconditionerOp& kept, const PreconditionerOptions& options,
                                             const PreconditionerInputs& inputs);
}  // namespace spcg
