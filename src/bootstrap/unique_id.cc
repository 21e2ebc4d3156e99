#include "bootstrap/unique_id.h"

#include <cstring>

#include "common/random.h"

namespace braid::bootstrap {

namespace {

constexpr uint8_t kMagic[4] = {'B', 'R', 'I', 'D'};
constexpr uint8_t kGrowMagic[4] = {'B', 'R', 'I', 'G'};
constexpr size_t kGrowTokenAt = 116;
constexpr uint16_t kVersion = 2;
constexpr size_t kKeyAt = 16;
constexpr size_t kHostLenAt = 48;
constexpr size_t kHostAt = 49;
constexpr size_t kChecksumAt = 124;
constexpr uint8_t kHostTooLong = 0xff;  // marks an id whose host did not fit

uint32_t fnv1a(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 16777619u;
  }
  return h;
}

void putLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t getLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool hostCharOk(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
         c == '_' || c == ':';
}

}  // namespace

void encodeUniqueId(const UniqueId& id, char out[kUniqueIdBytes]) {
  uint8_t* p = reinterpret_cast<uint8_t*>(out);
  std::memset(p, 0, kUniqueIdBytes);
  const bool grow = id.growToken != 0;
  std::memcpy(p, grow ? kGrowMagic : kMagic, 4);
  putLe(p + 4, kVersion, 2);
  putLe(p + 6, static_cast<uint16_t>(id.port), 2);
  putLe(p + 8, id.nonce, 8);
  std::memcpy(p + kKeyAt, id.key.bytes.data(), id.key.bytes.size());
  if (id.host.size() > (grow ? kGrowIdMaxHost : kUniqueIdMaxHost)) {
    p[kHostLenAt] = kHostTooLong;
  } else {
    p[kHostLenAt] = static_cast<uint8_t>(id.host.size());
    std::memcpy(p + kHostAt, id.host.data(), id.host.size());
  }
  if (grow) putLe(p + kGrowTokenAt, id.growToken, 8);
  putLe(p + kChecksumAt, fnv1a(p, kChecksumAt), 4);
}

StatusOr<UniqueId> decodeUniqueId(const char in[kUniqueIdBytes]) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(in);
  bool allZero = true;
  for (size_t i = 0; i < kUniqueIdBytes && allZero; ++i) allZero = p[i] == 0;
  if (allZero)
    return invalidArgument("unique id is all zeros: it was not filled by braidGetUniqueId or not shared with this rank");
  const bool grow = std::memcmp(p, kGrowMagic, 4) == 0;
  if (!grow && std::memcmp(p, kMagic, 4) != 0)
    return invalidArgument("unique id has a bad magic: not a braid unique id, or corrupted");
  const size_t maxHost = grow ? kGrowIdMaxHost : kUniqueIdMaxHost;
  const size_t paddingEnd = grow ? kGrowTokenAt : kChecksumAt;
  uint16_t version = static_cast<uint16_t>(getLe(p + 4, 2));
  if (version != kVersion)
    return invalidArgument("unique id has format version " + std::to_string(version) + "; this braid reads version " +
                           std::to_string(kVersion) + " (mixed braid versions in one job?)");
  uint32_t want = static_cast<uint32_t>(getLe(p + kChecksumAt, 4));
  if (fnv1a(p, kChecksumAt) != want)
    return invalidArgument("unique id checksum mismatch: the id was corrupted or truncated while being shared");
  UniqueId id;
  id.port = static_cast<int>(getLe(p + 6, 2));
  id.nonce = getLe(p + 8, 8);
  std::memcpy(id.key.bytes.data(), p + kKeyAt, id.key.bytes.size());
  id.key.present = false;
  for (uint8_t b : id.key.bytes) id.key.present |= b != 0;
  size_t hostLen = p[kHostLenAt];
  if (hostLen == kHostTooLong)
    return invalidArgument("unique id was created with a store host name longer than " + std::to_string(maxHost) +
                           " bytes");
  if (hostLen == 0 || hostLen > maxHost)
    return invalidArgument("unique id has an invalid host length " + std::to_string(hostLen));
  for (size_t i = 0; i < hostLen; ++i)
    if (!hostCharOk(p[kHostAt + i])) return invalidArgument("unique id host contains an invalid byte");
  for (size_t i = kHostAt + hostLen; i < paddingEnd; ++i)
    if (p[i] != 0) return invalidArgument("unique id has non-zero padding");
  if (id.port == 0) return invalidArgument("unique id has store port 0");
  if (grow) {
    id.growToken = getLe(p + kGrowTokenAt, 8);
    if (id.growToken == 0) return invalidArgument("grow id has a zero token");
  } else {
    if (id.nonce == 0) return invalidArgument("unique id has a zero session nonce");
    if (!id.key.present) return invalidArgument("unique id has an all-zero job key");
  }
  id.host.assign(reinterpret_cast<const char*>(p + kHostAt), hostLen);
  return id;
}

uint64_t randomNonce() {
  // A nonce guards against mixing up jobs (the auth key, not the nonce, is the secret); zero
  // means "none", so it is drawn again.
  for (;;)
    if (uint64_t v = randomU64()) return v;
}

}  // namespace braid::bootstrap
