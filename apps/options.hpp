#pragma once
// The one way a subcommand reads its command line (Boost.Program_options): store, print the help and stop when
// asked, else check the values. Returns false after printing the help (the command then exits 0).
#include <boost/program_options.hpp>
#include <iostream>
#include <string>
#include <vector>

namespace spcg {

inline bool parse_command_line(const std::vector<std::string>& args,
                               const boost::program_options::options_description& opts,
                               const boost::program_options::positional_options_description& positional,
                               boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  po::store(po::command_line_parser(args).options(opts).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return false;
  }
  po::notify(vm);
  return true;
}

}  // namespace spcg
