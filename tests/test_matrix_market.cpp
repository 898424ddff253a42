#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "spcg/error.hpp"
#include "spcg/generators.hpp"
#include "spcg/matrix_market.hpp"
#include "spcg/stats.hpp"
#include "tests/test_util.hpp"

using namespace spcg;

namespace {

MatrixFile parse(const std::string& text) { return parse_matrix_market(text, "test.mtx"); }

// Expects an InputError whose message contains `fragment` and names `line` (0: no line).
void expect_error(const std::string& text, const std::string& fragment, long line) {
  try {
    parse(text);
    FAIL() << "accepted malformed input, expected: " << fragment;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << "message: " << e.what();
    EXPECT_EQ(e.line(), line) << "message: " << e.what();
    EXPECT_EQ(e.file(), "test.mtx");
  }
}

// Expects `call` to throw an InputError naming `file` and `line` (0: no line) whose message contains `fragment`.
template <class Call>
void expect_input_error(Call&& call, const std::string& file, const std::string& fragment, long line) {
  try {
    call();
    ADD_FAILURE() << file << " accepted, expected: " << fragment;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << "message: " << e.what();
    EXPECT_EQ(e.line(), line) << "message: " << e.what();
    EXPECT_EQ(e.file(), file) << "message: " << e.what();
  }
}

// The bytes of a file (a test's own, in its TempDir).
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `text` as one gzip member (header, deflate data, CRC-32 and ISIZE trailer), as gzip writes it.
std::string gzip_member(const std::string& text) {
  std::string out(compressBound(static_cast<uLong>(text.size())) + 64, '\0');
  z_stream zs{};
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflateInit2");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  out.resize(zs.total_out);
  return out;
}

}  // namespace

TEST(MatrixMarket, GeneralReal) {
  auto f = parse("%%MatrixMarket matrix coordinate real general\n% c\n3 3 4\n1 1 2.5\n2 2 -1\n3 1 4e-3\n3 3 7\n");
  EXPECT_EQ(f.matrix.rows, 3);
  EXPECT_EQ(f.matrix.nnz(), 4);
  EXPECT_DOUBLE_EQ(f.matrix.values[0], 2.5);
  EXPECT_EQ(f.matrix.col_idx[2], 0);
  EXPECT_DOUBLE_EQ(f.matrix.values[2], 4e-3);
  f.matrix.validate();
}

TEST(MatrixMarket, SymmetricExpandsToFullStorage) {
  auto f = parse("%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 4\n2 1 -1\n3 2 -2\n");
  EXPECT_EQ(f.matrix.nnz(), 5);
  const MatrixStats s = compute_stats(f.matrix);
  EXPECT_TRUE(s.numerically_symmetric);
}

TEST(MatrixMarket, SkewSymmetricNegatesMirror) {
  auto f = parse("%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n2 1 3\n");
  ASSERT_EQ(f.matrix.nnz(), 2);
  EXPECT_DOUBLE_EQ(f.matrix.values[0], -3);  // (1,2)
  EXPECT_DOUBLE_EQ(f.matrix.values[1], 3);   // (2,1)
}

TEST(MatrixMarket, PatternAndIntegerFields) {
  auto p = parse("%%MatrixMarket matrix coordinate pattern symmetric\n2 2 2\n1 1\n2 1\n");
  EXPECT_EQ(p.matrix.nnz(), 3);
  EXPECT_DOUBLE_EQ(p.matrix.values[1], 1.0);
  auto i = parse("%%MatrixMarket matrix coordinate integer general\n1 1 1\n1 1 -7\n");
  EXPECT_DOUBLE_EQ(i.matrix.values[0], -7);
}

TEST(MatrixMarket, CaseInsensitiveBannerTabsCrlfBlankLines) {
  auto f = parse("%%matrixmarket MATRIX Coordinate REAL General\r\n%comment\r\n\r\n2\t2\t2\r\n1\t1\t1.0\r\n\r\n2 2 2\r\n");
  EXPECT_EQ(f.matrix.nnz(), 2);
  EXPECT_EQ(f.info.symmetry, "general");
}

TEST(MatrixMarket, DuplicatesSummedAndCountedExplicitZerosKept) {
  auto f = parse("%%MatrixMarket matrix coordinate real general\n2 2 4\n1 1 1\n1 1 2\n2 2 0\n2 1 5\n");
  EXPECT_EQ(f.matrix.nnz(), 3);
  EXPECT_EQ(f.info.duplicates_summed, 1);
  EXPECT_EQ(f.info.explicit_zeros, 1);
  EXPECT_DOUBLE_EQ(f.matrix.values[0], 3);
}

TEST(MatrixMarket, HeaderCommentsKept) {
  auto f = parse("%%MatrixMarket matrix coordinate real general\n% name: HB/test\n% kind: structural problem\n1 1 1\n1 1 1\n");
  EXPECT_EQ(f.info.name, "HB/test");
  EXPECT_EQ(f.info.kind, "structural problem");
  EXPECT_EQ(f.info.comments.size(), 2u);
}

TEST(MatrixMarket, FortranExponentAndPlusSign) {
  auto f = parse("%%MatrixMarket matrix coordinate real general\n1 1 1\n+1 +1 1.5D+02\n");
  EXPECT_DOUBLE_EQ(f.matrix.values[0], 150.0);
}

TEST(MatrixMarket, ArrayFormatDenseBlock) {
  auto d = parse_dense_matrix_market("%%MatrixMarket matrix array real general\n3 2\n1\n2\n3\n4\n5\n6\n", "b.mtx");
  ASSERT_EQ(d.block.rows, 3);
  ASSERT_EQ(d.block.cols, 2);
  EXPECT_DOUBLE_EQ(d.block.at(0, 1), 4);  // column-major in the file
  EXPECT_DOUBLE_EQ(d.block.at(2, 0), 3);
}

TEST(MatrixMarket, EmptyMatrix) {
  auto f = parse("%%MatrixMarket matrix coordinate real general\n0 0 0\n");
  EXPECT_EQ(f.matrix.rows, 0);
  EXPECT_EQ(f.matrix.nnz(), 0);
}

struct Malformed {
  const char* name;
  const char* text;
  const char* fragment;
  long line;
};

class MatrixMarketMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(MatrixMarketMalformed, ClearErrorWithLine) { expect_error(GetParam().text, GetParam().fragment, GetParam().line); }

// The same message and line on every thread count and with chunk boundaries anywhere (a chunk that fails is
// replayed serially from its true first line).
TEST_P(MatrixMarketMalformed, SameErrorOnEveryThreadCount) {
  for (ReadPasses passes : {ReadPasses::two, ReadPasses::one})
    for (int threads : {1, 2, 3, 7})
      for (size_t chunk : {size_t{1}, size_t{5}, size_t{17}, size_t{0}}) {
        ReadOptions o;
        o.threads = threads, o.chunk_bytes = chunk, o.passes = passes;
        const std::string how = " (" + std::to_string(threads) + " threads, chunks of " + std::to_string(chunk) +
                                (passes == ReadPasses::two ? "" : ", one pass") + ")";
        try {
          parse_matrix_market(GetParam().text, "test.mtx", o);
          ADD_FAILURE() << "accepted" << how;
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find(GetParam().fragment), std::string::npos) << e.what() << how;
          EXPECT_EQ(e.line(), GetParam().line) << e.what() << how;
        }
      }
}

INSTANTIATE_TEST_SUITE_P(
    Reader, MatrixMarketMalformed,
    ::testing::Values(
        Malformed{"Empty", "", "empty file", 1 - 1},
        Malformed{"NoBanner", "3 3 1\n1 1 1\n", "missing '%%MatrixMarket' banner", 1},
        Malformed{"GarbledBanner", "%%MatrixMarket matrix format\n1 1 1\n1 1 1\n", "banner must read", 1},
        Malformed{"UnsupportedObject", "%%MatrixMarket vector coordinate real general\n", "unsupported object", 1},
        Malformed{"UnsupportedFormat", "%%MatrixMarket matrix sparse real general\n", "unsupported format", 1},
        Malformed{"Complex", "%%MatrixMarket matrix coordinate complex general\n", "unsupported field 'complex'", 1},
        Malformed{"Hermitian", "%%MatrixMarket matrix coordinate real hermitian\n", "unsupported symmetry 'hermitian'", 1},
        Malformed{"UnknownField", "%%MatrixMarket matrix coordinate quaternion general\n", "unsupported field 'quaternion'", 1},
        Malformed{"BadSymmetry", "%%MatrixMarket matrix coordinate real upper\n", "unsupported symmetry", 1},
        Malformed{"NoSizeLine", "%%MatrixMarket matrix coordinate real general\n% only comments\n", "before the size line", 2},
        Malformed{"BadSizeLine", "%%MatrixMarket matrix coordinate real general\n3 3\n", "bad size line", 2},
        Malformed{"NonNumericSize", "%%MatrixMarket matrix coordinate real general\n3 x 1\n", "non-numeric column count", 2},
        Malformed{"NegativeSize", "%%MatrixMarket matrix coordinate real general\n-3 3 1\n", "negative size", 2},
        Malformed{"HugeDimension", "%%MatrixMarket matrix coordinate real general\n3000000000 3 1\n1 1 1\n", "does not fit in int32", 2},
        // Duplicates are legal, so more entries than positions is not wrong by itself; too few bytes for them is.
        Malformed{"AbsurdEntries", "%%MatrixMarket matrix coordinate real general\n2 2 5\n1 1 1\n", "only 6 bytes follow the size line", 2},
        Malformed{"EntriesBeyondFileSize", "%%MatrixMarket matrix coordinate real general\n100000 100000 99999\n1 1 1\n", "bytes follow the size line", 2},
        Malformed{"NnzOverInt32", "%%MatrixMarket matrix coordinate real general\n2000000000 2000000000 3000000000\n", "does not fit in int32", 2},
        Malformed{"FewerEntries", "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1\n2 2 1\n\n\n\n\n\n\n", "file ends after 2 of 3", 10},
        Malformed{"MoreEntries", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 1\n2 2 1\n", "more entries than the 1 declared", 4},
        Malformed{"OutOfRange", "%%MatrixMarket matrix coordinate real general\n3 3 1\n4 1 1\n", "out of range", 3},
        Malformed{"ZeroBased", "%%MatrixMarket matrix coordinate real general\n3 3 2\n0 1 1\n1 1 1\n", "file looks 0-based", 3},
        Malformed{"NegativeIndex", "%%MatrixMarket matrix coordinate real general\n3 3 1\n-1 1 1\n", "out of range", 3},
        Malformed{"NonNumericValue", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 abc\n", "non-numeric value 'abc'", 3},
        Malformed{"NonNumericIndex", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1x 1 1\n", "non-numeric row index", 3},
        Malformed{"NaN", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 nan\n", "NaN or Inf", 3},
        Malformed{"Inf", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 -inf\n", "NaN or Inf", 3},
        Malformed{"Overflow", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 1e999\n", "NaN or Inf", 3},
        Malformed{"TruncatedLastLine", "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.000000\n2 2", "truncated last line", 4},
        Malformed{"ExtraTokens", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 1 1\n", "expected 3 fields", 3},
        Malformed{"ElfHeader", "\x7f" "ELF\x02\x01\x01 garbage\n", "missing '%%MatrixMarket' banner", 1},
        Malformed{"SymmetricNonSquare", "%%MatrixMarket matrix coordinate real symmetric\n3 4 1\n1 1 1\n", "non-square", 2},
        Malformed{"SkewDiagonal", "%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n1 1 1\n", "nonzero diagonal", 3},
        // Array (dense) format: the sparse reader refuses it at its size line, after the header's own checks.
        Malformed{"ArrayIsDense", "%%MatrixMarket matrix array real general\n% a vector\n2 1\n1\n2\n", "array (dense) format holds a dense block", 3},
        Malformed{"ArrayEmpty", "%%MatrixMarket matrix array real general\n0 0\n", "array (dense) format holds a dense block", 2},
        Malformed{"ArrayPattern", "%%MatrixMarket matrix array pattern general\n2 1\n", "array format cannot have field 'pattern'", 1},
        Malformed{"ArrayCoordinateSizeLine", "%%MatrixMarket matrix array real general\n2 1 2\n1\n2\n", "expected 'rows cols'", 2},
        Malformed{"ArrayHugeDimension", "%%MatrixMarket matrix array real general\n1 3000000000\n", "does not fit in int32", 2},
        // Mirrored storage doubles the stored entries: refused from the size line, before anything is allocated
        // (2^30 entries expand to 2^31; one fewer passes this check and meets the next, the bytes that follow).
        Malformed{"SymmetricExpansionOverInt32", "%%MatrixMarket matrix coordinate real symmetric\n2000000000 2000000000 1073741824\n1 1 1\n",
                  "entry count 1073741824 does not fit in int32 indexing after expansion", 2},
        Malformed{"SkewExpansionOverInt32", "%%MatrixMarket matrix coordinate pattern skew-symmetric\n% c\n3 3 1500000000\n",
                  "entry count 1500000000 does not fit in int32 indexing after expansion", 3},
        Malformed{"SymmetricExpansionAtInt32", "%%MatrixMarket matrix coordinate real symmetric\n2000000000 2000000000 1073741823\n1 1 1\n",
                  "declares 1073741823 entries but only 6 bytes follow", 2},
        Malformed{"IntegerFieldRealValue", "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 2.5\n", "non-numeric integer value '2.5'", 3},
        Malformed{"IntegerValueTooLarge", "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 99999999999999999999\n", "integer value '99999999999999999999' is too large", 3},
        Malformed{"IndexTooLarge", "%%MatrixMarket matrix coordinate real general\n2 2 1\n99999999999999999999 1 1\n", "row index '99999999999999999999' is too large", 3},
        Malformed{"PatternWithValue", "%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 1 1\n", "expected 2 fields ('row col'), got more", 3},
        Malformed{"MissingValue", "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1\n2 2 1.000\n", "expected 3 fields ('row col value'), got 2", 3}));

TEST(MatrixMarket, BinaryGarbageWithNul) {
  expect_error(std::string("%%Matrix\0Market\x01\x02\n", 18), "binary data", 1);
}

TEST(MatrixMarket, BinaryDataInTheHeader) {
  expect_error(std::string("%%MatrixMarket matrix coordinate real general\n%\0\n1 1 1\n1 1 1\n", 61), "binary data in header", 2);
}

TEST(MatrixMarket, MissingFileAndDirectory) {
  try {
    read_matrix_market("/nonexistent/x.mtx");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos);
    EXPECT_EQ(e.file(), "/nonexistent/x.mtx");
  }
  try {
    read_matrix_market(std::filesystem::temp_directory_path().string());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos);
  }
}

TEST(MatrixMarket, WriterRoundTripsExactly) {
  CsrMatrix a;
  a.rows = 3, a.cols = 4;
  a.row_ptr = {0, 2, 2, 4};
  a.col_idx = {0, 3, 1, 2};
  a.values = {0.1, -1.0 / 3.0, 6.02214076e23, 5e-324};
  const spcg::test::TempDir tmp;
  const std::string path = tmp.file("roundtrip.mtx");
  write_matrix_market(path, a, {" written by a test"});
  MatrixFile f = read_matrix_market(path);
  EXPECT_EQ(f.matrix.row_ptr, a.row_ptr);
  EXPECT_EQ(f.matrix.col_idx, a.col_idx);
  EXPECT_EQ(f.matrix.values, a.values);  // bitwise: 17 significant digits
  DenseBlock b(3, 2);
  for (size_t i = 0; i < b.data.size(); ++i) b.data[i] = std::sqrt(double(i) + 0.5) * (i % 2 ? -1 : 1);
  write_dense_matrix_market(path, b);
  DenseFile d = read_dense_matrix_market(path);
  EXPECT_EQ(d.block.data, b.data);
}

TEST(MatrixMarket, WriterRefusals) {
  const spcg::test::TempDir tmp;
  CsrMatrix wide;
  wide.rows = 3, wide.cols = 4, wide.row_ptr = {0, 0, 0, 0};
  WriteOptions lower;
  lower.storage = MatrixStorage::symmetric_lower;
  try {
    write_matrix_market(tmp.file("wide.mtx"), wide, {}, lower);
    FAIL() << "wrote a non-square matrix as symmetric";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("symmetric storage needs a square matrix, this one is 3 x 4"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("wide.mtx")));
  const std::string nowhere = tmp.file("no/such/folder/a.mtx");
  expect_input_error([&] { write_matrix_market(nowhere, wide); }, nowhere, "cannot open for writing", 0);
  expect_input_error([&] { write_dense_matrix_market(nowhere, DenseBlock(2, 1)); }, nowhere, "cannot open for writing", 0);
}

TEST(MatrixMarket, GzipReadTransparently) {
  const std::string text = "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 2\n2 2 3\n";
  const spcg::test::TempDir tmp;
  const std::string path = tmp.file("small.mtx.gz");
  gzFile g = gzopen(path.c_str(), "wb");
  ASSERT_NE(g, nullptr);
  gzwrite(g, text.data(), static_cast<unsigned>(text.size()));
  gzclose(g);
  MatrixFile f = read_matrix_market(path);
  EXPECT_EQ(f.matrix.nnz(), 2);
  EXPECT_DOUBLE_EQ(f.matrix.values[1], 3);
  // A truncated gzip stream is an error, not a crash.
  const std::string raw = read_bytes(path);
  write_bytes(path, raw.substr(0, raw.size() / 2));
  EXPECT_THROW(read_matrix_market(path), InputError);
}

// Every file in ../shared/matrices loads with the counts its header declares, or fails with the expected error.
TEST(SharedMatrices, EveryFileLoadsOrFailsClearly) {
  SPCG_REQUIRE_MATRICES("nonspd", "odd");
  const std::string dir = spcg::test::matrix_dir();
  const std::map<std::string, std::string> bad = {
      {"odd/662_bus_no_banner.mtx", "missing '%%MatrixMarket' banner"},
      {"odd/aft01_nonstandard_banner_general.mtx", "banner must read"},
      {"odd/bad_header_linalg_sparse_orthogonal.mtx", "missing '%%MatrixMarket' banner"},
      {"odd/mesh3e1_zero_based_pattern.mtx", "file looks 0-based"},
      {"odd/mhd1280b.mtx", "unsupported field 'complex'"},
      {"odd/fpga_dcop_01_b_array.mtx", "array (dense) format"}};
  int checked = 0;
  for (const char* sub : {"spd", "nonspd", "odd"})
    for (const auto& e : std::filesystem::directory_iterator(dir + "/" + sub)) {
      const std::string rel = std::string(sub) + "/" + e.path().filename().string();
      if (rel.find(".mtx") == std::string::npos) continue;
      ++checked;
      auto it = bad.find(rel);
      if (it != bad.end()) {
        try {
          read_matrix_market(e.path().string());
          ADD_FAILURE() << rel << " accepted";
        } catch (const InputError& err) {
          EXPECT_NE(std::string(err.what()).find(it->second), std::string::npos) << rel << ": " << err.what();
        }
        continue;
      }
      MatrixFile f = read_matrix_market(e.path().string());
      f.matrix.validate(rel);
      int64_t diag = 0;
      for (int32_t i = 0; i < f.matrix.rows; ++i)
        for (int32_t p = f.matrix.row_ptr[i]; p < f.matrix.row_ptr[i + 1]; ++p) diag += f.matrix.col_idx[p] == i;
      const int64_t expected = f.info.symmetry == "general" ? f.info.declared_entries - f.info.duplicates_summed
                                                            : 2 * (f.info.declared_entries - f.info.duplicates_summed) - diag;
      EXPECT_EQ(f.matrix.nnz(), expected) << rel;
    }
  EXPECT_GE(checked, 50);
  // The dense vector loads as a dense block.
  DenseFile d = read_dense_matrix_market(dir + "/odd/fpga_dcop_01_b_array.mtx");
  EXPECT_EQ(d.block.rows, 1220);
  EXPECT_EQ(d.block.cols, 1);
}

TEST(SharedMatrices, ReadmeCountsForKnownFiles) {
  SPCG_REQUIRE_MATRICES("nonspd", "odd");
  const std::string dir = spcg::test::matrix_dir();
  struct Known { const char* file; int rows; int64_t stored; };
  for (const Known& k : {Known{"spd/bcsstk01.mtx", 48, 224}, Known{"spd/fv1.mtx", 9604, 47434},
                         Known{"spd/plat1919.mtx.gz", 1919, 17159}, Known{"nonspd/af23560.mtx.gz", 23560, 484256},
                         Known{"odd/nasa2910_pattern.mtx", 2910, 88603}}) {
    MatrixFile f = read_matrix_market(dir + "/" + k.file);
    EXPECT_EQ(f.matrix.rows, k.rows) << k.file;
    EXPECT_EQ(f.info.declared_entries, k.stored) << k.file;
  }
}

// ---- The parallel reader ----

namespace {

void expect_same_csr(const MatrixFile& got, const MatrixFile& want, const std::string& what) {
  ASSERT_EQ(got.matrix.rows, want.matrix.rows) << what;
  ASSERT_EQ(got.matrix.cols, want.matrix.cols) << what;
  EXPECT_TRUE(std::equal(got.matrix.row_ptr.begin(), got.matrix.row_ptr.end(), want.matrix.row_ptr.begin(),
                         want.matrix.row_ptr.end())) << what;
  EXPECT_TRUE(std::equal(got.matrix.col_idx.begin(), got.matrix.col_idx.end(), want.matrix.col_idx.begin(),
                         want.matrix.col_idx.end())) << what;
  ASSERT_EQ(got.matrix.values.size(), want.matrix.values.size()) << what;
  for (size_t p = 0; p < got.matrix.values.size(); ++p)  // bitwise: -0.0 and 0.0 differ
    ASSERT_EQ(std::memcmp(&got.matrix.values[p], &want.matrix.values[p], sizeof(double)), 0) << what << " entry " << p;
  EXPECT_EQ(got.info.duplicates_summed, want.info.duplicates_summed) << what;
  EXPECT_EQ(got.info.explicit_zeros, want.info.explicit_zeros) << what;
  EXPECT_EQ(got.info.comments, want.info.comments) << what;
}

// A one-thread read of `text` against 2, 3 and 7 threads with chunks cut every few bytes (boundaries inside
// comments, numbers, CRLF pairs, blank lines) and the automatic cut.
void expect_thread_invariant(const std::string& text, const std::string& what) {
  ReadOptions one;
  one.threads = 1;
  const MatrixFile want = parse_matrix_market(text, "t.mtx", one);
  want.matrix.validate(what);
  for (ReadPasses passes : {ReadPasses::two, ReadPasses::one})
    for (int threads : {1, 2, 3, 7})
      for (size_t chunk : {size_t{1}, size_t{3}, size_t{8}, size_t{64}, size_t{0}}) {
        ReadOptions o;
        o.threads = threads, o.chunk_bytes = chunk, o.passes = passes;
        expect_same_csr(parse_matrix_market(text, "t.mtx", o), want,
                        what + " (" + std::to_string(threads) + " threads, chunks of " + std::to_string(chunk) +
                            (passes == ReadPasses::two ? "" : ", one pass") + ")");
      }
}

std::string random_entries_text(const char* field, const char* symmetry, int n, int entries, uint64_t seed,
                                 bool crlf, bool final_newline) {
  SplitMix64 rng(seed);
  const char* nl = crlf ? "\r\n" : "\n";
  std::string t = std::string("%%MatrixMarket matrix coordinate ") + field + " " + symmetry + nl + "% a comment" + nl +
                  "%" + nl + std::to_string(n) + " " + std::to_string(n) + " " + std::to_string(entries) + nl;
  const double specials[] = {1.7976931348623157e308, -2.2250738585072014e-308, 4.9406564584124654e-324, -0.0, 0.0,
                             0.1, 1e22, 1e23, 9007199254740993.0, 123456789012345678.0};
  for (int e = 0; e < entries; ++e) {
    int i = 1 + static_cast<int>(rng.next() % n), j = 1 + static_cast<int>(rng.next() % n);
    if (std::string(symmetry) != "general" && j > i) std::swap(i, j);
    if (std::string(symmetry) == "skew-symmetric" && i == j) i = i % n + 1, j = i - 1 == 0 ? 0 : 1, i = std::max(i, 2), j = 1;
    if (e % 97 == 5) t += nl;                           // blank line
    if (e % 89 == 7) t += std::string("% between entries") + nl;  // comment between entries
    t += std::to_string(i) + (e % 5 == 0 ? "\t" : " ") + std::to_string(j);
    char v[64];
    if (std::string(field) == "real") {
      const double x = e % 11 == 0 ? specials[e % 10] : (2 * rng.uniform() - 1) * std::pow(10.0, static_cast<int>(rng.next() % 20) - 10);
      const int style = e % 4;
      std::snprintf(v, sizeof v, style == 0 ? " %.17g" : style == 1 ? " %.16e" : style == 2 ? " %g" : " %.3f", x);
      t += v;
    } else if (std::string(field) == "integer") {
      t += " " + std::to_string(static_cast<int64_t>(rng.next() % 2001) - 1000);
    }
    if (e + 1 < entries || final_newline) t += nl;
  }
  return t;
}

}  // namespace

TEST(ParallelReader, SameCsrOnEveryThreadCountForGeneratedTexts) {
  int cases = 0;
  for (const char* field : {"real", "integer", "pattern"})
    for (const char* symmetry : {"general", "symmetric", "skew-symmetric"})
      for (bool crlf : {false, true})
        for (bool final_newline : {true, false}) {
          // 60 x 60 with 400 entries: duplicates certain (summed in file order), some rows empty
          const std::string text = random_entries_text(field, symmetry, 60, 400, ++cases, crlf, final_newline);
          expect_thread_invariant(text, std::string(field) + " " + symmetry + (crlf ? " crlf" : "") +
                                            (final_newline ? "" : " no final newline"));
        }
}

TEST(ParallelReader, SameCsrOnEveryThreadCountForTheInputsAndSharedFiles) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(spcg::test::source_dir() + "/inputs"))
    if (e.path().extension() == ".mtx") files.push_back(e.path().string());
  if (spcg::test::have_matrix_dirs({"spd", "odd"}))  // the subfolders the files below are in
    for (const char* f : {"spd/bcsstk01.mtx", "spd/plat1919.mtx.gz", "odd/nasa2910_pattern.mtx"})
      files.push_back(spcg::test::matrix_dir() + "/" + f);
  ASSERT_GE(files.size(), 5u);
  for (const std::string& f : files) {
    ReadOptions one;
    one.threads = 1;
    const MatrixFile want = read_matrix_market(f, one);
    for (ReadPasses passes : {ReadPasses::two, ReadPasses::one})
      for (int threads : {2, 3, 7}) {
        ReadOptions o;
        o.threads = threads, o.chunk_bytes = 4096, o.passes = passes;
        expect_same_csr(read_matrix_market(f, o), want,
                        f + " (" + std::to_string(threads) + " threads" + (passes == ReadPasses::two ? "" : ", one pass") + ")");
      }
    expect_thread_invariant(load_file_text(f), f);
  }
}

// Sorted files (as SciPy and SuiteSparse write them) take the two-pass read when asked; a file whose
// chunks each touch rows all over a large matrix gives up its windows and takes the one-pass read; both give
// the one-thread CSR (one thread always reads in one pass).
TEST(ParallelReader, TwoPassesOnSortedFilesOnePassOnScatteredOnes) {
  const CsrMatrix sorted_source = poisson2d_5pt(60);
  const spcg::test::TempDir tmp;
  const std::string sorted = tmp.file("two_pass_sorted.mtx");
  WriteOptions w;
  w.storage = MatrixStorage::symmetric_lower;
  write_matrix_market(sorted, sorted_source, {}, w);
  // 300000 x 300000, entries at random rows: a chunk of them spans far more rows than its window may.
  const std::string scattered = random_entries_text("real", "general", 300000, 20000, 7, false, true);
  ReadOptions one;
  one.threads = 1;
  ReadOptions several;
  several.threads = 3, several.chunk_bytes = 4096, several.passes = ReadPasses::two;

  const MatrixFile s1 = read_matrix_market(sorted, one), s3 = read_matrix_market(sorted, several);
  EXPECT_EQ(s1.info.read.method, "one pass");
  EXPECT_EQ(s3.info.read.method, "two passes");
  expect_same_csr(s3, s1, sorted);
  const MatrixFile c1 = parse_matrix_market(scattered, "scattered.mtx", one),
                   c3 = parse_matrix_market(scattered, "scattered.mtx", several);
  EXPECT_EQ(c3.info.read.method, "one pass");
  expect_same_csr(c3, c1, "scattered");
  // automatic: two passes from TwoPassTuning::min_threads (6) threads on, one pass below
  ReadOptions few = several, many = several;
  few.passes = many.passes = ReadPasses::automatic, many.threads = 6;
  EXPECT_EQ(read_matrix_market(sorted, few).info.read.method, "one pass");
  EXPECT_EQ(read_matrix_market(sorted, many).info.read.method, "two passes");
}

// The reader's own decimal path (short and integer-valued numbers) and std::from_chars give strtod's double.
TEST(ParallelReader, ValuesAreStrtodsBitForBit) {
  SplitMix64 rng(2026);
  std::string text = "%%MatrixMarket matrix coordinate real general\n1 1 4000\n";
  std::vector<std::string> literals;
  const char* fixed[] = {"6", "-1", "0", "-0", "0.0", "-0.0", "6.0000000000000000e+00", "-1.0000000000000000e+00",
                         "9007199254740992", "9007199254740993", "1e22", "1e23", "123456789012345678", "0.1", "1.5e-300",
                         "4.9406564584124654e-324", "1.7976931348623157e+308", "2.2250738585072014e-308", ".5", "5.",
                         "00012.500", "1E5", "3e+0000", "1e-22", "2.5e-23", "0.000000000000000000000000001"};
  for (const char* f : fixed) literals.push_back(f);
  char buf[64];
  while (literals.size() < 4000) {
    const double x = (2 * rng.uniform() - 1) * std::pow(10.0, static_cast<int>(rng.next() % 40) - 20);
    const int digits = 1 + static_cast<int>(rng.next() % 17);
    std::snprintf(buf, sizeof buf, rng.next() % 2 ? "%.*e" : "%.*g", digits, x);
    literals.push_back(buf);
  }
  for (const auto& l : literals) text += "1 1 " + l + "\n";
  // All of them as duplicates of one entry: summed in file order, on every thread count and either pass.
  double sum = 0;
  for (size_t k = 0; k < literals.size(); ++k) {
    const double x = std::strtod(literals[k].c_str(), nullptr);
    sum = k == 0 ? x : sum + x;
  }
  for (ReadPasses passes : {ReadPasses::two, ReadPasses::one})
    for (int threads : {1, 3}) {
      ReadOptions o;
      o.threads = threads, o.chunk_bytes = threads == 1 ? 0 : 1000, o.passes = passes;
      const MatrixFile all = parse_matrix_market(text, "v.mtx", o);
      ASSERT_EQ(all.matrix.nnz(), 1);
      EXPECT_EQ(all.info.duplicates_summed, static_cast<int64_t>(literals.size()) - 1);
      EXPECT_EQ(std::memcmp(&all.matrix.values[0], &sum, sizeof sum), 0) << all.matrix.values[0] << " vs " << sum;
    }
  // Each as its own matrix: its value is strtod's.
  for (const auto& l : literals) {
    const MatrixFile f = parse_matrix_market("%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 " + l + "\n", "v.mtx");
    const double want = std::strtod(l.c_str(), nullptr);
    ASSERT_EQ(f.matrix.values.size(), 1u);
    EXPECT_EQ(std::memcmp(&f.matrix.values[0], &want, sizeof want), 0) << l;
  }
}

TEST(ParallelReader, DuplicatesBeyondRowsTimesColsAreSummed) {
  const MatrixFile f = parse_matrix_market(
      "%%MatrixMarket matrix coordinate real general\n2 2 6\n1 1 1\n1 1 2\n1 1 3\n2 2 4\n2 2 5\n1 2 6\n", "d.mtx");
  ASSERT_EQ(f.matrix.nnz(), 3);
  EXPECT_EQ(f.info.duplicates_summed, 3);
  EXPECT_EQ(f.matrix.values[0], 6.0);
  EXPECT_EQ(f.matrix.values[2], 9.0);
}

TEST(ParallelReader, HeaderNeedingMoreMemoryThanAvailableIsRefusedAtOnce) {
  // The 62-byte file of issue #22: 2e9 x 2e9 and one entry (about 52 GB of row arrays before any entry).
  const std::string text = "%%MatrixMarket matrix coordinate real general\n2000000000 2000000000 1\n1 1 1\n";
  ReadOptions o;
  o.memory_available = uint64_t{16} << 30;
  try {
    parse_matrix_market(text, "huge.mtx", o);
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find("needs about"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("17.18 GB available"), std::string::npos) << e.what();
  }
  EXPECT_GT(host_bytes_for_matrix(2000000000, 2000000000, 1, false), uint64_t{40} << 30);
}

TEST(ParallelReader, WriterSymmetricLowerTriangleRoundTrips) {
  const CsrMatrix a = poisson3d_7pt(7);
  const spcg::test::TempDir tmp;
  const std::string path = tmp.file("lower.mtx");
  for (const ValueFormat v : {ValueFormat::g17, ValueFormat::e16}) {
    WriteOptions w;
    w.storage = MatrixStorage::symmetric_lower, w.values = v, w.threads = 3;
    write_matrix_market(path, a, {" lower"}, w);
    const MatrixFile f = read_matrix_market(path);
    EXPECT_EQ(f.info.symmetry, "symmetric");
    EXPECT_EQ(f.info.declared_entries, (a.nnz() + a.rows) / 2);
    EXPECT_TRUE(std::equal(f.matrix.values.begin(), f.matrix.values.end(), a.values.begin(), a.values.end()));
    EXPECT_TRUE(std::equal(f.matrix.col_idx.begin(), f.matrix.col_idx.end(), a.col_idx.begin(), a.col_idx.end()));
  }
}

TEST(ParallelReader, MultiMemberGzipIsReadWhole) {
  const std::string a = "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1\n", b = "2 2 2\n3 3 3\n";
  const spcg::test::TempDir tmp;
  const std::string path = tmp.file("two_members.mtx.gz");
  write_bytes(path, gzip_member(a) + gzip_member(b));
  const MatrixFile f = read_matrix_market(path);
  EXPECT_EQ(f.matrix.nnz(), 3);
  EXPECT_EQ(f.info.read.access, gzip_inflater());
}

// ---- Dense blocks (array format), read serially ----

namespace {
std::vector<double> block_values(const DenseBlock& b) { return {b.data.begin(), b.data.end()}; }  // row-major
}  // namespace

TEST(DenseMatrixMarket, MalformedArraysAreClearErrorsWithLine) {
  struct Case {
    std::string text, fragment;
    long line;
  };
  const std::string banner = "%%MatrixMarket matrix array real general\n";
  for (const Case& c : {
           Case{"%%MatrixMarket matrix array real symmetric\n2 2\n1\n2\n3\n", "only general storage is supported for array format", 2},
           Case{"%%MatrixMarket matrix array pattern general\n2 1\n", "array format cannot have field 'pattern'", 1},
           Case{banner + "2000000000 2000000000\n1\n", "dense block too large", 2},
           Case{banner + "% c\n3 2\n1\n2\n", "declares 6 values but only 4 bytes follow the size line", 3},
           Case{banner + "2 1\n1\n2\n3\n", "more values than the 2 declared", 5},
           Case{banner + "2 1\n1 2\n3\n", "expected one value per line, got '1 2'", 3},
           Case{banner + "2 1\n1\nabc\n", "non-numeric value 'abc'", 4},
           Case{banner + "2 1\n1\ninf\n", "NaN or Inf", 4},
           Case{"%%MatrixMarket matrix array integer general\n2 1\n1\n2.5\n", "non-numeric integer value '2.5'", 4},
           Case{banner + "2 1\n1\n\n\n\n", "file ends after 1 of 2 declared values", 6},
           Case{banner + "2 1 1\n1\n2\n", "bad size line", 2},
       })
    expect_input_error([&] { parse_dense_matrix_market(c.text, "b.mtx"); }, "b.mtx", c.fragment, c.line);
}

TEST(DenseMatrixMarket, IntegerCommentsAndBlankLines) {
  const DenseFile d =
      parse_dense_matrix_market("%%MatrixMarket matrix array integer general\n% c\n2 2\n1\n\n% between\n-2\n3\n+4\n", "b.mtx");
  ASSERT_EQ(d.block.rows, 2);
  ASSERT_EQ(d.block.cols, 2);
  EXPECT_EQ(block_values(d.block), (std::vector<double>{1, 3, -2, 4}));  // row-major from the file's column-major order
  EXPECT_EQ(d.info.field, "integer");
  EXPECT_EQ(d.info.comments, (std::vector<std::string>{" c"}));
  const DenseFile empty = parse_dense_matrix_market("%%MatrixMarket matrix array real general\n0 3\n", "e.mtx");
  EXPECT_EQ(empty.block.rows, 0);
  EXPECT_EQ(empty.block.cols, 3);
}

// Coordinate files are scattered into a zero block (duplicates summed), with the sparse reader's info.
TEST(DenseMatrixMarket, CoordinateFileScatteredIntoAZeroBlock) {
  const DenseFile d = parse_dense_matrix_market(
      "%%MatrixMarket matrix coordinate real general\n3 2 3\n3 1 1.5\n1 2 -2\n3 1 1\n", "c.mtx");
  ASSERT_EQ(d.block.rows, 3);
  ASSERT_EQ(d.block.cols, 2);
  EXPECT_EQ(block_values(d.block), (std::vector<double>{0, -2, 0, 0, 2.5, 0}));
  EXPECT_EQ(d.info.format, "coordinate");
  EXPECT_EQ(d.info.duplicates_summed, 1);
  // the sparse reader's errors, with their lines
  expect_input_error([] { parse_dense_matrix_market("%%MatrixMarket matrix coordinate real general\n3 2 1\n4 1 1\n", "c.mtx"); },
                     "c.mtx", "out of range", 3);
}

TEST(DenseMatrixMarket, ReadFromPlainAndGzipFiles) {
  const spcg::test::TempDir tmp;
  const std::string text = "%%MatrixMarket matrix array real general\n2 1\n0.5\n-3\n";
  write_bytes(tmp.file("b.mtx"), text);
  write_bytes(tmp.file("b.mtx.gz"), gzip_member(text));
  for (const char* name : {"b.mtx", "b.mtx.gz"}) {
    const DenseFile d = read_dense_matrix_market(tmp.file(name));
    EXPECT_EQ(block_values(d.block), (std::vector<double>{0.5, -3})) << name;
    EXPECT_EQ(d.info.source, tmp.file(name));
  }
  expect_input_error([&] { read_dense_matrix_market(tmp.file("none.mtx")); }, tmp.file("none.mtx"), "no such file", 0);
}

// ---- gzip input: sizes and damage ----

namespace {
// A text of `entries` duplicate lines "1 1 1" of a 1 x 1 matrix: ~6 bytes a line that deflate squeezes ~1000:1.
std::string duplicate_entries(int64_t entries) {
  std::string t = "%%MatrixMarket matrix coordinate real general\n1 1 " + std::to_string(entries) + "\n";
  for (int64_t e = 0; e < entries; ++e) t += "1 1 1\n";
  return t;
}
void set_trailer_size(std::string& gz, uint32_t isize) {
  for (int b = 0; b < 4; ++b) gz[gz.size() - 4 + b] = static_cast<char>((isize >> (8 * b)) & 0xff);
}
}  // namespace

TEST(GzipInput, ExpandingPastTheLimitIsRefused) {
  const spcg::test::TempDir tmp;
  const std::string text = duplicate_entries(50000), path = tmp.file("big.mtx.gz"), plain = tmp.file("big.mtx");
  write_bytes(path, gzip_member(text));
  write_bytes(plain, text);
  ASSERT_LT(read_bytes(path).size(), text.size() / 50);
  EXPECT_EQ(load_file_text(path, text.size()), text);  // exactly at the limit: read
  expect_input_error([&] { load_file_text(path, text.size() - 1); }, path,
                     "decompressed size exceeds " + std::to_string(text.size() - 1) + " bytes", 0);
  expect_input_error([&] { load_file_text(path, 1000); }, path, "decompressed size exceeds 1000 bytes", 0);
  // a plain file is held to the same limit
  EXPECT_EQ(load_file_text(plain, text.size()), text);
  expect_input_error([&] { load_file_text(plain, 1000); }, plain, "file larger than 1000 bytes", 0);
}

// The trailer's size (ISIZE) only guides how much memory the inflater takes first: a wrong one, larger or
// smaller, is found by the gzip check itself and named as damage.
TEST(GzipInput, WrongSizeInTheTrailerIsCorruptData) {
  const spcg::test::TempDir tmp;
  const std::string text = duplicate_entries(50000), path = tmp.file("bad.mtx.gz");
  const std::string good = gzip_member(text);
  for (uint32_t isize : {uint32_t{0}, uint32_t{100}, static_cast<uint32_t>(text.size() - 1),
                         static_cast<uint32_t>(text.size() + 1), uint32_t{0xffffffff}}) {
    std::string gz = good;
    set_trailer_size(gz, isize);
    write_bytes(path, gz);
    expect_input_error([&] { read_matrix_market(path); }, path, "corrupt or truncated gzip data", 0);
  }
  // the true size mod 2^32 is what the trailer holds: read
  write_bytes(path, good);
  const MatrixFile f = read_matrix_market(path);
  EXPECT_EQ(f.matrix.nnz(), 1);
  EXPECT_EQ(f.matrix.values[0], 50000.0);
  EXPECT_EQ(f.info.read.file_bytes, good.size());
  EXPECT_EQ(f.info.read.text_bytes, text.size());
}

TEST(GzipInput, DamagedHeaderOrData) {
  const spcg::test::TempDir tmp;
  const std::string path = tmp.file("bad.mtx.gz");
  const std::string good = gzip_member(duplicate_entries(100));
  std::string method = good;
  method[2] = 7;  // compression method: only 8 (deflate) exists
  std::string extra = good;
  extra[3] = 4;  // FEXTRA: the two bytes after the fixed header give a field length past the file's end
  extra[10] = static_cast<char>(0xff), extra[11] = static_cast<char>(0xff);
  std::string data = good;
  for (size_t b = 10; b < data.size() - 8; ++b) data[b] = static_cast<char>(~data[b]);  // the deflate stream
  std::string crc = good;
  crc[crc.size() - 8] ^= 1;
  for (const std::string* gz : {&method, &extra, &data, &crc}) {
    write_bytes(path, *gz);
    expect_input_error([&] { read_matrix_market(path); }, path, "gzip data", 0);
  }
  write_bytes(path, std::string("\x1f\x8b", 2));  // the magic alone
  expect_input_error([&] { read_matrix_market(path); }, path, "gzip data", 0);
  write_bytes(path, gzip_member(""));  // a valid member holding nothing
  expect_input_error([&] { read_matrix_market(path); }, path, "empty file", 0);
}

// A member before the last may hold far more than the last one's trailer says: the inflater's first guess is
// too small and it grows until every member fits.
TEST(GzipInput, FirstMemberLargerThanTheLastTrailerSays) {
  const spcg::test::TempDir tmp;
  const std::string path = tmp.file("members.mtx.gz");
  const std::string head = duplicate_entries(60001), tail = "1 1 1\n";
  write_bytes(path, gzip_member(head.substr(0, head.size() - tail.size())) + gzip_member(tail));
  ASSERT_LT(read_bytes(path).size() * 4, size_t{65536});
  const MatrixFile f = read_matrix_market(path);
  EXPECT_EQ(f.matrix.nnz(), 1);
  EXPECT_EQ(f.info.duplicates_summed, 60000);
  EXPECT_EQ(f.matrix.values[0], 60001.0);
  EXPECT_EQ(f.info.read.text_bytes, head.size());
}

// ---- Parts of a file (FilePart): how several ranks parse a file once between them ----

namespace {

// Every part's entries, summed position by position in part order, and the parts' entry counts.
struct PartsRead {
  std::map<std::pair<int32_t, int32_t>, double> entries;
  int64_t entries_read = 0;
  int32_t rows = 0, cols = 0;
};
PartsRead read_in_parts(const std::string& path, int parts, int threads, size_t chunk, ReadPasses passes) {
  PartsRead out;
  for (int p = 0; p < parts; ++p) {
    ReadOptions o;
    o.threads = threads, o.chunk_bytes = chunk, o.part = {p, parts}, o.passes = passes;
    const MatrixFile f = read_matrix_market(path, o);
    f.matrix.validate(path + " part " + std::to_string(p));
    out.rows = f.matrix.rows, out.cols = f.matrix.cols;
    out.entries_read += f.info.part_entries;
    for (int32_t i = 0; i < f.matrix.rows; ++i)
      for (int32_t q = f.matrix.row_ptr[i]; q < f.matrix.row_ptr[i + 1]; ++q) out.entries[{i, f.matrix.col_idx[q]}] += f.matrix.values[q];
  }
  return out;
}

// The parts' sum against the whole read: the same positions, the values to the rounding of duplicates summed in
// another grouping (a duplicate pair split between two parts), the declared count.
void expect_parts_make_the_whole(const std::string& path, const std::string& what) {
  ReadOptions one;
  one.threads = 1;
  const MatrixFile whole = read_matrix_market(path, one);
  EXPECT_EQ(whole.info.part_entries, whole.info.declared_entries) << what;
  for (int parts : {1, 2, 3, 5, 8})
    for (size_t chunk : {size_t{7}, size_t{0}})
      for (ReadPasses passes : {ReadPasses::one, ReadPasses::two}) {
      const std::string how = what + " in " + std::to_string(parts) + " parts, chunks of " + std::to_string(chunk) +
                              (passes == ReadPasses::two ? ", two passes" : ", one pass");
      const PartsRead got = read_in_parts(path, parts, 3, chunk, passes);
      EXPECT_EQ(got.entries_read, whole.info.declared_entries) << how;
      ASSERT_EQ(got.rows, whole.matrix.rows) << how;
      ASSERT_EQ(got.cols, whole.matrix.cols) << how;
      ASSERT_EQ(static_cast<int64_t>(got.entries.size()), whole.matrix.nnz()) << how;
      for (int32_t i = 0; i < whole.matrix.rows; ++i)
        for (int32_t q = whole.matrix.row_ptr[i]; q < whole.matrix.row_ptr[i + 1]; ++q) {
          const auto it = got.entries.find({i, whole.matrix.col_idx[q]});
          ASSERT_NE(it, got.entries.end()) << how << " (" << i << ", " << whole.matrix.col_idx[q] << ")";
          const double want = whole.matrix.values[q], have = it->second;
          if (std::isfinite(want) && std::isfinite(have))
            EXPECT_LE(std::abs(have - want), 1e-12 * std::max(std::abs(want), 1e-300)) << how << " (" << i << ", " << whole.matrix.col_idx[q] << ")";
          else
            EXPECT_EQ(std::isnan(want), std::isnan(have)) << how;
        }
    }
}

}  // namespace

TEST(FileParts, PartsMakeTheWholeMatrix) {
  const spcg::test::TempDir tmp;
  int cases = 0;
  for (const char* field : {"real", "integer", "pattern"})
    for (const char* symmetry : {"general", "symmetric"})
      for (bool crlf : {false, true}) {
        const std::string path = tmp.file("random" + std::to_string(++cases) + ".mtx");
        write_bytes(path, random_entries_text(field, symmetry, 60, 400, 100 + cases, crlf, cases % 2 == 0));
        expect_parts_make_the_whole(path, std::string(field) + " " + symmetry + (crlf ? " crlf" : ""));
      }
  for (const auto& e : std::filesystem::directory_iterator(spcg::test::source_dir() + "/inputs"))
    if (e.path().extension() == ".mtx") expect_parts_make_the_whole(e.path().string(), e.path().string());
  // more parts than lines: the later parts read nothing
  const std::string tiny = tmp.file("tiny.mtx");
  write_bytes(tiny, "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 3\n");
  expect_parts_make_the_whole(tiny, "one entry");
}

// A malformed file read in parts: an error in a line is named, with the whole read's message and line, by the
// first part that throws (a header error by every part); a wrong entry count is named by exactly one part's
// check_part_entries, as the whole read names it.
TEST_P(MatrixMarketMalformed, SameErrorWhenReadInParts) {
  const spcg::test::TempDir tmp;
  const std::string path = tmp.file("test.mtx");
  write_bytes(path, GetParam().text);
  for (int parts : {2, 3, 5}) {
    const std::string how = " (" + std::to_string(parts) + " parts)";
    std::vector<int64_t> counts;
    bool thrown = false;
    for (int p = 0; p < parts && !thrown; ++p) {
      ReadOptions o;
      o.threads = 2, o.chunk_bytes = 5, o.part = {p, parts};
      try {
        counts.push_back(read_matrix_market(path, o).info.part_entries);
      } catch (const InputError& e) {
        thrown = true;
        EXPECT_NE(std::string(e.what()).find(GetParam().fragment), std::string::npos) << e.what() << how;
        EXPECT_EQ(e.line(), GetParam().line) << e.what() << how;
      }
    }
    if (thrown) continue;
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    int named = 0;
    for (int p = 0, before = 0; p < parts; before += static_cast<int>(counts[static_cast<size_t>(p)]), ++p) {
      ReadOptions o;
      o.part = {p, parts};
      try {
        check_part_entries(path, o, before, total);
      } catch (const InputError& e) {
        ++named;
        EXPECT_NE(std::string(e.what()).find(GetParam().fragment), std::string::npos) << e.what() << how;
        EXPECT_EQ(e.line(), GetParam().line) << e.what() << how;
      }
    }
    EXPECT_EQ(named, 1) << how;
  }
}
