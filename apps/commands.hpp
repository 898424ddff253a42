#pragma once
#include <string>
#include <vector>

namespace spcg {
// Each subcommand parses its own options (Boost.Program_options) and returns the process exit code.
int run_info(const std::vector<std::string>& args);
int run_solve(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
}  // namespace spcg
