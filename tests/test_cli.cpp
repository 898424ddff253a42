// The CLI through the spcg binary: its error paths, its outputs read back and checked against the system, and
// the host backend (run in CI, no GPU needed). Tests that need a GPU say so (SPCG_REQUIRE_GPU) and skip here.
// Every test writes in a folder of its own (spcg::test::TempDir), removed when it ends; none asserts a
// duration (a command that could hang runs under `timeout`).
#include <gtest/gtest.h>

#include <boost/lexical_cast.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "spcg/csr_matrix.hpp"
#include "spcg/generators.hpp"
#include "spcg/matrix_market.hpp"
#include "sparse/problem.hpp"
#include "spcg/spcg.hpp"
#include "tests/test_util.hpp"

namespace {

namespace fs = std::filesystem;
using spcg::test::TempDir;

struct Outcome {
  int code;
  std::string output;
};

// Runs a shell command, capturing its output (stderr too).
Outcome shell(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe.release());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

Outcome run(const std::string& args) { return shell(spcg::test::spcg_binary() + " " + args); }

// The ranks' variables a test's environment might carry (a CI job under mpirun or srun) unset, then `vars`
// (NAME=VALUE ...) set, for the commands that set their own: "env -u ... VARS ".
std::string clean_env(const std::string& vars = "") {
  std::string s = "env";
  for (const char* v : {"SPCG_RANK", "SPCG_RANKS", "SPCG_LOCAL_RANK", "SPCG_ID_FD", "SPCG_ID_FDS", "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
                        "SLURM_STEP_NUM_TASKS", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE",
                        "PMI_JOBID", "SLURM_JOB_ID", "SLURM_STEP_ID", "SPCG_SHARE_GPUS"})
    s += std::string(" -u ") + v;
  return s + " " + vars + " ";
}

// spcg with the ranks' variables `vars` only.
std::string spcg_with(const std::string& vars) { return clean_env(vars) + spcg::test::spcg_binary(); }

std::string write_file(const TempDir& dir, const std::string& name, const std::string& content) {
  const std::string p = dir.file(name);
  std::ofstream(p) << content;
  return p;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void expect(const std::string& args, int code, const std::string& fragment) {
  ASSERT_FALSE(fragment.empty()) << "an empty fragment matches any output";
  const Outcome o = run(args);
  EXPECT_EQ(o.code, code) << args << "\n" << o.output;
  EXPECT_NE(o.output.find(fragment), std::string::npos) << args << "\n" << o.output;
}

// A refusal: the exit code and exactly one line, which names the problem.
void expect_one_line(const std::string& args, int code, const std::string& fragment) {
  ASSERT_FALSE(fragment.empty());
  const Outcome o = run(args);
  EXPECT_EQ(o.code, code) << args << "\n" << o.output;
  EXPECT_NE(o.output.find(fragment), std::string::npos) << args << "\n" << o.output;
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << args << "\n" << o.output;
}

// A Matrix Market array file of a dense block (column by column, 17 digits: exact).
std::string dense_mtx(const spcg::DenseBlock& b) {
  std::string s = "%%MatrixMarket matrix array real general\n" + std::to_string(b.rows) + " " + std::to_string(b.cols) + "\n";
  char v[40];
  for (int32_t j = 0; j < b.cols; ++j)
    for (int32_t i = 0; i < b.rows; ++i) std::snprintf(v, sizeof v, "%.17g\n", b.at(i, j)), s += v;
  return s;
}

// The text after "key": (the first from `from`), up to the next , } or ].
std::string json_value(const std::string& json, const std::string& key, size_t from = 0) {
  const std::string k = "\"" + key + "\":";
  const size_t at = json.find(k, from);
  if (at == std::string::npos) return "";
  const size_t start = at + k.size();
  return json.substr(start, json.find_first_of(",}]", start) - start);
}

double json_number(const std::string& json, const std::string& key, size_t from = 0) {
  const std::string v = json_value(json, key, from);
  if (v.empty()) {
    ADD_FAILURE() << "no \"" << key << "\" in " << json;
    return NAN;
  }
  return std::stod(v);
}

// The report's verify line, the checksum line: the value after `prefix` in the output.
std::string after(const std::string& output, const std::string& prefix) {
  const size_t at = output.find(prefix);
  if (at == std::string::npos) return "";
  const size_t start = at + prefix.size();
  return output.substr(start, output.find('\n', start) - start);
}

// A CSV line's fields ("a, b" quoted, "" a quote inside).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
    else if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) out.emplace_back();
    else out.back() += c;
  }
  return out;
}

// FNV-1a over the bits of each double, as the report's --deterministic checksum.
std::string fnv1a(const spcg::DenseBlock& x) {
  uint64_t h = 14695981039346656037ULL;  // FNV-1a 64-bit offset basis (0xcbf29ce484222325)
  for (double d : x.data) {
    unsigned char b[8];
    std::memcpy(b, &d, 8);
    for (unsigned char c : b) h = (h ^ c) * 1099511628211ULL;
  }
  char s[20];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
  return s;
}

double max_relative_residual(const spcg::CsrMatrix& a, const spcg::DenseBlock& x, const spcg::DenseBlock& b) {
  const std::vector<double> rel = spcg::relative_residuals(a, x, b);
  return *std::max_element(rel.begin(), rel.end());
}

// ---- usage: exit 2 ----

TEST(Cli, HelpListsOptionsWithDefaults) {
  expect("--help", 0, "solve");
  expect("help", 0, "generate GENERATOR --output FILE");
  expect("-h", 0, "usage: spcg <command>");
  expect("solve --help", 0, "--tol");
  expect("solve --help", 0, "(=1e-08)");
  expect("solve --help", 0, "--kernel arg (=auto)");
  expect("solve --help", 0, "--stagnation arg (=200)");
  expect("solve --help", 0, "--rendezvous");
  expect("info --help", 0, "--format");
  expect("generate --help", 0, "--storage");
  expect("bench --help", 0, "--matrices");
}

TEST(Cli, UsageErrorsExitTwo) {
  TempDir dir;
  expect("", 2, "usage");
  expect("frobnicate", 2, "unknown command");
  expect("solve --bogus", 2, "unrecognised option");
  expect("solve --tol abc --backend host", 2, "tol");
  expect("solve --matrix a.mtx --generate poisson3d:4", 2, "conflict");
  expect("solve --solver gmres --backend host", 2, "--solver must be");
  expect("solve --precond ilu --backend host", 2, "--precond must be");
  expect("solve --backend tpu", 2, "--backend must be");
  expect("solve --persistent sometimes --backend host", 2, "--persistent must be");
  expect("solve --nrhs 0 --backend host", 2, "--nrhs");
  expect("solve --stagnation -1 --backend host", 2, "--stagnation must be >= 0");
  expect("info", 2, "missing matrix");
  expect("info poisson3d:4 --format xml", 2, "--format must be");
  // whether FP32 copies of the values lose anything (a stencil's 6 and -1 do not; fv1's decimals do)
  expect("info poisson3d:4", 0, "values            all FP32 numbers (mixed precision loses nothing)");
  expect("info poisson3d:4 --format json", 0, "\"values_not_fp32\":0");
  expect("info " + spcg::test::input("fv1.mtx"), 0, "are not FP32 numbers");
  expect("bench", 2, "missing benchmark: spmv, spmm, cg, block-cg, vcycle or read");
  expect("bench spmv --matrix-dir /nonexistent/dir", 2, "--matrix-dir /nonexistent/dir: not a directory");
  const std::string empty_dir = dir.file("no_mtx_here");
  fs::create_directories(empty_dir);
  expect("bench spmv --matrix-dir " + empty_dir, 2, "no .mtx or .mtx.gz files there");
}

// Each option's check: exit 2 with one line naming the option (before any matrix is read or device asked).
TEST(Cli, SolveOptionChecksAreOneLineUsageErrors) {
  const std::string host = " --backend host --generate poisson2d:4";
  expect_one_line("solve --maxit -1" + host, 2, "--maxit must be >= 0");
  expect_one_line("solve --maxit abc" + host, 2, "--maxit");
  expect_one_line("solve --maxit 1.5" + host, 2, "--maxit");
  expect_one_line("solve --tol -1e-3" + host, 2, "--tol and --atol must be finite and >= 0");
  expect_one_line("solve --tol nan" + host, 2, "--tol and --atol must be finite and >= 0");
  expect_one_line("solve --tol inf" + host, 2, "--tol and --atol must be finite and >= 0");
  expect_one_line("solve --atol -1" + host, 2, "--tol and --atol must be finite and >= 0");
  expect_one_line("solve --atol 1e-3x" + host, 2, "--atol");
  expect_one_line("solve --check-every 0" + host, 2, "--check-every >= 1");
  expect_one_line("solve --monitor -1" + host, 2, "--monitor must be >= 0");
  expect_one_line("solve --threads -1" + host, 2, "--threads must be >= 0");
  expect_one_line("solve --threads many" + host, 2, "--threads");
  expect_one_line("solve --nrhs 4097" + host, 2, "--nrhs must be between 1 and 4096");
  expect_one_line("solve --vector-ops thrust --solver block-cg" + host, 2, "--vector-ops thrust is the reference path of --solver cg only");
  expect_one_line("solve --vector-ops thrust --solver multi-cg" + host, 2, "--vector-ops thrust is the reference path");
  expect_one_line("solve --vector-ops scalar" + host, 2, "--vector-ops must be");
  expect_one_line("solve --timing always" + host, 2, "--timing must be");
  expect_one_line("solve --graph maybe" + host, 2, "--graph must be");
  expect_one_line("solve --precision maybe" + host, 2, "--precision must be auto, double or mixed, got 'maybe'");
  expect_one_line("solve --precision mixed" + host, 2, "--precision mixed needs the GPU backend (Eigen's CG is FP64)");
  expect_one_line("solve --amg-prolongator cubic" + host, 2, "--amg-prolongator must be");
  expect_one_line("solve --gpus 0" + host, 2, "--gpus must be between 1 and 1024");
  expect_one_line("solve --gpus 1025" + host, 2, "--gpus must be between 1 and 1024");
  expect_one_line("solve --device -1" + host, 2, "--device must be >= 0");
  expect_one_line("solve --repeat 0" + host, 2, "--repeat must be between 1 and 10000");
  expect_one_line("solve --device 0 --gpus 2" + host, 2, "--device picks the GPU of a one-GPU solve");
  {  // every GPU hidden: the default --device changes nothing, and the host backend solves
    const Outcome o = shell(spcg_with("CUDA_VISIBLE_DEVICES=-1") + " solve --generate poisson2d:4 --backend host");
    EXPECT_EQ(o.code, 0) << o.output;
  }
  {  // a GPU past the visible ones, refused before CUDA starts
    const Outcome o = shell(spcg_with("CUDA_VISIBLE_DEVICES=0") + " solve --device 1" + host);
    EXPECT_EQ(o.code, 2) << o.output;
    EXPECT_NE(o.output.find("--device 1: this machine shows 1 GPU(s)"), std::string::npos) << o.output;
  }
  expect_one_line("solve --seed -1" + host, 2, "--seed must be a non-negative integer, got '-1'");  // not 2^64 - 1
  expect_one_line("solve --seed 12x" + host, 2, "--seed must be a non-negative integer, got '12x'");
  expect_one_line("solve" + host + " --tol", 2, "the required argument for option '--tol' is missing");
  // spcg info / generate / bench
  TempDir dir;
  const std::string x = dir.file("x.mtx");
  expect_one_line("info poisson3d:4 --threads -1", 2, "--threads must be >= 0");
  expect_one_line("generate poisson3d:4 --output " + x + " --threads -1", 2, "--threads must be >= 0");
  expect_one_line("generate poisson3d:4 --output " + x + " --storage upper", 2, "--storage must be symmetric or general");
  expect_one_line("generate --output " + x, 2, "missing generator spec");
  EXPECT_FALSE(fs::exists(x));
  expect_one_line("bench read", 2, "bench read: give one or more Matrix Market files");
  expect_one_line("bench read a.mtx --threads 2,x", 2, "--threads: 'x' is not a thread count");
  expect_one_line("bench read a.mtx --threads -2", 2, "--threads: '-2' is not a thread count");
  expect_one_line("bench spmv --runs 0", 2, "--runs must be >= 1");
  expect_one_line("bench spmm --k 4,0 --no-files", 2, "--k: '0' is not a block width");
  expect_one_line("bench spmm --k 4x --no-files", 2, "--k: '4x' is not a block width");
  expect_one_line("bench frobnicate", 2, "unknown benchmark 'frobnicate'");
  expect_one_line("bench spmv extra.mtx", 2, "unexpected arguments after 'spmv'");
}

// ---- bad input or runtime errors: exit 1 ----

TEST(Cli, BadInputExitsOneWithTheReadersMessage) {
  TempDir dir;
  expect("solve --backend host --matrix /nonexistent/a.mtx", 1, "/nonexistent/a.mtx: no such file");
  expect("info " + write_file(dir, "bad.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1\n"), 1,
         "bad.mtx:3: index (3, 1) out of range");
  expect("solve --backend host --generate poisson3d:x", 1, "expected a non-negative integer size");
  expect("solve --backend host --matrix " + write_file(dir, "rect.mtx", "%%MatrixMarket matrix coordinate real general\n2 3 1\n1 1 1\n"), 1,
         "square");
  expect("solve --backend host --matrix " +
             write_file(dir, "unsym.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 2\n2 2 2\n1 2 1\n"),
         1, "not symmetric");
  expect("solve --backend host --precond jacobi --matrix " +
             write_file(dir, "zd.mtx", "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 2\n2 1 1\n"),
         1, "positive diagonal");
  // No SPD matrix has a zero, negative or missing diagonal entry: refused before solving, whatever the solver.
  const std::string zero_diagonal =
      write_file(dir, "zdiag.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 2\n2 2 0\n3 3 2\n");
  expect("solve --backend host --matrix " + zero_diagonal, 1, "zdiag.mtx: matrix is not positive definite: row 2 has diagonal 0");
  expect("solve --backend host --matrix " +
             write_file(dir, "negdiag.mtx", "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 -2\n2 2 -3\n"),
         1, "row 1 has diagonal -2 (2 such rows)");
  expect("solve --backend host --force --matrix " + zero_diagonal, 3, "non-finite");  // --force: the solve runs and says it failed
  expect("solve --backend host --generate poisson2d:3 --rhs " +
             write_file(dir, "nan.mtx", "%%MatrixMarket matrix array real general\n9 1\n1\n1\n1\nnan\n1\n1\n1\n1\n1\n"),
         1, "NaN or Inf");
  expect("solve --backend host --generate poisson2d:3 --rhs " +
             write_file(dir, "short.mtx", "%%MatrixMarket matrix array real general\n4 1\n1\n1\n1\n1\n"),
         1, "right-hand side has 4 rows");
  expect("info /nonexistent/m.mtx", 1, "/nonexistent/m.mtx");
}

// The matrix set's odd files (it reads odd/ only).
TEST(Cli, OddMatrixFilesAreRefusedWithTheReason) {
  SPCG_REQUIRE_MATRICES("odd");
  expect("info " + spcg::test::matrix_dir() + "/odd/mhd1280b.mtx", 1, "unsupported field 'complex'");
}

// --x0 must match the system (n x k) and be finite: exit 1 with one line naming the file and the problem.
TEST(Cli, InitialGuessOfTheWrongSizeOrNotFiniteIsRefused) {
  TempDir dir;
  const std::string host = "solve --backend host --generate poisson2d:3 --x0 ";
  expect_one_line(host + write_file(dir, "short.mtx", "%%MatrixMarket matrix array real general\n4 1\n1\n1\n1\n1\n"), 1,
                  "short.mtx: initial guess is 4 x 1, expected 9 x 1");
  expect_one_line(host + write_file(dir, "wide.mtx", dense_mtx(spcg::DenseBlock(9, 2, 0.5))) + " --nrhs 1", 1,
                  "initial guess is 9 x 2, expected 9 x 1");
  expect_one_line(host + write_file(dir, "inf.mtx", "%%MatrixMarket matrix array real general\n9 1\n0\ninf\n0\n0\n0\n0\n0\n0\n0\n"),
                  1, "inf.mtx:4: value 'inf' is NaN or Inf");
  expect_one_line(host + write_file(dir, "big.mtx", "%%MatrixMarket matrix array real general\n9 1\n0\n0\n1e400\n0\n0\n0\n0\n0\n0\n"),
                  1, "big.mtx:5: value '1e400' is NaN or Inf");
  expect_one_line(host + dir.file("missing.mtx"), 1, "missing.mtx");
}

// Outputs that cannot be written: exit 1 naming the file (found before the solve: see the test below).
TEST(Cli, UnwritableOutputsExitOne) {
  const std::string host = "solve --backend host --generate poisson2d:4 ";
  expect(host + "--output /nonexistent/dir/x.mtx", 1, "/nonexistent/dir/x.mtx");
  expect(host + "--report-file /nonexistent/dir/r.json", 1, "/nonexistent/dir/r.json: cannot open for writing");
  expect(host + "--history /nonexistent/dir/h.csv", 1, "/nonexistent/dir/h.csv: cannot open for writing");
  expect("generate poisson3d:6 --output /nonexistent/dir/x.mtx", 1, "cannot open for writing");
}

// Every output is checked before the read and the solve start: one line, exit 1, no report (nothing was solved),
// on one process and from the launcher of several (before any rank starts). A file that was not there is not
// left behind when the command then fails; one that was is left as it was.
TEST(Cli, UnwritableOutputsFailBeforeTheSolve) {
  TempDir dir;
  for (const std::string flag : {"--output", "--report-file", "--history"}) {
    for (const std::string& path : {std::string("/nonexistent/dir/out.csv"), dir.path().string()}) {  // no folder; a folder
      for (const std::string& where : {std::string(" --backend host"), std::string(" --gpus 2")}) {
        const std::string args = "solve --generate poisson2d:16 " + flag + " " + path + where;
        const Outcome o = run(args);
        EXPECT_EQ(o.code, 1) << args << "\n" << o.output;
        EXPECT_EQ(o.output, "spcg solve: error: " + path + ": cannot open for writing\n") << args;
      }
    }
  }
  // a later failure (the matrix is missing) leaves no new output behind, and an old one as it was
  const std::string fresh = dir.file("fresh.json"), old = write_file(dir, "old.csv", "kept\n");
  const Outcome o = run("solve --backend host --matrix " + dir.file("missing.mtx") + " --report-file " + fresh + " --history " + old);
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_FALSE(fs::exists(fresh));
  EXPECT_EQ(read_text(old), "kept\n");
}

// --rhs FILE obeys --nrhs's limit (4096 columns), refused at once: before the matrix is read (here it does not
// even exist), with one line.
TEST(Cli, RhsFileWiderThanTheLimitIsRefused) {
  TempDir dir;
  const std::string wide = write_file(dir, "wide.mtx", "%%MatrixMarket matrix coordinate real general\n9 4097 1\n1 1 1\n");
  expect_one_line("solve --backend host --matrix " + dir.file("missing.mtx") + " --rhs " + wide, 2,
                  "spcg solve: the columns of --rhs " + wide + " must be between 1 and 4096, got 4097");
  expect_one_line("solve --backend host --generate poisson2d:3 --nrhs 4097", 2, "--nrhs must be between 1 and 4096, got 4097");
  // the widest block taken: 4096 columns of a 9-row system
  const std::string widest = write_file(dir, "widest.mtx", "%%MatrixMarket matrix coordinate real general\n9 4096 1\n1 1 1\n");
  const Outcome o = run("solve --backend host --generate poisson2d:3 --rhs " + widest);
  EXPECT_EQ(o.code, 0) << o.output.substr(0, 2000);
  EXPECT_NE(o.output.find("4096 right-hand side(s)"), std::string::npos) << o.output.substr(0, 2000);
}

// spcg solve A.mtx: the matrix as the first argument, the same solve as --matrix A.mtx (spcg info A.mtx as ever).
TEST(Cli, MatrixAsPositionalArgument) {
  TempDir dir;
  const std::string matrix = spcg::test::input("nos6.mtx"), a = dir.file("a.json"), b = dir.file("b.json");
  ASSERT_EQ(run("solve " + matrix + " --backend host --precond none --report-file " + a).code, 0);
  ASSERT_EQ(run("solve --backend host --precond none --matrix " + matrix + " --report-file " + b).code, 0);
  const std::string ja = read_text(a), jb = read_text(b);
  for (const char* key : {"matrix", "rows", "nnz", "precond", "converged"}) EXPECT_EQ(json_value(ja, key), json_value(jb, key)) << key;
  EXPECT_EQ(json_value(ja, "matrix"), "\"" + matrix + "\"");
  EXPECT_EQ(json_number(ja, "iterations", ja.find("\"columns\":")), json_number(jb, "iterations", jb.find("\"columns\":")));
  expect("info " + matrix, 0, "675 x 675");
  expect_one_line("solve " + matrix + " " + matrix + " --backend host", 2, "too many positional options");
  expect_one_line("solve " + matrix + " --matrix " + matrix + " --backend host", 2, "'--matrix' cannot be specified more than once");
  expect_one_line("solve " + matrix + " --generate poisson2d:4 --backend host", 2, "--matrix and --generate conflict");
  expect("solve --help", 0, "spcg solve [MATRIX] [options]");
}

// spcg --version and spcg version: the project's version, the commit built, CUDA and the architectures built.
TEST(Cli, VersionNamesTheBuild) {
  for (const char* args : {"--version", "version"}) {
    const Outcome o = run(args);
    ASSERT_EQ(o.code, 0) << o.output;
    const std::vector<std::string> lines = lines_of(o.output);
    ASSERT_EQ(lines.size(), 4u) << o.output;
    EXPECT_EQ(lines[0], std::string("spcg ") + SPCG_PROJECT_VERSION);
    EXPECT_TRUE(std::regex_match(lines[1], std::regex("commit             ([0-9a-f]{7,40}(-dirty)?|[-.0-9A-Za-z]+-g[0-9a-f]{7,40}(-dirty)?|unknown)")))
        << lines[1];
    EXPECT_TRUE(std::regex_match(lines[2], std::regex("CUDA               [0-9]+\\.[0-9]+(\\.[0-9]+)? \\(built with\\)"))) << lines[2];
    EXPECT_EQ(lines[3], std::string("GPU architectures  ") + SPCG_ARCHITECTURES + " (CMAKE_CUDA_ARCHITECTURES)");
  }
  expect("--help", 0, "version");
}

// The CLI's default preconditioner is auto (the library's stays none): the report says auto. With --force it is
// none (auto takes the checks --force skips as passed); a named one is that one.
TEST(Cli, DefaultPreconditionerIsAuto) {
  EXPECT_EQ(spcg::SolverOptions{}.precond, spcg::Preconditioner::none);  // the library's default, unchanged
  TempDir dir;
  const std::string report = dir.file("r.json");
  const std::string solve = "solve --backend host --generate poisson2d:8 --report-file " + report;
  Outcome o = run(solve);
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find(", precond auto, "), std::string::npos) << o.output;
  EXPECT_EQ(json_value(read_text(report), "precond"), "\"auto\"");
  o = run(solve + " --force");
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_EQ(json_value(read_text(report), "precond"), "\"none\"");
  o = run(solve + " --precond jacobi --force");
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_EQ(json_value(read_text(report), "precond"), "\"jacobi\"");
  expect("solve --help", 0, "--precond arg (=auto)");
}

// The help prints the library's defaults (SolverOptions{}, PreconditionerOptions{}), not a second copy of them.
TEST(Cli, HelpShowsTheLibrarysDefaults) {
  const spcg::SolverOptions so;
  const spcg::SolveOptions& it = so.iteration;
  const spcg::PreconditionerOptions pc;
  auto shown = [](const std::string& flag, const std::string& value) { return "--" + flag + " arg (=" + value + ")"; };
  const Outcome o = run("solve --help");
  ASSERT_EQ(o.code, 0) << o.output;
  for (const std::string& text :
       {shown("tol", boost::lexical_cast<std::string>(it.stop.rtol)), shown("atol", boost::lexical_cast<std::string>(it.stop.atol)),
        shown("maxit", std::to_string(it.stop.max_iterations)), shown("solver", spcg::name_of(so.solver)), shown("kernel", so.kernel.name()),
        shown("vector-ops", spcg::name_of(it.vector_ops)), shown("check-every", std::to_string(it.check_every)),
        shown("stagnation", std::to_string(it.stagnation_window)), shown("timing", spcg::name_of(so.timing)),
        shown("graph", spcg::name_of(it.graph)), shown("persistent", spcg::name_of(it.persistent)),
        shown("backend", spcg::name_of(so.backend)), shown("amg-coarse-rows", std::to_string(pc.coarse_rows)),
        shown("amg-whole-rows", std::to_string(pc.whole_level_rows)),
        shown("amg-omega", boost::lexical_cast<std::string>(pc.prolongator_omega)),
        shown("amg-smoother", spcg::name_of(pc.smoother)), shown("cheb-degree", std::to_string(pc.chebyshev_degree))})
    EXPECT_NE(o.output.find(text), std::string::npos) << text << "\n" << o.output;
}

// ---- spcg info ----

TEST(Cli, InfoJsonHasCounts) {
  const Outcome o = run("info poisson3d:10 --format json");
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* key : {"\"rows\":1000", "\"cols\":1000", "\"nnz\":6400", "\"symmetric\":true", "\"row_length\":"})
    EXPECT_NE(o.output.find(key), std::string::npos) << key << "\n" << o.output;
}

TEST(Cli, InfoTableOfAGeneratorAndAFile) {
  Outcome o = run("info poisson2d:10");
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* text : {"matrix            poisson2d:10", "size              100 x 100, 460 stored entries (4.60 per row)",
                           "row length        min 3, mean 4.60, max 5", "symmetry          pattern yes, numerical yes",
                           "diagonal          all positive; 0 missing, 0 non-positive", "explicit zeros    0"})
    EXPECT_NE(o.output.find(text), std::string::npos) << text << "\n" << o.output;
  o = run("info " + spcg::test::input("nos6.mtx") + " --threads 2");
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("size              675 x 675"), std::string::npos) << o.output;
  o = run("info " + spcg::test::input("nos6.mtx") + " --format json");
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_EQ(json_number(o.output, "rows"), 675);
  EXPECT_EQ(json_value(o.output, "symmetric"), "true");
  EXPECT_EQ(json_value(o.output, "diagonal_positive"), "true");
  EXPECT_NE(o.output.find("\"reader\":{"), std::string::npos) << o.output;
}

// ---- spcg solve on the host backend ----

// The default system (inputs/fv1.mtx); the report (JSON) and the solution read back: x solves A x = b (b: ones)
// to the tolerance, as the report and --verify say.
TEST(Cli, HostBackendSolvesDefaultAndWritesReport) {
  TempDir dir;
  const std::string report = dir.file("report.json"), xout = dir.file("x.mtx");
  const Outcome o = run("solve --backend host --report-file " + report + " --output " + xout + " --verify");
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("status: converged"), std::string::npos) << o.output;
  const std::string json = read_text(report);
  for (const char* key : {"\"matrix\"", "\"rows\":9604", "\"phases\"", "\"kernels\"", "\"columns\"", "\"status\":\"converged\"",
                          "\"true_residual\"", "\"converged\":true", "\"verify_relative_residual\"", "\"reader\":{"})
    EXPECT_NE(json.find(key), std::string::npos) << key << "\n" << json;
  const spcg::CsrMatrix a = spcg::read_matrix_market(spcg::test::input("fv1.mtx")).matrix;
  const spcg::DenseBlock x = spcg::read_dense_matrix_market(xout).block;
  ASSERT_EQ(x.rows, a.rows);
  ASSERT_EQ(x.cols, 1);
  const double rel = max_relative_residual(a, x, spcg::DenseBlock(a.rows, 1, 1.0));
  EXPECT_LE(rel, 1e-7);
  // the report's true residual and --verify's are the residual of the x written
  EXPECT_NEAR(json_number(json, "relative_true_residual"), rel, 1e-3 * rel + 1e-15);
  EXPECT_NEAR(json_number(json, "verify_relative_residual"), rel, 1e-3 * rel + 1e-15);
  EXPECT_NEAR(std::stod(after(o.output, "verify (Eigen, host): max ||b - A x|| / ||b|| = ")), rel, 0.01 * rel + 1e-15);
}

// Several right-hand sides (random, seeded): x is n x k and each column solves its system.
TEST(Cli, OutputSolutionSatisfiesEverySystem) {
  TempDir dir;
  const std::string xout = dir.file("x.mtx"), report = dir.file("r.json");
  const Outcome o = run("solve --backend host --generate poisson2d:12 --rhs random --nrhs 3 --seed 7 --tol 1e-10 --output " + xout +
                        " --report-file " + report);
  ASSERT_EQ(o.code, 0) << o.output;
  const spcg::CsrMatrix a = spcg::generate("poisson2d:12");
  const spcg::DenseBlock x = spcg::read_dense_matrix_market(xout).block;
  ASSERT_EQ(x.rows, 144);
  ASSERT_EQ(x.cols, 3);
  EXPECT_LE(max_relative_residual(a, x, spcg::make_rhs("random", 144, 3, 7)), 1e-9);
  const std::string json = read_text(report);
  EXPECT_EQ(json_number(json, "nrhs"), 3);
  EXPECT_EQ(json_number(json, "rtol"), 1e-10);
  size_t at = json.find("\"columns\":");
  for (int j = 0; j < 3; ++j) {
    at = json.find("\"status\":", at + 1);
    ASSERT_NE(at, std::string::npos) << json;
    EXPECT_EQ(json_value(json, "status", at), "\"converged\"") << j;
    EXPECT_LE(json_number(json, "relative_true_residual", at), 1e-9) << j;
  }
}

// --rhs FILE fixes k; the solution, given back as --x0, is the answer already (no iteration).
TEST(Cli, RhsFileAndInitialGuess) {
  TempDir dir;
  spcg::DenseBlock b(100, 2);
  for (int32_t i = 0; i < 100; ++i) b.at(i, 0) = 1.0 + i % 7, b.at(i, 1) = std::sin(0.3 * i);
  const std::string rhs = write_file(dir, "b.mtx", dense_mtx(b)), xout = dir.file("x.mtx"), report = dir.file("r.json");
  Outcome o = run("solve --backend host --generate poisson2d:10 --tol 1e-13 --rhs " + rhs + " --nrhs 5 --output " + xout);
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("2 right-hand side(s)"), std::string::npos) << o.output;  // the file's k, not --nrhs
  const spcg::CsrMatrix a = spcg::generate("poisson2d:10");
  const spcg::DenseBlock x = spcg::read_dense_matrix_market(xout).block;
  ASSERT_EQ(x.cols, 2);
  EXPECT_LE(max_relative_residual(a, x, b), 1e-11);
  o = run("solve --backend host --generate poisson2d:10 --rhs " + rhs + " --x0 " + xout + " --report-file " + report);
  ASSERT_EQ(o.code, 0) << o.output;
  const std::string json = read_text(report);
  const size_t cols = json.find("\"columns\":");
  EXPECT_EQ(json_number(json, "iterations", cols), 0) << json;
  EXPECT_EQ(json_number(json, "iterations", json.find("\"status\":", json.find("\"status\":", cols) + 1)), 0) << json;
}

// --report-file: JSON or CSV by the extension, with the figures of the solve.
TEST(Cli, ReportFilesJsonAndCsv) {
  TempDir dir;
  const std::string json_path = dir.file("r.json"), csv_path = dir.file("r.csv");
  const std::string solve = "solve --backend host --generate poisson2d:16 --tol 1e-9 --precond jacobi --report-file ";
  ASSERT_EQ(run(solve + json_path).code, 0);
  ASSERT_EQ(run(solve + csv_path).code, 0);
  const std::string json = read_text(json_path);
  EXPECT_EQ(json_value(json, "matrix"), "\"poisson2d:16\"");
  EXPECT_EQ(json_number(json, "rows"), 256);
  EXPECT_EQ(json_number(json, "nnz"), 1216);
  EXPECT_EQ(json_number(json, "nrhs"), 1);
  EXPECT_EQ(json_value(json, "solver"), "\"cg\"");
  EXPECT_EQ(json_value(json, "backend"), "\"host\"");
  EXPECT_EQ(json_number(json, "rtol"), 1e-9);
  EXPECT_EQ(json_number(json, "atol"), 0);
  EXPECT_EQ(json_value(json, "converged"), "true");
  const size_t cols = json.find("\"columns\":");
  ASSERT_NE(cols, std::string::npos) << json;
  const double iterations = json_number(json, "iterations", cols);
  EXPECT_GT(iterations, 0);
  EXPECT_EQ(json_number(json, "b_norm", cols), 16);  // ||ones(256)||
  EXPECT_LE(json_number(json, "relative_true_residual", cols), 1e-8);
  EXPECT_NE(json.find("{\"name\":\"solve\",\"ms\":"), std::string::npos) << json;
  EXPECT_NE(json.find("{\"name\":\"wall (process)\",\"ms\":"), std::string::npos) << json;

  const std::vector<std::string> csv = lines_of(read_text(csv_path));
  ASSERT_GE(csv.size(), 3u);
  EXPECT_EQ(csv[0], "section,name,calls,total_ms,mean_us,bytes_per_call,status,iterations,recursive_residual,true_residual");
  bool solve_phase = false, start_phase = false, column = false;
  for (const std::string& line : csv) {
    EXPECT_EQ(csv_fields(line).size(), 10u) << line;
    solve_phase = solve_phase || line.rfind("phase,solve,,", 0) == 0;
    start_phase = start_phase || (csv_fields(line)[0] == "phase" && csv_fields(line)[1] == "start (CUDA, overlapped)");
    if (line.rfind("column,0,", 0) == 0) {
      column = true;
      EXPECT_EQ(line.rfind("column,0,,,,,converged," + std::to_string(static_cast<int>(iterations)) + ",", 0), 0u) << line;
      const double true_residual = std::stod(line.substr(line.find_last_of(',') + 1));
      EXPECT_LE(true_residual, 1e-8 * 16);
    }
  }
  EXPECT_TRUE(solve_phase) << read_text(csv_path);
  EXPECT_TRUE(start_phase) << read_text(csv_path);  // a name with a comma, quoted
  EXPECT_TRUE(column) << read_text(csv_path);
}

// --history: a header, then (column, iteration, residual) rows; the host backend (Eigen) records none of its
// iterations, so there only the header is certain (the GPU test below counts the rows).
TEST(Cli, HistoryFileIsWritten) {
  TempDir dir;
  const std::string h = dir.file("h.csv");
  const Outcome o = run("solve --backend host --generate poisson2d:8 --monitor 2 --history " + h);
  ASSERT_EQ(o.code, 0) << o.output;
  const std::vector<std::string> rows = lines_of(read_text(h));
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0], "column,iteration,residual_norm");
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_TRUE(std::regex_match(rows[i], std::regex("0,[0-9]+,[-+.e0-9]+"))) << rows[i];
}

// Exit 3: the solve ran and did not converge (here: out of iterations), the report says so.
TEST(Cli, NotConvergedExitsThree) {
  TempDir dir;
  const std::string report = dir.file("r.json");
  Outcome o = run("solve --backend host --generate poisson2d:16 --maxit 1 --report-file " + report);
  EXPECT_EQ(o.code, 3) << o.output;
  EXPECT_NE(o.output.find("max-iterations"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("status: NOT converged"), std::string::npos) << o.output;
  const std::string json = read_text(report);
  EXPECT_EQ(json_value(json, "converged"), "false");
  EXPECT_EQ(json_value(json, "status", json.find("\"columns\":")), "\"max-iterations\"");
  o = run("solve --backend host --generate poisson2d:16 --maxit 0");
  EXPECT_EQ(o.code, 3) << o.output;
}

// --atol: ||r|| <= max(tol ||b||, atol) decides. Ten iterations leave ||r|| well above 1e-8 ||b|| (exit 3), but
// below an atol of ||b|| / 2 (exit 0); the residual of the x written is below atol too. (The host backend's
// Eigen CG stops on the relative tolerance alone; the GPU test below checks that atol stops a solve earlier.)
TEST(Cli, AtolDecidesTheVerdict) {
  TempDir dir;
  const std::string xout = dir.file("x.mtx");
  const std::string solve = "solve --backend host --generate poisson2d:16 --maxit 10 --output " + xout;
  Outcome o = run(solve);
  EXPECT_EQ(o.code, 3) << o.output;
  o = run(solve + " --atol 8");  // ||b|| = 16
  EXPECT_EQ(o.code, 0) << o.output;
  const spcg::CsrMatrix a = spcg::generate("poisson2d:16");
  const spcg::DenseBlock x = spcg::read_dense_matrix_market(xout).block;
  const double abs_residual = 16 * max_relative_residual(a, x, spcg::DenseBlock(256, 1, 1.0));
  EXPECT_LE(abs_residual, 8.0);
  EXPECT_GT(abs_residual, 1e-8 * 16);  // it did stop early
  o = run(solve + " --atol 1e-30");
  EXPECT_EQ(o.code, 3) << o.output;
}

// --deterministic: the checksum line is the same on two runs and is FNV-1a over x's bits (x written exactly).
TEST(Cli, DeterministicChecksumRepeatsAndIsTheSolutions) {
  TempDir dir;
  const std::string x1 = dir.file("x1.mtx"), x2 = dir.file("x2.mtx");
  const std::string solve = "solve --backend host --generate poisson2d:20 --deterministic --output ";
  const Outcome a = run(solve + x1), b = run(solve + x2);
  ASSERT_EQ(a.code, 0) << a.output;
  ASSERT_EQ(b.code, 0) << b.output;
  const std::string sum = after(a.output, "checksum of x (FNV-1a over the bits): ");
  ASSERT_EQ(sum.size(), 16u) << a.output;
  EXPECT_EQ(after(b.output, "checksum of x (FNV-1a over the bits): "), sum);
  EXPECT_EQ(fnv1a(spcg::read_dense_matrix_market(x1).block), sum);
  EXPECT_EQ(read_text(x1), read_text(x2));
}

TEST(Cli, HostBackendPreconditionersAndFiles) {
  Outcome o = run("solve --backend host --matrix " + spcg::test::input("nos6.mtx") + " --precond jacobi --threads 2 --verify");
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* text : {"== spcg solve: ", "675 rows", "precond jacobi", "backend host", "reader      ", "status: converged"})
    EXPECT_NE(o.output.find(text), std::string::npos) << text << "\n" << o.output;
  EXPECT_LE(std::stod(after(o.output, "verify (Eigen, host): max ||b - A x|| / ||b|| = ")), 1e-6) << o.output;
  o = run("solve --backend host --generate poisson2d:8 --precond auto");
  ASSERT_EQ(o.code, 0) << o.output;
  o = run("solve --backend host --generate poisson2d:8 --solver block-cg --rhs random --nrhs 2");
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("solver      block-cg"), std::string::npos) << o.output;
}

// --matrix / --generate A1,A2,...: the first is set up and solved, each later one updates the values and is
// solved; each step's solution is a fresh run's on that matrix (checksums in deterministic mode), and the
// report lists each step's update and solve (table, JSON, CSV).
TEST(Cli, SequenceOfMatricesUpdatesThenSolvesEach) {
  TempDir dir;
  const std::string json_path = dir.file("steps.json"), csv_path = dir.file("steps.csv");
  const std::string common = " --backend host --precond jacobi --tol 1e-9 --deterministic";
  const Outcome seq = run("solve --generate jump3d:10:1,jump3d:10:2,jump3d:10:3" + common + " --report-file " + json_path);
  ASSERT_EQ(seq.code, 0) << seq.output;
  for (const char* text : {"update steps", "jump3d:10:2", "jump3d:10:3", "update: pattern check", ", statistics"})
    EXPECT_NE(seq.output.find(text), std::string::npos) << text << "\n" << seq.output;
  const Outcome first = run("solve --generate jump3d:10:1" + common), last = run("solve --generate jump3d:10:3" + common);
  ASSERT_EQ(first.code, 0) << first.output;
  ASSERT_EQ(last.code, 0) << last.output;
  const std::string sum_last = after(last.output, "checksum of x (FNV-1a over the bits): ");
  ASSERT_EQ(sum_last.size(), 16u) << last.output;
  EXPECT_EQ(after(seq.output, "checksum of x (FNV-1a over the bits): "),
            after(first.output, "checksum of x (FNV-1a over the bits): "));  // the report's own: the first matrix's
  const size_t step2 = seq.output.find("     2  jump3d:10:3");
  ASSERT_NE(step2, std::string::npos) << seq.output;
  EXPECT_EQ(after(seq.output.substr(step2), "checksum of x: "), sum_last) << seq.output;
  const std::string json = read_text(json_path);
  const size_t steps = json.find("\"steps\":");
  ASSERT_NE(steps, std::string::npos) << json;
  EXPECT_EQ(json_value(json, "matrix", steps), "\"jump3d:10:2\"");
  EXPECT_NE(json.find("\"update_phases\":[{\"name\":\"pattern check\"", steps), std::string::npos) << json;
  EXPECT_NE(json.find("{\"name\":\"statistics\"", steps), std::string::npos) << json;
  EXPECT_NE(json.find("\"update (total)\"", steps), std::string::npos) << json;
  EXPECT_EQ(json_value(json, "converged", steps), "true");
  ASSERT_EQ(run("solve --generate jump3d:10:1,jump3d:10:2" + common + " --report-file " + csv_path).code, 0);
  const std::string csv = read_text(csv_path);
  EXPECT_NE(csv.find("update,step 1: update (total),,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("step,step 1: jump3d:10:2,,"), std::string::npos) << csv;
  // files of one pattern: the same file twice gives the first solve again
  const std::string nos4 = spcg::test::input("nos4.mtx");
  const Outcome twice = run("solve --backend host --deterministic --precond jacobi --matrix " + nos4 + "," + nos4);
  ASSERT_EQ(twice.code, 0) << twice.output;
  EXPECT_EQ(after(twice.output, "checksum of x: "), after(twice.output, "checksum of x (FNV-1a over the bits): "));
}

// A later matrix of another pattern, or one the checks refuse, ends the command with one line naming that file.
TEST(Cli, SequenceRefusalsAreOneLine) {
  TempDir dir;
  expect_one_line("solve --backend host --generate poisson3d:6,poisson3d:7", 1,
                  "poisson3d:7: update_values: the new matrix is 343 x 343, the solver's 216 x 216");
  const std::string nos4 = spcg::test::input("nos4.mtx");
  expect_one_line("solve --backend host --matrix " + nos4 + "," + spcg::test::input("nos6.mtx"), 1, "nos6.mtx: update_values");
  expect_one_line("solve --backend host --matrix " + nos4 + ",", 2, "an empty name in the comma-separated sequence");
  // nos4 with a negative first diagonal entry: not positive definite (--force lets it through)
  std::string text = read_text(nos4);
  const size_t entry = text.find("\n1 1 .17155418\n");
  ASSERT_NE(entry, std::string::npos);
  text.replace(entry, 15, "\n1 1 -1\n");
  const std::string bad = write_file(dir, "negative.mtx", text);
  const Outcome o = run("solve --backend host --matrix " + nos4 + "," + bad);
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("negative.mtx: matrix is not positive definite: row 1 has diagonal -1"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("(use --force to try anyway)"), std::string::npos) << o.output;
  expect_one_line("solve --gpus 2 --precond jacobi --generate poisson3d:6,poisson3d:6", 2, "a sequence of matrices");
}

// On the GPU with AMG: each step's solution is a fresh setup's on that matrix, bit for bit (deterministic), and
// the update lists AMG's phases without the aggregation.
TEST(Cli, GpuSequenceWithAmgEqualsFreshSetups) {
  SPCG_REQUIRE_GPU();
  const std::string common = " --precond amg --tol 1e-9 --deterministic";
  const Outcome seq = run("solve --generate jump3d:24:1,jump3d:24:2" + common);
  ASSERT_EQ(seq.code, 0) << seq.output;
  const Outcome fresh = run("solve --generate jump3d:24:2" + common);
  ASSERT_EQ(fresh.code, 0) << fresh.output;
  EXPECT_EQ(after(seq.output, "checksum of x: "), after(fresh.output, "checksum of x (FNV-1a over the bits): ")) << seq.output;
  const size_t steps = seq.output.find("update steps");
  ASSERT_NE(steps, std::string::npos) << seq.output;
  const std::string tail = seq.output.substr(steps);
  for (const char* text : {"update: pattern check", ", upload", "preconditioner", "amg: diagonal", "galerkin: R (A P)",
                           "coarse factorisation"})
    EXPECT_NE(tail.find(text), std::string::npos) << text << "\n" << seq.output;
  EXPECT_EQ(tail.find("aggregation"), std::string::npos) << seq.output;
}

TEST(Cli, NoGpuSaysSoInOneLine) {
  std::string why;
  if (spcg::test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present";
  expect("solve --generate poisson2d:4", 0, "No CUDA device");
  expect("solve --backend gpu --generate poisson2d:4", 1, "--backend gpu: no");
  expect("bench spmv", 1, "benchmarks need a CUDA device");
  expect("bench cg --no-files --matrices poisson2d:8", 1, "benchmarks need a CUDA device");
}

TEST(Cli, SolveReportsStartAndWallTime) {
  const Outcome o = run("solve --backend host --generate poisson2d:8");
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* phase : {"start (CUDA, overlapped)", "read", "statistics", "solve", "wall (process)"})
    EXPECT_NE(o.output.find(phase), std::string::npos) << phase << "\n" << o.output;
}

// ---- spcg generate, spcg bench ----

// The file written is the generator's matrix, entry for entry, in each storage and number form.
TEST(Cli, GenerateWritesAFileTheReaderTakesBack) {
  TempDir dir;
  const std::string path = dir.file("gen.mtx");
  expect("generate poisson3d:6 --output " + path, 0, "216 x 216");
  const Outcome o = run("info " + path + " --format json --threads 3");
  ASSERT_EQ(o.code, 0) << o.output;
  // (a small file is read on one thread whatever --threads says: threads cost more than they save there)
  for (const char* key : {"\"rows\":216", "\"nnz\":1296", "\"symmetric\":true", "\"reader\":", "\"threads\":1"})
    EXPECT_NE(o.output.find(key), std::string::npos) << key << "\n" << o.output;
  const spcg::CsrMatrix want = spcg::generate("jump3d:5:3");
  for (const std::string options : {"", " --storage general", " --values e16", " --storage general --values e16 --threads 2"}) {
    const std::string file = dir.file("jump.mtx");
    expect("generate jump3d:5:3 -o " + file + options, 0, "125 x 125");
    const std::string banner = read_text(file).substr(0, 60);
    EXPECT_NE(banner.find(options.find("general") != std::string::npos ? "general" : "symmetric"), std::string::npos) << banner;
    if (options.find("e16") != std::string::npos)
      EXPECT_TRUE(std::regex_search(read_text(file), std::regex("\n[0-9]+ [0-9]+ -?[0-9]\\.[0-9]{16}e[-+][0-9]{2}\n")))
          << options;
    const spcg::CsrMatrix got = spcg::read_matrix_market(file).matrix;
    EXPECT_EQ(got.rows, want.rows) << options;
    EXPECT_TRUE(got.row_ptr == want.row_ptr) << options;
    EXPECT_TRUE(got.col_idx == want.col_idx) << options;
    EXPECT_TRUE(got.values == want.values) << options;  // exact: 17 significant digits
  }
  expect("generate poisson3d:6", 2, "missing --output");
  expect("generate bogus:6 --output " + path, 2, "not a generator spec");
  expect("generate poisson3d:6 --values hex --output " + path, 2, "--values must be");
  expect("generate poisson3d:6 --output /nonexistent/dir/x.mtx", 1, "cannot open for writing");
}

// The reader's benchmark needs no GPU: one thread and the counts asked, per file.
TEST(Cli, BenchReadRunsOnTheHost) {
  TempDir dir;
  const std::string file = dir.file("p.mtx");
  ASSERT_EQ(run("generate poisson2d:30 --output " + file).code, 0);
  const Outcome o = run("bench read " + file + " " + spcg::test::input("nos6.mtx") + " --runs 2 --threads 2,0");
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("speedup"), std::string::npos) << o.output;
  int p_rows = 0, nos6_rows = 0;
  for (const std::string& line : lines_of(o.output)) {
    p_rows += line.rfind("p.mtx ", 0) == 0;
    nos6_rows += line.rfind("nos6.mtx ", 0) == 0;
  }
  EXPECT_GE(p_rows, 3) << o.output;  // one thread, then each count with two passes and with one
  EXPECT_EQ(p_rows, nos6_rows) << o.output;
  expect("bench read " + dir.file("missing.mtx") + " --runs 1", 1, "missing.mtx");
}

TEST(Cli, BenchListNamesTheKernels) {
  const Outcome o = run("bench --list");
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* name : {"csr-scalar", "csr-vector", "spmv"}) EXPECT_NE(o.output.find(name), std::string::npos) << name;
}

// cuSPARSE and cuBLAS are opened only when a baseline or block CG past 32 columns calls them
// (kernels/cuda_libraries.cpp): linked, they cost every process 0.37 s and 255 MB on the development machine.
TEST(Cli, BinaryDoesNotLinkCusparseOrCublas) {
  const std::string out = shell("readelf -d " + spcg::test::spcg_binary()).output;
  if (out.find("NEEDED") == std::string::npos) GTEST_SKIP() << "readelf not available: " << out;
  EXPECT_EQ(out.find("libcusparse"), std::string::npos) << out;
  EXPECT_EQ(out.find("libcublas"), std::string::npos) << out;
}

// scripts/time_to_solution.py's floor: a process that only starts CUDA. Silent with a GPU; without one it says why
// in one line and exits 1.
// (SPCG_CUDA_FLOOR, else beside the spcg binary, as in a copy of the build carried elsewhere, else the build's.)
std::string cuda_floor_binary() {
  if (const char* e = std::getenv("SPCG_CUDA_FLOOR")) return e;
  const fs::path beside = fs::path(spcg::test::spcg_binary()).parent_path() / "spcg-cuda-floor";
  return fs::exists(beside) ? beside.string() : SPCG_CUDA_FLOOR;
}

TEST(Cli, CudaFloorStartsCudaOrSaysWhyNot) {
  const Outcome o = shell(cuda_floor_binary());
  std::string why;
  if (spcg::test::gpu_available(&why)) {
    EXPECT_EQ(o.code, 0) << o.output;
    EXPECT_EQ(o.output, "");
  } else {
    EXPECT_EQ(o.code, 1) << o.output;
    EXPECT_EQ(o.output.rfind("spcg-cuda-floor: ", 0), 0u) << o.output;
    EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
  }
}

// A header that needs more host memory than the machine has is refused at once (the 62-byte file of #22).
TEST(Cli, HugeHeaderIsRefusedWithTheBytesNeeded) {
  TempDir dir;
  const std::string path = write_file(dir, "huge.mtx", "%%MatrixMarket matrix coordinate real general\n2000000000 2000000000 1\n1 1 1\n");
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (meminfo >> key >> kb && key != "MemAvailable:") meminfo.ignore(256, '\n');
  if (kb * 1024 > (uint64_t{52} << 30)) GTEST_SKIP() << "this machine has the 52 GB that file needs";
  expect("info " + path, 1, "huge.mtx:2: a 2000000000 x 2000000000 matrix with 1 entries needs about");
}

// ---- several ranks from the command line ----

// The environment of a rank is checked like an option: a bad value is a usage error naming the variable.
TEST(Cli, RankEnvironmentErrorsAreUsageErrors) {
  Outcome o = shell(spcg_with("SPCG_RANK=abc") + " solve --generate poisson2d:8");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("environment variable SPCG_RANK='abc' is not a rank number"), std::string::npos) << o.output;
  o = shell(spcg_with("OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=2") + " solve --generate poisson2d:8");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("rank 2 of 2 from Open MPI (OMPI_COMM_WORLD_*): the rank must be below"), std::string::npos) << o.output;
  const std::string mpi = spcg_with("OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2") + " solve --generate poisson2d:8 ";
  o = shell(mpi + "--gpus 3");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("rank 1 of 2: --gpus 3, but Open MPI (OMPI_COMM_WORLD_*) started 2 ranks"), std::string::npos) << o.output;
  o = shell(mpi + "--kernel csr-vector");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("rank 1 of 2: on several GPUs the kernel is auto"), std::string::npos) << o.output;
  o = shell(mpi + "--backend host");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("rank 1 of 2: on several GPUs the backend is gpu"), std::string::npos) << o.output;
  o = shell(mpi + "--vector-ops thrust");
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("on several GPUs the vector operations are fused (thrust"), std::string::npos) << o.output;
  o = shell(mpi);  // no job id to name the rendezvous file after
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("give --rendezvous FILE"), std::string::npos) << o.output;
}

// Without a GPU a rank gets as far as it can: the id (from the rendezvous file, or the launcher's pipe), its rows
// (read and cut from the file, with --rhs FILE and --x0 rows), then ends with one line naming the rank and the
// reason, exit 1; rank 0 leaves no rendezvous file behind.
TEST(Cli, RankWithoutGpuFailsCleanly) {
  std::string why;
  if (spcg::test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present (the GPU tests run ranks)";
  TempDir dir;
  const std::string tmpdir = "TMPDIR=" + dir.path().string() + " ";
  const std::string rendezvous = dir.file("job.id");
  write_file(dir, "job.id", std::string(128, 'i'));  // rank 0's id, fresh and ours
  const std::string matrix = spcg::test::input("nos6.mtx");
  const std::string rhs = write_file(dir, "b.mtx", dense_mtx(spcg::DenseBlock(675, 2, 1.0)));
  const std::string x0 = write_file(dir, "x0.mtx", dense_mtx(spcg::DenseBlock(675, 2, 0.0)));
  const std::string rank1 = spcg_with(tmpdir + "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2") + " solve --rendezvous " + rendezvous;
  Outcome o = shell(rank1 + " --matrix " + matrix + " --rhs " + rhs + " --x0 " + x0 + " --precond jacobi --solver block-cg");
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("spcg solve: rank 1 of 2: error: "), std::string::npos) << o.output;
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
  EXPECT_TRUE(fs::exists(rendezvous));  // only rank 0 removes it
  o = shell(rank1 + " --generate poisson2d:20 --x0 " + x0);  // generated rows; an --x0 of the wrong size
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("initial guess is 675 x 2, expected 400 x 1"), std::string::npos) << o.output;
  // rank 0: at --rendezvous and at the default path (TMPDIR/spcg-<uid>/nccl-<job>.id), nothing is left
  fs::remove(rendezvous);
  o = shell(spcg_with(tmpdir + "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2") + " solve --generate poisson2d:20 --rendezvous " +
            rendezvous);
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("spcg solve: rank 0 of 2: error: "), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(rendezvous));
  o = shell(spcg_with(tmpdir + "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_MCA_ess_base_jobid=77") +
            " solve --generate poisson2d:20");
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_FALSE(fs::exists(dir.file("spcg-" + std::to_string(geteuid())) + "/nccl-77.id"));
  // our launcher's rank without its pipe
  o = shell(spcg_with("SPCG_RANK=1 SPCG_RANKS=2") + " solve --generate poisson2d:20");
  EXPECT_EQ(o.code, 1) << o.output;
  EXPECT_NE(o.output.find("rank 1 of 2: error: rank 1: the launcher gave no pipe for the NCCL id"), std::string::npos) << o.output;
}

// Several GPUs from the command line (issue #25): options a rank cannot run are refused once, by the launcher;
// without enough GPUs the launcher says how many it sees. On a GPU machine: one rank started as the launcher
// starts them (its variables) solves and reports per rank; two ranks forced onto one GPU fail in NCCL's start
// and the launcher ends the job with one line naming the rank and a non-zero status, no hang.
TEST(Cli, SeveralGpus) {
  expect("solve --generate poisson2d:8 --gpus 2 --kernel csr-vector", 2, "on several GPUs the kernel is auto");
  expect("solve --generate poisson2d:8 --gpus 0", 2, "--gpus must be between 1 and 1024");
  expect("solve --generate poisson2d:8 --gpus 2 --tol -1", 2, "--tol and --atol must be finite");  // checked once, by the launcher
  expect("solve --gpus 2 --help", 0, "--gpus");
  // past 2^31 rows x stays with the ranks: what would gather it whole is refused by name, before any rank starts
  for (const std::string& gathers : {"--output x.mtx", "--verify", "--deterministic", "--x0 x0.mtx"})
    expect_one_line("solve --generate poisson3d:1300 --gpus 4 --precond jacobi " + gathers, 2,
                    gathers.substr(0, gathers.find(' ')) + (gathers == "--deterministic" ? "'s checksum" : "") +
                        ": poisson3d:1300 has 2197000000 rows, more than a whole vector on one process holds");
  expect_one_line("solve --generate poisson3d:1300 --precond jacobi --backend host", 1,
                  "2197000000 rows: more than one GPU's int32 indexing allows");
  std::string why;
  if (!spcg::test::gpu_available(&why)) {
    expect("solve --generate poisson2d:8 --gpus 2", 2, "--gpus 2: this machine shows 0 GPU(s)");
    GTEST_SKIP() << why;
  }
  const Outcome one = shell(spcg_with("SPCG_RANK=0 SPCG_RANKS=1") +
                            " solve --generate poisson3d:20 --precond jacobi --solver block-cg --nrhs 2 --verify");
  ASSERT_EQ(one.code, 0) << one.output;
  for (const char* text : {"gpu x 1 (NCCL, spcg --gpus)", "rank        rows", "communication: ", "verify (Eigen, host)",
                           "status: converged"})
    EXPECT_NE(one.output.find(text), std::string::npos) << text << "\n" << one.output;
  // both ranks on the first GPU, whatever the machine has (NCCL refuses two ranks on one device)
  const Outcome shared = shell("timeout 120 " + spcg_with("SPCG_SHARE_GPUS=1 CUDA_VISIBLE_DEVICES=0") +
                               " solve --generate poisson2d:50 --gpus 2");
  EXPECT_NE(shared.code, 0) << shared.output;
  EXPECT_NE(shared.code, 124) << "the launcher hung:\n" << shared.output;
  EXPECT_NE(shared.output.find("of 2 failed"), std::string::npos) << shared.output;
}

// ---- on a GPU ----

// --smoothing-apart runs AMG's smoothing steps apart from the DIA product: the same bits as fused (the
// deterministic checksum), and the report names the fused level only where they were fused.
// --precision on the GPU: auto takes FP32 values where they are FP32 numbers and says so on the report's
// precision line; double asked for stays double; mixed on values that are not FP32 numbers iterates on their
// rounding and still reaches the tolerance by the FP64 residual.
TEST(Cli, GpuPrecisionOptionAndItsReportLine) {
  SPCG_REQUIRE_GPU();
  const std::string solve = "solve --generate poisson3d:40 --precond jacobi --kernel dia --tol 1e-10";
  const Outcome autos = run(solve), fp64 = run(solve + " --precision double");
  const Outcome jump = run("solve --generate jump3d:16 --precond jacobi --kernel dia --tol 1e-10 --precision mixed");
  ASSERT_EQ(autos.code, 0) << autos.output;
  ASSERT_EQ(fp64.code, 0) << fp64.output;
  ASSERT_EQ(jump.code, 0) << jump.output;
  EXPECT_NE(autos.output.find("precision   mixed: "), std::string::npos) << autos.output;
  EXPECT_NE(autos.output.find("every value is an FP32 number"), std::string::npos) << autos.output;
  EXPECT_NE(fp64.output.find("precision   double"), std::string::npos) << fp64.output;
  EXPECT_NE(jump.output.find("precision   mixed: asked: dia-f32 in the iteration, the FP64 residual judging it"), std::string::npos)
      << jump.output;
  EXPECT_NE(jump.output.find("status: converged"), std::string::npos) << jump.output;
}

TEST(Cli, GpuSmoothingApartKeepsTheBits) {
  SPCG_REQUIRE_GPU();
  const std::string solve = "solve --generate poisson3d:40 --kernel dia --precond amg --tol 1e-10 --deterministic";
  const Outcome fused = run(solve), apart = run(solve + " --smoothing-apart");
  ASSERT_EQ(fused.code, 0) << fused.output;
  ASSERT_EQ(apart.code, 0) << apart.output;
  const std::string sum = after(fused.output, "checksum of x (FNV-1a over the bits): ");
  ASSERT_FALSE(sum.empty()) << fused.output;
  EXPECT_EQ(after(apart.output, "checksum of x (FNV-1a over the bits): "), sum);
  EXPECT_NE(fused.output.find("fused into the product on level(s) 0"), std::string::npos) << fused.output;
  EXPECT_EQ(apart.output.find("fused into the product"), std::string::npos) << apart.output;
}

// Two MPI ranks (Open MPI's variables) meet at the default rendezvous file: rank 1 gets rank 0's id from it (it
// never times out waiting), and no file is left, whatever NCCL then says. Both ranks see the one GPU 0, so
// NCCL refuses the pair on any machine (two ranks on one device) and each ends with one line, exit 1.
TEST(Cli, GpuMpiRanksMeetThroughThePrivateRendezvousFile) {
  SPCG_REQUIRE_GPU();
  TempDir dir;
  auto rank = [&](int r) {
    const std::string log = dir.file("rank" + std::to_string(r));
    return "(timeout 120 " +
           spcg_with("CUDA_VISIBLE_DEVICES=0 OMPI_COMM_WORLD_SIZE=2 OMPI_MCA_ess_base_jobid=4711 TMPDIR=" + dir.path().string() +
                     " OMPI_COMM_WORLD_RANK=" + std::to_string(r)) +
           " solve --generate poisson2d:64 --precond jacobi > " + log + ".log 2>&1; echo $? > " + log + ".rc)";
  };
  shell(rank(0) + " & " + rank(1) + " & wait");
  const std::string folder = dir.file("spcg-" + std::to_string(geteuid()));
  for (int r = 0; r < 2; ++r) {
    const std::string log = read_text(dir.file("rank" + std::to_string(r) + ".log"));
    const int rc = std::stoi(read_text(dir.file("rank" + std::to_string(r) + ".rc")));
    EXPECT_NE(rc, 124) << "rank " << r << " hung:\n" << log;
    EXPECT_NE(rc, 0) << log;
    EXPECT_NE(log.find("spcg solve: rank " + std::to_string(r) + " of 2: error: "), std::string::npos) << log;
    EXPECT_EQ(log.find("no NCCL id from rank 0"), std::string::npos) << log;
  }
  struct stat st {};
  ASSERT_EQ(lstat(folder.c_str(), &st), 0) << folder;
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_FALSE(fs::exists(folder + "/nccl-4711.id"));
}

// The preconditioner in the report: AMG's level table and phases (text and JSON), auto's reason; bad options
// and the host backend's refusal are usage errors.
TEST(Cli, PreconditionerReportAndOptions) {
  expect("solve --generate poisson2d:8 --precond ilu", 2, "--precond");
  expect("solve --generate poisson2d:8 --precond amg --amg-smoother gauss", 2, "--amg-smoother");
  expect("solve --backend host --generate poisson2d:8 --precond amg", 2, "host backend offers --precond none or jacobi");
  SPCG_REQUIRE_GPU();
  TempDir dir;
  const std::string report = dir.file("amg.json");
  const Outcome o = run("solve --generate poisson2d:60 --precond amg --amg-coarse-rows 100 --report-file " + report);
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* text : {"precond     amg: ", "level        rows", "operator complexity", "galerkin", "status: converged"})
    EXPECT_NE(o.output.find(text), std::string::npos) << text << "\n" << o.output;
  const std::string json = read_text(report);
  for (const char* key : {"\"preconditioner\":", "\"kind\":\"amg\"", "\"levels\":", "\"operator_complexity\"", "\"setup_ms\""})
    EXPECT_NE(json.find(key), std::string::npos) << key << "\n" << json;
  expect("solve --generate poisson2d:60 --precond auto", 0, "auto: 3600 rows < 100000");
  expect("solve --precond auto", 0, "; constant diagonal");  // fv1, the default matrix
  expect("solve --matrix " + spcg::test::input("nos6.mtx") + " --precond auto", 0, "auto: 675 rows < 100000");
  expect("solve --precond block-jacobi --block-size 9", 2, "--block-size must be");
  expect("solve --generate poisson2d:60 --precond amg --amg-omega 2.5", 2, "omega x lambda_max must be in (0, 2)");
}

// --history on the GPU (cg): a row per iteration, 0 to the last, from ||b|| down to the target.
TEST(Cli, GpuHistoryHasARowPerIteration) {
  SPCG_REQUIRE_GPU();
  TempDir dir;
  const std::string h = dir.file("h.csv"), report = dir.file("r.json");
  for (const char* persistent : {"on", "off"}) {
    const Outcome o = run(std::string("solve --generate poisson2d:32 --persistent ") + persistent + " --history " + h +
                          " --report-file " + report);
    ASSERT_EQ(o.code, 0) << o.output;
    const std::string json = read_text(report);
    const int iterations = static_cast<int>(json_number(json, "iterations", json.find("\"columns\":")));
    const std::vector<std::string> rows = lines_of(read_text(h));
    ASSERT_EQ(rows.size(), static_cast<size_t>(iterations) + 2) << persistent << "\n" << read_text(h);  // header + 0..iterations
    EXPECT_EQ(rows[0], "column,iteration,residual_norm");
    for (int i = 0; i <= iterations; ++i)
      EXPECT_EQ(rows[static_cast<size_t>(i) + 1].rfind("0," + std::to_string(i) + ",", 0), 0u) << rows[static_cast<size_t>(i) + 1];
    EXPECT_NEAR(std::stod(rows[1].substr(4)), 32.0, 1e-9);  // r0 = b = ones(1024)
    EXPECT_LE(std::stod(rows.back().substr(rows.back().find_last_of(',') + 1)), 1e-8 * 32 * 1.000001);
  }
}

// The benchmark harness (spcg bench, solver/bench/) on the GPU, each benchmark on a small generated matrix with
// one timed run: it exits 0, prints its table, and its JSON holds the rows it measured, the solves converged.
TEST(Cli, GpuBenchmarksRunEveryHarness) {
  SPCG_REQUIRE_GPU();
  TempDir dir;
  const std::string json = dir.file("b.json");
  const std::string common = " --matrices poisson2d:48,powerlaw:400 --no-files --runs 1 --output " + json;
  {
    const Outcome o = run("bench spmv --kernels csr-scalar,dia,auto" + common);
    ASSERT_EQ(o.code, 0) << o.output;
    const std::string j = read_text(json);
    for (const char* what : {"poisson2d:48", "powerlaw:400", "csr-scalar", "copy_bandwidth_gbs"})
      EXPECT_NE(j.find(what), std::string::npos) << what << "\n" << j.substr(0, 400);
    // dia's own bytes on the stencil (its half of the stripes) are fewer than the CSR model counts
    const size_t dia = j.find("\"kernel\":\"dia\"");
    ASSERT_NE(dia, std::string::npos) << j.substr(0, 600);
    EXPECT_GT(json_number(j, "own_model_gbs", dia), 0.0) << j.substr(dia, 400);
    EXPECT_LT(json_number(j, "own_model_gbs", dia), json_number(j, "csr_model_gbs", dia)) << j.substr(dia, 400);
    EXPECT_GT(json_number(j, "own_vs_same_size_copy", dia), 0.0) << j.substr(dia, 400);
  }
  {
    const Outcome o = run("bench spmm --k 1,4 --kernels spmm-cwm,spmm-naive" + common);
    ASSERT_EQ(o.code, 0) << o.output;
    EXPECT_NE(read_text(json).find("spmm-cwm"), std::string::npos);
  }
  {
    const Outcome o = run("bench cg" + common);
    ASSERT_EQ(o.code, 0) << o.output;
    const double rel = json_number(read_text(json), "relative_true_residual", 0);
    EXPECT_LE(rel, 1e-7) << read_text(json).substr(0, 400);
    // dia's own bytes on the stencil (its half of the stripes) below the CSR model's: the lower floor
    const Outcome d = run("bench cg --kernel dia --matrices poisson2d:48 --no-files --output " + json);
    ASSERT_EQ(d.code, 0) << d.output;
    const std::string j = read_text(json);
    EXPECT_NE(j.find("\"kernel\":\"dia"), std::string::npos) << j.substr(0, 600);
    EXPECT_GT(json_number(j, "own_bytes_floor_us", 0), 0.0) << j.substr(0, 600);
    EXPECT_LT(json_number(j, "own_bytes_floor_us", 0), json_number(j, "fused_floor_us", 0)) << j.substr(0, 600);
    // the iteration's passes as copies of as many bytes: measured, and slower than the bandwidth says
    EXPECT_GT(json_number(j, "passes_as_copies_us", 0), json_number(j, "own_bytes_floor_us", 0)) << j.substr(0, 600);
  }
  {
    const Outcome o = run("bench block-cg --k 4" + common);
    ASSERT_EQ(o.code, 0) << o.output;
    const std::string j = read_text(json);
    EXPECT_NE(j.find("\"block_cg_converged\":true"), std::string::npos) << j.substr(0, 600);
    EXPECT_NE(j.find("\"multi_cg_converged\":true"), std::string::npos) << j.substr(0, 600);
  }
  {  // the V-cycle: FP64 and FP32 levels on the stencil (dia-f32 on level 0), a model and a time for each
    const Outcome o = run("bench vcycle --matrices poisson3d:40 --kernel dia --runs 3 --output " + json);
    ASSERT_EQ(o.code, 0) << o.output;
    const std::string j = read_text(json);
    EXPECT_NE(j.find("\"values\":\"fp64\""), std::string::npos) << j.substr(0, 600);
    EXPECT_NE(j.find("dia-f32"), std::string::npos) << j.substr(0, 600);
    EXPECT_NE(j.find("\"smoothing_steps\":\"fused\""), std::string::npos) << j.substr(0, 600);
    EXPECT_NE(j.find("\"smoothing_steps\":\"apart\""), std::string::npos) << j.substr(0, 600);
    EXPECT_GT(json_number(j, "model_bytes", 0), 0.0) << j.substr(0, 600);
    EXPECT_GT(json_number(j, "us_per_cycle", 0), 0.0) << j.substr(0, 600);
    EXPECT_NEAR(json_number(j, "ratio_to_floor", 0), json_number(j, "us_per_cycle", 0) / json_number(j, "floor_us", 0), 1e-6)
        << j.substr(0, 600);
    // its launches as copies: at least a launch a level, slower than the bandwidth alone, a PCG iteration more
    EXPECT_GE(json_number(j, "launches", 0), json_number(j, "levels", 0)) << j.substr(0, 600);
    EXPECT_GT(json_number(j, "launches_as_copies_us", 0), json_number(j, "floor_us", 0)) << j.substr(0, 600);
    EXPECT_GT(json_number(j, "pcg_iteration_as_copies_us", 0), json_number(j, "launches_as_copies_us", 0)) << j.substr(0, 600);
  }
}

// --monitor N on the GPU: a progress line at (or just past) each multiple of N.
TEST(Cli, GpuMonitorPrintsProgress) {
  SPCG_REQUIRE_GPU();
  const Outcome o = run("solve --generate poisson2d:32 --monitor 10");
  ASSERT_EQ(o.code, 0) << o.output;
  int lines = 0;
  for (const std::string& line : lines_of(o.output))
    if (std::regex_search(line, std::regex("^  iter +[0-9]+  col +0  \\|\\|r\\|\\| [0-9.e+-]+  \\(target [0-9.e+-]+\\)$"))) ++lines;
  EXPECT_GE(lines, 3) << o.output;  // poisson2d:32 takes ~50+ iterations
}

// --atol on the GPU stops earlier than the relative tolerance alone, with ||b - A x|| near atol.
TEST(Cli, GpuAtolStopsEarlier) {
  SPCG_REQUIRE_GPU();
  TempDir dir;
  const std::string report = dir.file("r.json"), xout = dir.file("x.mtx");
  const std::string solve = "solve --generate poisson2d:32 --output " + xout + " --report-file " + report;
  ASSERT_EQ(run(solve).code, 0);
  std::string json = read_text(report);
  const double full = json_number(json, "iterations", json.find("\"columns\":"));
  const Outcome o = run(solve + " --atol 1e-2");  // ||b|| = 32: 3e-4 relative, against 1e-8
  ASSERT_EQ(o.code, 0) << o.output;
  json = read_text(report);
  EXPECT_LT(json_number(json, "iterations", json.find("\"columns\":")), full);
  EXPECT_LE(json_number(json, "recursive_residual", json.find("\"columns\":")), 1e-2);
  const spcg::DenseBlock x = spcg::read_dense_matrix_market(xout).block;
  const double abs_residual = 32 * max_relative_residual(spcg::generate("poisson2d:32"), x, spcg::DenseBlock(1024, 1, 1.0));
  EXPECT_LE(abs_residual, 2e-2);  // the true residual: the recursive one, up to rounding's drift
  EXPECT_GT(abs_residual, 1e-8 * 32);
}

TEST(Cli, GpuDeterministicChecksumRepeats) {
  SPCG_REQUIRE_GPU();
  TempDir dir;
  const std::string xout = dir.file("x.mtx");
  const Outcome a = run("solve --generate poisson3d:16 --deterministic --output " + xout);
  const Outcome b = run("solve --generate poisson3d:16 --deterministic");
  ASSERT_EQ(a.code, 0) << a.output;
  ASSERT_EQ(b.code, 0) << b.output;
  const std::string sum = after(a.output, "checksum of x (FNV-1a over the bits): ");
  ASSERT_EQ(sum.size(), 16u) << a.output;
  EXPECT_EQ(after(b.output, "checksum of x (FNV-1a over the bits): "), sum);
  EXPECT_EQ(fnv1a(spcg::read_dense_matrix_market(xout).block), sum);
}

// --repeat solves the same system again on the one setup: the report keeps the first solve and adds the later
// ones' median, and the answer is still the system's (checked on the host).
TEST(Cli, RepeatReportsTheLaterSolvesApart) {
  TempDir dir;
  const std::string x = dir.file("x.mtx");
  const Outcome o = run("solve --generate poisson2d:30 --backend host --precond jacobi --tol 1e-10 --repeat 3 --output " + x);
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("solve again (median of 2)"), std::string::npos) << o.output;
  const spcg::CsrMatrix a = spcg::generate("poisson2d:30");
  const spcg::DenseBlock sol = spcg::read_dense_matrix_market(x).block;
  const std::vector<double> rel = spcg::relative_residuals(a, sol, spcg::DenseBlock(a.rows, 1, 1.0));
  EXPECT_LT(rel[0], 1e-9);
}

// A rank (our launcher's variables, one rank) solving from a file with --rhs FILE and --x0: x written whole by
// rank 0 solves the system of the file; the report has the rank's line; JSON too.
TEST(Cli, GpuRankSolvesFromAFileWithRhsAndX0) {
  SPCG_REQUIRE_GPU();
  TempDir dir;
  const std::string matrix = spcg::test::input("lap2D_5pt_n100.mtx");
  const spcg::CsrMatrix a = spcg::read_matrix_market(matrix).matrix;
  spcg::DenseBlock b(a.rows, 2), x0(a.rows, 2, 0.25);
  for (int32_t i = 0; i < a.rows; ++i) b.at(i, 0) = 1.0, b.at(i, 1) = std::cos(0.01 * i);
  const std::string rhs = write_file(dir, "b.mtx", dense_mtx(b)), x0_file = write_file(dir, "x0.mtx", dense_mtx(x0));
  const std::string xout = dir.file("x.mtx"), report = dir.file("r.json");
  const Outcome o = shell("timeout 300 " + spcg_with("SPCG_RANK=0 SPCG_RANKS=1") + " solve --matrix " +
                          matrix + " --rhs " + rhs + " --x0 " + x0_file + " --precond jacobi --solver block-cg --verify --output " +
                          xout + " --report-file " + report + " --deterministic");
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* text : {"gpu x 1 (NCCL, spcg --gpus)", "rank        rows", "2 right-hand side(s)", "status: converged",
                           "checksum of x"})
    EXPECT_NE(o.output.find(text), std::string::npos) << text << "\n" << o.output;
  const spcg::DenseBlock x = spcg::read_dense_matrix_market(xout).block;
  ASSERT_EQ(x.rows, a.rows);
  ASSERT_EQ(x.cols, 2);
  const double rel = max_relative_residual(a, x, b);
  EXPECT_LE(rel, 1e-7);
  EXPECT_LE(std::stod(after(o.output, "verify (Eigen, host): max ||b - A x|| / ||b|| = ")), 1e-7);
  const std::string json = read_text(report);
  EXPECT_NE(json.find("\"ranks\":[{\"rank\":0,\"rows\":" + std::to_string(a.rows)), std::string::npos) << json;
  EXPECT_EQ(json_value(json, "converged"), "true");
  // the same through mpirun's variables, with the rendezvous file in a private folder (removed after)
  const Outcome mpi = shell(spcg_with("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1") + " solve --matrix " + matrix + " --rhs " + rhs);
  EXPECT_EQ(mpi.code, 0) << mpi.output;  // size 1: a plain process
}

}  // namespace
