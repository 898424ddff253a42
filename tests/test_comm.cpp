// The multi-GPU solvers' communication (issue #25): the in-process stand-in group (threads on the one GPU)
// sums in rank order, bit for bit the host's sum, for 1, 2, 3 and 5 ranks, and delivers point-to-point
// transfers around a ring and to every other rank; a rank that fails ends the others' waits with a
// CommunicationError; the distributed SpMV (local product overlapped with the halo exchange) equals the whole
// product on 1, 2, 3 and 5 ranks; and NCCL itself, with one rank, sums and sends. GPU tests skip without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <exception>
#include <functional>
#include <random>
#include <thread>

#include "kernels/communicator.hpp"
#include "kernels/cuda_libraries.hpp"
#include "kernels/device_array.hpp"
#include "kernels/distributed_operator.hpp"
#include "spcg/generators.hpp"
#include "spcg/matrix_market.hpp"
#include "spcg/partition.hpp"
#include "spcg/distributed.hpp"
#include "tests/test_util.hpp"

using namespace spcg;

namespace {

class GpuComm : public spcg::test::GpuTest {};

std::vector<double> values_of(int rank, size_t count) {
  std::mt19937_64 g(1000 + rank);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(count);
  for (double& x : v) x = u(g) * (1 + rank);
  return v;
}

// Runs body(rank) on one thread per rank; rethrows the first failure.
void on_ranks(int size, const std::function<void(int)>& body) { spcg::test::rethrow_first(spcg::test::on_threads(size, body)); }

TEST_F(GpuComm, InProcessAllreduceSumsInRankOrder) {
  for (const int size : {1, 2, 3, 5})
    for (const size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{100003}}) {
      InProcessGroup group(size);
      std::vector<std::vector<double>> results(static_cast<size_t>(size));
      on_ranks(size, [&](int r) {
        DeviceArray<double> v(values_of(r, count), "test values");
        group.communicator(r).allreduce_sum(v.data(), count, 0);
        results[static_cast<size_t>(r)] = v.download();
      });
      std::vector<double> expected = values_of(0, count);
      for (int r = 1; r < size; ++r) {
        const std::vector<double> v = values_of(r, count);
        for (size_t i = 0; i < count; ++i) expected[i] += v[i];
      }
      for (int r = 0; r < size; ++r)
        ASSERT_EQ(0, std::memcmp(results[static_cast<size_t>(r)].data(), expected.data(), count * sizeof(double)))
            << size << " ranks, " << count << " values: rank " << r << " differs from the host's rank-order sum";
    }
}

TEST_F(GpuComm, InProcessExchangeDeliversRingAndAllToAll) {
  for (const int size : {1, 2, 3, 5}) {
    InProcessGroup group(size);
    const size_t count = 777;
    on_ranks(size, [&](int r) {
      // ring: send to the next rank, receive from the previous one; then every rank sends rank + 1 values to
      // every other rank
      DeviceArray<double> mine(values_of(r, count), "test send"), from_prev(count, "test receive");
      const int next = (r + 1) % size, prev = (r + size - 1) % size;
      group.communicator(r).exchange({{next, mine.data(), count}}, {{prev, from_prev.data(), count}}, 0);
      if (from_prev.download() != values_of(prev, count)) throw std::runtime_error("ring: wrong values");
      std::vector<DeviceArray<double>> inbox;
      std::vector<Transfer> sends, receives;
      for (int p = 0; p < size; ++p) {
        if (p == r) continue;
        sends.push_back({p, mine.data(), static_cast<size_t>(r + 1)});
        inbox.emplace_back(static_cast<size_t>(p + 1), "test inbox");
        receives.push_back({p, inbox.back().data(), static_cast<size_t>(p + 1)});
      }
      group.communicator(r).exchange(sends, receives, 0);
      for (size_t k = 0; k < receives.size(); ++k) {
        const int p = receives[k].peer;
        const std::vector<double> got = inbox[k].download(), sent = values_of(p, count);
        if (!std::equal(got.begin(), got.end(), sent.begin())) throw std::runtime_error("all-to-all: wrong values");
      }
    });
  }
}

// A rank that fails (here: leaves instead of summing) ends the others' wait with a CommunicationError; a
// mismatched transfer is one too.
TEST_F(GpuComm, InProcessFailureEndsEveryRank) {
  InProcessGroup group(3, /*timeout_s=*/30);
  std::vector<int> threw(3, 0);
  on_ranks(3, [&](int r) {
    if (r == 1) {
      group.abort();
      return;
    }
    DeviceArray<double> v(values_of(r, 10), "test values");
    try {
      group.communicator(r).allreduce_sum(v.data(), 10, 0);
    } catch (const CommunicationError&) {
      threw[static_cast<size_t>(r)] = 1;
    }
  });
  EXPECT_EQ(threw, (std::vector<int>{1, 0, 1}));
  InProcessGroup slow(2, /*timeout_s=*/0.2);  // rank 1 never comes: rank 0 times out
  DeviceArray<double> v(values_of(0, 10), "test values");
  EXPECT_THROW(slow.communicator(0).allreduce_sum(v.data(), 10, 0), CommunicationError);
  InProcessGroup pair(2);  // rank 1 expects 5 values, rank 0 sends 8: both ranks stop
  on_ranks(2, [&](int r) {
    DeviceArray<double> buffer(8, "test buffer");
    if (r == 0) EXPECT_THROW(pair.communicator(0).exchange({{1, buffer.data(), 8}}, {}, 0), CommunicationError);
    else EXPECT_THROW(pair.communicator(1).exchange({}, {{0, buffer.data(), 5}}, 0), CommunicationError);
  });
}

// y = A x by ranks, each with its rows' local and halo blocks and the in-process communicator, against the host
// product of the whole matrix (the same entries, summed local block first: rounding apart).
TEST_F(GpuComm, DistributedSpmvEqualsTheWholeProduct) {
  std::vector<std::pair<std::string, CsrMatrix>> cases = {
      {"poisson2d:30", generate("poisson2d:30")}, {"jump3d:7", generate("jump3d:7")},
      {"powerlaw:600", generate("powerlaw:600")}, {"poisson2d:1", generate("poisson2d:1")}};
  cases.emplace_back("bcsstk01", read_matrix_market(spcg::test::input("bcsstk01.mtx")).matrix);
  for (const auto& [name, a] : cases)
    for (const int size : {1, 2, 3, 5}) {
      const std::string what = name + " on " + std::to_string(size) + " ranks";
      const std::vector<RankBlocks> blocks = split_for_ranks(a, partition_by_work(a, size));
      const std::vector<double> x = values_of(7, static_cast<size_t>(a.cols));
      std::vector<double> y(static_cast<size_t>(a.rows), std::nan(""));
      InProcessGroup group(size);
      on_ranks(size, [&](int r) {
        const RankBlocks& b = blocks[static_cast<size_t>(r)];
        DistributedOperator op(b, group.communicator(r));
        const std::vector<double> xr(x.begin() + b.row_begin, x.begin() + b.row_end);
        DeviceArray<double> dx(xr, "test x"), dy(xr.size(), "test y");
        op.apply(dx.data(), dy.data(), 0);
        CHECK_CUDA(cudaStreamSynchronize(0));
        const std::vector<double> yr = dy.download();
        std::copy(yr.begin(), yr.end(), y.begin() + b.row_begin);  // disjoint rows per rank
      });
      for (int32_t i = 0; i < a.rows; ++i) {
        double expected = 0, scale = 0;
        for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
          expected += a.values[p] * x[a.col_idx[p]];
          scale += std::abs(a.values[p] * x[a.col_idx[p]]);
        }
        ASSERT_NEAR(y[i], expected, 1e-14 * (a.row_ptr[i + 1] - a.row_ptr[i] + 1) * scale + 1e-300) << what << " row " << i;
      }
    }
}

// NCCL itself, one rank: loaded on first use, the sum over one rank leaves the values' bits, a send to itself
// arrives.
TEST_F(GpuComm, NcclOneRankSumsAndSends) {
  NcclCommunicator comm(0, 1, NcclCommunicator::unique_id());
  EXPECT_TRUE(nccl_is_loaded());
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  const std::vector<double> h = values_of(0, 5000);
  DeviceArray<double> v(h, "test values"), received(h.size(), "test receive");
  comm.allreduce_sum(v.data(), h.size(), 0);
  CHECK_CUDA(cudaStreamSynchronize(0));
  EXPECT_EQ(v.download(), h);
  comm.exchange({{0, v.data(), h.size()}}, {{0, received.data(), h.size()}}, 0);
  CHECK_CUDA(cudaStreamSynchronize(0));
  EXPECT_EQ(received.download(), h);
  EXPECT_THROW(NcclCommunicator(1, 1, NcclCommunicator::unique_id()), UsageError);
}


// spcg::sum_over_ranks (the public gather of per-rank figures): on 1, 2 and 3 ranks of the in-process group,
// every rank gets the host's sum in rank order, bit for bit (NaN-free values of every magnitude, so the order
// shows in the last bits); the counters say one sum of that many bytes, and with timing on the same.
TEST_F(GpuComm, SumOverRanksEqualsTheHostSumInRankOrder) {
  for (const int size : {1, 2, 3})
    for (const size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}})
      for (const bool timed : {false, true}) {
        const std::string what = std::to_string(size) + " ranks, " + std::to_string(count) + " values" + (timed ? ", timed" : "");
        auto scaled = [](int r, size_t n) {  // magnitudes over 20 decades: a sum out of rank order rounds differently
          std::vector<double> v = values_of(r, n);
          for (size_t i = 0; i < n; ++i) v[i] *= std::pow(10.0, static_cast<double>((i + 3 * r) % 21) - 10);
          return v;
        };
        InProcessGroup group(size);
        std::vector<std::vector<double>> results(static_cast<size_t>(size));
        std::vector<CommunicationStats> stats(static_cast<size_t>(size));
        on_ranks(size, [&](int r) {
          Communicator& comm = group.communicator(r);
          comm.set_timing(timed);
          std::vector<double> v = scaled(r, count);
          sum_over_ranks(comm, v);
          results[static_cast<size_t>(r)] = v;
          stats[static_cast<size_t>(r)] = communication_stats(comm);
        });
        std::vector<double> expected = scaled(0, count);
        for (int r = 1; r < size; ++r) {
          const std::vector<double> v = scaled(r, count);
          for (size_t i = 0; i < count; ++i) expected[i] += v[i];
        }
        for (int r = 0; r < size; ++r) {
          const std::vector<double>& got = results[static_cast<size_t>(r)];
          ASSERT_EQ(got.size(), count) << what;
          EXPECT_EQ(0, std::memcmp(got.data(), expected.data(), count * sizeof(double)))
              << what << ": rank " << r << " differs from the host's rank-order sum";
          EXPECT_EQ(stats[static_cast<size_t>(r)].sums, 1) << what;
          EXPECT_EQ(stats[static_cast<size_t>(r)].sum_bytes, static_cast<int64_t>(count * sizeof(double))) << what;
          EXPECT_EQ(stats[static_cast<size_t>(r)].exchanges, 0) << what;
        }
      }
}

// The in-process group's own checks and the counters, which need no device: a group of no ranks, a rank
// outside the group, each member's rank and size, nothing counted before any call.
TEST(InProcessGroupHost, SizesRanksAndCounters) {
  EXPECT_THROW(InProcessGroup(0), UsageError);
  EXPECT_THROW(InProcessGroup(-2), UsageError);
  InProcessGroup group(3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(group.communicator(r).rank(), r);
    EXPECT_EQ(group.communicator(r).size(), 3);
    group.communicator(r).set_timing(true);  // nothing timed yet: stats() waits for no event
    const CommunicationStats st = communication_stats(group.communicator(r));
    EXPECT_EQ(st.sums, 0);
    EXPECT_EQ(st.exchanges, 0);
    EXPECT_EQ(st.sum_bytes, 0);
    EXPECT_EQ(st.sum_ms, 0.0);
  }
  EXPECT_THROW(group.communicator(3), std::out_of_range);
  EXPECT_THROW(group.communicator(-1), std::out_of_range);
  group.abort();  // no rank waits: nothing to end
}

// NCCL's communicator refuses a rank outside [0, size) and a bad SPCG_COMM_TIMEOUT_S before it touches NCCL.
TEST(NcclCommunicatorHost, RefusesBadRanksAndTimeouts) {
  const ncclUniqueId id{};
  for (const auto& [rank, size] : std::vector<std::pair<int, int>>{{1, 1}, {-1, 2}, {0, 0}, {3, 2}}) {
    try {
      NcclCommunicator c(rank, size, id);
      ADD_FAILURE() << "rank " << rank << " of " << size << " accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "NCCL communicator: rank " + std::to_string(rank) + " of " + std::to_string(size));
    }
  }
  const char* before = std::getenv("SPCG_COMM_TIMEOUT_S");
  const std::string saved = before ? before : "";
  for (const char* bad : {"abc", "0", "-5", "3x", ""}) {
    ::setenv("SPCG_COMM_TIMEOUT_S", bad, 1);
    try {
      NcclCommunicator c(0, 1, id);
      ADD_FAILURE() << "SPCG_COMM_TIMEOUT_S='" << bad << "' accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("SPCG_COMM_TIMEOUT_S='") + bad + "' is not a positive number of seconds");
    }
  }
  if (before) ::setenv("SPCG_COMM_TIMEOUT_S", saved.c_str(), 1);
  else ::unsetenv("SPCG_COMM_TIMEOUT_S");
}

}  // namespace
