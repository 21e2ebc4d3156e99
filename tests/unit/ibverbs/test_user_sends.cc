// Sends from user memory over the verbs protocol (user_sends.h), on the fake queue pairs,
// with a registrar that hands out keys; and the memory hooks that keep the registration
// cache in step with unmapped memory (memory_hooks.h), on real mappings.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "fake_rdma.h"
#include "support/catch.h"
#include "transports/ibverbs/memory_hooks.h"
#include "transports/ibverbs/rdma_protocol.h"
#include "transports/ibverbs/registration_cache.h"
#include "transports/ibverbs/user_sends.h"

namespace braid::transport::ibverbs::test {
namespace {

class KeyRegistrar final : public Registrar {
 public:
  StatusOr<MemoryKey> registerRegion(void* addr, size_t bytes) override {
    if (failNext) {
      failNext = false;
      return Status(Code::kSystemError, "ibv_reg_mr: Bad address");
    }
    MemoryKey k;
    k.lkey = k.rkey = ++nextKey;
    live[k.lkey] = {reinterpret_cast<uintptr_t>(addr), bytes};
    return k;
  }
  void deregisterRegion(const MemoryKey& key) override {
    live.erase(key.lkey);
    ++deregistrations;
  }
  std::map<uint32_t, std::pair<uintptr_t, size_t>> live;
  uint32_t nextKey = 0;
  int deregistrations = 0;
  bool failNext = false;
};

constexpr size_t kSlot = 16 * 1024;
constexpr size_t kMin = 4096;

struct Link {
  FakeQueue sq{4 * slotStride(kSlot)};
  FakeQueue rq{4 * slotStride(kSlot)};
  SendProtocol send{&sq, 1, 4, kSlot};
  RecvProtocol recv{&rq, 0, 4, kSlot};
  KeyRegistrar reg;
  RegistrationCache cache{&reg, 16, size_t{1} << 30, 4096};
  UserSends user{&send, &cache, kMin};

  Link() {
    FakeQueue::pair(sq, rq);
    REQUIRE(recv.start().isOk());
  }
  Status post(const void* src, size_t n, uint64_t tag) {
    Slot s;
    BRAID_RETURN_IF_ERROR(send.reserve(&s));
    s.tag = tag;
    return user.post(s, src, n);
  }
  // The next message's bytes, released.
  std::vector<uint8_t> take() {
    Slot s;
    REQUIRE(recv.peek(&s).isOk());
    std::vector<uint8_t> got(static_cast<const uint8_t*>(s.data), static_cast<const uint8_t*>(s.data) + s.bytes);
    REQUIRE(recv.release(s).isOk());
    return got;
  }
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13);
  return v;
}

}  // namespace

TEST_CASE("ibverbs user sends: a large payload goes from user memory, held registered until its write completes",
          "[ibverbs]") {
  Link l;
  std::vector<uint8_t> buf = pattern(12000, 7);
  l.sq.holdLocalCompletions(true);
  REQUIRE(l.post(buf.data() + 1, 10000, 5).isOk());
  CHECK(l.sq.writesFromUser() == 1);
  CHECK(l.user.sentFromUser() == 1);
  REQUIRE(l.reg.live.size() == 1);
  CHECK(l.sq.lastUserKey() == l.reg.live.begin()->first);
  // The data is at the receiver, but the NIC has not said it is done reading.
  CHECK(l.take() == std::vector<uint8_t>(buf.begin() + 1, buf.begin() + 10001));
  REQUIRE(l.send.progress().isOk());
  l.user.reap();
  CHECK(l.user.held() == 1);
  // Unmapped meanwhile: the region leaves the lookup, and goes once the write is done.
  l.cache.noteUnmapped(buf.data(), buf.size());
  REQUIRE(l.post(buf.data(), 8192, 6).isOk());  // a new registration, not the held one
  CHECK(l.reg.live.size() == 2);
  CHECK(l.sq.lastUserKey() == 2);
  l.sq.holdLocalCompletions(false);
  REQUIRE(l.send.progress().isOk());
  l.user.reap();
  CHECK(l.user.held() == 0);
  CHECK(l.reg.live.size() == 1);  // the stale one deregistered, the new one cached
  CHECK(l.reg.deregistrations == 1);
  CHECK(l.take() == std::vector<uint8_t>(buf.begin(), buf.begin() + 8192));
  // Again from the same buffer: a hit, no registration.
  REQUIRE(l.post(buf.data() + 100, 5000, 7).isOk());
  CHECK(l.reg.nextKey == 2);
  CHECK(l.take() == std::vector<uint8_t>(buf.begin() + 100, buf.begin() + 5100));
  REQUIRE(l.send.progress().isOk());
  CHECK(l.send.flushed());
}

TEST_CASE("ibverbs user sends: small payloads and unregistrable memory go through the slot", "[ibverbs]") {
  Link l;
  std::vector<uint8_t> buf = pattern(kSlot, 3);
  REQUIRE(l.post(buf.data(), kMin - 1, 1).isOk());
  CHECK(l.sq.writesFromUser() == 0);
  CHECK(l.reg.nextKey == 0);
  CHECK(l.take() == std::vector<uint8_t>(buf.begin(), buf.begin() + kMin - 1));
  REQUIRE(l.post(buf.data(), 0, 2).isOk());
  CHECK(l.take().empty());
  l.reg.failNext = true;  // read-only memory, or over the locked-memory limit
  REQUIRE(l.post(buf.data(), kSlot, 3).isOk());
  CHECK(l.sq.writesFromUser() == 0);
  CHECK(l.user.copied() == 3);
  CHECK(l.take() == buf);
  // The next registration works again.
  REQUIRE(l.post(buf.data(), kSlot, 4).isOk());
  CHECK(l.sq.writesFromUser() == 1);
  CHECK(l.take() == buf);
  // More than a slot is the protocol's error, whichever way it would go.
  std::vector<uint8_t> big(kSlot + 1);
  Slot s;
  REQUIRE(l.send.progress().isOk());
  REQUIRE(l.send.reserve(&s).isOk());
  CHECK(l.user.post(s, big.data(), big.size()).code() == Code::kInvalidArgument);
}

TEST_CASE("ibverbs user sends: a connection going away lets go of what its writes held", "[ibverbs]") {
  FakeQueue sq{4 * slotStride(kSlot)}, rq{4 * slotStride(kSlot)};
  FakeQueue::pair(sq, rq);
  KeyRegistrar reg;
  {
    RegistrationCache cache{&reg, 16, size_t{1} << 30, 4096};
    SendProtocol send{&sq, 1, 4, kSlot};
    RecvProtocol recv{&rq, 0, 4, kSlot};
    REQUIRE(recv.start().isOk());
    std::vector<uint8_t> buf = pattern(kSlot, 9);
    {
      UserSends user{&send, &cache, kMin};
      sq.holdLocalCompletions(true);
      Slot s;
      REQUIRE(send.reserve(&s).isOk());
      REQUIRE(user.post(s, buf.data(), kSlot).isOk());
      CHECK(user.held() == 1);
      cache.noteUnmapped(buf.data(), kSlot);
      REQUIRE(send.reserve(&s).isOk());
      REQUIRE(user.post(s, buf.data(), kSlot).isOk());  // registers anew (the lookup drains the unmap)
      CHECK(reg.live.size() == 2);
    }
    // The stale region went with its last holder; the other stays cached.
    CHECK(reg.live.size() == 1);
  }
  CHECK(reg.live.empty());
}

TEST_CASE("ibverbs user sends: BRAID_IB_ZCOPY and BRAID_IB_ZCOPY_MIN are read, and bad values named", "[ibverbs]") {
  ZeroCopySettings z = zeroCopySettings(nullptr, nullptr);
  CHECK(z.on);
  CHECK(z.minBytes == ZeroCopySettings::kDefaultMinBytes);
  CHECK(z.warning.empty());

  z = zeroCopySettings("0", "131072");
  CHECK_FALSE(z.on);
  CHECK(z.minBytes == 131072);
  CHECK(z.warning.empty());
  z = zeroCopySettings("1", "0");
  CHECK(z.on);
  CHECK(z.minBytes == 0);
  CHECK(z.warning.empty());

  // Unreadable values keep the defaults, and the warning names each variable and value.
  z = zeroCopySettings("maybe", "64K");
  CHECK(z.on);
  CHECK(z.minBytes == ZeroCopySettings::kDefaultMinBytes);
  CHECK(z.warning.find("BRAID_IB_ZCOPY='maybe' is not 0 or 1") != std::string::npos);
  CHECK(z.warning.find("BRAID_IB_ZCOPY_MIN='64K' is not a number of bytes; using 65536") != std::string::npos);
  for (const char* bad : {"-1", " -1", "+5", "12x", "99999999999999999999999"}) {
    z = zeroCopySettings(nullptr, bad);
    CHECK(z.minBytes == ZeroCopySettings::kDefaultMinBytes);
    CHECK(z.warning.find("BRAID_IB_ZCOPY_MIN='" + std::string(bad) + "'") != std::string::npos);
  }
  // As libbraid's switches: true and false, and empty for unset.
  z = zeroCopySettings("false", "");
  CHECK_FALSE(z.on);
  CHECK(z.minBytes == ZeroCopySettings::kDefaultMinBytes);
  CHECK(z.warning.empty());
  z = zeroCopySettings("true", nullptr);
  CHECK(z.on);
  CHECK(z.warning.empty());
  z = zeroCopySettings("", nullptr);
  CHECK(z.on);
  CHECK(z.warning.empty());
}

TEST_CASE("registration cache: unmaps noted from a hook apply at the next lookup", "[ibverbs]") {
  KeyRegistrar reg;
  RegistrationCache cache{&reg, 64, size_t{1} << 30, 4096};
  const uintptr_t base = 0x40000000;
  auto at = [](uintptr_t a) { return reinterpret_cast<const void*>(a); };
  auto r1 = cache.acquire(at(base), 8192);
  REQUIRE(r1.isOk());
  cache.release(r1.value());
  auto r2 = cache.acquire(at(base + 0x100000), 4096);
  REQUIRE(r2.isOk());  // held
  // Unmaps outside every region are not even queued; the lookup still hits.
  cache.noteUnmapped(at(base - 0x10000), 0x10000);
  cache.noteUnmapped(at(base + 0x200000), 4096);
  cache.noteUnmapped(at(base + 8192), 100);
  auto hit = cache.acquire(at(base), 100);
  REQUIRE(hit.isOk());
  CHECK(cache.stats().hits == 1);
  cache.release(hit.value());
  // One byte of the first region unmapped: the region goes at the next lookup.
  cache.noteUnmapped(at(base + 4095), 1);
  CHECK(cache.entries() == 2);  // nothing happens before a lookup
  auto miss = cache.acquire(at(base), 100);
  REQUIRE(miss.isOk());
  CHECK(cache.stats().misses == 3);
  CHECK(reg.deregistrations == 1);
  cache.release(miss.value());
  // More unmaps than the queue holds: everything is invalidated; the held region stays
  // registered until released.
  for (int i = 0; i < RegistrationCache::kPendingMax + 1; ++i) cache.noteUnmapped(at(base + 0x100000), 4096);
  auto again = cache.acquire(at(base + 0x100000), 4096);
  REQUIRE(again.isOk());
  CHECK(again.value() != r2.value());
  CHECK(reg.live.size() == 2);  // the held stale one and the new one
  cache.release(r2.value());
  CHECK(reg.live.size() == 1);
  cache.release(again.value());
}

TEST_CASE("ibverbs memory hooks: munmap, mmap over, madvise and mremap of registered memory reach the cache",
          "[ibverbs]") {
  KeyRegistrar reg;
  RegistrationCache cache{&reg, 64, size_t{1} << 30, static_cast<size_t>(sysconf(_SC_PAGESIZE))};
  auto watch = UnmapWatch::start(&cache);
#ifndef BRAID_HAVE_UCM
  REQUIRE_FALSE(watch.isOk());
  CHECK(watch.status().message().find("libucm") != std::string::npos);
  SKIP("built without UCX's memory hooks: " << watch.status().message());
#else
  REQUIRE(watch.isOk());
  const size_t len = 8 * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  // Has p registered (and cached), then asks again after `change`: a miss says the cache
  // heard of it.
  auto missesAfter = [&](const char* what, auto change) {
    INFO(what);
    auto r = cache.acquire(p, len);
    REQUIRE(r.isOk());
    cache.release(r.value());
    const uint64_t before = cache.stats().misses;
    change();
    auto after = cache.acquire(p, len);
    REQUIRE(after.isOk());
    cache.release(after.value());
    return cache.stats().misses - before;
  };
  CHECK(missesAfter("mmap MAP_FIXED over it", [&] {
          REQUIRE(mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == p);
        }) == 1);
  CHECK(missesAfter("madvise MADV_DONTNEED of one page", [&] {
          REQUIRE(madvise(static_cast<char*>(p) + len / 2, 4096, MADV_DONTNEED) == 0);
        }) == 1);
  CHECK(missesAfter("munmap of one page and a new mapping there", [&] {
          REQUIRE(munmap(p, 4096) == 0);
          REQUIRE(mmap(p, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == p);
        }) == 1);
  CHECK(missesAfter("nothing", [] {}) == 0);
  // Memory elsewhere coming and going leaves the cache alone.
  CHECK(missesAfter("another mapping unmapped", [&] {
          void* q = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          REQUIRE(q != MAP_FAILED);
          REQUIRE(munmap(q, 4096) == 0);
        }) == 0);
  watch.value().reset();
  // Stopped: the cache hears nothing more.
  CHECK(missesAfter("after the watch stopped", [&] {
          REQUIRE(madvise(p, 4096, MADV_DONTNEED) == 0);
        }) == 0);
  munmap(p, len);
#endif
}

}  // namespace braid::transport::ibverbs::test
