// The CLI's error paths and the host backend: run in CI (no GPU needed).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "test_util.hpp"

namespace {

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

std::string tmp(const std::string& name, const std::string& content = "") {
  const std::string p = (std::filesystem::temp_directory_path() / ("spcg_cli_" + name)).string();
  if (!content.empty()) std::ofstream(p) << content;
  return p;
}

void expect(const std::string& args, int code, const std::string& fragment) {
  const Outcome o = run(args);
  EXPECT_EQ(o.code, code) << args << "\n" << o.output;
  EXPECT_NE(o.output.find(fragment), std::string::npos) << args << "\n" << o.output;
}

}  // namespace

TEST(Cli, HelpListsOptionsWithDefaults) {
  expect("--help", 0, "solve");
  expect("solve --help", 0, "--tol");
  expect("solve --help", 0, "(=1e-08)");
  expect("solve --help", 0, "--kernel arg (=auto)");
  expect("solve --help", 0, "--stagnation arg (=200)");
  expect("info --help", 0, "--format");
}

TEST(Cli, UsageErrorsExitTwo) {
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
  expect("bench", 2, "");
  expect("bench spmv --matrix-dir /nonexistent/dir", 2, "--matrix-dir /nonexistent/dir: not a directory");
  const std::string empty_dir = tmp("no_mtx_here");
  std::filesystem::create_directories(empty_dir);
  expect("bench spmv --matrix-dir " + empty_dir, 2, "no .mtx or .mtx.gz files there");
}

TEST(Cli, BadInputExitsOneWithTheReadersMessage) {
  expect("solve --backend host --matrix /nonexistent/a.mtx", 1, "/nonexistent/a.mtx: no such file");
  expect("info " + tmp("bad.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1\n"), 1, "bad.mtx:3: index (3, 1) out of range");
  expect("solve --backend host --generate poisson3d:x", 1, "expected a non-negative integer size");
  expect("solve --backend host --matrix " + tmp("rect.mtx", "%%MatrixMarket matrix coordinate real general\n2 3 1\n1 1 1\n"), 1,
         "square");
  expect("solve --backend host --matrix " + tmp("unsym.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 2\n2 2 2\n1 2 1\n"), 1,
         "not symmetric");
  expect("solve --backend host --precond jacobi --matrix " +
             tmp("zd.mtx", "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 2\n2 1 1\n"), 1,
         "positive diagonal");
  // No SPD matrix has a zero, negative or missing diagonal entry: refused before solving, whatever the solver.
  const std::string zero_diagonal = tmp("zdiag.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 2\n2 2 0\n3 3 2\n");
  expect("solve --backend host --matrix " + zero_diagonal, 1, "zdiag.mtx: matrix is not positive definite: row 2 has diagonal 0");
  expect("solve --backend host --matrix " + tmp("negdiag.mtx", "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 -2\n2 2 -3\n"),
         1, "row 1 has diagonal -2 (2 such rows)");
  expect("solve --backend host --force --matrix " + zero_diagonal, 3, "non-finite");  // --force: the solve runs and says it failed
  expect("solve --backend host --generate poisson2d:3 --rhs " +
             tmp("nan.mtx", "%%MatrixMarket matrix array real general\n9 1\n1\n1\n1\nnan\n1\n1\n1\n1\n1\n"), 1, "NaN or Inf");
  expect("solve --backend host --generate poisson2d:3 --rhs " +
             tmp("short.mtx", "%%MatrixMarket matrix array real general\n4 1\n1\n1\n1\n1\n"), 1, "right-hand side has 4 rows");
  if (spcg::test::have_matrix_dir())
    expect("info " + spcg::test::matrix_dir() + "/odd/mhd1280b.mtx", 1, "unsupported field 'complex'");
}

TEST(Cli, InfoJsonHasCounts) {
  const Outcome o = run("info poisson3d:10 --format json");
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* key : {"\"rows\":1000", "\"cols\":1000", "\"nnz\":6400", "\"symmetric\":true", "\"row_length\":"})
    EXPECT_NE(o.output.find(key), std::string::npos) << key << "\n" << o.output;
}

TEST(Cli, HostBackendSolvesDefaultAndWritesReport) {
  const std::string report = tmp("report.json"), xout = tmp("x.mtx");
  const Outcome o = run("solve --backend host --report-file " + report + " --output " + xout + " --verify");
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("converged"), std::string::npos);
  std::ifstream f(report);
  const std::string json((std::istreambuf_iterator<char>(f)), {});
  for (const char* key : {"\"matrix\"", "\"rows\":9604", "\"phases\"", "\"kernels\"", "\"columns\"", "\"status\":\"converged\"",
                          "\"true_residual\"", "\"converged\":true", "\"verify_relative_residual\""})
    EXPECT_NE(json.find(key), std::string::npos) << key << "\n" << json;
  EXPECT_TRUE(std::filesystem::exists(xout));
}

TEST(Cli, NoGpuSaysSoInOneLine) {
  std::string why;
  if (spcg::test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present";
  expect("solve --generate poisson2d:4", 0, "No CUDA device");
  expect("solve --backend gpu --generate poisson2d:4", 1, "--backend gpu: no");
  expect("bench spmv", 1, "benchmarks need a CUDA device");
}

TEST(Cli, GenerateWritesAFileTheReaderTakesBack) {
  const std::string path = tmp("gen.mtx");
  expect("generate poisson3d:6 --output " + path, 0, "216 x 216");
  const Outcome o = run("info " + path + " --format json --threads 3");
  ASSERT_EQ(o.code, 0) << o.output;
  // (a small file is read on one thread whatever --threads says: threads cost more than they save there)
  for (const char* key : {"\"rows\":216", "\"nnz\":1296", "\"symmetric\":true", "\"reader\":", "\"threads\":1"})
    EXPECT_NE(o.output.find(key), std::string::npos) << key << "\n" << o.output;
  expect("generate poisson3d:6", 2, "missing --output");
  expect("generate bogus:6 --output " + path, 2, "not a generator spec");
  expect("generate poisson3d:6 --values hex --output " + path, 2, "--values must be");
  expect("generate poisson3d:6 --output /nonexistent/dir/x.mtx", 1, "cannot open for writing");
}

TEST(Cli, SolveReportsStartAndWallTime) {
  const Outcome o = run("solve --backend host --generate poisson2d:8");
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* phase : {"start (CUDA, overlapped)", "read", "statistics", "solve", "wall (process)"})
    EXPECT_NE(o.output.find(phase), std::string::npos) << phase << "\n" << o.output;
}

// cuSPARSE and cuBLAS are opened only when a baseline or block CG past 32 columns calls them
// (kernels/cuda_libraries.cpp): linked, they cost every process 0.37 s and 255 MB on the development machine.
TEST(Cli, BinaryDoesNotLinkCusparseOrCublas) {
  const std::string out = shell("readelf -d " + spcg::test::spcg_binary()).output;
  if (out.find("NEEDED") == std::string::npos) GTEST_SKIP() << "readelf not available: " << out;
  EXPECT_EQ(out.find("libcusparse"), std::string::npos) << out;
  EXPECT_EQ(out.find("libcublas"), std::string::npos) << out;
}

// A header that needs more host memory than the machine has is refused at once (the 62-byte file of #22).
TEST(Cli, HugeHeaderIsRefusedWithTheBytesNeeded) {
  const std::string path = tmp("huge.mtx", "%%MatrixMarket matrix coordinate real general\n2000000000 2000000000 1\n1 1 1\n");
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (meminfo >> key >> kb && key != "MemAvailable:") meminfo.ignore(256, '\n');
  if (kb * 1024 > (uint64_t{52} << 30)) GTEST_SKIP() << "this machine has the 52 GB that file needs";
  const auto t0 = std::chrono::steady_clock::now();
  expect("info " + path, 1, "huge.mtx:2: a 2000000000 x 2000000000 matrix with 1 entries needs about");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

// The preconditioner in the report: AMG's level table and phases (text and JSON), auto's reason; bad options
// and the host backend's refusal are usage errors.
TEST(Cli, PreconditionerReportAndOptions) {
  expect("solve --generate poisson2d:8 --precond ilu", 2, "--precond");
  expect("solve --generate poisson2d:8 --precond amg --amg-smoother gauss", 2, "--amg-smoother");
  expect("solve --backend host --generate poisson2d:8 --precond amg", 2, "host backend offers --precond none or jacobi");
  std::string why;
  if (!spcg::test::gpu_available(&why)) GTEST_SKIP() << why;
  const std::string report = tmp("amg.json");
  const Outcome o = run("solve --generate poisson2d:60 --precond amg --amg-coarse-rows 100 --report-file " + report);
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* text : {"precond     amg: ", "level        rows", "operator complexity", "galerkin", "status: converged"})
    EXPECT_NE(o.output.find(text), std::string::npos) << text << "\n" << o.output;
  std::ifstream f(report);
  const std::string json((std::istreambuf_iterator<char>(f)), {});
  for (const char* key : {"\"preconditioner\":", "\"kind\":\"amg\"", "\"levels\":", "\"operator_complexity\"", "\"setup_ms\""})
    EXPECT_NE(json.find(key), std::string::npos) << key << "\n" << json;
  expect("solve --generate poisson2d:60 --precond auto", 0, "auto: 3600 rows < 100000");
  expect("solve --precond auto", 0, "; constant diagonal");  // fv1, the default matrix
  expect("solve --matrix " + spcg::test::input("nos6.mtx") + " --precond auto", 0, "auto: 675 rows < 100000");
  expect("solve --precond block-jacobi --block-size 9", 2, "--block-size must be");
  expect("solve --generate poisson2d:60 --precond amg --amg-omega 2.5", 2, "omega x lambda_max must be in (0, 2)");
}

// Several GPUs from the command line (issue #25): options a rank cannot run are refused once, by the launcher;
// without enough GPUs the launcher says how many it sees. On a GPU machine: one rank started as the launcher
// starts them (its variables) solves and reports per rank; two ranks forced onto one GPU fail in NCCL's start
// and the launcher ends the job with one line naming the rank and a non-zero status, no hang.
TEST(Cli, SeveralGpus) {
  expect("solve --generate poisson2d:8 --gpus 2 --precond amg", 2, "several GPUs: --precond none or jacobi");
  expect("solve --generate poisson2d:8 --gpus 2 --kernel csr-vector", 2, "several GPUs: --kernel auto");
  expect("solve --generate poisson2d:8 --gpus 0", 2, "--gpus must be between 1 and 1024");
  std::string why;
  if (!spcg::test::gpu_available(&why)) {
    expect("solve --generate poisson2d:8 --gpus 2", 2, "--gpus 2: this machine shows 0 GPU(s)");
    GTEST_SKIP() << why;
  }
  const Outcome one = shell("SPCG_RANK=0 SPCG_RANKS=1 " + spcg::test::spcg_binary() +
                            " solve --generate poisson3d:20 --precond jacobi --solver block-cg --nrhs 2 --verify");
  ASSERT_EQ(one.code, 0) << one.output;
  for (const char* text : {"gpu x 1 (NCCL, spcg --gpus)", "rank        rows", "communication: ", "verify (Eigen, host)",
                           "status: converged"})
    EXPECT_NE(one.output.find(text), std::string::npos) << text << "\n" << one.output;
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome shared = shell("SPCG_SHARE_GPUS=1 timeout 120 " + spcg::test::spcg_binary() +
                               " solve --generate poisson2d:50 --gpus 2");
  EXPECT_NE(shared.code, 0) << shared.output;
  EXPECT_NE(shared.code, 124) << "the launcher hung:\n" << shared.output;
  EXPECT_NE(shared.output.find("of 2 failed"), std::string::npos) << shared.output;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
}
