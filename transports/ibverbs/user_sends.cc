#include "transports/ibverbs/user_sends.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace braid::transport::ibverbs {

ZeroCopySettings zeroCopySettings(const char* zcopy, const char* minBytes) {
  ZeroCopySettings z;
  auto warn = [&](const std::string& w) { z.warning += (z.warning.empty() ? "" : "; ") + w; };
  // As libbraid reads its own switches: 1/true, 0/false, empty for unset.
  if (zcopy && (std::strcmp(zcopy, "0") == 0 || std::strcmp(zcopy, "false") == 0)) {
    z.on = false;
  } else if (zcopy && *zcopy && std::strcmp(zcopy, "1") != 0 && std::strcmp(zcopy, "true") != 0) {
    warn(std::string("BRAID_IB_ZCOPY='") + zcopy + "' is not 0 or 1; sending from user memory where it can");
  }
  if (minBytes && *minBytes) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(minBytes, &end, 10);
    if (minBytes[0] >= '0' && minBytes[0] <= '9' && *end == '\0' && errno == 0) {
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
