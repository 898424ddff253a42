#pragma once
// What a rank's communication cost on several GPUs (no CUDA here: the public interface reports it): calls,
// bytes this rank sent (a sum counts its own values once), and, while timing is on, the device time of the
// calls (events around each on its stream).
#include <cstdint>

namespace spcg {

struct CommunicationStats {
  int64_t sums = 0, sum_bytes = 0;
  int64_t exchanges = 0, exchange_bytes_sent = 0, exchange_bytes_received = 0;
  double sum_ms = 0, exchange_ms = 0;  // 0 unless timed
};

}  // namespace spcg
