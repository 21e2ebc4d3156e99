// Pieces of the UCX plugin that need no UCX worker, built into a test of their own.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/catch.h"
#include "transports/ucx/ucx_connection.h"

using braid::transport::ucx::eagerMaxUnder;
using braid::transport::ucx::PeerBook;

TEST_CASE("ucx: the largest eager message under a UCX_RNDV_THRESH value", "[ucx]") {
  constexpr size_t kUnknown = 12345;
  CHECK(eagerMaxUnder("131073", kUnknown) == 131072);  // what braid sets over tcp
  CHECK(eagerMaxUnder("262145", kUnknown) == 262144);
  CHECK(eagerMaxUnder("65537", kUnknown) == 65536);    // ... and with shared memory
  CHECK(eagerMaxUnder("64k", kUnknown) == 65535);
  CHECK(eagerMaxUnder("64K", kUnknown) == 65535);
  CHECK(eagerMaxUnder("1mb", kUnknown) == (size_t{1} << 20) - 1);
  CHECK(eagerMaxUnder("2G", kUnknown) == (size_t{2} << 30) - 1);
  CHECK(eagerMaxUnder("inf", kUnknown) == SIZE_MAX);
  CHECK(eagerMaxUnder("99999999999999999999", kUnknown) == SIZE_MAX);  // beyond any message
  CHECK(eagerMaxUnder("18446744073709551615g", kUnknown) == SIZE_MAX);
  CHECK(eagerMaxUnder("-1", kUnknown) == kUnknown);
  CHECK(eagerMaxUnder(" 64k", kUnknown) == kUnknown);
  // UCX's own choice, and what does not parse: the caller's guess.
  CHECK(eagerMaxUnder("auto", kUnknown) == kUnknown);
  CHECK(eagerMaxUnder(nullptr, kUnknown) == kUnknown);
  CHECK(eagerMaxUnder("", kUnknown) == kUnknown);
  CHECK(eagerMaxUnder("0", kUnknown) == kUnknown);
  CHECK(eagerMaxUnder("64x", kUnknown) == kUnknown);
  CHECK(eagerMaxUnder("k", kUnknown) == kUnknown);
}

namespace {
// Asks a book about its peer from a static's destructor, as the plugin's teardown threads do
// while the process, at its exit, waits for them (ucx_transport.cc, Teardowns).
struct AskAtExit {
  PeerBook* book = nullptr;
  ~AskAtExit() {
    if (book && !book->isStalled(1)) std::_Exit(3);
  }
};
}  // namespace

// The processes found stopped or gone are kept for the whole process. A function's static
// made on first use is destroyed before a static made earlier, so a teardown still running
// at exit read the set after it was freed (AddressSanitizer: heap-use-after-free in
// PeerBook::isStalled, under a multi-process recovery test over UCX). The set is now never
// destroyed. This child asks it at exit after it was first used: under AddressSanitizer
// (CI's run of the transport tests) the child fails if the set went.
TEST_CASE("ucx: the peer processes found gone outlive the process's statics at exit", "[ucx]") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    static AskAtExit ask;  // made before the set below
    const pid_t gone = fork();
    if (gone == 0) _exit(0);
    waitpid(gone, nullptr, 0);
    auto* book = new PeerBook;  // outlives every static, as the teardown's does
    book->localHost = "this-host";
    book->ids[1] = {"this-host", gone};
    ask.book = book;
    book->markStalled(1);  // a gone process of this host: the set is made here, on first use
    book->stalled.clear();  // so the answer at exit comes from the set alone
    std::exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {
// dst = payload + local, doubles; counts the calls and the bytes they covered.
struct SumOf {
  size_t calls = 0, bytes = 0;
  static void fn(void* ctx, void* dst, const void* payload, const void* local, size_t bytes) {
    auto* self = static_cast<SumOf*>(ctx);
    ++self->calls;
    self->bytes += bytes;
    REQUIRE(bytes % sizeof(double) == 0);
    for (size_t i = 0; i < bytes / sizeof(double); ++i) {
      double p, l;
      std::memcpy(&p, static_cast<const char*>(payload) + i * sizeof(double), sizeof(double));
      std::memcpy(&l, static_cast<const char*>(local) + i * sizeof(double), sizeof(double));
      const double d = p + l;
      std::memcpy(static_cast<char*>(dst) + i * sizeof(double), &d, sizeof(double));
    }
  }
};
}  // namespace

TEST_CASE("ucx: a payload reduced as it arrives, in pieces that split elements, in any order", "[ucx]") {
  using braid::transport::ucx::ArrivalLanding;
  constexpr size_t kElems = 1000;
  std::vector<double> payload(kElems), local(kElems);
  for (size_t i = 0; i < kElems; ++i) {
    payload[i] = 0.5 * static_cast<double>(i);
    local[i] = 1000.0 + static_cast<double>(i);
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(payload.data());
  const size_t total = kElems * sizeof(double);
  // Piece boundaries: none on an element's edge but the ends, some pieces inside one element.
  const std::vector<size_t> cuts = {0, 3, 5, 13, 800, 803, 4001, 4002, 4003, total - 1, total};
  for (bool reversed : {false, true}) {
    for (bool inPlace : {false, true}) {
      std::vector<double> out(kElems, -7.0), mine = local;
      SumOf sum;
      ArrivalLanding a;
      a.r.local = inPlace ? static_cast<const void*>(mine.data()) : local.data();
      a.r.fn = &SumOf::fn;
      a.r.ctx = &sum;
      a.r.elemBytes = sizeof(double);
      a.dst = reinterpret_cast<char*>(inPlace ? mine.data() : out.data());
      a.bytes = total;
      std::vector<size_t> order;
      for (size_t k = 0; k + 1 < cuts.size(); ++k) order.push_back(k);
      if (reversed) std::reverse(order.begin(), order.end());
      for (size_t k : order) CHECK(a.unpack(cuts[k], bytes + cuts[k], cuts[k + 1] - cuts[k]));
      CHECK(a.whole());
      CHECK(sum.bytes == total);  // every element exactly once
      const std::vector<double>& got = inPlace ? mine : out;
      for (size_t i = 0; i < kElems; ++i) {
        INFO("element " << i << (reversed ? ", pieces reversed" : "") << (inPlace ? ", in place" : ""));
        REQUIRE(got[i] == payload[i] + local[i]);
      }
    }
  }
}

TEST_CASE("ucx: a payload reduced as it arrives refuses bytes past its end and writes nothing once dropped",
          "[ucx]") {
  using braid::transport::ucx::ArrivalLanding;
  std::vector<double> payload(8, 1.0), local(8, 2.0), out(8, -1.0);
  SumOf sum;
  ArrivalLanding a;
  a.r.local = local.data();
  a.r.fn = &SumOf::fn;
  a.r.ctx = &sum;
  a.r.elemBytes = sizeof(double);
  a.dst = reinterpret_cast<char*>(out.data());
  a.bytes = 8 * sizeof(double);
  CHECK_FALSE(a.unpack(60, payload.data(), 8));  // 4 bytes too many
  CHECK_FALSE(a.unpack(65, payload.data(), 0));
  CHECK(sum.calls == 0);
  // Half an element, then the rest: not whole in between.
  CHECK(a.unpack(0, payload.data(), 4));
  CHECK_FALSE(a.whole());
  CHECK(a.unpack(4, reinterpret_cast<const char*>(payload.data()) + 4, 4));
  CHECK(a.whole());
  CHECK(out[0] == 3.0);
  // Dropped (its operation is over): bytes are taken and nothing is written.
  a.r.fn = nullptr;
  CHECK(a.unpack(8, payload.data() + 1, 7 * sizeof(double)));
  for (size_t i = 1; i < 8; ++i) CHECK(out[i] == -1.0);
}
