#pragma once
#include <string>
#include <vector>

namespace spcg {
// The whole command line (without the program's name): dispatches to a subcommand, maps its errors to exit codes
// (printing one line) and returns the process's exit status.
int run_cli(std::vector<std::string> args);
// Each subcommand parses its own options (Boost.Program_options) and returns the process exit code.
int run_info(const std::vector<std::string>& args);
int run_solve(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
int run_generate(const std::vector<std::string>& args);
// spcg bench read FILE...: the reader on one thread and on every core (apps/bench_read.cpp).
// `threads`: the thread counts read beside one thread (each with two passes and with one).
// The built-in default system of the main job (inputs/fv1.mtx of the checkout).
std::string default_matrix_path();
int bench_read(const std::vector<std::string>& files, int runs, const std::vector<int>& threads);
// spcg --version: the version, the commit built, the CUDA toolkit and the GPU architectures (apps/version.cpp).
std::string version_text();
// Milliseconds since main() was entered: the report's wall time of the whole process.
double ms_since_process_start();
}  // namespace spcg
