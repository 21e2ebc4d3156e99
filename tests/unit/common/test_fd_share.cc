// fd_share: a descriptor published by one process and fetched by another through its ticket,
// and every way a fetch is refused.

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>

#include "common/fd_share.h"
#include "support/catch.h"

using namespace braid;

namespace {

// A 4 KiB memory file holding `text` at its start.
int memoryFile(const char* text) {
  const int fd = ::memfd_create("fd-share-test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 4096) == 0);
  REQUIRE(::pwrite(fd, text, std::strlen(text) + 1, 0) == static_cast<ssize_t>(std::strlen(text) + 1));
  return fd;
}

std::string readText(int fd) {
  char buf[64] = {};
  REQUIRE(::pread(fd, buf, sizeof buf - 1, 0) > 0);
  return buf;
}

// Replaces the last hex digit of `ticket` with another.
std::string otherSecret(std::string ticket) {
  ticket.back() = ticket.back() == '0' ? '1' : '0';
  return ticket;
}

}  // namespace

TEST_CASE("fd_share: another process fetches the published descriptor and shares its memory", "[fd_share]") {
  const int fd = memoryFile("published");
  auto ticket = publishFd(fd);
  REQUIRE(ticket.isOk());
  CHECK(ticket.value().find_first_of(":|;") == std::string::npos);
  CHECK(publishedFds() == 1);
  auto* mine = static_cast<char*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  REQUIRE(mine != MAP_FAILED);

  const pid_t child = ::fork();
  if (child == 0) {
    alarm(20);
    // 0: fetched, mapped and written; 1-3: which step failed.
    auto got = fetchFd(ticket.value(), 5000);
    if (!got.isOk()) _exit(1);
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, got.value(), 0);
    if (p == MAP_FAILED) _exit(2);
    if (std::strcmp(static_cast<char*>(p), "published") != 0) _exit(3);
    std::strcpy(static_cast<char*>(p) + 100, "written by the child");
    // The child publishes nothing of its parent's.
    _exit(publishedFds() == 0 ? 0 : 4);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::string(mine + 100) == "written by the child");

  // The publisher's own copy is a duplicate: closing the caller's descriptor keeps it.
  ::munmap(mine, 4096);
  ::close(fd);
  auto again = fetchFd(ticket.value(), 5000);
  REQUIRE(again.isOk());
  CHECK(readText(again.value()) == "published");
  ::close(again.value());

  withdrawFd(ticket.value());
  CHECK(publishedFds() == 0);
  auto gone = fetchFd(ticket.value(), 2000);
  REQUIRE_FALSE(gone.isOk());
  // The last withdrawal stopped the server: nobody answers for its socket any more.
  CHECK(gone.status().message().find("no process answers") != std::string::npos);
}

TEST_CASE("fd_share: a wrong secret, a withdrawn descriptor and malformed tickets are refused", "[fd_share]") {
  const int a = memoryFile("first"), b = memoryFile("second");
  auto ta = publishFd(a), tb = publishFd(b);
  REQUIRE(ta.isOk());
  REQUIRE(tb.isOk());
  CHECK(ta.value() != tb.value());

  auto wrong = fetchFd(otherSecret(ta.value()), 2000);
  REQUIRE_FALSE(wrong.isOk());
  CHECK(wrong.status().message().find("secret is wrong") != std::string::npos);

  // One withdrawn, the other still served by the same socket.
  withdrawFd(ta.value());
  auto withdrawn = fetchFd(ta.value(), 2000);
  REQUIRE_FALSE(withdrawn.isOk());
  CHECK(withdrawn.status().message().find("withdrawn") != std::string::npos);
  auto second = fetchFd(tb.value(), 2000);
  REQUIRE(second.isOk());
  CHECK(readText(second.value()) == "second");
  ::close(second.value());

  for (const std::string& bad :
       {std::string(""), std::string("fd."), std::string("fd..1.00"), std::string("xx.name.1.00"),
        tb.value().substr(0, tb.value().size() - 1), tb.value() + ".more", std::string("fd.name.x1.") + std::string(32, '0'),
        std::string("fd.name.1.") + std::string(32, 'g')}) {
    auto r = fetchFd(bad, 2000);
    REQUIRE_FALSE(r.isOk());
    INFO(bad);
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find("malformed ticket") != std::string::npos);
  }
  // Well formed, but nobody publishes under that name.
  auto nobody = fetchFd("fd.braid-fd-nobody.1." + std::string(32, '0'), 2000);
  REQUIRE_FALSE(nobody.isOk());
  CHECK(nobody.status().message().find("no process answers for braid-fd-nobody") != std::string::npos);

  withdrawFd(tb.value());
  withdrawFd(tb.value());  // twice: ignored
  withdrawFd("fd.elsewhere.3.00");
  CHECK(publishedFds() == 0);
  ::close(a);
  ::close(b);
}

TEST_CASE("fd_share: a process of another user is refused", "[fd_share]") {
  if (::geteuid() != 0) {
    WARN("skipped: fetching as another user needs root");
    return;
  }
  const int fd = memoryFile("private");
  auto ticket = publishFd(fd);
  REQUIRE(ticket.isOk());
  const pid_t child = ::fork();
  if (child == 0) {
    alarm(20);
    if (::setresuid(65534, 65534, 65534) != 0) _exit(10);
    auto got = fetchFd(ticket.value(), 5000);
    if (got.isOk()) _exit(1);
    _exit(got.status().message().find("its own user") != std::string::npos ? 0 : 2);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  withdrawFd(ticket.value());
  ::close(fd);
}

TEST_CASE("fd_share: a caller that connects and says nothing holds the others up for a second at most",
          "[fd_share]") {
  const int fd = memoryFile("patient");
  auto ticket = publishFd(fd);
  REQUIRE(ticket.isOk());
  // "fd.<socket>.<id>.<secret>": connect to the socket and send nothing.
  const std::string& t = ticket.value();
  const std::string name = t.substr(3, t.find('.', 3) - 3);
  const int silent = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(silent >= 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  REQUIRE(::connect(silent, reinterpret_cast<sockaddr*>(&a),
                    static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto got = fetchFd(t, 5000);
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE(got.isOk());
  CHECK(readText(got.value()) == "patient");
  CHECK(waited < std::chrono::milliseconds(3000));
  ::close(got.value());
  ::close(silent);
  withdrawFd(t);
  ::close(fd);
}
