// The transport conformance suite: every scenario here runs against every transport in
// registry(), once per way of pairing two ranks the transport supports (threads of one
// process, or two processes), like UCX's uct_test. Test names read
// "<transport>/<threads|processes>: <scenario>", so `ctest -R tcp` selects one transport.
//
// Scenarios are written for two ranks; most have rank 0 send and rank 1 receive.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "support/catch.h"
#include "transports/plugin/plugin_loader.h"

namespace braid::transport::test {
namespace {

Deadline soon() { return Deadline::after(20); }

// Reserves a slot, fills `bytes` of pattern `seed` straight into it, posts it with `tag`.
Status sendPattern(Connection& c, size_t bytes, uint64_t tag, uint64_t seed, Deadline d, uint64_t offset = 0) {
  Slot s;
  BRAID_RETURN_IF_ERROR(reserveSlot(c, &s, d));
  fillPattern(s.data, bytes, seed, offset);
  s.tag = tag;
  return c.postSend(s, bytes);
}

// Receives one slot and checks length, tag and every byte; releases it unless asked not to.
std::string expectSlot(Connection& c, size_t bytes, uint64_t tag, uint64_t seed, Deadline d, uint64_t offset = 0,
                       bool release = true) {
  Slot s;
  T_OK(recvSlot(c, &s, d));
  T_EXPECT(s.bytes == bytes, "got " + std::to_string(s.bytes) + " bytes, expected " + std::to_string(bytes) +
                                 " (tag " + std::to_string(s.tag) + ")");
  T_EXPECT(((s.tag ^ tag) & c.tagMask()) == 0,
           "got tag " + std::to_string(s.tag) + ", expected " + std::to_string(tag));
  int64_t bad = checkPattern(s.data, bytes, seed, offset);
  T_EXPECT(bad < 0, "payload differs at byte " + std::to_string(bad) + " of slot with tag " + std::to_string(tag));
  if (release) T_OK(c.releaseRecv(s));
  return "";
}

// Sizes that cover empty, tiny, odd and full slots.
size_t variedSize(uint64_t seq, size_t slotBytes) {
  switch (seq % 5) {
    case 0: return 0;
    case 1: return 1;
    case 2: return slotBytes;
    default: return static_cast<size_t>((seq * 7919) % (slotBytes + 1));
  }
}

std::string streamsOnly(Endpoint& ep) {
  if (ep.recv[0]->seesPeerFailure() && ep.send[0]->seesPeerFailure()) return "";
  return std::string("skip: ") + ep.factory->name +
         " does not see a peer die while it waits (FIFOs in memory, or UCX over shared memory or "
         "RDMA); the communicator's liveness check covers it";
}

// ---- scenarios -------------------------------------------------------------------------

std::string oneSlot(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  const size_t n = 1000;
  const uint64_t tag = 0xABCDEF0123456789ull;
  if (ep.rank == 0) {
    T_OK(sendPattern(*ep.send[0], n, tag, 11, soon()));
    T_OK(flush(*ep.send[0], soon()));
  } else {
    T_RUN(expectSlot(*ep.recv[0], n, tag, 11, soon()));
    Slot s;
    Status st = ep.recv[0]->peekRecv(&s);
    T_EXPECT(st.code() == Code::kWouldBlock, "a second slot appeared: " + describe(st));
  }
  return "";
}

std::string manySlots(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  const uint64_t count = 16 * static_cast<uint64_t>(ep.cfg.nslots) + 3;
  const size_t slot = ep.cfg.slotBytes;
  for (uint64_t seq = 0; seq < count; ++seq) {
    const size_t bytes = variedSize(seq, slot);
    const uint64_t tag = seq * 0x100000001B3ull + 5;
    if (ep.rank == 0) {
      T_OK(sendPattern(*ep.send[0], bytes, tag, seq, soon()));
    } else {
      T_RUN(expectSlot(*ep.recv[0], bytes, tag, seq, soon()));
    }
  }
  if (ep.rank == 0) T_OK(flush(*ep.send[0], soon()));
  return "";
}

// Messages that are already waiting when their receives go up (every slot's worth, sent
// while the receiver sleeps), then the connections torn down: teardown must not wait for
// anything those early arrivals left behind. (Receives that complete inside the call that
// posts them once left a stale request that teardown waited seconds for.)
std::string earlyArrivalsThenTeardown(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  const int count = ep.cfg.nslots;
  const size_t bytes = 1000;
  if (ep.rank == 0) {
    for (int i = 0; i < count; ++i) T_OK(sendPattern(*ep.send[0], bytes, 300 + i, 40 + i, soon()));
    T_OK(flush(*ep.send[0], soon()));
    T_RUN(signalPeer(ep, "sent"));
    T_RUN(waitPeer(ep, "received"));
  } else {
    T_RUN(waitPeer(ep, "sent"));
    usleep(50 * 1000);
    for (int i = 0; i < count; ++i) T_RUN(expectSlot(*ep.recv[0], bytes, 300 + i, 40 + i, soon()));
    T_RUN(signalPeer(ep, "received"));
  }
  // A bound, not a measurement: a teardown with nothing in flight takes milliseconds; the
  // bug it guards against took the full drain timeout (2 s) per connection.
  const int64_t start = nowNanos();
  ep.recv.clear();
  ep.send.clear();
  const double secs = static_cast<double>(nowNanos() - start) / 1e9;
  T_EXPECT(secs < 1.0, "tearing down two idle connections took " + std::to_string(secs) + " s");
  return "";
}

std::string zeroBytes(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  for (uint64_t i = 0; i < 6; ++i) {
    // Five empty slots, then one byte: an empty slot must not swallow the next one.
    const size_t bytes = i < 5 ? 0 : 1;
    if (ep.rank == 0) {
      T_OK(sendPattern(*ep.send[0], bytes, 1000 + i, i, soon()));
    } else {
      T_RUN(expectSlot(*ep.recv[0], bytes, 1000 + i, i, soon()));
    }
  }
  if (ep.rank == 0) T_OK(flush(*ep.send[0], soon()));
  return "";
}

std::string smallPayloads(Endpoint& ep) {
  // Every size from 0 to 100 bytes, several laps of the FIFO: memory transports carry
  // payloads of up to a cache line's spare bytes inside the slot's metadata line, so the
  // sizes around that boundary, and slots reused after an inline payload, must all arrive.
  T_RUN(setupPair(ep, 1));
  uint64_t seq = 0;
  for (int lap = 0; lap < 3; ++lap)
    for (size_t bytes = 0; bytes <= 100; ++bytes, ++seq) {
      const size_t b = lap == 1 ? 100 - bytes : bytes;  // the middle lap shrinks
      if (ep.rank == 0) {
        T_OK(sendPattern(*ep.send[0], b, 7000 + seq, seq, soon()));
      } else {
        T_RUN(expectSlot(*ep.recv[0], b, 7000 + seq, seq, soon()));
      }
    }
  if (ep.rank == 0) T_OK(flush(*ep.send[0], soon()));
  return "";
}

std::string fullSlots(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  Connection& c = ep.rank == 0 ? *ep.send[0] : *ep.recv[0];
  T_EXPECT(c.slotBytes() >= ep.cfg.slotBytes,
           "slotBytes() is " + std::to_string(c.slotBytes()) + ", configured " + std::to_string(ep.cfg.slotBytes));
  const size_t n = ep.cfg.slotBytes;
  for (uint64_t i = 0; i < 3; ++i) {
    if (ep.rank == 0) {
      T_OK(sendPattern(c, n, i, 77 + i, soon()));
    } else {
      T_RUN(expectSlot(c, n, i, 77 + i, soon()));
    }
  }
  if (ep.rank == 0) T_OK(flush(c, soon()));
  return "";
}

// The sender fills every buffer between it and a receiver that holds its first slot, must
// see kWouldBlock, and stays blocked until the receiver lets go.
std::string backpressure(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  const size_t n = ep.cfg.slotBytes;
  const uint64_t extra = 2 * static_cast<uint64_t>(ep.cfg.nslots) + 1;
  if (ep.rank == 0) {
    Connection& c = *ep.send[0];
    // Enough to fill any transport's slots plus a stream transport's kernel buffers.
    const uint64_t limit = std::max<uint64_t>(64, (256u << 20) / n);
    uint64_t sent = 0;
    bool blocked = false;
    Deadline overall = soon();
    Slot s;
    while (sent < limit && !overall.expired()) {
      Status st = c.reserveSend(&s);
      if (st.isOk()) {
        fillPattern(s.data, n, sent);
        s.tag = sent;
        T_OK(c.postSend(s, n));
        ++sent;
        continue;
      }
      T_EXPECT(st.code() == Code::kWouldBlock, describe(st));
      // Let the transport push what it still can: only a FIFO that stays full for a while
      // is really full rather than draining into kernel buffers.
      bool freed = false;
      Deadline stuck = Deadline::after(0.3);
      while (!stuck.expired()) {
        Status p = c.progress();
        T_EXPECT(p.isOk() || p.code() == Code::kWouldBlock, describe(p));
        if (c.reserveSend(&s).isOk()) {
          freed = true;
          break;
        }
        waitReady(c, true, 20);
      }
      if (!freed) {
        blocked = true;
        break;
      }
    }
    T_EXPECT(blocked, "the sender never saw a full FIFO after " + std::to_string(sent) + " slots");
    T_RUN(signalPeer(ep, "blocked " + std::to_string(sent)));
    for (uint64_t seq = sent; seq < sent + extra; ++seq) T_OK(sendPattern(c, n, seq, seq, soon()));
    T_OK(flush(c, soon()));
  } else {
    Connection& c = *ep.recv[0];
    Slot first;
    T_OK(recvSlot(c, &first, soon()));
    T_EXPECT(first.tag == 0 && first.bytes == n, "first slot has tag " + std::to_string(first.tag));
    std::string cue;
    T_EXPECT(ep.side->recv(&cue, soon()), "the sender never reported being blocked");
    T_EXPECT(cue.rfind("blocked ", 0) == 0, "unexpected cue '" + cue + "'");
    const uint64_t sent = std::stoull(cue.substr(8));
    Slot again;
    T_OK(c.peekRecv(&again));
    T_EXPECT(again.data == first.data && again.tag == first.tag && again.bytes == first.bytes,
             "peekRecv returned a different slot while the first was held");
    T_EXPECT(checkPattern(first.data, n, 0) < 0, "first slot corrupted while held");
    T_OK(c.releaseRecv(first));
    for (uint64_t seq = 1; seq < sent + extra; ++seq) T_RUN(expectSlot(c, n, seq, seq, soon()));
  }
  return "";
}

std::string repeatCalls(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  if (ep.rank == 0) {
    Connection& c = *ep.send[0];
    Slot a, b;
    T_OK(reserveSlot(c, &a, soon()));
    T_OK(reserveSlot(c, &b, soon()));
    T_EXPECT(a.data == b.data, "reserveSend handed out two different slots without a postSend");
    fillPattern(a.data, 100, 1);
    a.tag = 1;
    T_OK(c.postSend(a, 100));
    T_OK(sendPattern(c, 200, 2, 2, soon()));
    T_OK(flush(c, soon()));
  } else {
    Connection& c = *ep.recv[0];
    Slot a, b;
    T_OK(recvSlot(c, &a, soon()));
    T_OK(c.peekRecv(&b));
    T_EXPECT(a.data == b.data && a.bytes == b.bytes && a.tag == b.tag,
             "peekRecv returned a different slot without a releaseRecv");
    T_EXPECT(a.bytes == 100 && a.tag == 1 && checkPattern(a.data, 100, 1) < 0, "first slot wrong");
    T_OK(c.releaseRecv(a));
    T_RUN(expectSlot(c, 200, 2, 2, soon()));
  }
  return "";
}

// Posts message `seq` (`n` bytes of its pattern, tagged `tag`) on `c`: from a buffer of
// the caller's own, kept in `keep` until flushed, when `fromUser`, else through the slot.
Status postPatterned(Connection& c, uint64_t seq, size_t n, uint64_t tag, bool fromUser, Deadline d,
                     std::vector<uint8_t>* keep) {
  Slot s;
  BRAID_RETURN_IF_ERROR(reserveSlot(c, &s, d));
  s.tag = tag;
  if (!fromUser) {
    fillPattern(s.data, n, seq);
    return c.postSend(s, n);
  }
  keep->resize(n + 1);
  fillPattern(keep->data() + 1, n, seq);  // odd address on purpose
  return c.postSendFrom(s, keep->data() + 1, n);
}

// Zero copy and memory that changes under an address: a buffer sent from, then given new
// pages at the same address (mapped over, or dropped with MADV_DONTNEED) and refilled,
// sends the new contents. A
// transport that caches registrations of user memory (verbs) must hear of the unmap; one
// that pinned the old pages would send them again. Full-slot messages, so that a transport
// sending only large ones from user memory does so here.
std::string remappedBuffer(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  const size_t n = ep.cfg.slotBytes;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t len = (n + page - 1) / page * page;
  constexpr int kRounds = 3;
  if (ep.rank == 0) {
    Connection& c = *ep.send[0];
    void* at = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    T_EXPECT(at != MAP_FAILED, std::string("mmap: ") + std::strerror(errno));
    for (int r = 0; r < kRounds; ++r) {
      // New pages under the same address, without a moment where the address is free (the
      // other rank may be a thread of this process, mapping memory of its own): new
      // mappings over the old, then the pages dropped (as free() gives memory back).
      if (r == 1) {
        void* again = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        T_EXPECT(again == at, std::string("mmap over the buffer: ") + std::strerror(errno));
      } else if (r == 2) {
        T_EXPECT(madvise(at, len, MADV_DONTNEED) == 0, std::string("madvise: ") + std::strerror(errno));
      }
      for (int k = 0; k < 2; ++k) {  // twice per mapping: the second may hit a cache
        const uint64_t seed = static_cast<uint64_t>(10 * r + k);
        fillPattern(at, n, seed);
        Slot s;
        T_OK(reserveSlot(c, &s, soon()));
        s.tag = seed;
        if (c.sendsFromUser()) {
          T_OK(c.postSendFrom(s, at, n));
        } else {
          std::memcpy(s.data, at, n);
          T_OK(c.postSend(s, n));
        }
        T_OK(flush(c, soon()));
      }
    }
    munmap(at, len);
  } else {
    Connection& c = *ep.recv[0];
    for (int r = 0; r < kRounds; ++r)
      for (int k = 0; k < 2; ++k) {
        const uint64_t seed = static_cast<uint64_t>(10 * r + k);
        T_RUN(expectSlot(c, n, seed, seed, soon()));
      }
  }
  return "";
}

// Zero copy: the sender alternates slots and its own buffers (where the connection sends
// from them), the receiver alternates slots and landing in its own buffers, so every mix
// of the two meets, at sizes from empty to a full slot. Whatever a transport supports, the
// bytes and tags must arrive; a tag mask must keep the call shape (low 32 bits) and the
// low bits of the operation number.
std::string zeroCopy(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  const size_t slot = ep.cfg.slotBytes;
  const uint64_t count = 6 * static_cast<uint64_t>(ep.cfg.nslots) + 5;
  const uint64_t mustCarry = (uint64_t{0xff} << 32) | 0xffffffffull;
  auto sizeOf = [&](uint64_t seq) { return seq % 7 == 3 ? slot : variedSize(seq, slot); };
  auto tagOf = [](uint64_t seq) { return (seq << 32) | (0x9E3779B9u * static_cast<uint32_t>(seq + 1)); };
  if (ep.rank == 0) {
    Connection& c = *ep.send[0];
    T_EXPECT((c.tagMask() & mustCarry) == mustCarry, "tag mask " + std::to_string(c.tagMask()) +
                                                         " drops bits of the call shape or operation number");
    // Each message from its own buffer: a transport may read it until flushed().
    std::vector<std::vector<uint8_t>> bufs(count);
    for (uint64_t seq = 0; seq < count; ++seq)
      T_OK(postPatterned(c, seq, sizeOf(seq), tagOf(seq), c.sendsFromUser() && seq % 2 == 0, soon(), &bufs[seq]));
    T_OK(flush(c, soon()));
  } else {
    Connection& c = *ep.recv[0];
    std::vector<uint8_t> dst(slot + 64);
    for (uint64_t seq = 0; seq < count; ++seq) {
      const size_t n = sizeOf(seq);
      const bool into = seq % 3 != 2;
      uint8_t* land = dst.data() + (seq % 5);
      std::memset(dst.data(), 0xEE, dst.size());
      Slot s;
      T_OK(recvSlot(c, &s, soon(), into ? land : nullptr, n));
      if (into) {
        // Asked again before release: the same message, wherever it landed.
        Slot again;
        T_OK(c.peekRecvInto(&again, land, n));
        T_EXPECT(again.data == s.data && again.bytes == s.bytes, "peekRecvInto returned another message");
      }
      T_EXPECT(s.bytes == n, "message " + std::to_string(seq) + ": " + std::to_string(s.bytes) + " bytes, expected " +
                                 std::to_string(n));
      T_EXPECT(((s.tag ^ tagOf(seq)) & c.tagMask()) == 0, "message " + std::to_string(seq) + ": wrong tag");
      T_EXPECT(checkPattern(s.data, n, seq) < 0, "message " + std::to_string(seq) + ": payload differs");
      if (s.data == land && n > 0) {
        T_EXPECT(land[n] == 0xEE && (seq % 5 == 0 || land[-1] == 0xEE),
                 "message " + std::to_string(seq) + " wrote outside the bytes asked for");
      }
      T_OK(c.releaseRecv(s));
    }
  }
  return "";
}

// Receives announced ahead (Connection::expectRecv): the receiver announces the first two
// messages before the sender sends anything, lets them arrive, then takes each with what it
// announced while announcing the one two places further on. Every message arrives whole, in
// order, with its tag; one larger than a slot lands where it was announced; nothing outside
// the announced bytes changes. Messages alternate between the caller's memory and slots at
// both ends. UCX posts the announced receives; the other transports ignore the word.
std::string announcedReceives(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  const size_t slot = ep.cfg.slotBytes;
  Connection& c = ep.rank == 0 ? *ep.send[0] : *ep.recv[0];
  const bool large = c.maxMessageBytes() > slot;
  std::vector<size_t> sizes;
  for (uint64_t seq = 0; seq < 3 * static_cast<uint64_t>(ep.cfg.nslots) + 4; ++seq)
    sizes.push_back(large && seq % 4 == 1 ? 2 * slot + 7 : variedSize(seq, slot));
  auto tagOf = [](uint64_t seq) { return (seq << 32) | (0x27D4EB2Fu * static_cast<uint32_t>(seq + 5)); };
  if (ep.rank == 0) {
    T_RUN(waitPeer(ep, "announced"));
    std::vector<std::vector<uint8_t>> bufs(sizes.size());
    for (uint64_t seq = 0; seq < sizes.size(); ++seq) {
      const size_t n = sizes[seq];
      T_OK(postPatterned(c, seq, n, tagOf(seq), n > slot || (c.sendsFromUser() && seq % 2 == 0), Deadline::after(30),
                         &bufs[seq]));
    }
    T_OK(flush(c, Deadline::after(30)));
    return "";
  }
  // Each message's landing has 32 guard bytes either side; every third one is a slot.
  std::vector<std::vector<uint8_t>> dst(sizes.size());
  for (uint64_t seq = 0; seq < sizes.size(); ++seq) dst[seq].assign(sizes[seq] + 64, 0xEE);
  auto land = [&](uint64_t seq) -> uint8_t* {
    return sizes[seq] > slot || seq % 3 != 2 ? dst[seq].data() + 32 : nullptr;
  };
  T_OK(c.expectRecv(0, land(0), sizes[0]));
  T_OK(c.expectRecv(1, land(1), sizes[1]));
  T_RUN(signalPeer(ep, "announced"));
  const Deadline settle = Deadline::after(0.2);
  while (!settle.expired()) {
    T_OK(c.progress());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (uint64_t seq = 0; seq < sizes.size(); ++seq) {
    const size_t n = sizes[seq];
    const std::string what = "message " + std::to_string(seq) + " (" + std::to_string(n) + " bytes)";
    Slot s;
    T_OK(recvSlot(c, &s, Deadline::after(30), land(seq), n));
    // Announced again (the same words), and the one after that, while this one is held.
    if (seq + 1 < sizes.size()) T_OK(c.expectRecv(1, land(seq + 1), sizes[seq + 1]));
    if (seq + 2 < sizes.size()) T_OK(c.expectRecv(2, land(seq + 2), sizes[seq + 2]));
    T_EXPECT(s.bytes == n, what + ": " + std::to_string(s.bytes) + " bytes arrived");
    T_EXPECT(((s.tag ^ tagOf(seq)) & c.tagMask()) == 0, what + ": wrong tag");
    T_EXPECT(checkPattern(s.data, n, seq) < 0, what + ": payload differs");
    if (n > slot) T_EXPECT(s.data == land(seq), what + " did not land where it was announced");
    for (size_t k = 0; k < 32; ++k) {
      T_EXPECT(dst[seq][k] == 0xEE && dst[seq][32 + n + k] == 0xEE, what + " wrote outside the bytes announced");
    }
    T_OK(c.releaseRecv(s));
  }
  return "";
}

// Large messages (Connection::maxMessageBytes): where a connection carries messages larger
// than a slot, each goes from the sender's memory straight into the receiver's, in order
// with slot-sized messages (some through slots), with its tag, and nothing outside the
// bytes asked for changes. Both ends learn from their own connection whether it carries
// them; a transport that does not is skipped.
std::string largeMessages(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  const size_t slot = ep.cfg.slotBytes;
  Connection& c = ep.rank == 0 ? *ep.send[0] : *ep.recv[0];
  if (c.maxMessageBytes() <= slot) {
    return std::string("skip: ") + ep.factory->name + " carries no message larger than a slot";
  }
  const std::vector<size_t> sizes = {slot + 1, 64, 3 * slot + 5, slot, (size_t{4} << 20) + 3, 0, 2 * slot, 100};
  auto large = [&](size_t n) { return n > slot; };
  auto tagOf = [](uint64_t seq) { return (seq << 32) | (0x85EBCA6Bu * static_cast<uint32_t>(seq + 3)); };
  if (ep.rank == 0) {
    T_EXPECT(c.sendsFromUser(), "a connection carrying large messages must send from the caller's memory");
    std::vector<std::vector<uint8_t>> bufs(sizes.size());
    for (uint64_t seq = 0; seq < sizes.size(); ++seq) {
      const size_t n = sizes[seq];
      T_EXPECT(n <= c.maxMessageBytes(), "a message larger than the connection says it carries");
      T_OK(postPatterned(c, seq, n, tagOf(seq), large(n) || seq % 2 == 1, Deadline::after(30), &bufs[seq]));
    }
    T_OK(flush(c, Deadline::after(30)));
  } else {
    for (uint64_t seq = 0; seq < sizes.size(); ++seq) {
      const size_t n = sizes[seq];
      std::vector<uint8_t> dst(n + 64, 0xEE);
      uint8_t* land = dst.data() + 32;
      const bool into = large(n) || seq % 3 == 0;
      if (large(n)) {
        // A look at its tag first, as a long wait's mismatch scan takes: it must not commit
        // the message to a slot, or it could not land where its receive asks.
        uint64_t tag = 0;
        Deadline d = Deadline::after(30);
        Status st;
        while ((st = c.peekTag(&tag)).code() == Code::kWouldBlock && !d.expired()) (void)c.progress();
        T_OK(st);
        T_EXPECT(((tag ^ tagOf(seq)) & c.tagMask()) == 0, "message " + std::to_string(seq) + ": peekTag saw a wrong tag");
      }
      Slot s;
      T_OK(recvSlot(c, &s, Deadline::after(30), into ? land : nullptr, n));
      if (large(n)) T_EXPECT(s.data == land, "message " + std::to_string(seq) + " of " + std::to_string(n) + " bytes did not land where asked");
      T_EXPECT(s.bytes == n, "message " + std::to_string(seq) + ": " + std::to_string(s.bytes) + " bytes, expected " +
                                 std::to_string(n));
      T_EXPECT(((s.tag ^ tagOf(seq)) & c.tagMask()) == 0, "message " + std::to_string(seq) + ": wrong tag");
      T_EXPECT(checkPattern(s.data, n, seq) < 0, "message " + std::to_string(seq) + ": payload differs");
      if (s.data == land) {
        for (size_t k = 0; k < 32; ++k) {
          T_EXPECT(dst[k] == 0xEE && dst[32 + n + k] == 0xEE,
                   "message " + std::to_string(seq) + " wrote outside the bytes asked for");
        }
      }
      T_OK(c.releaseRecv(s));
    }
  }
  return "";
}

std::string bulk(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  const size_t total = 64u << 20;
  const size_t slot = ep.cfg.slotBytes;
  const uint64_t seed = 0xB01C;
  T_RUN(ep.rank == 0 ? signalPeer(ep, "go") : waitPeer(ep, "go"));
  const int64_t start = nowNanos();
  Deadline d = Deadline::after(60);
  for (size_t off = 0; off < total; off += slot) {
    const size_t bytes = std::min(slot, total - off);
    if (ep.rank == 0) {
      T_OK(sendPattern(*ep.send[0], bytes, off, seed, d, off));
    } else {
      T_RUN(expectSlot(*ep.recv[0], bytes, off, seed, d, off));
    }
  }
  if (ep.rank == 0) {
    T_OK(flush(*ep.send[0], d));
  } else {
    double secs = static_cast<double>(nowNanos() - start) / 1e9;
    std::printf("%s/%s: 64 MiB in %.1f ms (%.2f GB/s, pattern fill and check included; %d socket(s)/peer)\n",
                ep.factory->name, modeName(ep.mode), secs * 1e3, static_cast<double>(total) / secs / 1e9,
                ep.cfg.socketsPerPeer);
  }
  return "";
}

// Both ranks send and receive at once, over two connections each way, from one thread.
std::string bidirectional(Endpoint& ep) {
  const int channels = 2;
  T_RUN(setupPair(ep, channels));
  const uint64_t count = 8 * static_cast<uint64_t>(ep.cfg.nslots) + 1;
  const size_t slot = ep.cfg.slotBytes;
  auto seedOf = [](int from, int ch, uint64_t seq) { return static_cast<uint64_t>(from) * 1000003 + ch * 1009 + seq; };
  uint64_t sent[channels] = {0, 0}, got[channels] = {0, 0};
  Deadline d = Deadline::after(30);
  for (;;) {
    bool busy = false, done = true;
    for (int ch = 0; ch < channels; ++ch) {
      Connection& out = *ep.send[ch];
      if (sent[ch] < count) {
        done = false;
        Slot s;
        Status st = out.reserveSend(&s);
        if (st.isOk()) {
          const uint64_t seq = sent[ch];
          const size_t bytes = variedSize(seq, slot);
          fillPattern(s.data, bytes, seedOf(ep.rank, ch, seq));
          s.tag = seedOf(ep.rank, ch, seq);
          T_OK(out.postSend(s, bytes));
          ++sent[ch];
          busy = true;
        } else {
          T_EXPECT(st.code() == Code::kWouldBlock, describe(st));
        }
      }
      Connection& in = *ep.recv[ch];
      if (got[ch] < count) {
        done = false;
        Slot s;
        Status st = in.peekRecv(&s);
        if (st.isOk()) {
          const uint64_t seq = got[ch];
          const uint64_t seed = seedOf(ep.peer, ch, seq);
          T_EXPECT(s.tag == seed && s.bytes == variedSize(seq, slot),
                   "channel " + std::to_string(ch) + " slot " + std::to_string(seq) + " has tag " +
                       std::to_string(s.tag) + " and " + std::to_string(s.bytes) + " bytes");
          T_EXPECT(checkPattern(s.data, s.bytes, seed) < 0, "payload of channel " + std::to_string(ch) + " slot " +
                                                                std::to_string(seq) + " corrupted");
          T_OK(in.releaseRecv(s));
          ++got[ch];
          busy = true;
        } else {
          T_EXPECT(st.code() == Code::kWouldBlock, describe(st));
        }
      }
    }
    if (done) break;
    T_EXPECT(!d.expired(), "stalled at sent " + std::to_string(sent[0]) + "/" + std::to_string(sent[1]) +
                               ", received " + std::to_string(got[0]) + "/" + std::to_string(got[1]));
    if (!busy) {
      for (int ch = 0; ch < channels; ++ch) {
        Status a = ep.send[ch]->progress(), b = ep.recv[ch]->progress();
        T_EXPECT(a.isOk() || a.code() == Code::kWouldBlock, describe(a));
        T_EXPECT(b.isOk() || b.code() == Code::kWouldBlock, describe(b));
      }
      // Sleep on whichever receive is still pending; a short cap covers the sends.
      for (int ch = 0; ch < channels; ++ch) {
        if (got[ch] < count) {
          waitReady(*ep.recv[ch], false, 2);
          break;
        }
      }
    }
  }
  for (int ch = 0; ch < channels; ++ch) T_OK(flush(*ep.send[ch], soon()));
  return "";
}

// Four channels carry different streams; the receiver drains them in reverse order, so
// each channel must buffer and flow-control on its own.
std::string channels(Endpoint& ep) {
  const int nch = 4;
  T_RUN(setupPair(ep, nch));
  const size_t slot = ep.cfg.slotBytes;
  auto countOf = [&](int ch) { return static_cast<uint64_t>(ch + 1) * 2 * ep.cfg.nslots; };
  auto tagOf = [](int ch, uint64_t seq) { return (static_cast<uint64_t>(ch) << 32) | seq; };
  if (ep.rank == 0) {
    std::vector<uint64_t> sent(nch, 0);
    Deadline d = Deadline::after(30);
    for (;;) {
      bool busy = false, done = true;
      for (int ch = 0; ch < nch; ++ch) {
        if (sent[ch] >= countOf(ch)) continue;
        done = false;
        Connection& c = *ep.send[ch];
        Slot s;
        Status st = c.reserveSend(&s);
        if (st.code() == Code::kWouldBlock) continue;
        T_OK(st);
        const uint64_t seq = sent[ch];
        const size_t bytes = variedSize(seq + ch, slot);
        fillPattern(s.data, bytes, tagOf(ch, seq));
        s.tag = tagOf(ch, seq);
        T_OK(c.postSend(s, bytes));
        ++sent[ch];
        busy = true;
      }
      if (done) break;
      T_EXPECT(!d.expired(), "sender stalled");
      if (!busy) {
        for (int ch = 0; ch < nch; ++ch) {
          Status p = ep.send[ch]->progress();
          T_EXPECT(p.isOk() || p.code() == Code::kWouldBlock, describe(p));
        }
        waitReady(*ep.send[nch - 1], true, 2);
      }
    }
    for (int ch = 0; ch < nch; ++ch) T_OK(flush(*ep.send[ch], soon()));
  } else {
    for (int ch = nch - 1; ch >= 0; --ch) {
      for (uint64_t seq = 0; seq < countOf(ch); ++seq) {
        T_RUN(expectSlot(*ep.recv[ch], variedSize(seq + ch, slot), tagOf(ch, seq), tagOf(ch, seq), soon()));
      }
      Slot s;
      Status st = ep.recv[ch]->peekRecv(&s);
      T_EXPECT(st.code() == Code::kWouldBlock, "channel " + std::to_string(ch) + " has an extra slot");
    }
  }
  return "";
}

// Rank 1 sends a few slots and dies; rank 0 must get every slot, then kRemoteError naming
// rank 1, within a few seconds. What a memory or stream transport flushed outlives its sender
// (it is in shared memory or the kernel's socket). UCX's completion of an eager message says
// only that UCX took it: its tcp may still hold the bytes, and a socket closed with unread
// data (the receiver's credits) is reset, dropping what the kernel had not sent; asking UCX
// to flush the endpoint waits for the receiver to progress. Over UCX rank 1 therefore dies
// once rank 0 has its slots, and what is checked is the error that follows.
std::string peerDiesWhileSending(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  T_RUN(streamsOnly(ep));
  ep.skipFinalBarrier = true;
  const size_t n = ep.cfg.slotBytes;
  const bool deliveredFirst = std::string(ep.factory->name) == "ucx";
  if (ep.rank == 1) {
    for (uint64_t i = 0; i < 3; ++i) T_OK(sendPattern(*ep.send[0], n, i, i, soon()));
    // A fourth slot is reserved and half written when the process dies.
    Slot s;
    T_OK(reserveSlot(*ep.send[0], &s, soon()));
    std::memset(s.data, 0xEE, n / 2);
    T_OK(flush(*ep.send[0], soon()));
    if (deliveredFirst) T_RUN(waitPeer(ep, "received"));
    std::fflush(nullptr);
    _exit(0);
  }
  for (uint64_t i = 0; i < 3; ++i) T_RUN(expectSlot(*ep.recv[0], n, i, i, soon()));
  if (deliveredFirst) T_RUN(signalPeer(ep, "received"));
  const int64_t start = nowNanos();
  Slot s;
  Status st = recvSlot(*ep.recv[0], &s, Deadline::after(10));
  const double secs = static_cast<double>(nowNanos() - start) / 1e9;
  T_EXPECT(st.code() == Code::kRemoteError, "expected a remote error, got " + describe(st));
  T_EXPECT(st.rank() == 1, "the error names rank " + std::to_string(st.rank()) + ": " + describe(st));
  T_EXPECT(st.message().find("rank 1") != std::string::npos, "message does not name rank 1: " + describe(st));
  T_EXPECT(secs < 5, "took " + std::to_string(secs) + " s to notice");
  return "";
}

// Rank 1 receives two slots and dies with more unread; rank 0 keeps sending and must get
// kRemoteError naming rank 1 within a few seconds.
std::string peerDiesWhileReceiving(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  T_RUN(streamsOnly(ep));
  ep.skipFinalBarrier = true;
  const size_t n = ep.cfg.slotBytes;
  if (ep.rank == 1) {
    for (uint64_t i = 0; i < 2; ++i) T_RUN(expectSlot(*ep.recv[0], n, i, i, soon()));
    std::fflush(nullptr);
    _exit(0);
  }
  const int64_t start = nowNanos();
  Status st;
  uint64_t seq = 0;
  // Bounded: the kernel buffers hold far less than this.
  for (; seq < (1u << 30) / n && st.isOk(); ++seq) st = sendPattern(*ep.send[0], n, seq, seq, Deadline::after(10));
  if (st.isOk()) st = flush(*ep.send[0], Deadline::after(10));
  const double secs = static_cast<double>(nowNanos() - start) / 1e9;
  T_EXPECT(st.code() == Code::kRemoteError,
           "expected a remote error after " + std::to_string(seq) + " slots, got " + describe(st));
  T_EXPECT(st.rank() == 1, "the error names rank " + std::to_string(st.rank()) + ": " + describe(st));
  T_EXPECT(st.message().find("rank 1") != std::string::npos, "message does not name rank 1: " + describe(st));
  T_EXPECT(secs < 5, "took " + std::to_string(secs) + " s to notice");
  return "";
}

// Rank 1 trades a slot each way with rank 0, then dies with nothing in flight. Asked while
// rank 1 lives, the transport has not seen it fail (Transport::sawPeerFail); asked after, a
// transport that tells (tcp and UCX; verbs does not yet) must say it did within a few
// seconds. UCX's endpoints hear of their peer's end only as their worker is driven, which the
// question itself must do; tcp's sockets show it to a poll.
std::string idlePeerDeathSeen(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  T_RUN(streamsOnly(ep));
  ep.skipFinalBarrier = true;
  const size_t n = 1000;
  if (ep.rank == 1) {
    T_OK(sendPattern(*ep.send[0], n, 7, 7, soon()));
    T_RUN(expectSlot(*ep.recv[0], n, 8, 8, soon()));
    T_OK(flush(*ep.send[0], soon()));
    T_RUN(waitPeer(ep, "asked"));
    std::fflush(nullptr);
    _exit(0);
  }
  T_RUN(expectSlot(*ep.recv[0], n, 7, 7, soon()));
  T_OK(sendPattern(*ep.send[0], n, 8, 8, soon()));
  T_OK(flush(*ep.send[0], soon()));
  T_EXPECT(!ep.transport->sawPeerFail(1), "the transport saw rank 1 fail while it lived");
  T_RUN(signalPeer(ep, "asked"));
  const int64_t start = nowNanos();
  bool seen = false;
  while (!seen && nowNanos() - start < 5'000'000'000) {
    seen = ep.transport->sawPeerFail(1);
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string name = ep.factory->name;
  if (!seen && name != "ucx" && name != "tcp" && name != "tcp-abi")
    return "skip: " + name + " does not tell which peers it saw fail";
  T_EXPECT(seen, "the transport did not see rank 1 fail within 5 s of its death");
  return "";
}

// What a failed call leaves: a receive announced into the caller's memory, never peeked.
// Rank 1 then sends that message. Asking whether rank 1 failed (Transport::sawPeerFail)
// drives the transport outside any operation; the answer is no, and nothing lands in the
// caller's memory, which its caller may have freed. (UCX posts announced receives: it must
// cancel them before it drives its worker.)
std::string failedPeerQuestionLeavesCallerMemory(Endpoint& ep) {
  T_RUN(setupPair(ep, 1));
  const size_t n = 1000;
  if (ep.rank == 1) {
    T_RUN(waitPeer(ep, "announced"));
    T_OK(sendPattern(*ep.send[0], n, 5, 5, soon()));
    T_OK(flush(*ep.send[0], soon()));
    T_RUN(signalPeer(ep, "sent"));
    T_RUN(waitPeer(ep, "checked"));
    return "";
  }
  std::vector<uint8_t> dst(n + 64, 0xEE);
  T_OK(ep.recv[0]->expectRecv(0, dst.data() + 32, n));
  T_RUN(signalPeer(ep, "announced"));
  T_RUN(waitPeer(ep, "sent"));
  const Deadline settle = Deadline::after(0.3);
  while (!settle.expired()) {
    T_EXPECT(!ep.transport->sawPeerFail(1), "the transport saw rank 1 fail while it lived");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (size_t k = 0; k < dst.size(); ++k)
    T_EXPECT(dst[k] == 0xEE, "byte " + std::to_string(k) + " of the caller's memory changed after its call ended");
  T_RUN(signalPeer(ep, "checked"));
  return "";
}

// A transport of another job (different nonce) claiming to be rank 1 attaches first. It
// must be refused, the real rank 1 must still get through, and rank 0 must receive only
// the real rank 1's slots.
std::string strangerRefused(Endpoint& ep) {
  const size_t n = 256;
  if (ep.rank == 0) {
    std::string blob;
    auto r = ep.transport->createRecv(1, 0, &blob);
    T_OK(r.status());
    ep.recv.push_back(std::move(r).value());
    T_EXPECT(ep.side->send(blob), "side channel closed");
    T_RUN(waitPeer(ep, "attached"));
    T_OK(ep.transport->establish(Deadline::after(10)));
    for (uint64_t i = 0; i < 4; ++i) T_RUN(expectSlot(*ep.recv[0], n, 100 + i, 100 + i, soon()));
    // Nothing from the stranger may follow.
    Deadline quiet = Deadline::after(0.3);
    while (!quiet.expired()) {
      Slot s;
      Status st = ep.recv[0]->peekRecv(&s);
      T_EXPECT(st.code() == Code::kWouldBlock, "after the legitimate slots: " +
                                                   (st.isOk() ? "a slot with tag " + std::to_string(s.tag)
                                                              : describe(st)));
      waitReady(*ep.recv[0], false, 20);
    }
    T_RUN(signalPeer(ep, "checked"));
    return "";
  }
  std::string blob;
  T_EXPECT(ep.side->recv(&blob, soon()), "no blob from rank 0");
  TransportConfig other = ep.cfg;
  other.nonce = ep.cfg.nonce ^ 0x5A5A5A5A5A5A5A5Aull;
  other.connectTimeoutSec = 2;
  auto strangerOr = ep.factory->create(other);
  T_OK(strangerOr.status());
  std::unique_ptr<Transport> stranger = std::move(strangerOr).value();
  auto sc = stranger->connectSend(0, 0, blob);
  std::unique_ptr<Connection> strangerConn;
  if (sc.isOk()) {
    strangerConn = std::move(sc).value();
    (void)stranger->establish(Deadline::after(1));
  }
  auto legit = ep.transport->connectSend(0, 0, blob);
  T_OK(legit.status());
  ep.send.push_back(std::move(legit).value());
  T_RUN(signalPeer(ep, "attached"));
  T_OK(ep.transport->establish(Deadline::after(10)));
  if (strangerConn) {
    // Whatever the stranger manages to post must never be delivered; its errors are fine.
    for (int i = 0; i < 4; ++i) {
      Slot s;
      if (!strangerConn->reserveSend(&s).isOk()) break;
      std::memset(s.data, 0x66, n);
      s.tag = 999;
      if (!strangerConn->postSend(s, n).isOk()) break;
    }
    (void)strangerConn->progress();
  }
  for (uint64_t i = 0; i < 4; ++i) T_OK(sendPattern(*ep.send[0], n, 100 + i, 100 + i, soon()));
  T_OK(flush(*ep.send[0], soon()));
  T_RUN(waitPeer(ep, "checked"));
  return "";
}

// ---- single-rank checks ----------------------------------------------------------------

// establish() with a receive connection nobody attaches to must return by its deadline;
// if it fails (transports that wait for senders), the Status must name the missing rank.
// Rank 0 of 2 with small slots, and abortCheck as given.
TransportConfig loneReceiverConfig(std::function<Status()> abortCheck = nullptr) {
  TransportConfig cfg;
  cfg.rank = 0;
  cfg.nranks = 2;
  cfg.nonce = freshNonce();
  cfg.slotBytes = 4096;
  cfg.nslots = 2;
  cfg.abortCheck = std::move(abortCheck);
  return cfg;
}

// establish() on `t` with a connection from rank 1, who never comes, created first.
Status establishAlone(Transport& t, Deadline deadline) {
  std::string blob;
  auto r = t.createRecv(1, 0, &blob);
  REQUIRE(r.isOk());
  return t.establish(deadline);
}

void establishTimesOut(const TransportFactory& f) {
  auto created = f.create(loneReceiverConfig());
  INFO(created.status().toString());
  REQUIRE(created.isOk());
  const int64_t start = nowNanos();
  Status s = establishAlone(*created.value(), Deadline::after(0.5));
  const double secs = static_cast<double>(nowNanos() - start) / 1e9;
  INFO(describe(s));
  CHECK(secs < 2.5);
  if (s.isOk()) {
    WARN(std::string(f.name) + ": establish() does not wait for senders; a missing sender is caught by the "
                               "communicator's barrier instead");
    return;
  }
  CHECK(s.code() == Code::kTimeout);
  CHECK(s.rank() == 1);
  CHECK(s.message().find("rank 1") != std::string::npos);
  CHECK(secs >= 0.45);
}

// The communicator's check (a peer's pid, its store mark, an abort record) ends a wait for a
// sender that died before it connected, well before the deadline, with the check's error.
void establishStopsAtAbortCheck(const TransportFactory& f) {
  // The check passes for its first 0.3 s (counted from its first call, so that a slow
  // machine's set-up does not count) and fails from then on.
  int checks = 0;
  int64_t firstCheck = 0;
  auto created = f.create(loneReceiverConfig([&]() -> Status {
    if (++checks == 1) firstCheck = nowNanos();
    if (nowNanos() - firstCheck < 300 * 1000 * 1000) return Status::ok();
    return Status(Code::kRemoteError, "rank 1 exited during init", 1);
  }));
  INFO(created.status().toString());
  REQUIRE(created.isOk());
  const int64_t start = nowNanos();
  Status s = establishAlone(*created.value(), Deadline::after(20));
  const double secs = static_cast<double>(nowNanos() - start) / 1e9;
  INFO(describe(s));
  if (s.isOk()) {
    WARN(std::string(f.name) + ": establish() does not wait for senders");
    return;
  }
  CHECK(s.code() == Code::kRemoteError);
  CHECK(s.rank() == 1);
  CHECK(s.message() == "rank 1 exited during init");
  CHECK(secs < 5.0);
  CHECK(checks >= 2);
}

void refusesOtherJobs(const TransportFactory& f) {
  TransportConfig cfg;
  cfg.nranks = 2;
  auto created = f.create(cfg);
  INFO(created.status().toString());
  REQUIRE(created.isOk());
  auto& t = created.value();
  CHECK(std::string(t->name()) == f.name);
  PeerInfo local{0, "host-a", static_cast<int64_t>(getpid()), 1234};
  PeerInfo remote = local;
  remote.rank = 1;
  remote.nonce = 4321;
  CHECK(t->canConnect(local, remote) == 0);
  remote.pid += 1;
  CHECK(t->canConnect(local, remote) == 0);
}

// ---- registration ----------------------------------------------------------------------

struct PairCase {
  const char* name;
  std::string (*fn)(Endpoint&);
  size_t slotBytes;
  int nslots;
  int sockets;
  bool threads;    // run with both ranks as threads (where the transport allows)
  bool processes;  // run with both ranks as processes (where the transport allows)
};

const PairCase kPairCases[] = {
    {"one slot", oneSlot, 64 << 10, 4, 1, true, true},
    {"many slots keep FIFO order and tags", manySlots, 64 << 10, 4, 1, true, true},
    {"many slots keep FIFO order over 3 sockets per peer", manySlots, 16 << 10, 5, 3, true, false},
    {"zero-byte payloads", zeroBytes, 64 << 10, 4, 1, true, true},
    {"messages waiting before their receives, then a prompt teardown", earlyArrivalsThenTeardown, 64 << 10, 4, 1,
     true, true},
    {"full-slot payloads", fullSlots, 64 << 10, 4, 1, true, true},
    {"payloads of 0 to 100 bytes, inline and not, over several laps", smallPayloads, 4096, 3, 1, true, true},
    {"sender blocks on a full FIFO until the receiver releases", backpressure, 64 << 10, 4, 1, true, true},
    {"repeated reserveSend and peekRecv return the same slot", repeatCalls, 64 << 10, 4, 1, true, true},
    {"zero copy: sends from user memory and receives into it, mixed with slots", zeroCopy, 64 << 10, 4, 1, true,
     true},
    {"zero copy with small slots", zeroCopy, 4096, 3, 1, true, true},
    {"a buffer unmapped and mapped again at its address sends its new contents", remappedBuffer, 128 << 10, 4, 1,
     true, true},
    {"large messages from user memory into user memory, among slot-sized ones", largeMessages, 64 << 10, 4, 1, true,
     true},
    {"receives announced ahead land whole, in order and where announced", announcedReceives, 64 << 10, 4, 1, true,
     true},
    {"bulk 64 MiB verified", bulk, 512 << 10, 8, 1, true, true},
    {"bulk 64 MiB verified over 2 sockets per peer", bulk, 512 << 10, 8, 2, false, true},
    {"bidirectional over two connections each way", bidirectional, 32 << 10, 4, 1, true, true},
    {"several channels stay independent", channels, 16 << 10, 4, 1, true, true},
    {"peer death while sending is a remote error naming it", peerDiesWhileSending, 64 << 10, 4, 1, false, true},
    {"peer death while receiving is a remote error naming it", peerDiesWhileReceiving, 64 << 10, 4, 1, false,
     true},
    {"a peer that died between messages is seen failed when asked", idlePeerDeathSeen, 64 << 10, 4, 1, false,
     true},
    {"asking which peers failed lands nothing in a call's memory after it ended",
     failedPeerQuestionLeavesCallerMemory, 64 << 10, 4, 1, true, true},
    {"a transport of another job is refused", strangerRefused, 4096, 4, 1, true, true},
};

class PairInvoker final : public Catch::ITestInvoker {
 public:
  PairInvoker(const TransportFactory* f, Mode m, const PairCase* c) : f_(f), m_(m), c_(c) {}
  void invoke() const override {
    TransportConfig cfg;
    cfg.nonce = freshNonce();
    cfg.slotBytes = c_->slotBytes;
    cfg.nslots = c_->nslots;
    cfg.socketsPerPeer = c_->sockets;
    cfg.connectTimeoutSec = 20;
    std::string result = runPair(*f_, m_, cfg, c_->fn);
    if (result.rfind("skip: ", 0) == 0) {
      WARN(result);
      return;
    }
    if (!result.empty()) FAIL(result);
    SUCCEED();
  }

 private:
  const TransportFactory* f_;
  Mode m_;
  const PairCase* c_;
};

class SingleInvoker final : public Catch::ITestInvoker {
 public:
  SingleInvoker(const TransportFactory* f, void (*fn)(const TransportFactory&)) : f_(f), fn_(fn) {}
  void invoke() const override { fn_(*f_); }

 private:
  const TransportFactory* f_;
  void (*fn_)(const TransportFactory&);
};

// What the suite runs against: every transport in the registry (built-ins and the plugins
// of the build tree's folder) and tcp rebuilt as a plugin, so the ABI is itself under test.
const std::vector<TransportFactory>& suiteFactories() {
  static const std::vector<TransportFactory> kAll = [] {
    std::vector<TransportFactory> all = registry();
    auto tcpAbi = plugin::loadPlugin(BRAID_TEST_PLUGIN_DIR "/libbraid-net-tcp-abi.so");
    if (tcpAbi.isOk()) all.push_back(std::move(tcpAbi).value());
    else std::fprintf(stderr, "conformance: %s\n", tcpAbi.status().toString().c_str());
    return all;
  }();
  return kAll;
}

// Test cases are registered while static objects are constructed, before Catch2 lists or
// runs anything; registry() is a function-local static, so it is ready by then.
void reportUnavailable(const TransportFactory& f) {
  TransportConfig probe;
  probe.nranks = 2;
  auto t = f.create(probe);
  if (t.isOk()) FAIL(std::string(f.name) + " became available after the suite was registered");
  WARN("skipped: " + std::string(f.name) + " cannot run here: " + t.status().message());
  CHECK(t.status().message().find(f.name) != std::string::npos);
}

struct Registrar {
  std::vector<std::string> unavailable;
  std::deque<std::string> names;  // Catch2 keeps references to the names
  std::deque<std::string> tags;

  void add(Catch::ITestInvoker* invoker, std::string name, const char* transport) {
    names.push_back(std::move(name));
    tags.push_back(std::string("[transport][") + transport + "]");
    // AutoReg only registers; the registry hub owns the invoker from here on.
    Catch::AutoReg reg(invoker, CATCH_INTERNAL_LINEINFO, Catch::StringRef(),
                       Catch::NameAndTags{names.back(), tags.back()});
  }

  Registrar() {
    for (const TransportFactory& f : suiteFactories()) {
      TransportConfig probe;
      probe.nranks = 2;
      auto t = f.create(probe);
      if (!t.isOk()) {
        // A plugin whose library finds nothing to drive here (no RDMA device, say): one test
        // that says why the rest of its suite does not run.
        unavailable.push_back(f.name + std::string(": ") + t.status().message());
        add(new SingleInvoker(&f, reportUnavailable), std::string(f.name) + ": unavailable here (suite skipped)",
            f.name);
        continue;
      }
      for (const PairCase& c : kPairCases) {
        for (Mode m : {Mode::kThreads, Mode::kProcesses}) {
          if ((m == Mode::kThreads ? !c.threads : !c.processes) || !supportsMode(f, m)) continue;
          add(new PairInvoker(&f, m, &c), std::string(f.name) + "/" + modeName(m) + ": " + c.name, f.name);
        }
      }
      add(new SingleInvoker(&f, establishTimesOut),
          std::string(f.name) + ": establish with a missing sender returns by its deadline", f.name);
      add(new SingleInvoker(&f, establishStopsAtAbortCheck),
          std::string(f.name) + ": establish waiting for a sender stops at the communicator's abort check", f.name);
      add(new SingleInvoker(&f, refusesOtherJobs), std::string(f.name) + ": canConnect refuses another job",
          f.name);
    }
  }
};

const Registrar registrar;

}  // namespace

TEST_CASE("registry: every transport listed once, instantiated by this suite", "[transport]") {
  const auto& reg = registry();
  REQUIRE(!reg.empty());
  for (size_t i = 0; i < reg.size(); ++i) {
    for (size_t j = i + 1; j < reg.size(); ++j) CHECK(std::string(reg[i].name) != reg[j].name);
    bool instantiated = false;
    for (const std::string& n : registrar.names) instantiated |= n.rfind(std::string(reg[i].name) + "/", 0) == 0;
    for (const std::string& n : registrar.unavailable) instantiated |= n.rfind(std::string(reg[i].name) + ": ", 0) == 0;
    INFO(reg[i].name);
    CHECK(instantiated);
  }
}

TEST_CASE("registry: scores prefer loopback in a process, then shm on a host, then tcp", "[transport]") {
  PeerInfo local{0, "host-a", static_cast<int64_t>(getpid()), 99};
  PeerInfo sameProcess = local;
  sameProcess.rank = 1;
  PeerInfo sameHost = sameProcess;
  sameHost.pid += 1;
  PeerInfo otherHost = sameHost;
  otherHost.hostId = "host-b";
  auto score = [&](const char* name, const PeerInfo& remote) {
    for (const TransportFactory& f : registry()) {
      if (std::string(f.name) == name) {
        TransportConfig cfg;
        cfg.nranks = 2;
        auto t = f.create(cfg);
        return t.isOk() ? t.value()->canConnect(local, remote) : -1;
      }
    }
    return -1;  // not registered
  };
  const int tcpSame = score("tcp", sameProcess), tcpHost = score("tcp", sameHost), tcpFar = score("tcp", otherHost);
  if (tcpSame < 0) return;
  CHECK(tcpSame > 0);
  CHECK(tcpHost > 0);
  CHECK(tcpFar > 0);
  if (score("shm", sameHost) >= 0) {
    CHECK(score("shm", sameHost) > tcpHost);
    CHECK(score("shm", otherHost) == 0);
  }
  if (score("loopback", sameProcess) >= 0) {
    CHECK(score("loopback", sameProcess) > std::max(tcpSame, score("shm", sameProcess)));
    CHECK(score("loopback", sameHost) == 0);
  }
}

// A process of another pid namespace on the same host (a container sharing the host's name
// and /dev/shm) may have this process's pid: the process token tells them apart, and only
// ranks of one process take the loopback transport.
TEST_CASE("registry: an equal pid of another pid namespace is another process", "[transport]") {
  PeerInfo local{0, "host-a", 2, 99, /*pidNs=*/111, /*process=*/0xabc};
  PeerInfo thread = local;
  thread.rank = 1;
  PeerInfo container = thread;
  container.pidNs = 222;
  container.process = 0xdef;
  CHECK(sameProcess(local, thread));
  CHECK_FALSE(sameProcess(local, container));
  CHECK(pidMeaningfulTo(thread, local));
  CHECK_FALSE(pidMeaningfulTo(container, local));
  for (const TransportFactory& f : registry()) {
    TransportConfig cfg;
    cfg.nranks = 2;
    auto t = f.create(cfg);
    if (!t.isOk()) continue;
    INFO(f.name);
    if (std::string(f.name) == "loopback") {
      CHECK(t.value()->canConnect(local, thread) > 0);
      CHECK(t.value()->canConnect(local, container) == 0);
    }
    if (std::string(f.name) == "shm") CHECK(t.value()->canConnect(local, container) > 0);
  }
}

// A container with the host's network but IPC of its own (docker's default /dev/shm) shares
// the host's name but not its POSIX shared memory: shm does not offer itself between them.
TEST_CASE("registry: shm only between ranks that see the same /dev/shm", "[transport]") {
  PeerInfo local{0, "host-a", 2, 99, 111, 0xabc, /*shmDev=*/40};
  PeerInfo same = local;
  same.rank = 1;
  same.process = 0xdef;
  PeerInfo ownShm = same;
  ownShm.shmDev = 41;
  PeerInfo unknown = same;
  unknown.shmDev = 0;
  CHECK(shareDevShm(local, same));
  CHECK_FALSE(shareDevShm(local, ownShm));
  CHECK(shareDevShm(local, unknown));
  for (const TransportFactory& f : registry()) {
    if (std::string(f.name) != "shm") continue;
    TransportConfig cfg;
    cfg.nranks = 2;
    auto t = f.create(cfg);
    REQUIRE(t.isOk());
    CHECK(t.value()->canConnect(local, same) > 0);
    CHECK(t.value()->canConnect(local, ownShm) == 0);
    CHECK(t.value()->canConnect(local, unknown) > 0);
  }
}

}  // namespace braid::transport::test
