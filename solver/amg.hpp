#pragma once
// Smoothed-aggregation AMG as a preconditioner (solver/amg.cpp).
#include <memory>

#include "preconditioner.hpp"

namespace spcg {
std::unique_ptr<PreconditionerOp> make_amg(const PreconditionerOptions& options, const PreconditionerInputs& inputs);
// Loads what AMG's setup needs (cuSPARSE, for the Galerkin products) on a helper thread while it lives.
class AmgLibraryPreload {
 public:
  AmgLibraryPreload();
  ~AmgLibraryPreload();

 private:
  std::unique_ptr<class SpgemmPreload> preload_;
};
}  // namespace spcg
