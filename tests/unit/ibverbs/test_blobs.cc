// The verbs transport's address blob (receiver -> sender, through braid's bootstrap) and
// hello datagram (sender -> receiver): round trips, every way a blob can be wrong, and the
// proof of the job's key a hello carries.

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/auth.h"
#include "support/catch.h"
#include "transports/ibverbs/rdma_protocol.h"

namespace braid::transport::ibverbs::test {
namespace {

constexpr uint64_t kNonce = 0x0123456789ABCDEFull;
constexpr int kPeer = 3;
constexpr int kChannel = 2;
constexpr int kSlots = 8;
constexpr size_t kSlotBytes = 65536;

QpAddress someAddress(uint32_t qpn) {
  QpAddress a;
  a.qpn = qpn;
  a.psn = 0xABCDE;
  a.lid = 17;
  a.port = 1;
  a.mtu = 5;
  a.global = true;
  for (int i = 0; i < 16; ++i) a.gid[i] = static_cast<uint8_t>(0xF0 + i);
  return a;
}

RecvBlob someBlob() {
  RecvBlob b;
  b.nonce = kNonce;
  b.rank = kPeer;
  b.channel = kChannel;
  b.nslots = kSlots;
  b.slotBytes = kSlotBytes;
  b.slabAddr = 0x7F0012340000ull;
  b.slabRkey = 0x1234;
  b.data = someAddress(0x111);
  b.hello = someAddress(0x222);
  b.helloQkey = 0x5555;
  for (size_t i = 0; i < b.challenge.size(); ++i) b.challenge[i] = static_cast<uint8_t>(0xC0 + i);
  return b;
}

// What rank 5 says to the receiver of its channel 1 connection (no proof).
SenderHello someHello() {
  SenderHello h;
  h.nonce = kNonce;
  h.rank = 5;
  h.channel = 1;
  h.recvQpn = 0x111;
  h.data = someAddress(0x333);
  h.creditAddr = 0x7F00AAAA0000ull;
  h.creditRkey = 0x99;
  return h;
}

StatusOr<RecvBlob> decode(const std::string& blob) {
  return decodeRecvBlob(blob, kPeer, kChannel, kNonce, kSlots, kSlotBytes);
}

void expectRefused(const StatusOr<RecvBlob>& r, const char* words) {
  INFO(r.status().toString());
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("rank 3") != std::string::npos);
  CHECK(r.status().message().find("ibverbs") != std::string::npos);
  CHECK(r.status().message().find(words) != std::string::npos);
}

bool sameAddress(const QpAddress& a, const QpAddress& b) {
  return a.qpn == b.qpn && a.psn == b.psn && a.lid == b.lid && a.port == b.port && a.mtu == b.mtu &&
         a.global == b.global && std::memcmp(a.gid, b.gid, 16) == 0;
}

// Overwrites the 4 bytes at `at` of an encoded blob.
std::string patched(std::string blob, size_t at, uint32_t v) {
  std::memcpy(&blob[at], &v, 4);
  return blob;
}

}  // namespace

TEST_CASE("ibverbs blob: round trip", "[ibverbs]") {
  const RecvBlob b = someBlob();
  auto r = decode(encodeRecvBlob(b));
  REQUIRE(r.isOk());
  const RecvBlob& d = r.value();
  CHECK(d.nonce == b.nonce);
  CHECK(d.rank == b.rank);
  CHECK(d.channel == b.channel);
  CHECK(d.nslots == b.nslots);
  CHECK(d.slotBytes == b.slotBytes);
  CHECK(d.slabAddr == b.slabAddr);
  CHECK(d.slabRkey == b.slabRkey);
  CHECK(sameAddress(d.data, b.data));
  CHECK(sameAddress(d.hello, b.hello));
  CHECK(d.helloQkey == b.helloQkey);
  CHECK(d.challenge == b.challenge);
}

TEST_CASE("ibverbs blob: every truncation and any extra byte is refused naming the rank", "[ibverbs]") {
  const std::string full = encodeRecvBlob(someBlob());
  for (size_t n = 0; n < full.size(); ++n) {
    INFO("truncated to " << n << " bytes");
    expectRefused(decode(full.substr(0, n)), "truncated");
  }
  expectRefused(decode(full + "x"), "bytes, expected");
}

TEST_CASE("ibverbs blob: another format, version, rank or channel is refused", "[ibverbs]") {
  const std::string full = encodeRecvBlob(someBlob());
  expectRefused(decode(patched(full, 0, 0x58435542)), "not an ibverbs address");
  expectRefused(decode(patched(full, 4, 1)), "wire version 1");
  expectRefused(decode(std::string(full.size(), '\0')), "not an ibverbs address");

  RecvBlob b = someBlob();
  b.rank = 4;
  expectRefused(decode(encodeRecvBlob(b)), "rank 4's, channel 2");
  b = someBlob();
  b.channel = 0;
  expectRefused(decode(encodeRecvBlob(b)), "rank 3's, channel 0");
}

TEST_CASE("ibverbs blob: another job's blob is refused", "[ibverbs]") {
  RecvBlob b = someBlob();
  b.nonce = kNonce ^ 0x5A5A5A5A5A5A5A5Aull;
  expectRefused(decode(encodeRecvBlob(b)), "another job");
}

TEST_CASE("ibverbs blob: a different slot geometry is refused with the knobs to check", "[ibverbs]") {
  RecvBlob b = someBlob();
  b.nslots = kSlots + 1;
  expectRefused(decode(encodeRecvBlob(b)), "BRAID_NSLOTS");
  b = someBlob();
  b.slotBytes = kSlotBytes * 2;
  expectRefused(decode(encodeRecvBlob(b)), "BRAID_SLOT_BYTES");
}

TEST_CASE("ibverbs blob: impossible queue pair fields are refused", "[ibverbs]") {
  RecvBlob b = someBlob();
  b.data.mtu = 0;
  expectRefused(decode(encodeRecvBlob(b)), "MTU");
  b = someBlob();
  b.hello.mtu = 6;
  expectRefused(decode(encodeRecvBlob(b)), "MTU");
  b = someBlob();
  b.data.qpn = 0;
  expectRefused(decode(encodeRecvBlob(b)), "queue pair number");
  b = someBlob();
  b.hello.qpn = 0x1000000;
  expectRefused(decode(encodeRecvBlob(b)), "queue pair number");
  b = someBlob();
  b.slabAddr = 0;
  expectRefused(decode(encodeRecvBlob(b)), "no slot memory");
}

TEST_CASE("ibverbs hello: round trip, fixed size", "[ibverbs]") {
  SenderHello h = someHello();
  const std::string m = encodeHello(h);
  CHECK(m.size() == kHelloBytes);
  auto r = decodeHello(m.data(), m.size(), kNonce);
  REQUIRE(r.isOk());
  CHECK(r->rank == 5);
  CHECK(r->channel == 1);
  CHECK(r->recvQpn == 0x111);
  CHECK(sameAddress(r->data, h.data));
  CHECK(r->creditAddr == h.creditAddr);
  CHECK(r->creditRkey == h.creditRkey);
  CHECK(r->proof == h.proof);
}

// What a receiver checks before it connects its queue pair to the sender a hello names: a
// datagram from outside the job, or from a rank with another key, must not connect it.
TEST_CASE("ibverbs hello: the proof binds the key, the receiver, the challenge and every field", "[ibverbs][auth]") {
  const AuthKey key = randomAuthKey();
  std::array<uint8_t, 16> challenge{};
  for (size_t i = 0; i < challenge.size(); ++i) challenge[i] = static_cast<uint8_t>(i * 7 + 1);
  SenderHello h = someHello();
  h.proof = helloProof(key, h, 2, challenge);
  // Through the wire and back, as the receiver sees it.
  const std::string m = encodeHello(h);
  REQUIRE(m.size() == kHelloBytes);
  auto got = decodeHello(m.data(), m.size(), kNonce);
  REQUIRE(got.isOk());
  CHECK(checkHelloProof(key, got.value(), 2, challenge).empty());
  // A job without a key takes any well-formed hello of its nonce, as before.
  CHECK(checkHelloProof(AuthKey{}, got.value(), 2, challenge).empty());

  auto refusedFor = [&](const SenderHello& x, const AuthKey& k, int receiver, const std::array<uint8_t, 16>& c) {
    const std::string enc = encodeHello(x);
    auto d = decodeHello(enc.data(), enc.size(), kNonce);
    REQUIRE(d.isOk());
    return checkHelloProof(k, d.value(), receiver, c);
  };
  CHECK(refusedFor(h, randomAuthKey(), 2, challenge).find("does not prove this job's key") != std::string::npos);
  CHECK(refusedFor(h, key, 3, challenge).find("does not prove") != std::string::npos);  // meant for another rank
  std::array<uint8_t, 16> other = challenge;
  other[15] ^= 1;
  CHECK(refusedFor(h, key, 2, other).find("does not prove") != std::string::npos);  // another connection's
  SenderHello keyless = h;
  keyless.proof = Digest{};
  CHECK(refusedFor(keyless, key, 2, challenge).find("has no key and this job has one") != std::string::npos);
  // Every field is covered: a stranger cannot take a real hello and point it elsewhere.
  std::vector<std::pair<const char*, SenderHello>> changed;
  auto with = [&](const char* what, auto change) {
    SenderHello x = h;
    change(x);
    changed.emplace_back(what, x);
  };
  with("rank", [](SenderHello& x) { x.rank = 6; });
  with("channel", [](SenderHello& x) { x.channel = 2; });
  with("receiver's queue pair", [](SenderHello& x) { x.recvQpn = 0x112; });
  with("sender's queue pair", [](SenderHello& x) { x.data.qpn = 0x334; });
  with("sender's GID", [](SenderHello& x) { x.data.gid[3] ^= 1; });
  with("credit address", [](SenderHello& x) { x.creditAddr += 64; });
  with("credit key", [](SenderHello& x) { x.creditRkey = 0x98; });
  for (const auto& [what, x] : changed) {
    INFO(what);
    CHECK_FALSE(refusedFor(x, key, 2, challenge).empty());
  }
}

TEST_CASE("ibverbs hello: short, foreign and malformed datagrams are refused", "[ibverbs]") {
  SenderHello h = someHello();
  const std::string m = encodeHello(h);

  auto shortOne = decodeHello(m.data(), kHelloBytes - 1, kNonce);
  CHECK(shortOne.status().code() == Code::kInvalidArgument);
  CHECK(shortOne.status().message().find("short hello") != std::string::npos);

  auto stranger = decodeHello(m.data(), m.size(), kNonce + 1);
  CHECK(stranger.status().code() == Code::kInvalidArgument);
  CHECK(stranger.status().message().find("rank 5 of another job") != std::string::npos);

  const std::string zeros(kHelloBytes, '\0');
  CHECK(decodeHello(zeros.data(), zeros.size(), kNonce).status().message().find("not a hello") != std::string::npos);

  SenderHello bad = h;
  bad.creditAddr = 0;
  const std::string mb = encodeHello(bad);
  auto r = decodeHello(mb.data(), mb.size(), kNonce);
  CHECK(r.status().message().find("malformed hello from rank 5") != std::string::npos);
}

}  // namespace braid::transport::ibverbs::test

namespace braid::transport::ibverbs::test {

TEST_CASE("ibverbs device area name: round trip, and every malformed or mismatched name refused", "[ibverbs]") {
  const AreaName a{0x7f00deadbeef000ull, 0x1234abcd, 8 * 65536};
  const std::string name = encodeAreaName(a);
  CHECK(name.find(';') == std::string::npos);
  CHECK(name.find('|') == std::string::npos);
  auto back = decodeAreaName(name, kPeer, a.bytes);
  REQUIRE(back.isOk());
  CHECK(back.value().addr == a.addr);
  CHECK(back.value().rkey == a.rkey);
  CHECK(back.value().bytes == a.bytes);
  CHECK(decodeAreaName(encodeAreaName(AreaName{0, 0, 0}), kPeer, 0).isOk());

  auto refused = [](const std::string& n, uint64_t bytes, const char* words) {
    auto r = decodeAreaName(n, kPeer, bytes);
    INFO(n);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find("rank 3") != std::string::npos);
    CHECK(r.status().message().find(words) != std::string::npos);
  };
  refused(name, a.bytes + 1, "BRAID_SLOT_BYTES");
  refused("fake:1:/seg", a.bytes, "not an area name");
  refused("ibarea:1:2", a.bytes, "three hexadecimal fields");
  refused("ibarea:1:2:", a.bytes, "three hexadecimal fields");
  refused("ibarea::2:80000", a.bytes, "three hexadecimal fields");
  refused("ibarea:1:2:80000:", a.bytes, "three hexadecimal fields");
  refused("ibarea:1:2g:80000", a.bytes, "three hexadecimal fields");
  refused("ibarea:1:2:8000O", a.bytes, "three hexadecimal fields");
  refused("ibarea:11111111111111111:2:80000", a.bytes, "three hexadecimal fields");
  refused("ibarea:1:100000000:80000", a.bytes, "32 bits");
}

}  // namespace braid::transport::ibverbs::test
