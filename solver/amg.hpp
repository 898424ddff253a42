#pragma once
// Smoothed-aggregation AMG as a preconditioner (solver/amg.cpp).
#include <memory>

#include "solver/preconditioner.hpp"

namespace spcg {
std::unique_ptr<PreconditionerOp> make_amg(const PreconditionerOptions& options, const PreconditionerInputs& inputs);
}  // namespace spcg
