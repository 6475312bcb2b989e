// The doorbell transport of ExchangeShared (ServeSharedRegion in
// parameter_server.proto): a same-host client posts a request in its region
// and wakes the server through a futex in the region; a server thread of
// the region's own answers in the region and wakes the client. No socket,
// no gRPC framing, two wake-ups per exchange. Layout in
// common/shared_layout.h.
#ifndef STRATA_SERVER_SHARED_DOORBELL_H_
#define STRATA_SERVER_SHARED_DOORBELL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "server/shared_regions.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

class DoorbellServer {
 public:
  // Answers one request (a request whose pull would wait is refused by the
  // handler, not here).
  using Handler = std::function<absl::Status(const v1::SharedExchangeRequest&,
                                             v1::SharedExchangeResponse*)>;

  // Serves the doorbell at `control_offset` of `region` (whose range the
  // caller checked: control block and two message areas of
  // `message_bytes`) on a thread of its own, until Stop() or `alive()`
  // turns false (checked about every 100 ms while idle).
  DoorbellServer(std::shared_ptr<MappedRegion> region, uint64_t control_offset,
                 uint32_t message_bytes, Handler handle,
                 std::function<bool()> alive);
  ~DoorbellServer();  // Stop() and join
  DoorbellServer(const DoorbellServer&) = delete;
  DoorbellServer& operator=(const DoorbellServer&) = delete;

  void Stop();
  bool finished() const { return finished_.load(); }

 private:
  void Loop();

  const std::shared_ptr<MappedRegion> region_;
  char* const control_;
  const uint32_t message_bytes_;
  const Handler handle_;
  const std::function<bool()> alive_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_SERVER_SHARED_DOORBELL_H_
