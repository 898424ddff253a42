// The public face of the ranks' communication (spcg/distributed.hpp): NCCL's id and communicator, the costs,
// and sums of host values. The rank's Solver is solver_api.cpp's.
#include "spcg/distributed.hpp"

#include <cstring>
#include <exception>
#include <functional>
#include <string>

#include "kernels/communicator.hpp"
#include "kernels/device_array.hpp"
#include "solver/solver.hpp"

namespace spcg {
namespace {
// The widest step connect_sums prepares for (block CG's sums are k x k, later ones reuse the connection anyway).
constexpr size_t kMaxConnectedColumns = 16;
}  // namespace

NcclId nccl_unique_id() {
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclId), "NcclId holds ncclUniqueId's bytes");
  const ncclUniqueId id = NcclCommunicator::unique_id();
  NcclId out;
  std::memcpy(out.bytes, &id, sizeof id);
  return out;
}

void CommunicatorDeleter::operator()(Communicator* c) const { delete c; }

CommunicatorPtr make_nccl_communicator(int rank, int size, const NcclId& id) {
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes, sizeof nid);
  return CommunicatorPtr(new NcclCommunicator(rank, size, nid));
}

CommunicationStats communication_stats(const Communicator& comm) { return comm.stats(); }

void connect_sums(Communicator& comm) {
  std::vector<double> zeros(2 * kMaxConnectedColumns, 0.0);
  sum_over_ranks(comm, zeros);
}

void agree_over_ranks(Communicator* ranks, const std::function<void()>& check) {
  if (!ranks) return check();
  std::exception_ptr failure;
  try {
    check();
  } catch (...) {
    failure = std::current_exception();
  }
  std::vector<double> failed{failure ? 1.0 : 0.0};
  try {
    sum_over_ranks(*ranks, failed);
  } catch (...) {  // a peer that already ended (told by this sum) may end it early: a failed rank keeps its reason
    if (failure) std::rethrow_exception(failure);
    throw;
  }
  if (failure) std::rethrow_exception(failure);
  if (failed[0] > 0)
    throw CommunicationError("rank " + std::to_string(ranks->rank()) + ": " + std::to_string(static_cast<int>(failed[0])) +
                             " other rank(s) refused the setup (their messages say why)");
}

void sum_over_ranks(Communicator& comm, std::vector<double>& values) {
  DeviceArray<double> d(values, "values summed over ranks");
  comm.allreduce_sum(d.data(), values.size(), 0);
  comm.wait(0);
  values = d.download();
}

}  // namespace spcg
