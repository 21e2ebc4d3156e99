// The verbs transport's protocol over the in-memory fake: slot ring, credits, immediates,
// ordering checks and error translation, with the same assertions the conformance suite
// makes of a real transport plus the failures only a fake can produce on demand.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "support/catch.h"
#include "transports/ibverbs/ibverbs_transport.h"
#include "transports/ibverbs/rdma_protocol.h"
#include "unit/ibverbs/fake_rdma.h"

namespace braid::transport::ibverbs::test {
namespace {

constexpr int kSender = 0;
constexpr int kReceiver = 1;

// A sender (rank 0) and a receiver (rank 1) over two fake queue pairs. Each protocol
// object names the *peer* in its errors: the sender names rank 1, the receiver rank 0.
struct Pair {
  int nslots;
  size_t slotBytes;
  FakeQueue sq, rq;
  SendProtocol send;
  RecvProtocol recv;

  Pair(int n, size_t bytes, bool start = true)
      : nslots(n),
        slotBytes(bytes),
        sq(static_cast<size_t>(n) * slotStride(bytes)),
        rq(static_cast<size_t>(n) * slotStride(bytes)),
        send(&sq, kReceiver, n, bytes),
        recv(&rq, kSender, n, bytes) {
    FakeQueue::pair(sq, rq);
    if (start) REQUIRE(recv.start().isOk());
  }

  // Reserves, fills `bytes` with a pattern of `seed`, posts with `tag`.
  Status sendOne(size_t bytes, uint64_t tag, uint64_t seed) {
    Slot s;
    Status st = send.reserve(&s);
    if (!st.isOk()) return st;
    auto* p = static_cast<uint8_t*>(s.data);
    for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(seed * 131 + i * 7);
    s.tag = tag;
    return send.post(s, bytes);
  }

  // Peeks the next slot, checks it, releases it. Returns "" or what was wrong.
  std::string expectOne(size_t bytes, uint64_t tag, uint64_t seed) {
    Slot s;
    Status st = recv.peek(&s);
    if (!st.isOk()) return "peek: " + st.toString();
    if (s.bytes != bytes) return "bytes " + std::to_string(s.bytes) + " != " + std::to_string(bytes);
    if (s.tag != tag) return "tag " + std::to_string(s.tag) + " != " + std::to_string(tag);
    const auto* p = static_cast<const uint8_t*>(s.data);
    for (size_t i = 0; i < bytes; ++i) {
      if (p[i] != static_cast<uint8_t>(seed * 131 + i * 7)) return "payload differs at byte " + std::to_string(i);
    }
    st = recv.release(s);
    if (!st.isOk()) return "release: " + st.toString();
    return "";
  }
};

size_t variedSize(uint64_t seq, size_t slotBytes) {
  switch (seq % 5) {
    case 0: return 0;
    case 1: return 1;
    case 2: return slotBytes;
    default: return static_cast<size_t>((seq * 7919) % (slotBytes + 1));
  }
}

}  // namespace

TEST_CASE("ibverbs protocol: slot stride is header plus payload rounded to 64 bytes", "[ibverbs]") {
  CHECK(slotStride(0) == 64);
  CHECK(slotStride(48) == 64);
  CHECK(slotStride(49) == 128);
  CHECK(slotStride(65536) == 65536 + 64);
}

TEST_CASE("ibverbs protocol: data immediates round-trip sequence and length", "[ibverbs]") {
  const uint64_t seqs[] = {0, 1, 255, 256, 257, 0xFFFFFFFFull, 0x123456789ABCDEFull};
  const size_t sizes[] = {0, 1, 64, 65536, kLongLength - 1, kLongLength, kLongLength + 1, size_t{256} << 20};
  for (uint64_t seq : seqs) {
    for (size_t bytes : sizes) {
      const DataImm d = decodeDataImm(encodeDataImm(seq, bytes));
      INFO("seq " << seq << " bytes " << bytes);
      CHECK(d.seq8 == (seq & 0xFF));
      CHECK(d.longForm == (bytes >= kLongLength));
      if (!d.longForm) CHECK(d.length == bytes);
    }
  }
  // The layout itself is part of the wire format: sequence byte on top, length below.
  CHECK(encodeDataImm(0x1AB, 0x123) == 0xAB000123u);
  CHECK(encodeDataImm(2, size_t{1} << 26) == 0x02FFFFFFu);
}

TEST_CASE("ibverbs protocol: credit immediates widen to 64 bits across 32-bit wrap", "[ibverbs]") {
  CHECK(encodeCreditImm(0x100000005ull) == 5u);
  CHECK(widenCounter(0, 0) == 0);
  CHECK(widenCounter(10, 12) == 12);
  CHECK(widenCounter(0xFFFFFFF0ull, 0x10) == 0x100000010ull);
  CHECK(widenCounter(0x1FFFFFFFFull, 0) == 0x200000000ull);
  // A counter walked across the 2^32 boundary in uneven steps, as credits arrive.
  uint64_t seen = 0xFFFFFF00ull;
  for (uint64_t v = seen; v < 0x100000300ull; v += 7) {
    REQUIRE(widenCounter(seen, encodeCreditImm(v)) == v);
    seen = v;
  }
}

TEST_CASE("ibverbs protocol: nothing is sent before the receiver says it is ready", "[ibverbs]") {
  Pair p(4, 256, /*start=*/false);
  Slot s;
  CHECK(p.send.reserve(&s).code() == Code::kWouldBlock);
  CHECK_FALSE(p.send.ready());
  REQUIRE(p.recv.start().isOk());
  CHECK(p.rq.creditsPosted() == 1);
  CHECK(p.rq.lastCreditPosted() == 0);
  REQUIRE(p.send.reserve(&s).isOk());
  CHECK(p.send.ready());
  // start() twice sends nothing more.
  REQUIRE(p.recv.start().isOk());
  CHECK(p.rq.creditsPosted() == 1);
}

TEST_CASE("ibverbs protocol: one slot lands in the receiver's memory with tag and length", "[ibverbs]") {
  Pair p(4, 1000);
  REQUIRE(p.sendOne(1000, 0xABCDEF0123456789ull, 11).isOk());
  CHECK(p.sq.writesPosted() == 1);
  Slot s;
  REQUIRE(p.recv.peek(&s).isOk());
  // Slot 0 of the receiver's slab, right behind the 16-byte header.
  CHECK(s.data == p.rq.slab() + kSlotHeaderBytes);
  SlotHeader h;
  std::memcpy(&h, p.rq.slab(), sizeof(h));
  CHECK(h.tag == 0xABCDEF0123456789ull);
  CHECK(h.bytes == 1000);
  CHECK(h.seq == 0);
  CHECK(p.expectOne(1000, 0xABCDEF0123456789ull, 11).empty());
  CHECK(p.recv.peek(&s).code() == Code::kWouldBlock);
}

TEST_CASE("ibverbs protocol: FIFO order, tags and sizes over many laps of the ring", "[ibverbs]") {
  for (int nslots : {1, 2, 4, 7}) {
    Pair p(nslots, 512);
    const uint64_t count = 300 * static_cast<uint64_t>(nslots) + 3;  // hundreds of wrap-arounds
    uint64_t sent = 0, got = 0;
    while (got < count) {
      // The sender runs ahead until it is out of credits, then the receiver drains a
      // varying number, so the sender resumes at every position of the ring.
      while (sent < count) {
        Status st = p.sendOne(variedSize(sent, 512), sent * 0x100000001B3ull + 5, sent);
        if (st.code() == Code::kWouldBlock) break;
        REQUIRE(st.isOk());
        ++sent;
      }
      const uint64_t drain = 1 + (got % static_cast<uint64_t>(nslots));
      for (uint64_t i = 0; i < drain && got < sent; ++i, ++got) {
        INFO("nslots " << nslots << " slot " << got);
        REQUIRE(p.expectOne(variedSize(got, 512), got * 0x100000001B3ull + 5, got).empty());
      }
    }
    REQUIRE(p.send.progress().isOk());
    CHECK(p.send.flushed());
    CHECK(p.send.posted() == count);
    CHECK(p.recv.arrived() == count);
    Slot s;
    CHECK(p.recv.peek(&s).code() == Code::kWouldBlock);
  }
}

TEST_CASE("ibverbs protocol: slot index follows the sequence number around the ring", "[ibverbs]") {
  Pair p(3, 128);
  for (uint64_t seq = 0; seq < 10; ++seq) {
    Slot out;
    REQUIRE(p.send.reserve(&out).isOk());
    const size_t idx = seq % 3;
    CHECK(out.data == p.sq.slab() + idx * slotStride(128) + kSlotHeaderBytes);
    out.tag = seq;
    REQUIRE(p.send.post(out, 5).isOk());
    Slot in;
    REQUIRE(p.recv.peek(&in).isOk());
    CHECK(in.data == p.rq.slab() + idx * slotStride(128) + kSlotHeaderBytes);
    CHECK(in.tag == seq);
    REQUIRE(p.recv.release(in).isOk());
  }
}

TEST_CASE("ibverbs protocol: sender blocks on credits and resumes after releases", "[ibverbs]") {
  Pair p(4, 256);
  for (uint64_t i = 0; i < 4; ++i) REQUIRE(p.sendOne(256, i, i).isOk());
  Slot s;
  CHECK(p.send.reserve(&s).code() == Code::kWouldBlock);
  CHECK_FALSE(p.send.canReserve());
  // Progress alone frees nothing while the receiver holds every slot.
  REQUIRE(p.send.progress().isOk());
  CHECK(p.send.reserve(&s).code() == Code::kWouldBlock);

  // The receiver looks at the first slot but keeps it: still blocked.
  Slot first, again;
  REQUIRE(p.recv.peek(&first).isOk());
  REQUIRE(p.recv.peek(&again).isOk());
  CHECK(again.data == first.data);
  CHECK(again.tag == first.tag);
  CHECK(p.send.reserve(&s).code() == Code::kWouldBlock);

  // One release, one slot more, and no more than that.
  REQUIRE(p.recv.release(first).isOk());
  REQUIRE(p.sendOne(256, 4, 4).isOk());
  CHECK(p.send.reserve(&s).code() == Code::kWouldBlock);

  // Draining everything opens the whole ring again.
  for (uint64_t i = 1; i < 5; ++i) REQUIRE(p.expectOne(256, i, i).empty());
  for (uint64_t i = 5; i < 9; ++i) REQUIRE(p.sendOne(256, i, i).isOk());
  CHECK(p.send.reserve(&s).code() == Code::kWouldBlock);
  for (uint64_t i = 5; i < 9; ++i) REQUIRE(p.expectOne(256, i, i).empty());
}

TEST_CASE("ibverbs protocol: repeated reserve and peek return the same slot", "[ibverbs]") {
  Pair p(4, 256);
  Slot a, b;
  REQUIRE(p.send.reserve(&a).isOk());
  REQUIRE(p.send.reserve(&b).isOk());
  CHECK(a.data == b.data);
  a.tag = 1;
  REQUIRE(p.send.post(a, 100).isOk());
  REQUIRE(p.send.reserve(&b).isOk());
  CHECK(b.data != a.data);

  Slot x, y;
  REQUIRE(p.recv.peek(&x).isOk());
  REQUIRE(p.recv.peek(&y).isOk());
  CHECK(x.data == y.data);
  CHECK(x.bytes == y.bytes);
  CHECK(x.tag == y.tag);
}

TEST_CASE("ibverbs protocol: empty, one-byte and full-slot payloads", "[ibverbs]") {
  Pair p(3, 4096);
  const size_t sizes[] = {0, 0, 0, 1, 4096, 0, 1, 4095, 4096, 0};
  uint64_t seq = 0;
  for (size_t n : sizes) {
    REQUIRE(p.sendOne(n, 1000 + seq, seq).isOk());
    INFO("slot " << seq << " of " << n << " bytes");
    REQUIRE(p.expectOne(n, 1000 + seq, seq).empty());
    ++seq;
  }
  // A full slot writes exactly header + payload into the peer.
  Slot s;
  REQUIRE(p.send.reserve(&s).isOk());
  CHECK(p.send.post(s, 4097).code() == Code::kInvalidArgument);
}

TEST_CASE("ibverbs protocol: tags travel unchanged", "[ibverbs]") {
  Pair p(2, 64);
  const uint64_t tags[] = {0, 1, ~uint64_t{0}, 0x8000000000000000ull, 0xDEADBEEFCAFEF00Dull, 42};
  for (uint64_t t : tags) {
    REQUIRE(p.sendOne(8, t, t).isOk());
    REQUIRE(p.expectOne(8, t, t).empty());
  }
}

TEST_CASE("ibverbs protocol: sends are flushed once their writes complete", "[ibverbs]") {
  Pair p(4, 64);
  p.sq.holdLocalCompletions(true);
  REQUIRE(p.sendOne(10, 1, 1).isOk());
  REQUIRE(p.send.progress().isOk());
  CHECK_FALSE(p.send.flushed());
  // The data is in the peer already; only the ack is late.
  REQUIRE(p.expectOne(10, 1, 1).empty());
  p.sq.holdLocalCompletions(false);
  REQUIRE(p.send.progress().isOk());
  CHECK(p.send.flushed());
}

TEST_CASE("ibverbs protocol: a staging slot is not reused before its write completed", "[ibverbs]") {
  Pair p(2, 64);
  p.sq.holdLocalCompletions(true);
  REQUIRE(p.sendOne(10, 1, 1).isOk());
  REQUIRE(p.sendOne(10, 2, 2).isOk());
  REQUIRE(p.expectOne(10, 1, 1).empty());
  REQUIRE(p.expectOne(10, 2, 2).empty());
  // Credits are back, but the NIC may still be reading the staging slots.
  Slot s;
  CHECK(p.send.reserve(&s).code() == Code::kWouldBlock);
  p.sq.holdLocalCompletions(false);
  CHECK(p.send.reserve(&s).isOk());
}

TEST_CASE("ibverbs protocol: credits coalesce while credit writes are outstanding", "[ibverbs]") {
  const int n = 16;
  Pair p(n, 64);
  for (int i = 0; i < n; ++i) REQUIRE(p.sendOne(1, static_cast<uint64_t>(i), 0).isOk());
  p.rq.holdLocalCompletions(true);  // the receiver's credit writes are slow to complete
  const uint64_t before = p.rq.creditsPosted();
  for (int i = 0; i < n; ++i) REQUIRE(p.expectOne(1, static_cast<uint64_t>(i), 0).empty());
  // Only kMaxCreditsInFlight updates went out, the last one carrying 4 released slots...
  CHECK(p.rq.creditsPosted() - before == RecvProtocol::kMaxCreditsInFlight);
  CHECK(p.rq.lastCreditPosted() == RecvProtocol::kMaxCreditsInFlight);
  REQUIRE(p.send.progress().isOk());
  CHECK(p.send.released() == RecvProtocol::kMaxCreditsInFlight);
  // ...and once they complete, one update carries all the rest.
  p.rq.holdLocalCompletions(false);
  REQUIRE(p.recv.progress().isOk());
  CHECK(p.rq.creditsPosted() - before == RecvProtocol::kMaxCreditsInFlight + 1);
  CHECK(p.rq.lastCreditPosted() == static_cast<uint64_t>(n));
  REQUIRE(p.send.progress().isOk());
  CHECK(p.send.released() == static_cast<uint64_t>(n));
}

TEST_CASE("ibverbs protocol: misuse of the slot API is refused", "[ibverbs]") {
  Pair p(2, 64);
  Slot s;
  REQUIRE(p.send.reserve(&s).isOk());
  Slot other = s;
  other.data = static_cast<uint8_t*>(s.data) + 1;
  CHECK(p.send.post(other, 1).code() == Code::kInvalidArgument);
  Slot none;
  CHECK(p.recv.release(none).code() == Code::kInternal);
  REQUIRE(p.send.post(s, 1).isOk());
  Slot in;
  REQUIRE(p.recv.peek(&in).isOk());
  Slot wrong = in;
  wrong.data = p.rq.slab();
  CHECK(p.recv.release(wrong).code() == Code::kInvalidArgument);
  CHECK(p.recv.release(in).isOk());
}

TEST_CASE("ibverbs protocol: a failed completion is a remote error naming the peer", "[ibverbs]") {
  Pair p(4, 64);
  REQUIRE(p.sendOne(8, 1, 1).isOk());
  p.sq.failNextPost(12, "transport retry counter exceeded");
  REQUIRE(p.sendOne(8, 2, 2).isOk());  // the post itself is accepted, like ibv_post_send
  Status st = p.send.progress();
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.rank() == kReceiver);
  CHECK(st.message().find("rank 1") != std::string::npos);
  CHECK(st.message().find("transport retry counter exceeded") != std::string::npos);
  CHECK(st.message().find("ibverbs") != std::string::npos);
  // Sticky: every later call reports the same failure, not a flush error.
  Slot s;
  Status again = p.send.reserve(&s);
  CHECK(again.code() == Code::kRemoteError);
  CHECK(again.message() == st.message());
  // The slot that made it before the failure is still delivered.
  CHECK(p.expectOne(8, 1, 1).empty());
}

TEST_CASE("ibverbs protocol: a failed credit write is a remote error naming the sender", "[ibverbs]") {
  Pair p(4, 64);
  REQUIRE(p.sendOne(8, 1, 1).isOk());
  p.rq.failNextPost(9, "remote invalid request error");
  REQUIRE(p.expectOne(8, 1, 1).empty());
  Slot s;
  Status st = p.recv.peek(&s);
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.rank() == kSender);
  CHECK(st.message().find("rank 0") != std::string::npos);
  CHECK(st.message().find("remote invalid request error") != std::string::npos);
}

TEST_CASE("ibverbs protocol: a write outside the peer's memory fails like the NIC would", "[ibverbs]") {
  // Sender and receiver disagree on the slab size (a corrupted blob, say): the fake, like
  // a NIC, fails the write with a remote access error rather than writing anywhere.
  FakeQueue sq(4 * slotStride(64)), rq(slotStride(64));
  FakeQueue::pair(sq, rq);
  SendProtocol send(&sq, kReceiver, 4, 64);
  RecvProtocol recv(&rq, kSender, 1, 64);
  REQUIRE(recv.start().isOk());
  Slot s;
  for (int i = 0; i < 2; ++i) {
    REQUIRE(send.reserve(&s).isOk());
    REQUIRE(send.post(s, 8).isOk());
  }
  Status st = send.progress();
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.rank() == kReceiver);
  CHECK(st.message().find("remote access error") != std::string::npos);
}

TEST_CASE("ibverbs protocol: an async event is a remote error naming the peer", "[ibverbs]") {
  SECTION("on the receiver") {
    Pair p(4, 64);
    p.rq.raiseAsync("mlx5_0 port 1 went down (local catastrophic error)");
    Slot s;
    Status st = p.recv.peek(&s);
    CHECK(st.code() == Code::kRemoteError);
    CHECK(st.rank() == kSender);
    CHECK(st.message().find("rank 0") != std::string::npos);
    CHECK(st.message().find("port 1 went down") != std::string::npos);
    CHECK(p.recv.progress().code() == Code::kRemoteError);
  }
  SECTION("on the sender, while it is blocked on credits") {
    Pair p(1, 64);
    REQUIRE(p.sendOne(1, 1, 1).isOk());
    Slot s;
    CHECK(p.send.reserve(&s).code() == Code::kWouldBlock);
    p.sq.raiseAsync("its queue pair on mlx5_0 reported local work queue catastrophic error");
    Status st = p.send.reserve(&s);
    CHECK(st.code() == Code::kRemoteError);
    CHECK(st.rank() == kReceiver);
    CHECK(st.message().find("rank 1") != std::string::npos);
    CHECK(st.message().find("catastrophic") != std::string::npos);
  }
}

// ---- a broken or foreign peer ----------------------------------------------------------

namespace {

std::vector<uint8_t> slotBytesOf(uint64_t tag, uint32_t bytes, uint32_t seq, size_t payload) {
  std::vector<uint8_t> v(kSlotHeaderBytes + payload, 0x5A);
  SlotHeader h{tag, bytes, seq};
  std::memcpy(v.data(), &h, sizeof(h));
  return v;
}

Status peekAfterForge(RecvProtocol& recv) {
  Slot s;
  return recv.peek(&s);
}

void expectViolation(const Status& st, const char* words) {
  INFO(st.toString());
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.rank() == kSender);
  CHECK(st.message().find("rank 0") != std::string::npos);
  CHECK(st.message().find(words) != std::string::npos);
}

}  // namespace

TEST_CASE("ibverbs protocol: malformed arrivals are rejected naming the peer", "[ibverbs]") {
  const size_t slot = 64;
  const size_t stride = slotStride(slot);
  FakeQueue rq(4 * stride);
  RecvProtocol recv(&rq, kSender, 4, slot);

  SECTION("a well-formed forged arrival is accepted (the baseline)") {
    rq.forgeArrival(0, slotBytesOf(7, 10, 0, 10), encodeDataImm(0, 10));
    Slot s;
    REQUIRE(recv.peek(&s).isOk());
    CHECK(s.tag == 7);
    CHECK(s.bytes == 10);
  }
  SECTION("out of order: the immediate's sequence byte") {
    rq.forgeArrival(0, slotBytesOf(7, 10, 0, 10), encodeDataImm(1, 10));
    expectViolation(peekAfterForge(recv), "out of order");
  }
  SECTION("the header's sequence number") {
    rq.forgeArrival(0, slotBytesOf(7, 10, 256, 10), encodeDataImm(0, 10));
    expectViolation(peekAfterForge(recv), "sequence number 256");
  }
  SECTION("a length beyond the slot") {
    rq.forgeArrival(0, slotBytesOf(7, 65, 0, 0), encodeDataImm(0, 65), static_cast<int64_t>(kSlotHeaderBytes + 65));
    expectViolation(peekAfterForge(recv), "BRAID_SLOT_BYTES");
  }
  SECTION("header and immediate disagree on the length") {
    rq.forgeArrival(0, slotBytesOf(7, 10, 0, 10), encodeDataImm(0, 11));
    expectViolation(peekAfterForge(recv), "its immediate 11");
  }
  SECTION("a long-form immediate for a short payload") {
    rq.forgeArrival(0, slotBytesOf(7, 10, 0, 10), encodeDataImm(0, kLongLength));
    expectViolation(peekAfterForge(recv), "16 MiB or more");
  }
  SECTION("the wire length does not match the header") {
    rq.forgeArrival(0, slotBytesOf(7, 10, 0, 10), encodeDataImm(0, 10), 12);
    expectViolation(peekAfterForge(recv), "written with 12 bytes");
  }
  SECTION("a write beyond the credits it was given") {
    for (uint32_t k = 0; k < 4; ++k) {
      rq.forgeArrival(k * stride, slotBytesOf(k, 1, k, 1), encodeDataImm(k, 1));
    }
    REQUIRE(peekAfterForge(recv).isOk());  // all four slots held, none released
    rq.forgeArrival(0, slotBytesOf(4, 1, 4, 1), encodeDataImm(4, 1));
    expectViolation(recv.progress(), "no credit");
  }
  SECTION("the first failure sticks") {
    rq.forgeArrival(0, slotBytesOf(7, 10, 0, 10), encodeDataImm(1, 10));
    Status first = peekAfterForge(recv);
    Slot s;
    CHECK(recv.peek(&s).message() == first.message());
    CHECK(recv.progress().message() == first.message());
  }
}

// ---- device messages (GPUDirect RDMA) ---------------------------------------------------

TEST_CASE("ibverbs protocol: device messages carry the payload area to area and the header alone", "[ibverbs]") {
  const int n = 4;
  const size_t bytes = 96;
  Pair p(n, bytes);
  p.sq.makeArea(n * bytes);
  p.rq.makeArea(n * bytes);
  p.send.enableDeviceArea(true);
  p.recv.enableDeviceArea(true);
  // Three laps of the ring, device and host messages alternating, of varied sizes.
  uint64_t withPayload = 0;
  for (uint64_t k = 0; k < 3 * n; ++k) {
    const bool device = k % 2 == 0;
    const size_t len = variedSize(k, bytes);
    withPayload += device && len;
    Slot s;
    REQUIRE(p.send.reserve(&s).isOk());
    const size_t off = p.send.areaOffset(s);
    CHECK(off == (k % n) * bytes);
    uint8_t* to = device ? p.sq.area() + off : static_cast<uint8_t*>(s.data);
    for (size_t i = 0; i < len; ++i) to[i] = static_cast<uint8_t>(k * 31 + i);
    s.tag = 100 + k;
    REQUIRE((device ? p.send.postDevice(s, len) : p.send.post(s, len)).isOk());

    Slot r;
    REQUIRE(p.recv.peek(&r).isOk());
    INFO("message " << k);
    CHECK(r.device == device);
    CHECK(r.bytes == len);
    CHECK(r.tag == 100 + k);
    CHECK(p.recv.areaOffset(r) == off);
    const uint8_t* from = device ? p.rq.area() + p.recv.areaOffset(r) : static_cast<const uint8_t*>(r.data);
    bool same = true;
    for (size_t i = 0; i < len; ++i) same &= from[i] == static_cast<uint8_t>(k * 31 + i);
    CHECK(same);
    REQUIRE(p.recv.release(r).isOk());
    REQUIRE(p.send.progress().isOk());
  }
  // One area write per device message with a payload (an empty one sends the header only),
  // one header or whole-slot write per message.
  CHECK(p.sq.writesPosted() == 3 * n);
  CHECK(withPayload > 0);
  CHECK(p.sq.areaWritesPosted() == withPayload);
  CHECK(p.send.flushed());
}

TEST_CASE("ibverbs protocol: device messages are refused where areas are not set up", "[ibverbs]") {
  SECTION("the sender has not enabled them") {
    Pair p(4, 64);
    Slot s;
    REQUIRE(p.send.reserve(&s).isOk());
    Status st = p.send.postDevice(s, 8);
    CHECK(st.code() == Code::kInternal);
    CHECK(st.message().find("without device areas") != std::string::npos);
  }
  // A receiver given one forged device header (its length 10, with `payload` bytes after
  // it on the wire and `immLength` in the immediate), with its area set up or not.
  auto forged = [](bool area, size_t payload, size_t immLength) {
    FakeQueue rq(4 * slotStride(64));
    RecvProtocol recv(&rq, kSender, 4, 64);
    recv.enableDeviceArea(area);
    rq.forgeArrival(0, slotBytesOf(7, 10 | kDeviceBit, 0, payload), encodeDataImm(0, immLength));
    return peekAfterForge(recv);
  };
  SECTION("the receiver has not: a protocol error naming the sender") {
    expectViolation(forged(false, 0, 10), "device area, which this side has not set up");
  }
  SECTION("a device header that came with its payload") {
    expectViolation(forged(true, 10, 10), "the header of a device message of 10");
  }
  SECTION("a device header and its immediate disagree on the length") {
    expectViolation(forged(true, 0, 12), "its immediate 12");
  }
  SECTION("a well-formed device header is accepted (the baseline)") {
    CHECK(forged(true, 0, 10).isOk());
  }
}

TEST_CASE("ibverbs protocol: a failed area write fails the message's header and names the peer", "[ibverbs]") {
  const size_t bytes = 64;
  SECTION("the receiver's area is smaller than the sender thinks") {
    Pair p(4, bytes);
    p.sq.makeArea(4 * bytes);
    p.rq.makeArea(bytes);  // only slot 0
    p.send.enableDeviceArea(true);
    p.recv.enableDeviceArea(true);
    for (int k = 0; k < 2; ++k) {
      Slot s;
      REQUIRE(p.send.reserve(&s).isOk());
      s.tag = static_cast<uint64_t>(k);
      REQUIRE(p.send.postDevice(s, bytes).isOk());  // accepted, as ibv_post_send would
    }
    Status st = p.send.progress();
    CHECK(st.code() == Code::kRemoteError);
    CHECK(st.rank() == kReceiver);
    CHECK(st.message().find("remote access error") != std::string::npos);
    // The first message arrived whole; the second's header never did.
    Slot r;
    REQUIRE(p.recv.peek(&r).isOk());
    CHECK(r.device);
    REQUIRE(p.recv.release(r).isOk());
    CHECK(p.recv.peek(&r).code() == Code::kWouldBlock);
  }
  SECTION("an injected failure") {
    Pair p(4, bytes);
    p.sq.makeArea(4 * bytes);
    p.rq.makeArea(4 * bytes);
    p.send.enableDeviceArea(true);
    p.recv.enableDeviceArea(true);
    p.sq.failNextPost(12, "transport retry counter exceeded");
    Slot s;
    REQUIRE(p.send.reserve(&s).isOk());
    REQUIRE(p.send.postDevice(s, 8).isOk());
    Status st = p.send.progress();
    CHECK(st.code() == Code::kRemoteError);
    CHECK(st.message().find("transport retry counter exceeded") != std::string::npos);
    CHECK(p.sq.writesPosted() == 1);  // the header was posted and flushed behind it
    Slot r;
    CHECK(p.recv.peek(&r).code() == Code::kWouldBlock);
  }
}

TEST_CASE("ibverbs protocol: credits for slots never sent are rejected", "[ibverbs]") {
  FakeQueue sq(2 * slotStride(64)), rq(2 * slotStride(64));
  FakeQueue::pair(sq, rq);
  SendProtocol send(&sq, kReceiver, 2, 64);
  sq.forgeCredit(0, encodeCreditImm(0));  // ready
  Slot s;
  REQUIRE(send.reserve(&s).isOk());
  REQUIRE(send.post(s, 1).isOk());
  sq.forgeCredit(3, encodeCreditImm(3));
  Status st = send.progress();
  INFO(st.toString());
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.rank() == kReceiver);
  CHECK(st.message().find("rank 1") != std::string::npos);
  CHECK(st.message().find("released 3 slots but only 1 were sent") != std::string::npos);
}

TEST_CASE("ibverbs protocol: error translation names the operation, the peer and the status", "[ibverbs]") {
  Status w = completionFailure(5, Completion::Op::kWrite, 12, "transport retry counter exceeded");
  CHECK(w.code() == Code::kRemoteError);
  CHECK(w.rank() == 5);
  CHECK(w.message() ==
        "ibverbs: RDMA write to rank 5 failed: transport retry counter exceeded (completion status 12)");
  Status c = completionFailure(2, Completion::Op::kCredit, 5, "Work Request Flushed Error");
  CHECK(c.message().find("credit update to rank 2") != std::string::npos);
  Status a = asyncEventFailure(7, "mlx5_1 failed (local catastrophic error)");
  CHECK(a.code() == Code::kRemoteError);
  CHECK(a.rank() == 7);
  CHECK(a.message() == "ibverbs: connection with rank 7 failed: mlx5_1 failed (local catastrophic error)");
}

TEST_CASE("ibverbs transport: scores refuse other jobs and rank RDMA across hosts only", "[ibverbs]") {
  PeerInfo local{0, "host-a", 100, 1234};
  PeerInfo sameHost{1, "host-a", 101, 1234};
  PeerInfo otherHost{1, "host-b", 100, 1234};
  PeerInfo stranger = otherHost;
  stranger.nonce = 4321;
  CHECK(score(local, stranger) == 0);
  PeerInfo strangerHere = sameHost;
  strangerHere.nonce = 4321;
  CHECK(score(local, strangerHere) == 0);
  CHECK(score(local, otherHost) == 80);
  CHECK(score(local, sameHost) == 3);
  // The other transports' published scores: UCX over RDMA 50 and without 5, tcp 10, shm 100.
  CHECK(score(local, otherHost) > 50);
  CHECK(score(local, otherHost) > 10);
  CHECK(score(local, sameHost) < 5);
  CHECK(score(local, sameHost) < 10);
  CHECK(score(local, sameHost) < 100);
  CHECK(score(local, sameHost) > 0);
}

}  // namespace braid::transport::ibverbs::test
