// spcg: GPU conjugate-gradient solver for sparse SPD systems. Subcommands: info, solve, bench, generate.
// Exit codes: 0 ok, 1 bad input or runtime error, 2 usage error, 3 the solve did not converge.
// Everything but main() is the spcg_app library (apps/cli.cpp and the commands), which the tests link too.
#include <string>
#include <vector>

#include "apps/commands.hpp"

int main(int argc, char** argv) { return spcg::run_cli(std::vector<std::string>(argv + 1, argv + argc)); }
