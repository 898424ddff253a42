#pragma once
// Error types shared by every layer and thrown through the library's public interface (nothing in the library
// prints or exits). The CLI maps them to exit codes: InputError (bad file or data) -> 1, UsageError (bad
// options or arguments) -> 2, CudaError (a failed CUDA / cuSPARSE / cuBLAS call, or no device) and anything
// else -> 1.
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

// Bad usage: unknown, missing or conflicting options or arguments.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A CUDA, cuSPARSE, cuBLAS or NCCL call failed (the message names the call, file and line), or no device is usable.
class CudaError : public Error {
 public:
  using Error::Error;
};

// Not enough device memory: says how much was asked for and how much is free.
class DeviceMemoryError : public CudaError {
 public:
  using CudaError::CudaError;
};

// The ranks of a multi-GPU solve could not communicate: a rank failed or left, or a transfer did not match.
class CommunicationError : public Error {
 public:
  using Error::Error;
};

}  // namespace spcg
