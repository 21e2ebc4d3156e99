// The 128-byte unique id: round trips, and every kind of corruption is detected.

#include <cstring>
#include <set>

#include "bootstrap/unique_id.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::bootstrap;

namespace {
// An id for host, port and nonce, with a fresh key.
UniqueId withKey(const std::string& host, int port, uint64_t nonce) {
  UniqueId id;
  id.host = host;
  id.port = port;
  id.nonce = nonce;
  id.key = randomAuthKey();
  return id;
}
}  // namespace

TEST_CASE("unique id round trip", "[bootstrap][unique_id]") {
  for (const char* host : {"10.1.2.3", "127.0.0.1", "node-17.cluster.example.com", "h"}) {
    UniqueId in = withKey(host, 29500, 0xfeedfacecafebeefull);
    char buf[kUniqueIdBytes];
    encodeUniqueId(in, buf);
    auto out = decodeUniqueId(buf);
    INFO(host << ": " << out.status().toString());
    REQUIRE(out.isOk());
    CHECK(out.value().host == host);
    CHECK(out.value().port == 29500);
    CHECK(out.value().nonce == 0xfeedfacecafebeefull);
    CHECK(out.value().key.present);
    CHECK(out.value().key.bytes == in.key.bytes);
  }
  UniqueId longest = withKey(std::string(kUniqueIdMaxHost, 'a'), 65535, 1);
  char buf[kUniqueIdBytes];
  encodeUniqueId(longest, buf);
  auto out = decodeUniqueId(buf);
  REQUIRE(out.isOk());
  CHECK(out.value().host == longest.host);
  CHECK(out.value().port == 65535);
}

TEST_CASE("unique id corruption is detected", "[bootstrap][unique_id]") {
  UniqueId in = withKey("192.168.0.10", 4242, 0x1122334455667788ull);
  char good[kUniqueIdBytes];
  encodeUniqueId(in, good);
  char buf[kUniqueIdBytes];

  SECTION("all zeros: never filled in") {
    std::memset(buf, 0, sizeof(buf));
    auto r = decodeUniqueId(buf);
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find("all zeros") != std::string::npos);
  }
  SECTION("any single flipped bit") {
    for (size_t byte = 0; byte < kUniqueIdBytes; ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        std::memcpy(buf, good, sizeof(buf));
        buf[byte] = static_cast<char>(buf[byte] ^ (1 << bit));
        INFO("byte " << byte << " bit " << bit);
        CHECK(decodeUniqueId(buf).status().code() == Code::kInvalidArgument);
      }
    }
  }
  SECTION("truncated by a string copy") {
    std::memcpy(buf, good, sizeof(buf));
    std::memset(buf + 20, 0, sizeof(buf) - 20);
    CHECK_FALSE(decodeUniqueId(buf).isOk());
  }
  SECTION("another version") {
    std::memcpy(buf, good, sizeof(buf));
    buf[4] = 9;
    auto r = decodeUniqueId(buf);
    CHECK(r.status().message().find("version") != std::string::npos);
  }
  SECTION("a host too long to encode is reported at decode") {
    encodeUniqueId(withKey(std::string(kUniqueIdMaxHost + 1, 'h'), 1, 1), buf);
    auto r = decodeUniqueId(buf);
    CHECK(r.status().message().find("longer than") != std::string::npos);
  }
  SECTION("port and nonce must be set") {
    encodeUniqueId(withKey("h", 0, 1), buf);
    CHECK(decodeUniqueId(buf).status().message().find("port") != std::string::npos);
    encodeUniqueId(withKey("h", 1, 0), buf);
    CHECK(decodeUniqueId(buf).status().message().find("nonce") != std::string::npos);
    encodeUniqueId(withKey("", 1, 1), buf);
    CHECK_FALSE(decodeUniqueId(buf).isOk());
    encodeUniqueId(withKey("bad host\n", 1, 1), buf);
    CHECK_FALSE(decodeUniqueId(buf).isOk());
  }
  SECTION("the job key must be set") {
    encodeUniqueId(UniqueId{"h", 1, 1, AuthKey{}}, buf);
    CHECK(decodeUniqueId(buf).status().message().find("key") != std::string::npos);
  }
}

TEST_CASE("every unique id carries a key of its own", "[bootstrap][unique_id]") {
  // The key is what keeps strangers out of a braidGetUniqueId job: two ids never share one.
  std::set<std::string> keys;
  for (int i = 0; i < 100; ++i) keys.insert(withKey("h", 1, 1).key.hex());
  CHECK(keys.size() == 100);
}

TEST_CASE("randomNonce is non-zero and varies", "[bootstrap][unique_id]") {
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t n = randomNonce();
    CHECK(n != 0);
    seen.insert(n);
  }
  CHECK(seen.size() == 1000);
}
