#pragma once
// Error types shared by every layer. The CLI maps them to exit codes:
// InputError (bad file or data) -> 1, UsageError (bad options) -> 2, anything else -> 1.
#include <stdexcept>
#include <string>

namespace spcg {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input data. Carries the file (or generator spec) and 1-based line where known (0 = none).
class InputError : public Error {
 public:
  InputError(std::string file, long line, const std::string& problem)
      : Error(format(file, line, problem)), file_(std::move(file)), line_(line), problem_(problem) {}
  const std::string& file() const { return file_; }
  long line() const { return line_; }
  const std::string& problem() const { return problem_; }

 private:
  static std::string format(const std::string& file, long line, const std::string& problem) {
    std::string s = file;
    if (line > 0) s += ":" + std::to_string(line);
    if (!s.empty()) s += ": ";
    return s + problem;
  }
  std::string file_;
  long line_;
  std::string problem_;
};

// Bad command-line usage (unknown, missing or conflicting options).
class UsageError : public Error {
 public:
  using Error::Error;
};

}  // namespace spcg
