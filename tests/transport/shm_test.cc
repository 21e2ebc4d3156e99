// Shared-memory segment names: random, created exclusively, skipped when taken, gone from
// /dev/shm once the sender has mapped them, and removable by their creator's pid.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "common/shm_names.h"
#include "support/catch.h"
#include "transports/shm/shm_connection.h"

using namespace braid;

namespace {

bool inDevShm(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("shm names: the creator's pid and 64 random bits, never the same twice", "[transport][shm]") {
  std::set<std::string> seen;
  const std::string prefix = "/braid-" + std::to_string(getpid()) + "-";
  for (int i = 0; i < 1000; ++i) {
    std::string n = newSegmentName();
    CHECK(n.rfind(prefix, 0) == 0);
    CHECK(n.size() == prefix.size() + 16);
    CHECK(isSegmentName(n));
    CHECK(isSegmentName(n.substr(1)));
    seen.insert(n);
  }
  CHECK(seen.size() == 1000);
  for (const char* bad : {"/braid-", "/braid-12-", "/braid-12-0123456789abcde", "/braid-12-0123456789abcdefg",
                          "/braid--0123456789abcdef", "/braid-x1-0123456789abcdef", "/other-12-0123456789abcdef",
                          "/braid-0123456789abcdef0123456789abcdef-1-2-3", "/braid-12345678901-0123456789abcdef"}) {
    INFO(bad);
    CHECK_FALSE(isSegmentName(bad));
  }
}

TEST_CASE("shm: a name someone already holds is skipped, never opened", "[transport][shm]") {
  // A stranger's segment under the first name braid would try.
  const std::string taken = newSegmentName();
  int fd = shm_open(taken.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  close(fd);
  std::vector<std::string> tried;
  std::string fresh = newSegmentName();
  auto names = [&]() {
    tried.push_back(tried.empty() ? taken : fresh);
    return tried.back();
  };
  auto seg = transport::shm::createSegment(names, 4, 4096, 42, -1);
  REQUIRE(seg.isOk());
  CHECK(seg.value()->name == fresh);
  CHECK(tried.size() == 2);
  // The stranger's segment is untouched (still empty: braid did not size or format it).
  fd = shm_open(taken.c_str(), O_RDONLY, 0);
  REQUIRE(fd >= 0);
  CHECK(lseek(fd, 0, SEEK_END) == 0);
  close(fd);
  shm_unlink(fresh.c_str());
  delete seg.value();

  // Every name taken: a clear error naming them, after a bounded number of tries.
  int calls = 0;
  auto always = [&]() {
    ++calls;
    return taken;
  };
  auto none = transport::shm::createSegment(always, 4, 4096, 42, -1);
  REQUIRE_FALSE(none.isOk());
  CHECK(none.status().message().find("already exists") != std::string::npos);
  CHECK(none.status().message().find(taken) != std::string::npos);
  CHECK(calls == 16);
  shm_unlink(taken.c_str());
}

TEST_CASE("shm: removeSegmentsOf removes a dead process's segments and nobody else's", "[transport][shm]") {
  // A child creates two segments and dies by SIGKILL without unlinking them.
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(pipefd[0]);
    for (int i = 0; i < 2; ++i) {
      std::string n = newSegmentName();
      int fd = shm_open(n.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0) _exit(3);
      close(fd);
      n += "\n";
      if (write(pipefd[1], n.data(), n.size()) != static_cast<ssize_t>(n.size())) _exit(4);
    }
    close(pipefd[1]);
    raise(SIGKILL);
    _exit(5);
  }
  close(pipefd[1]);
  std::string got;
  char buf[256];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  std::vector<std::string> left;
  for (size_t at = 0, nl; (nl = got.find('\n', at)) != std::string::npos; at = nl + 1) left.push_back(got.substr(at, nl - at));
  REQUIRE(left.size() == 2);
  for (const auto& s : left) CHECK(inDevShm(s));

  // One of ours, which must stay.
  const std::string mine = newSegmentName();
  int fd = shm_open(mine.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  close(fd);

  CHECK(removeSegmentsOf(child) == 2);
  for (const auto& s : left) CHECK_FALSE(inDevShm(s));
  CHECK(inDevShm(mine));
  CHECK(removeSegmentsOf(child) == 0);
  shm_unlink(mine.c_str());
}
