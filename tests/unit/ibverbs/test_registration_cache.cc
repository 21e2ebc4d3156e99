// The registration cache for user buffers, over a fake registrar that records what is
// registered (addresses are never touched, so made-up ones do).

#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "support/catch.h"
#include "transports/ibverbs/registration_cache.h"

namespace braid::transport::ibverbs::test {
namespace {

constexpr size_t kPage = 4096;

class FakeRegistrar final : public Registrar {
 public:
  StatusOr<MemoryKey> registerRegion(void* addr, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu);
    if (failNext) {
      failNext = false;
      return Status(Code::kSystemError, "ibv_reg_mr: Cannot allocate memory");
    }
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    // Catch2's assertions are not thread-safe: count misuse, tests check the count.
    if (a % kPage != 0 || bytes % kPage != 0) ++misuse;
    MemoryKey k;
    k.lkey = k.rkey = ++nextKey;
    k.handle = reinterpret_cast<void*>(static_cast<uintptr_t>(k.lkey));
    live[k.lkey] = {a, bytes};
    ++registrations;
    return k;
  }
  void deregisterRegion(const MemoryKey& key) override {
    std::lock_guard<std::mutex> lock(mu);
    if (live.erase(key.lkey) != 1) ++misuse;  // exactly once per registration
    ++deregistrations;
  }

  std::mutex mu;
  std::map<uint32_t, std::pair<uintptr_t, size_t>> live;
  uint32_t nextKey = 0;
  int registrations = 0;
  int deregistrations = 0;
  bool failNext = false;
  int misuse = 0;
  ~FakeRegistrar() { CHECK(misuse == 0); }
};

const void* at(uintptr_t a) { return reinterpret_cast<const void*>(a); }

constexpr uintptr_t kBase = 0x10000000;

}  // namespace

TEST_CASE("registration cache: a covered range is a hit, page-rounded, reference counted", "[ibverbs]") {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 16, 1 << 30, kPage);
  auto a = cache.acquire(at(kBase + 100), 3 * kPage);  // spans 4 pages
  REQUIRE(a.isOk());
  CHECK(a.value()->start == kBase);
  CHECK(a.value()->end == kBase + 4 * kPage);
  CHECK(a.value()->refs == 1);
  CHECK(reg.registrations == 1);

  auto b = cache.acquire(at(kBase + kPage), kPage);  // inside: no new registration
  REQUIRE(b.isOk());
  CHECK(b.value() == a.value());
  CHECK(a.value()->refs == 2);
  CHECK(reg.registrations == 1);
  CHECK(cache.stats().hits == 1);
  CHECK(cache.stats().misses == 1);

  cache.release(b.value());
  cache.release(a.value());
  // Unreferenced but cached: the next use is still a hit.
  auto c = cache.acquire(at(kBase), 10);
  REQUIRE(c.isOk());
  CHECK(reg.registrations == 1);
  CHECK(c.value()->key.lkey == a.value()->key.lkey);
  cache.release(c.value());
  CHECK(cache.entries() == 1);
  CHECK(cache.bytes() == 4 * kPage);
}

TEST_CASE("registration cache: empty and wrapping ranges are refused", "[ibverbs]") {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 16, 1 << 30, kPage);
  CHECK(cache.acquire(at(kBase), 0).status().code() == Code::kInvalidArgument);
  CHECK(cache.acquire(at(UINTPTR_MAX - 10), 100).status().code() == Code::kInvalidArgument);
  CHECK(reg.registrations == 0);
}

TEST_CASE("registration cache: least recently used unreferenced regions are evicted", "[ibverbs]") {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 3, 1 << 30, kPage);
  std::vector<const RegistrationCache::Region*> r;
  for (int i = 0; i < 3; ++i) {
    auto x = cache.acquire(at(kBase + static_cast<uintptr_t>(i) * 16 * kPage), kPage);
    REQUIRE(x.isOk());
    r.push_back(x.value());
  }
  // Release in the order 1, 0, 2: region 1 is the least recently used.
  cache.release(r[1]);
  cache.release(r[0]);
  cache.release(r[2]);
  auto d = cache.acquire(at(kBase + 100 * kPage), kPage);
  REQUIRE(d.isOk());
  CHECK(cache.entries() == 3);
  CHECK(cache.stats().evictions == 1);
  // Region 1's range now misses; region 0's still hits.
  const int before = reg.registrations;
  auto hit = cache.acquire(at(kBase), kPage);
  REQUIRE(hit.isOk());
  CHECK(reg.registrations == before);
  auto miss = cache.acquire(at(kBase + 16 * kPage), kPage);
  REQUIRE(miss.isOk());
  CHECK(reg.registrations == before + 1);
  cache.release(hit.value());
  cache.release(miss.value());
  cache.release(d.value());
}

TEST_CASE("registration cache: the byte budget evicts too, but never a held region", "[ibverbs]") {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 100, 8 * kPage, kPage);
  auto big = cache.acquire(at(kBase), 6 * kPage);
  REQUIRE(big.isOk());
  auto other = cache.acquire(at(kBase + 64 * kPage), 4 * kPage);  // 10 pages held: over budget
  REQUIRE(other.isOk());
  CHECK(cache.bytes() == 10 * kPage);
  CHECK(cache.stats().evictions == 0);
  cache.release(big.value());  // now evictable, and the cache is over budget
  CHECK(cache.stats().evictions == 1);
  CHECK(cache.bytes() == 4 * kPage);
  cache.release(other.value());
  CHECK(cache.entries() == 1);
  CHECK(reg.live.size() == 1);
}

TEST_CASE("registration cache: overlapping unreferenced regions merge into one", "[ibverbs]") {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 16, 1 << 30, kPage);
  auto a = cache.acquire(at(kBase), 2 * kPage);
  auto b = cache.acquire(at(kBase + 4 * kPage), 2 * kPage);
  REQUIRE(a.isOk());
  REQUIRE(b.isOk());
  cache.release(a.value());
  cache.release(b.value());
  // A buffer that grew over both.
  auto c = cache.acquire(at(kBase + kPage), 4 * kPage);
  REQUIRE(c.isOk());
  CHECK(c.value()->start == kBase);
  CHECK(c.value()->end == kBase + 6 * kPage);
  CHECK(cache.entries() == 1);
  CHECK(cache.stats().merges == 2);
  CHECK(reg.live.size() == 1);
  cache.release(c.value());
}

TEST_CASE("registration cache: a held region is not merged away, and overlaps coexist", "[ibverbs]") {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 16, 1 << 30, kPage);
  auto held = cache.acquire(at(kBase), 2 * kPage);
  REQUIRE(held.isOk());
  auto wider = cache.acquire(at(kBase + kPage), 4 * kPage);
  REQUIRE(wider.isOk());
  CHECK(wider.value() != held.value());
  CHECK(cache.entries() == 2);
  CHECK(held.value()->refs == 1);
  // A range inside both is served by one of them, without registering again.
  const int before = reg.registrations;
  auto inner = cache.acquire(at(kBase + kPage), 10);
  REQUIRE(inner.isOk());
  CHECK(reg.registrations == before);
  cache.release(inner.value());
  cache.release(held.value());
  cache.release(wider.value());
}

TEST_CASE("registration cache: invalidate drops free regions now and held ones on release", "[ibverbs]") {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 16, 1 << 30, kPage);
  auto freeOne = cache.acquire(at(kBase), kPage);
  auto heldOne = cache.acquire(at(kBase + 8 * kPage), kPage);
  auto untouched = cache.acquire(at(kBase + 64 * kPage), kPage);
  REQUIRE(freeOne.isOk());
  REQUIRE(heldOne.isOk());
  REQUIRE(untouched.isOk());
  cache.release(freeOne.value());
  cache.release(untouched.value());

  cache.invalidate(at(kBase), 16 * kPage);  // the user freed the first 16 pages
  CHECK(reg.deregistrations == 1);
  CHECK(cache.entries() == 2);  // the held one lingers until released
  // The held region is no longer found: the same range registers afresh.
  auto again = cache.acquire(at(kBase + 8 * kPage), kPage);
  REQUIRE(again.isOk());
  CHECK(again.value() != heldOne.value());
  cache.release(heldOne.value());
  CHECK(reg.deregistrations == 2);
  cache.release(again.value());
  // The region outside the range is still cached.
  const int before = reg.registrations;
  auto hit = cache.acquire(at(kBase + 64 * kPage), kPage);
  REQUIRE(hit.isOk());
  CHECK(reg.registrations == before);
  cache.release(hit.value());
}

TEST_CASE("registration cache: a failed registration is reported and leaves the cache as it was", "[ibverbs]") {
  FakeRegistrar reg;
  RegistrationCache cache(&reg, 16, 1 << 30, kPage);
  auto a = cache.acquire(at(kBase), kPage);
  REQUIRE(a.isOk());
  cache.release(a.value());
  reg.failNext = true;
  auto b = cache.acquire(at(kBase), 4 * kPage);  // would merge region a
  REQUIRE_FALSE(b.isOk());
  CHECK(b.status().code() == Code::kSystemError);
  CHECK(b.status().message().find("ibv_reg_mr") != std::string::npos);
  CHECK(cache.entries() == 1);
  CHECK(reg.live.size() == 1);
  auto c = cache.acquire(at(kBase), kPage);
  CHECK(c.isOk());
  cache.release(c.value());
}

TEST_CASE("registration cache: destruction deregisters everything", "[ibverbs]") {
  FakeRegistrar reg;
  {
    RegistrationCache cache(&reg, 16, 1 << 30, kPage);
    for (int i = 0; i < 5; ++i) {
      auto r = cache.acquire(at(kBase + static_cast<uintptr_t>(i) * 32 * kPage), kPage);
      REQUIRE(r.isOk());
      cache.release(r.value());
    }
    CHECK(reg.live.size() == 5);
  }
  CHECK(reg.live.empty());
}

TEST_CASE("registration cache: concurrent users keep counts consistent", "[ibverbs]") {
  FakeRegistrar reg;
  {
    RegistrationCache cache(&reg, 8, 64 * kPage, kPage);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&cache, t] {
        std::mt19937 rng(static_cast<unsigned>(t) + 1);
        std::vector<const RegistrationCache::Region*> held;
        for (int i = 0; i < 2000; ++i) {
          if (held.size() < 3 && rng() % 2 == 0) {
            const uintptr_t a = kBase + (rng() % 64) * kPage + rng() % kPage;
            auto r = cache.acquire(at(a), 1 + rng() % (3 * kPage));
            if (r.isOk()) {
              if (r.value()->start > a) std::abort();  // must cover what was asked
              held.push_back(r.value());
            }
          } else if (!held.empty()) {
            cache.release(held.back());
            held.pop_back();
          }
        }
        for (auto* r : held) cache.release(r);
      });
    }
    for (auto& th : threads) th.join();
    CHECK(cache.entries() == reg.live.size());
    CHECK(cache.entries() <= 8);
    CHECK(cache.bytes() <= 64 * kPage);
  }
  CHECK(reg.live.empty());
}

}  // namespace braid::transport::ibverbs::test
