#pragma once
// The single list of kernels. The CLI (--kernel), the benchmark and the tests all iterate it, so a new kernel is
// one new .cu file plus one line in registry.cpp.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/linear_operator.hpp"
#include "kernels/matrix_setup.hpp"

namespace spcg {

enum class KernelFamily { spmv, spmm, baseline };
// Where a kernel's layout is made from the shared CSR: on the device (DIA's stripes, ELL's and SELL-32-1's
// slices, the CSR kernels, which need no layout), or on the host (sorted SELL, row blocks, COO, ...: a matrix
// made on the device, as AMG's levels are, would first be downloaded).
enum class LayoutBuilt { on_device, on_host };

// A kernel and its capabilities, as fields (auto and the tests read them; no list of names elsewhere).
struct KernelEntry {
  std::string name;
  KernelFamily family;
  std::string description;
  std::function<std::unique_ptr<LinearOperator>(const MatrixSetup&, const OperatorOptions&)> make;
  LayoutBuilt layout = LayoutBuilt::on_host;
  int auto_max_k = 0;  // auto short-lists it for block widths up to this (0: any width)
  // Its variant with FP32 values (a registry name; empty: none): mixed precision's iteration operator
  // (SolverOptions::precision), the FP64 kernel kept for the true residual.
  std::string fp32_variant;
  // Stores its values in FP32 (x, y and the sums stay FP64): its products carry FP32 rounding of the values, so
  // the tests hold it to that; auto never short-lists it.
  bool fp32_values = false;
  // The longest row it takes (0: any): past it the kernel refuses the matrix, and auto does not short-list it.
  int max_row = 0;
};

const std::vector<KernelEntry>& kernel_registry();
std::vector<std::string> kernel_names();                          // every entry, registry order
std::vector<std::string> kernel_names(KernelFamily family);
const KernelEntry* find_kernel(const std::string& name);
// The kernels with an FP32-values variant, comma-separated (for messages: what mixed precision can take)
std::string kernels_with_fp32_variant();
// "auto" or a registry name; throws UsageError listing the names for anything else. A MatrixSetup shared by
// several calls uploads the matrix once; a plain CsrMatrix gets a setup of its own.
std::unique_ptr<LinearOperator> make_operator(const std::string& name, const MatrixSetup& a,
                                              const OperatorOptions& options = {});
// The same from a host CSR, through a setup of its own for this call (the operator keeps what it uploads).
std::unique_ptr<LinearOperator> make_operator(const std::string& name, const CsrMatrix& a,
                                              const OperatorOptions& options = {});

// `op` made again from `a`, new values on op's pattern (Solver::update_values, AMG's levels on an update): the
// same kernel, so the choice is kept (a registry kernel by its name; auto, a KeptChoice, with the kernels it
// chose: no short list, no trial). Every layout is built again from a's values, which is correct for every
// kernel whatever its layout holds (DIA's stripes, SELL's slices, a persistent-CG layout).
std::unique_ptr<LinearOperator> remake_operator(const LinearOperator& op, const MatrixSetup& a,
                                                const OperatorOptions& options = {});

// Auto-selection (auto_select.cpp): short list from statistics, optionally timed trials.
std::unique_ptr<LinearOperator> make_auto_operator(const MatrixSetup& a, const OperatorOptions& options);

}  // namespace spcg

namespace spcg {
// For reports: the kernel an operator really runs at block width k ("auto" resolves to its choice).
std::string auto_choice(const LinearOperator& op, int k);
}  // namespace spcg
