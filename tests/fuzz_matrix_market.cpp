// libFuzzer target: the reader must throw InputError or succeed with a valid CSR, never crash or hang.
#include <cstddef>
#include <cstdint>
#include <string>

#include "error.hpp"
#include "matrix_market.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    spcg::MatrixFile f = spcg::parse_matrix_market(text, "fuzz");
    f.matrix.validate("fuzz");
  } catch (const spcg::InputError&) {
  }
  try {
    spcg::parse_dense_matrix_market(text, "fuzz");
  } catch (const spcg::InputError&) {
  }
  return 0;
}
