#include "kernels/registry.hpp"

#include "kernels/kernel_factories.hpp"

namespace spcg {

const std::vector<KernelEntry>& kernel_registry() {
  using F = KernelFamily;
  // spmm-vector (lanes over a row's entries, each lane all columns of a panel of <= 16) wins on long or skewed
  // rows at small k and loses on short regular ones: auto times it up to k = 16 only.
  static const std::vector<KernelEntry> entries = {
      {"csr-scalar", F::spmv, "CSR, one thread per row (Bell & Garland 2009)", make_csr_scalar, LayoutBuilt::on_device},
      {"csr-vector", F::spmv, "CSR, adaptive sub-warp per row with shuffle reduction", make_csr_vector, LayoutBuilt::on_device,
       0, "csr-vector-f32"},
      {"csr-vector-f32", F::spmv, "csr-vector with FP32 values, FP64 vectors and sums (AMG's coarse levels, mixed precision)",
       make_csr_vector_f32, LayoutBuilt::on_device, 0, "", true},
      {"csr-stream", F::spmv, "CSR row blocks of fixed height, entries streamed, lanes by the mean row sum a row (Greathouse & Daga 2014)",
       make_csr_stream, LayoutBuilt::on_device, 0, "csr-stream-f32", false, 1024},
      {"csr-stream-f32", F::spmv, "csr-stream with FP32 values, FP64 vectors and sums (AMG's transfer operators)",
       make_csr_stream_f32, LayoutBuilt::on_device, 0, "", true, 1024},
      {"csr-adaptive", F::spmv, "CSR row blocks: stream / warp / block per row (Greathouse & Daga 2014)", make_csr_adaptive},
      {"csr-merge", F::spmv, "CSR merge-path, equal work per thread (Merrill & Garland 2016)", make_csr_merge},
      {"ell", F::spmv, "column-major padded ELLPACK", make_ell, LayoutBuilt::on_device},
      {"sell", F::spmv, "SELL-32-1, warp per slice (Kreutzer et al. 2014)", make_sell, LayoutBuilt::on_device, 0, "sell-f32"},
      {"sell-f32", F::spmv, "sell with FP32 values, FP64 vectors and sums (mixed precision's iteration operator)",
       make_sell_f32, LayoutBuilt::on_device, 0, "", true},
      {"sell-sorted", F::spmv, "SELL-32-1024, rows sorted by length in windows", make_sell_sorted},
      {"dia", F::spmv, "diagonal storage, no column indices", make_dia, LayoutBuilt::on_device, 0, "dia-f32"},
      {"dia-f32", F::spmv, "dia with FP32 values, FP64 vectors and sums (mixed precision's iteration operator)",
       make_dia_f32, LayoutBuilt::on_device, 0, "", true},
      {"coo", F::spmv, "COO, warp segmented reduction (Bell & Garland 2009)", make_coo},
      {"hyb", F::spmv, "ELL + COO tail (Bell & Garland 2009)", make_hyb},
      {"csr-sym", F::spmv, "symmetric CSR: strict upper triangle + diagonal, lower half as atomic adds", make_csr_sym},
      {"spmm-naive", F::spmm, "one thread per (row, column)", make_spmm_naive},
      {"spmm-crc", F::spmm, "coalesced row caching (GE-SpMM, SC 2020)", make_spmm_crc, LayoutBuilt::on_device},
      {"spmm-cwm", F::spmm, "row caching + 2 columns per lane, 16-byte X loads (GE-SpMM)", make_spmm_cwm, LayoutBuilt::on_device},
      {"spmm-swizzle", F::spmm, "rows ordered by length (Sputnik row swizzle, SC 2020)", make_spmm_swizzle},
      {"spmm-split", F::spmm, "long rows split into pieces, deterministic combine", make_spmm_split},
      {"spmm-vector", F::spmm, "lanes over a row's entries, each lane all columns of a panel of <= 16 (CSR-vector)", make_spmm_vector, LayoutBuilt::on_host, 16},
      {"spmm-dia", F::spmm, "diagonal storage, coalesced row-major X rows, 2 columns per thread", make_spmm_dia, LayoutBuilt::on_device},
      {"spmm-dia-runs", F::spmm, "diagonal storage, 4 rows per thread share the X rows of consecutive diagonals", make_spmm_dia_runs, LayoutBuilt::on_device},
      {"cusparse-alg1", F::baseline, "cuSPARSE CSR SpMV ALG1 / SpMM ALG1 (baseline)", make_cusparse_alg1},
      {"cusparse-alg2", F::baseline, "cuSPARSE CSR SpMV ALG2 / SpMM ALG2 (baseline)", make_cusparse_alg2},
      {"cusparse-alg3", F::baseline, "cuSPARSE CSR SpMV ALG1 / SpMM ALG3 (baseline)", make_cusparse_spmm_alg3},
  };
  return entries;
}

std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  for (const auto& e : kernel_registry()) names.push_back(e.name);
  return names;
}

std::vector<std::string> kernel_names(KernelFamily family) {
  std::vector<std::string> names;
  for (const auto& e : kernel_registry())
    if (e.family == family) names.push_back(e.name);
  return names;
}

const KernelEntry* find_kernel(const std::string& name) {
  for (const auto& e : kernel_registry())
    if (e.name == name) return &e;
  return nullptr;
}

std::string kernels_with_fp32_variant() {
  std::string names;
  for (const KernelEntry& e : kernel_registry())
    if (!e.fp32_variant.empty()) names += (names.empty() ? "" : ", ") + e.name;
  return names;
}

std::unique_ptr<LinearOperator> make_operator(const std::string& name, const MatrixSetup& a, const OperatorOptions& o) {
  if (name == "auto") return make_auto_operator(a, o);
  const KernelEntry* e = find_kernel(name);
  if (!e) {
    std::string list;
    for (const auto& n : kernel_names()) list += (list.empty() ? "" : ", ") + n;
    throw UsageError("unknown kernel '" + name + "'; choose auto or one of: " + list);
  }
  return e->make(a, o);
}

std::unique_ptr<LinearOperator> remake_operator(const LinearOperator& op, const MatrixSetup& a, const OperatorOptions& o) {
  if (a.rows() != op.rows() || a.cols() != op.cols() || a.nnz() != op.nnz())
    throw UsageError("remake_operator: '" + op.name() + "' is " + std::to_string(op.rows()) + " x " +
                     std::to_string(op.cols()) + " with " + std::to_string(op.nnz()) + " entries, the new values " +
                     std::to_string(a.rows()) + " x " + std::to_string(a.cols()) + " with " + std::to_string(a.nnz()));
  if (const auto* kept = dynamic_cast<const KeptChoice*>(&op)) return kept->remade(a, o);
  if (!find_kernel(op.name()))  // (a rank's distributed operator: its shares are not remade here)
    throw UsageError("remake_operator: '" + op.name() + "' is not a registry kernel");
  return make_operator(op.name(), a, o);
}

std::unique_ptr<LinearOperator> make_operator(const std::string& name, const CsrMatrix& a, const OperatorOptions& o) {
  const MatrixSetup setup(a);
  return make_operator(name, setup, o);
}

}  // namespace spcg
