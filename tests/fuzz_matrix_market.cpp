// libFuzzer target: the reader must throw InputError or succeed with a valid CSR, never crash or hang; and the
// parallel paths (3 threads, chunks of a few bytes, so boundaries fall everywhere; the two-pass read and the
// one-pass read) must give the one-thread result exactly: the same CSR bit for bit, or the same message on
// the same line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "spcg/error.hpp"
#include "spcg/matrix_market.hpp"

namespace {
// "ok" plus the CSR's bytes, or the error's line and message.
std::string outcome(const std::string& text, int threads, size_t chunk, spcg::ReadPasses passes) {
  spcg::ReadOptions o;
  o.threads = threads, o.chunk_bytes = chunk, o.passes = passes;
  o.memory_available = uint64_t{1} << 30;  // a header that needs more is refused, not allocated
  try {
    spcg::MatrixFile f = spcg::parse_matrix_market(text, "fuzz", o);
    f.matrix.validate("fuzz");
    std::string s = "ok";
    s.append(reinterpret_cast<const char*>(f.matrix.row_ptr.data()), f.matrix.row_ptr.size() * sizeof(int32_t));
    s.append(reinterpret_cast<const char*>(f.matrix.col_idx.data()), f.matrix.col_idx.size() * sizeof(int32_t));
    s.append(reinterpret_cast<const char*>(f.matrix.values.data()), f.matrix.values.size() * sizeof(double));
    return s;
  } catch (const spcg::InputError& e) {
    return std::to_string(e.line()) + ":" + e.what();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string serial = outcome(text, 1, 0, spcg::ReadPasses::automatic);
  for (spcg::ReadPasses passes : {spcg::ReadPasses::two, spcg::ReadPasses::one})
    if (outcome(text, 3, 1 + size % 13, passes) != serial) std::abort();  // a parallel read differs from the serial
  try {
    spcg::parse_dense_matrix_market(text, "fuzz");
  } catch (const spcg::InputError&) {
  }
  return 0;
}
