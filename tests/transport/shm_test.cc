// Shared-memory segment names: random, created exclusively, skipped when taken, gone from
// /dev/shm once the sender has mapped them, and removable by their creator's pid.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/shm_names.h"
#include "transports/slot_fifo.h"
#include "support/catch.h"
#include "transports/shm/shm_connection.h"

using namespace braid;

namespace {

bool inDevShm(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

// In a forked child: makes a segment under a fresh name and writes the name and `suffix` to
// `fd`, leaving the segment in /dev/shm. False on any failure.
bool leaveSegment(int fd, const std::string& suffix) {
  std::string n = newSegmentName();
  int s = shm_open(n.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (s < 0) return false;
  close(s);
  n += suffix;
  return write(fd, n.data(), n.size()) == static_cast<ssize_t>(n.size());
}

// A forked child that ran `body` with the write end of a pipe and exited with what it
// returned: its pid, its wait status and what it wrote.
struct ChildRun {
  pid_t pid = -1;
  int status = 0;
  std::string out;
};
ChildRun runChild(const std::function<int(int fd)>& body) {
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  ChildRun c;
  c.pid = fork();
  REQUIRE(c.pid >= 0);
  if (c.pid == 0) {
    close(pipefd[0]);
    _exit(body(pipefd[1]));
  }
  close(pipefd[1]);
  char buf[256];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof buf)) > 0) c.out.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  REQUIRE(waitpid(c.pid, &c.status, 0) == c.pid);
  return c;
}

}  // namespace

TEST_CASE("shm names: the creator's pid, its pid namespace and 64 random bits, never the same twice",
          "[transport][shm]") {
  std::set<std::string> seen;
  struct stat ns {};
  REQUIRE(stat("/proc/self/ns/pid", &ns) == 0);
  CHECK(pidNamespaceTag() == static_cast<uint32_t>(ns.st_ino));
  char tag[16];
  std::snprintf(tag, sizeof tag, "%08x", static_cast<unsigned>(static_cast<uint32_t>(ns.st_ino)));
  const std::string prefix = "/braid-" + std::to_string(getpid()) + "-" + tag + "-";
  for (int i = 0; i < 1000; ++i) {
    std::string n = newSegmentName();
    CHECK(n.rfind(prefix, 0) == 0);
    CHECK(n.size() == prefix.size() + 16);
    CHECK(isSegmentName(n));
    CHECK(isSegmentName(n.substr(1)));
    seen.insert(n);
  }
  CHECK(seen.size() == 1000);
  CHECK(isSegmentName("/braid-12-effffffe-0123456789abcdef"));
  for (const char* bad : {"/braid-", "/braid-12-", "/braid-12-0123456789abcdef", "/braid-12-effffffe-0123456789abcde",
                          "/braid-12-effffffe-0123456789abcdefg", "/braid-12-effffffe-0123456789abcdef-",
                          "/braid-12-efffffe-0123456789abcdef", "/braid-12-efffffffe-0123456789abcdef",
                          "/braid-12-effffffe0123456789abcdef", "/braid-12-efffffxe-0123456789abcdef",
                          "/braid--effffffe-0123456789abcdef", "/braid-x1-effffffe-0123456789abcdef",
                          "/other-12-effffffe-0123456789abcdef", "/braid-0123456789abcdef0123456789abcdef-1-2-3",
                          "/braid-12345678901-effffffe-0123456789abcdef"}) {
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
  const ChildRun run = runChild([](int fd) {
    for (int i = 0; i < 2; ++i)
      if (!leaveSegment(fd, "\n")) return 3;
    close(fd);
    raise(SIGKILL);
    return 5;
  });
  REQUIRE(WIFSIGNALED(run.status));
  const pid_t child = run.pid;
  const std::string& got = run.out;
  std::vector<std::string> left;
  for (size_t at = 0, nl; (nl = got.find('\n', at)) != std::string::npos; at = nl + 1) left.push_back(got.substr(at, nl - at));
  REQUIRE(left.size() == 2);
  for (const auto& s : left) CHECK(inDevShm(s));

  // One of ours, which must stay; and one of a process with the child's pid in another pid
  // namespace (a rank in a container that shares /dev/shm), which must stay too.
  const std::string mine = newSegmentName();
  char tag[16];
  std::snprintf(tag, sizeof tag, "%08x", static_cast<unsigned>(pidNamespaceTag() ^ 1u));
  const std::string other = "/braid-" + std::to_string(child) + "-" + tag + "-" + mine.substr(mine.size() - 16);
  REQUIRE(isSegmentName(other));
  for (const std::string& n : {mine, other}) {
    int fd = shm_open(n.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    close(fd);
  }

  CHECK(removeSegmentsOf(child) == 2);
  for (const auto& s : left) CHECK_FALSE(inDevShm(s));
  CHECK(inDevShm(mine));
  CHECK(inDevShm(other));
  CHECK(removeSegmentsOf(child) == 0);
  // Asked for that namespace's process, the launcher of that container removes its segment.
  CHECK(removeSegmentsOf(child, pidNamespaceTag() ^ 1u) == 1);
  CHECK_FALSE(inDevShm(other));
  shm_unlink(mine.c_str());
}

TEST_CASE("shm names: a process in a pid namespace of its own names its segments with that namespace",
          "[transport][shm]") {
  // A child unshares its pid namespace and forks: the grandchild is pid 1 there, makes a
  // segment and exits without unlinking it, as a rank in a container killed during init.
  const ChildRun run = runChild([](int fd) {
    if (unshare(CLONE_NEWPID) != 0) return 7;
    pid_t g = fork();
    if (g < 0) return 8;
    if (g == 0) {
      char tag[16];
      std::snprintf(tag, sizeof tag, " %08x\n", static_cast<unsigned>(pidNamespaceTag()));
      _exit(leaveSegment(fd, tag) ? 0 : 3);
    }
    int st = 0;
    return waitpid(g, &st, 0) == g && WIFEXITED(st) ? WEXITSTATUS(st) : 5;
  });
  const int status = run.status;
  const std::string& got = run.out;
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 7) {
    WARN("skipped: this process may not make a pid namespace (unshare(CLONE_NEWPID) needs CAP_SYS_ADMIN)");
    return;
  }
  REQUIRE(WEXITSTATUS(status) == 0);
  const size_t sp = got.find(' ');
  REQUIRE(sp != std::string::npos);
  const std::string name = got.substr(0, sp);
  const uint32_t tag = static_cast<uint32_t>(std::stoul(got.substr(sp + 1), nullptr, 16));
  INFO(name);
  CHECK(name.rfind("/braid-1-", 0) == 0);
  CHECK(tag != pidNamespaceTag());
  CHECK(inDevShm(name));
  // Pid 1 of this namespace is not the one that made it.
  CHECK(removeSegmentsOf(1) == 0);
  CHECK(inDevShm(name));
  CHECK(removeSegmentsOf(1, tag) == 1);
  CHECK_FALSE(inDevShm(name));
}

// ---- references to the sender's memory (FifoConnection::enableRefs) ----------------------

namespace {

// A FIFO region as the receiver formats it, in memory this process owns.
struct Region {
  Region(int nslots, size_t slotBytes) {
    bytes = transport::SlotFifo::regionBytes(nslots, slotBytes);
    mem = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    std::memset(mem, 0, bytes);
    transport::SlotFifo::format(mem, nslots, slotBytes, 42);
  }
  ~Region() { std::free(mem); }
  void* mem = nullptr;
  size_t bytes = 0;
};

bool allOf(const void* p, size_t n, char c) {
  const char* b = static_cast<const char*>(p);
  return std::all_of(b, b + n, [c](char x) { return x == c; });
}

}  // namespace

TEST_CASE("shm: sends of 64 KiB and more go as references the receiver reads once, into the destination or its slot",
          "[transport][shm]") {
  constexpr size_t kSlot = 256 * 1024;
  Region region(4, kSlot);
  transport::FifoConnection recv(region.mem, 1, /*sender=*/false, nullptr, nullptr);
  transport::FifoConnection send(region.mem, 0, /*sender=*/true, nullptr, nullptr);
  recv.enableRefs();
  send.enableRefs();
  REQUIRE(send.sendsFromUser());
  REQUIRE(send.inReceiverMemory());
  std::vector<char> user(kSlot, 'a'), dst(kSlot, 0);
  transport::Slot s;

  // The receiver has not answered the offer yet: the bytes are copied into the slot.
  REQUIRE(send.reserveSend(&s).isOk());
  REQUIRE(send.postSendFrom(s, user.data(), 128 * 1024).isOk());
  CHECK(send.flushed());
  transport::Slot r;
  REQUIRE(recv.peekRecvInto(&r, dst.data(), 128 * 1024).isOk());  // answers the offer first
  CHECK(r.data != dst.data());
  CHECK(allOf(r.data, 128 * 1024, 'a'));
  REQUIRE(recv.releaseRecv(r).isOk());

  // Answered: a reference. Until the receiver reads it the bytes stay the caller's, so what
  // arrives is what they are when read; the sender is flushed once the slot is released.
  REQUIRE(send.reserveSend(&s).isOk());
  s.tag = 9;
  REQUIRE(send.postSendFrom(s, user.data(), 128 * 1024).isOk());
  CHECK_FALSE(send.flushed());
  std::fill(user.begin(), user.end(), 'b');
  REQUIRE(recv.peekRecvInto(&r, dst.data(), kSlot).isOk());
  CHECK(r.data == dst.data());
  CHECK(r.bytes == 128 * 1024);
  CHECK(r.tag == 9);
  CHECK(allOf(dst.data(), 128 * 1024, 'b'));
  CHECK(allOf(dst.data() + 128 * 1024, kSlot - 128 * 1024, 0));
  // Asked again before the release: the same message, not read again.
  std::fill(user.begin(), user.end(), 'c');
  REQUIRE(recv.peekRecvInto(&r, dst.data(), kSlot).isOk());
  CHECK(allOf(dst.data(), 128 * 1024, 'b'));
  CHECK_FALSE(send.flushed());
  REQUIRE(recv.releaseRecv(r).isOk());
  CHECK(send.flushed());

  // Without a destination (a reduction's receive), or one too small, it is read into the slot.
  REQUIRE(send.reserveSend(&s).isOk());
  REQUIRE(send.postSendFrom(s, user.data(), kSlot).isOk());
  REQUIRE(recv.peekRecv(&r).isOk());
  CHECK(r.data != user.data());
  CHECK(allOf(r.data, kSlot, 'c'));
  REQUIRE(recv.releaseRecv(r).isOk());
  REQUIRE(send.reserveSend(&s).isOk());
  REQUIRE(send.postSendFrom(s, user.data(), kSlot).isOk());
  REQUIRE(recv.peekRecvInto(&r, dst.data(), kSlot - 64).isOk());
  CHECK(r.data != dst.data());
  CHECK(r.bytes == kSlot);
  REQUIRE(recv.releaseRecv(r).isOk());
  CHECK(send.flushed());

  // Below 64 KiB a copy costs less than the system call: the bytes go into the slot.
  REQUIRE(send.reserveSend(&s).isOk());
  REQUIRE(send.postSendFrom(s, user.data(), 64 * 1024 - 64).isOk());
  CHECK(send.flushed());
  std::fill(user.begin(), user.end(), 'd');
  REQUIRE(recv.peekRecvInto(&r, dst.data(), kSlot).isOk());
  CHECK(r.data != dst.data());
  CHECK(allOf(r.data, 64 * 1024 - 64, 'c'));
  REQUIRE(recv.releaseRecv(r).isOk());
}

TEST_CASE("shm: without the receiver's consent (BRAID_SHM_CMA=0 there) the sender copies", "[transport][shm]") {
  constexpr size_t kSlot = 128 * 1024;
  Region region(2, kSlot);
  transport::FifoConnection recv(region.mem, 1, /*sender=*/false, nullptr, nullptr);
  transport::FifoConnection send(region.mem, 0, /*sender=*/true, nullptr, nullptr);
  CHECK_FALSE(recv.sendsFromUser());
  send.enableRefs();
  std::vector<char> user(kSlot, 'e');
  transport::Slot s, r;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(send.reserveSend(&s).isOk());
    REQUIRE(send.postSendFrom(s, user.data(), kSlot).isOk());
    CHECK(send.flushed());
    REQUIRE(recv.peekRecv(&r).isOk());
    CHECK(allOf(r.data, kSlot, 'e'));
    REQUIRE(recv.releaseRecv(r).isOk());
  }
}

TEST_CASE("shm: a reference from a sender that has ended is an error naming it", "[transport][shm]") {
  constexpr size_t kSlot = 128 * 1024;
  const size_t bytes = transport::SlotFifo::regionBytes(2, kSlot);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  transport::SlotFifo::format(mem, 2, kSlot, 42);
  transport::FifoConnection recv(mem, 3, /*sender=*/false, nullptr, nullptr);
  recv.enableRefs();
  int toChild[2], toParent[2];
  REQUIRE(pipe(toChild) == 0);
  REQUIRE(pipe(toParent) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    transport::FifoConnection send(mem, 0, /*sender=*/true, nullptr, nullptr);
    send.enableRefs();
    char c = 'o';
    if (write(toParent[1], &c, 1) != 1 || read(toChild[0], &c, 1) != 1) _exit(1);
    std::vector<char> user(kSlot, 'f');
    transport::Slot s;
    if (!send.reserveSend(&s).isOk() || !send.postSendFrom(s, user.data(), kSlot).isOk()) _exit(2);
    _exit(send.flushed() ? 3 : 0);  // a reference: not flushed, and the memory goes with the process
  }
  char c = 0;
  REQUIRE(read(toParent[0], &c, 1) == 1);
  transport::Slot r;
  CHECK(recv.peekRecv(&r).code() == Code::kWouldBlock);  // answers the offer
  REQUIRE(write(toChild[1], &c, 1) == 1);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  std::vector<char> dst(kSlot);
  Status st = recv.peekRecvInto(&r, dst.data(), kSlot);
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.rank() == 3);
  CHECK_THAT(st.message(), Catch::Matchers::Contains("rank 3"));
  for (int fd : {toChild[0], toChild[1], toParent[0], toParent[1]}) close(fd);
  munmap(mem, bytes);
}
