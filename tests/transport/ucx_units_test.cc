// Pieces of the UCX plugin that need no UCX worker, built into a test of their own.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

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
