#pragma once
// Zero copy from the caller's memory (Connection::postSendFrom) over a SendProtocol: a
// payload of at least `minBytes` goes to the peer's slot straight from where it lies,
// registered through the transport's RegistrationCache, instead of being copied into a
// staging slot first. The registration is held until the write's completion says the NIC
// has read the payload. Smaller payloads, and any whose registration fails (read-only
// memory, the locked-memory limit), are copied into the slot as before.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "transports/ibverbs/rdma_protocol.h"
#include "transports/ibverbs/registration_cache.h"

namespace braid::transport::ibverbs {

// Whether payloads may go from user memory, and from what size, as the environment says:
// BRAID_IB_ZCOPY (0 or false off, 1 or true on) and BRAID_IB_ZCOPY_MIN (bytes), either unset
// (null or empty). A value that reads as neither keeps the default, and `warning` says so,
// naming the variable (the transport logs it). libbraid refuses such values at init
// (core::Config::fromEnv), so this is for the plugin used on its own.
struct ZeroCopySettings {
  // Payloads from this size up go from user memory by default: below it a copy into the
  // slot costs less than a lookup in the cache, and a program's many small buffers would
  // each take a registration.
  static constexpr size_t kDefaultMinBytes = 64 * 1024;
  bool on = true;
  size_t minBytes = kDefaultMinBytes;
  std::string warning;
};
ZeroCopySettings zeroCopySettings(const char* zcopy, const char* minBytes);

class UserSends {
 public:
  // `cache` null: every payload is copied.
  UserSends(SendProtocol* proto, RegistrationCache* cache, size_t minBytes)
      : proto_(proto), cache_(cache), minBytes_(minBytes) {}
  // Lets go of every registration still held (the connection is going away).
  ~UserSends();
  UserSends(const UserSends&) = delete;
  UserSends& operator=(const UserSends&) = delete;

  // Posts the reserved slot `s` with `bytes` read from `src`.
  Status post(const Slot& s, const void* src, size_t bytes);
  // Lets go of the registrations of messages whose writes have completed; call after the
  // protocol's progress.
  void reap() {
    while (!held_.empty() && held_.front().first < proto_->completed()) {
      cache_->release(held_.front().second);
      held_.pop_front();
    }
  }
  bool zeroCopy() const { return cache_ != nullptr; }
  size_t held() const { return held_.size(); }
  uint64_t sentFromUser() const { return fromUser_; }
  uint64_t copied() const { return copied_; }

 private:
  SendProtocol* proto_;
  RegistrationCache* cache_;
  size_t minBytes_;
  std::deque<std::pair<uint64_t, const RegistrationCache::Region*>> held_;  // message number, region
  uint64_t fromUser_ = 0;
  uint64_t copied_ = 0;
  bool warned_ = false;
};

}  // namespace braid::transport::ibverbs
