#pragma once
// Host memory for the big arrays (CSR, dense blocks, the reader's entries).
// Fresh anonymous memory is paid for at first touch, page by page: on the development VM a 200 MB memset of
// new memory takes 545-557 ms (about 11 us per 4 KiB fault), more than parsing the file that fills it.
// Measured there, five runs each: a huge-page hint alone 19-438 ms (huge pages when the kernel has them at
// hand); populating in one call (MADV_POPULATE_WRITE) alone 119-132 ms; both 18-25 ms. Large allocations
// are therefore mapped with the hint and populated, and vectors default-initialise their elements instead
// of zeroing them, so an array is written once, by whoever fills it.
#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace spcg {

// Allocations of at least this many bytes are mapped and populated; smaller ones go to malloc.
constexpr size_t kHostMappedBytes = size_t{1} << 20;

void* host_allocate(size_t bytes);            // throws std::bad_alloc
void host_free(void* p, size_t bytes) noexcept;

template <class T>
struct HostAllocator {
  using value_type = T;
  HostAllocator() = default;
  template <class U>
  HostAllocator(const HostAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(host_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { host_free(p, n * sizeof(T)); }
  // Default-initialisation: resize() of a vector of numbers leaves them unwritten (no zeroing pass).
  template <class U>
  void construct(U* p) noexcept(noexcept(::new (static_cast<void*>(p)) U)) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const HostAllocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const HostAllocator<U>&) const noexcept { return false; }
};

// A std::vector on HostAllocator: resize(n) leaves numbers unwritten, assign(n, v) and resize(n, v) write v.
template <class T>
using HostVector = std::vector<T, HostAllocator<T>>;

}  // namespace spcg
