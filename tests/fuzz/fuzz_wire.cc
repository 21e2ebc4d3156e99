// What a rank reads from peers and strangers outside the store: the tcp transport's
// handshake and address blobs (transports/tcp/socket_util.h), a shared-memory FIFO header
// another process formatted (transports/slot_fifo.h), and the verbs transport's address
// blob and hello datagram (transports/ibverbs/rdma_protocol.h).
// Properties: nothing crashes or reads out of bounds; a random handshake never passes the
// MAC check; what decodes re-encodes to the same thing; a FIFO header that passes check()
// describes a FIFO that fits its region.

#include <cstring>
#include <string>
#include <vector>

#include "common/auth.h"
#include "fuzz_check.h"
#include "transports/ibverbs/rdma_protocol.h"
#include "transports/slot_fifo.h"
#include "transports/tcp/socket_util.h"

using namespace braid;
using namespace braid::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const AuthKey key = [] {
    AuthKey k;
    k.present = true;
    for (size_t i = 0; i < k.bytes.size(); ++i) k.bytes[i] = static_cast<uint8_t>(i * 7 + 1);
    return k;
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);

  if (size >= tcp::kHandshakeBytes) {
    const tcp::Handshake h = tcp::decodeHandshake(data);
    uint8_t back[tcp::kHandshakeBytes];
    tcp::encodeHandshake(h, back);
    FUZZ_CHECK(std::memcmp(back, data, tcp::kHandshakeBytes) == 0);
    FUZZ_CHECK(!tcp::verifyHandshake(key, std::string(tcp::kChallengeBytes, 'c'), h));
  }
  sockaddr_in addr{};
  std::string challenge;
  if (tcp::parseBlob(text, &addr, &challenge)) {
    sockaddr_in again{};
    std::string challenge2;
    FUZZ_CHECK(tcp::parseBlob(tcp::formatBlob(addr, challenge), &again, &challenge2));
    FUZZ_CHECK(challenge2 == challenge && again.sin_addr.s_addr == addr.sin_addr.s_addr &&
               again.sin_port == addr.sin_port);
  }

  // The FIFO header lies in shared memory: aligned as a mapping would be.
  std::vector<uint64_t> region((size + 7) / 8 + 1, 0);
  std::memcpy(region.data(), data, size);
  uint64_t nonce = 0;
  if (size >= 16) std::memcpy(&nonce, data + 8, 8);  // let a header with any nonce through
  if (SlotFifo::check(region.data(), size, nonce) == nullptr) {
    SlotFifo fifo(region.data());
    size_t slots = 0;
    FUZZ_CHECK(!__builtin_mul_overflow(static_cast<size_t>(fifo.nslots()), fifo.slotBytes(), &slots));
    FUZZ_CHECK(slots <= size);
  }

  auto blob = ibverbs::decodeRecvBlob(text, 3, 1, 0x1234, 8, 4096);
  if (blob.isOk()) {
    auto again = ibverbs::decodeRecvBlob(ibverbs::encodeRecvBlob(blob.value()), 3, 1, 0x1234, 8, 4096);
    FUZZ_CHECK(again.isOk());
    FUZZ_CHECK(ibverbs::encodeRecvBlob(again.value()) == ibverbs::encodeRecvBlob(blob.value()));
  }
  auto hello = ibverbs::decodeHello(data, size, 0x1234);
  if (hello.isOk()) {
    const std::string enc = ibverbs::encodeHello(hello.value());
    auto again = ibverbs::decodeHello(enc.data(), enc.size(), 0x1234);
    FUZZ_CHECK(again.isOk() && ibverbs::encodeHello(again.value()) == enc);
  }
  return 0;
}
