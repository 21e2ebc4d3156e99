#include "transports/ibverbs/user_sends.h"

#include <cstring>

#include "common/env_value.h"
#include "common/log.h"

namespace braid::transport::ibverbs {

ZeroCopySettings zeroCopySettings(const char* zcopy, const char* minBytes) {
  ZeroCopySettings z;
  auto warn = [&](const std::string& w) { z.warning += (z.warning.empty() ? "" : "; ") + w; };
  if (zcopy && *zcopy && !parseSwitch(zcopy, &z.on))
    warn(std::string("BRAID_IB_ZCOPY='") + zcopy + "' is not 0 or 1; sending from user memory where it can");
  uint64_t n = 0;
  if (minBytes && *minBytes) {
    if (parseCount(minBytes, &n)) {
      z.minBytes = static_cast<size_t>(n);
    } else {
      warn(std::string("BRAID_IB_ZCOPY_MIN='") + minBytes + "' is not a number of bytes; using " +
           std::to_string(z.minBytes));
    }
  }
  return z;
}

UserSends::~UserSends() {
  for (const auto& h : held_) cache_->release(h.second);
}

Status UserSends::post(const Slot& s, const void* src, size_t bytes) {
  if (cache_ && bytes >= minBytes_ && bytes <= proto_->slotBytes()) {
    StatusOr<const RegistrationCache::Region*> r = cache_->acquire(src, bytes);
    if (r.isOk()) {
      const uint64_t n = proto_->posted();
      Status st = proto_->postFrom(s, src, bytes, r.value()->key.lkey);
      if (!st.isOk()) {
        cache_->release(r.value());
        return st;
      }
      held_.emplace_back(n, r.value());
      ++fromUser_;
      return Status::ok();
    }
    if (!warned_) {
      warned_ = true;
      BRAID_WARN("ibverbs: sending through the slots instead of from user memory: %s",
                 r.status().message().c_str());
    }
  }
  if (bytes > proto_->slotBytes()) return proto_->post(s, bytes);  // the protocol names the error
  if (bytes) std::memcpy(s.data, src, bytes);
  ++copied_;
  return proto_->post(s, bytes);
}

}  // namespace braid::transport::ibverbs
