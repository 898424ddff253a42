#include "spcg/host_memory.hpp"

#include "sparse/parallel.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and pages fault in on first touch
#endif

namespace spcg {

void* host_allocate(size_t bytes) {
  if (bytes < kHostMappedBytes) {
    void* p = std::malloc(bytes ? bytes : 1);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  madvise(p, bytes, MADV_HUGEPAGE);
  // Populated in slices on every thread: the kernel zeroes each new page, at about 1 ms per MB on the
  // development VM when the memory is new to the process (perf: clear_page_erms).
  // ENOMEM: the machine cannot hold it, which is bad_alloc here rather than the OOM killer at first touch.
  // EINVAL (a kernel before 5.14): the pages fault in on first touch.
  constexpr size_t kSlice = size_t{8} << 20;  // below two slices one thread does it: starting threads costs more
  const int64_t slices = static_cast<int64_t>((bytes + kSlice - 1) / kSlice);
  std::atomic<bool> out_of_memory{false};
  parallel_for(slices, slices >= 2 ? hardware_threads() : 1, [&](int64_t s) {
    char* at = static_cast<char*>(p) + static_cast<size_t>(s) * kSlice;
    const size_t len = std::min(kSlice, bytes - static_cast<size_t>(s) * kSlice);
    if (madvise(at, len, MADV_POPULATE_WRITE) != 0 && errno == ENOMEM) out_of_memory = true;
  });
  if (out_of_memory) {
    munmap(p, bytes);
    throw std::bad_alloc();
  }
  return p;
}

void host_free(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (bytes < kHostMappedBytes) std::free(p);
  else munmap(p, bytes);
}

}  // namespace spcg
