#pragma once
// Host parallelism for the reader, the statistics and the host conversions: plain std::threads over a task
// counter. The calling thread works too; the first exception (by task order) is rethrown after every worker
// has stopped, so an error is the same on every thread count.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace spcg {

// The host's threads this process may use: 0, every hardware thread; else at most that many. Ranks that share a
// host share its cores (each generating, reading and converting on all of them would run ranks x cores threads).
inline std::atomic<int>& thread_budget() {
  static std::atomic<int> budget{0};
  return budget;
}
inline void set_thread_budget(int threads) { thread_budget() = std::max(0, threads); }
// Every hardware thread this process may use (at least 1).
inline int hardware_threads() {
  const int all = std::max(1, static_cast<int>(std::thread::hardware_concurrency())), budget = thread_budget();
  return budget > 0 ? std::min(all, budget) : all;
}
// `requested` threads, or every hardware thread when requested <= 0.
inline int resolve_threads(int requested) { return requested > 0 ? requested : hardware_threads(); }

// fn(task) or fn(task, worker) for every task in [0, tasks), taken in increasing order from a shared counter
// by up to `threads` threads; worker in [0, threads) names the thread (for per-thread scratch). Tasks after a
// failed one may still run; the exception of the lowest failed task is rethrown.
template <class Fn>
void parallel_for(int64_t tasks, int threads, Fn&& fn) {
  threads = static_cast<int>(std::min<int64_t>(std::max(1, threads), std::max<int64_t>(tasks, 1)));
  auto call = [&fn](int64_t task, int worker) {
    if constexpr (std::is_invocable_v<Fn&, int64_t, int>) fn(task, worker);
    else fn(task);
  };
  if (threads == 1) {
    for (int64_t t = 0; t < tasks; ++t) call(t, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  std::mutex m;
  int64_t failed_task = tasks;
  std::exception_ptr failure;
  auto work = [&](int worker) {
    for (int64_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) {
      try {
        call(t, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (t < failed_task) failed_task = t, failure = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) pool.emplace_back(work, i);
  work(0);
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
}

// Splits [0, n) into `parts` contiguous ranges; range p is [split(p), split(p + 1)).
inline int64_t even_split(int64_t n, int64_t parts, int64_t p) { return n / parts * p + std::min(p, n % parts); }

}  // namespace spcg
