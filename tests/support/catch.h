#pragma once
// Catch2 for tests whose ranks are threads. Catch2 v2 keeps one run context (assertion
// counts, the INFO stack, a pool of string streams) and updates it with no lock, so rank
// threads asserting at once race on it: ThreadSanitizer reports it, and a count or a message
// can be lost. Here every assertion and message macro a test uses holds one process-wide lock
// while Catch runs it (the approach Catch2 3.9 takes with its thread-safe assertions). Test
// files include this instead of <catch2/catch.hpp>.
//
// Left as they are: a REQUIRE that fails on a thread other than the test's own still ends
// the process (Catch2 unwinds with an exception nobody catches there), so rank threads use
// CHECK, or return what they found for the test's thread to REQUIRE.

#include <catch2/catch.hpp>
#include <memory>
#include <mutex>
#include <utility>

namespace braid::test {

inline std::recursive_mutex& catchMutex() {
  static std::recursive_mutex m;
  return m;
}

// Holds the lock for the rest of a full-expression: INFO creates one before Catch's message
// builder, so the builder (which borrows from Catch's string-stream pool) is made and
// destroyed under the lock.
class CatchGuard {
 public:
  CatchGuard() { catchMutex().lock(); }
  ~CatchGuard() { catchMutex().unlock(); }
  CatchGuard(const CatchGuard&) = delete;
  CatchGuard& operator=(const CatchGuard&) = delete;
};

// INFO's scoped message, pushed (under the CatchGuard of its full-expression) and popped
// under the lock.
class LockedScopedMessage {
 public:
  explicit LockedScopedMessage(const Catch::MessageBuilder& builder)
      : message_(std::make_unique<Catch::ScopedMessage>(builder)) {}
  ~LockedScopedMessage() {
    std::lock_guard<std::recursive_mutex> lock(catchMutex());
    message_.reset();
  }
  LockedScopedMessage(const LockedScopedMessage&) = delete;
  LockedScopedMessage& operator=(const LockedScopedMessage&) = delete;

 private:
  std::unique_ptr<Catch::ScopedMessage> message_;
};

}  // namespace braid::test

#define BRAID_CATCH_LOCKED_(...)                                                                 \
  do {                                                                                           \
    std::lock_guard<std::recursive_mutex> braidCatchLock_(::braid::test::catchMutex());         \
    __VA_ARGS__;                                                                                 \
  } while (false)

#undef REQUIRE
#undef REQUIRE_FALSE
#undef REQUIRE_THROWS
#undef REQUIRE_THROWS_AS
#undef REQUIRE_THROWS_WITH
#undef REQUIRE_NOTHROW
#undef REQUIRE_THAT
#undef CHECK
#undef CHECK_FALSE
#undef CHECK_NOFAIL
#undef CHECK_THROWS
#undef CHECK_THROWS_AS
#undef CHECK_THROWS_WITH
#undef CHECK_NOTHROW
#undef CHECK_THAT
#undef INFO
#undef WARN
#undef FAIL
#undef FAIL_CHECK
#undef SUCCEED

// clang-format off
#define REQUIRE(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_TEST("REQUIRE", Catch::ResultDisposition::Normal, __VA_ARGS__))
#define REQUIRE_FALSE(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_TEST("REQUIRE_FALSE", Catch::ResultDisposition::Normal | Catch::ResultDisposition::FalseTest, __VA_ARGS__))
#define REQUIRE_THROWS(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_THROWS("REQUIRE_THROWS", Catch::ResultDisposition::Normal, __VA_ARGS__))
#define REQUIRE_THROWS_AS(expr, exceptionType) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_THROWS_AS("REQUIRE_THROWS_AS", exceptionType, Catch::ResultDisposition::Normal, expr))
#define REQUIRE_THROWS_WITH(expr, matcher) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_THROWS_STR_MATCHES("REQUIRE_THROWS_WITH", Catch::ResultDisposition::Normal, matcher, expr))
#define REQUIRE_NOTHROW(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_NO_THROW("REQUIRE_NOTHROW", Catch::ResultDisposition::Normal, __VA_ARGS__))
#define REQUIRE_THAT(arg, matcher) BRAID_CATCH_LOCKED_(INTERNAL_CHECK_THAT("REQUIRE_THAT", matcher, Catch::ResultDisposition::Normal, arg))
#define CHECK(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_TEST("CHECK", Catch::ResultDisposition::ContinueOnFailure, __VA_ARGS__))
#define CHECK_FALSE(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_TEST("CHECK_FALSE", Catch::ResultDisposition::ContinueOnFailure | Catch::ResultDisposition::FalseTest, __VA_ARGS__))
#define CHECK_NOFAIL(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_TEST("CHECK_NOFAIL", Catch::ResultDisposition::ContinueOnFailure | Catch::ResultDisposition::SuppressFail, __VA_ARGS__))
#define CHECK_THROWS(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_THROWS("CHECK_THROWS", Catch::ResultDisposition::ContinueOnFailure, __VA_ARGS__))
#define CHECK_THROWS_AS(expr, exceptionType) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_THROWS_AS("CHECK_THROWS_AS", exceptionType, Catch::ResultDisposition::ContinueOnFailure, expr))
#define CHECK_THROWS_WITH(expr, matcher) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_THROWS_STR_MATCHES("CHECK_THROWS_WITH", Catch::ResultDisposition::ContinueOnFailure, matcher, expr))
#define CHECK_NOTHROW(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_NO_THROW("CHECK_NOTHROW", Catch::ResultDisposition::ContinueOnFailure, __VA_ARGS__))
#define CHECK_THAT(arg, matcher) BRAID_CATCH_LOCKED_(INTERNAL_CHECK_THAT("CHECK_THAT", matcher, Catch::ResultDisposition::ContinueOnFailure, arg))
#define INFO(msg) ::braid::test::LockedScopedMessage INTERNAL_CATCH_UNIQUE_NAME(braidScopedMessage)((::braid::test::CatchGuard(), Catch::MessageBuilder("INFO"_catch_sr, CATCH_INTERNAL_LINEINFO, Catch::ResultWas::Info) << msg))
#define WARN(msg) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_MSG("WARN", Catch::ResultWas::Warning, Catch::ResultDisposition::ContinueOnFailure, msg))
#define FAIL(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_MSG("FAIL", Catch::ResultWas::ExplicitFailure, Catch::ResultDisposition::Normal, __VA_ARGS__))
#define FAIL_CHECK(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_MSG("FAIL_CHECK", Catch::ResultWas::ExplicitFailure, Catch::ResultDisposition::ContinueOnFailure, __VA_ARGS__))
#define SUCCEED(...) BRAID_CATCH_LOCKED_(INTERNAL_CATCH_MSG("SUCCEED", Catch::ResultWas::Ok, Catch::ResultDisposition::ContinueOnFailure, __VA_ARGS__))
// clang-format on
