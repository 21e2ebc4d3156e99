#include "common/fd_share.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/hex.h"
#include "common/random.h"

namespace braid {
namespace {

// A request: the descriptor's id and the ticket's secret. The answer: one status byte, with
// the descriptor attached when it is kOk.
constexpr size_t kSecretBytes = 16;
struct Request {
  uint64_t id;
  unsigned char secret[kSecretBytes];
};
enum Answer : unsigned char { kOk = 0, kUnknown = 1, kWrongSecret = 2, kOtherUser = 3 };
constexpr int kServeTimeoutMs = 1000;  // for each connection the publisher answers

// The abstract socket address of `name` (a leading NUL, then the name), and its length.
socklen_t abstractAddress(const std::string& name, sockaddr_un* a) {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

void setTimeouts(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool readAll(int fd, void* p, size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, b, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

class Publisher {
 public:
  StatusOr<std::string> publish(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    forgetParent();
    if (listenFd_ < 0) BRAID_RETURN_IF_ERROR(start());
    Entry e;
    e.fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (e.fd < 0) return Status(Code::kSystemError, std::string("fd sharing: dup: ") + std::strerror(errno));
    randomBytes(e.secret, sizeof e.secret);
    const uint64_t id = nextId_++;
    entries_[id] = e;
    return "fd." + name_ + "." + std::to_string(id) + "." + hex(e.secret, sizeof e.secret);
  }

  void withdraw(const std::string& ticket) {
    std::unique_ptr<std::thread> server;
    int listenFd = -1, wake = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      forgetParent();
      const std::string prefix = "fd." + name_ + ".";
      if (listenFd_ < 0 || ticket.compare(0, prefix.size(), prefix) != 0) return;
      const uint64_t id = std::strtoull(ticket.c_str() + prefix.size(), nullptr, 10);
      auto it = entries_.find(id);
      if (it == entries_.end()) return;
      ::close(it->second.fd);
      entries_.erase(it);
      if (!entries_.empty()) return;
      // The last one: stop the server, outside the lock (it takes the lock to answer).
      server = std::move(server_);
      listenFd = listenFd_;
      wake = wake_;
      listenFd_ = wake_ = -1;
      name_.clear();
    }
    const uint64_t one = 1;
    (void)!::write(wake, &one, sizeof one);
    if (server) server->join();
    ::close(listenFd);
    ::close(wake);
  }

  size_t published() {
    std::lock_guard<std::mutex> lock(mu_);
    forgetParent();
    return entries_.size();
  }

 private:
  struct Entry {
    int fd = -1;
    unsigned char secret[kSecretBytes] = {};
  };

  // In a forked child the server thread is gone and the descriptors are the parent's to
  // hand out: the child starts over with none.
  void forgetParent() {
    if (listenFd_ < 0 || owner_ == ::getpid()) return;
    for (auto& [id, e] : entries_) ::close(e.fd);
    entries_.clear();
    (void)server_.release();  // names a thread of the parent, none of the child's
    ::close(listenFd_);
    ::close(wake_);
    listenFd_ = wake_ = -1;
    name_.clear();
  }

  Status start() {
    const uint64_t salt = randomU64();
    const std::string name = "braid-fd-" + hex(&salt, sizeof salt);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status(Code::kSystemError, std::string("fd sharing: socket: ") + std::strerror(errno));
    sockaddr_un a;
    const socklen_t len = abstractAddress(name, &a);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 64) != 0) {
      const int err = errno;
      ::close(fd);
      return Status(Code::kSystemError, "fd sharing: a Unix socket to answer on: " + std::string(std::strerror(err)));
    }
    const int wake = ::eventfd(0, EFD_CLOEXEC);
    if (wake < 0) {
      const int err = errno;
      ::close(fd);
      return Status(Code::kSystemError, "fd sharing: eventfd: " + std::string(std::strerror(err)));
    }
    listenFd_ = fd;
    wake_ = wake;
    name_ = name;
    owner_ = ::getpid();
    server_ = std::make_unique<std::thread>([this, fd, wake] { serve(fd, wake); });
    return Status::ok();
  }

  void serve(int listenFd, int wake) {
    for (;;) {
      pollfd p[2] = {{listenFd, POLLIN, 0}, {wake, POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[1].revents) return;
      if (!(p[0].revents & POLLIN)) continue;
      const int c = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;  // the caller gave up (ECONNABORTED), or EINTR
      answer(c);
      ::close(c);
    }
  }

  void answer(int c) {
    setTimeouts(c, kServeTimeoutMs);
    ucred cred{};
    socklen_t credLen = sizeof cred;
    if (::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &credLen) != 0) return;
    // Another user (anyone may connect to an abstract socket) is answered at once, without
    // waiting for what it sends.
    if (cred.uid != ::geteuid()) {
      const unsigned char refused = kOtherUser;
      (void)::send(c, &refused, 1, MSG_NOSIGNAL);
      return;
    }
    Request req{};
    if (!readAll(c, &req, sizeof req)) return;
    std::lock_guard<std::mutex> lock(mu_);
    unsigned char status = kOk;
    int fd = -1;
    auto it = entries_.find(req.id);
    if (it == entries_.end()) {
      status = kUnknown;
    } else {
      unsigned char diff = 0;  // the whole secret compared, whatever differs first
      for (size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<unsigned char>(req.secret[i] ^ it->second.secret[i]);
      if (diff) status = kWrongSecret;
      else fd = it->second.fd;
    }
    iovec iov{&status, 1};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (fd >= 0) {
      m.msg_control = control;
      m.msg_controllen = sizeof control;
      cmsghdr* h = CMSG_FIRSTHDR(&m);
      h->cmsg_level = SOL_SOCKET;
      h->cmsg_type = SCM_RIGHTS;
      h->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(h), &fd, sizeof fd);
    }
    (void)::sendmsg(c, &m, MSG_NOSIGNAL);
  }

  std::mutex mu_;
  int listenFd_ = -1, wake_ = -1;
  pid_t owner_ = 0;
  std::string name_;  // the socket's abstract name while it runs
  std::unique_ptr<std::thread> server_;
  std::map<uint64_t, Entry> entries_;
  uint64_t nextId_ = 1;
};

Publisher& publisher() {
  static Publisher* p = new Publisher();  // never destroyed: its thread may outlive statics
  return *p;
}

}  // namespace

StatusOr<std::string> publishFd(int fd) { return publisher().publish(fd); }

void withdrawFd(const std::string& ticket) { publisher().withdraw(ticket); }

size_t publishedFds() { return publisher().published(); }

StatusOr<int> fetchFd(const std::string& ticket, int timeoutMs) {
  // "fd.<socket name>.<id>.<secret>"
  const size_t a = ticket.find('.'), b = ticket.find('.', a + 1), c = ticket.find('.', b + 1);
  Request req{};
  const std::string bad = "fd sharing: a malformed ticket '" + ticket + "'";
  if (ticket.compare(0, 3, "fd.") != 0 || b == std::string::npos || c == std::string::npos || b == a + 1 ||
      c == b + 1 || b - a - 1 > sizeof(sockaddr_un::sun_path) - 2 || ticket.find('.', c + 1) != std::string::npos)
    return Status(Code::kInvalidArgument, bad);
  const std::string name = ticket.substr(a + 1, b - a - 1), idText = ticket.substr(b + 1, c - b - 1);
  if (idText.find_first_not_of("0123456789") != std::string::npos || !unhex(ticket.substr(c + 1), req.secret, kSecretBytes))
    return Status(Code::kInvalidArgument, bad);
  req.id = std::strtoull(idText.c_str(), nullptr, 10);

  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Status(Code::kSystemError, std::string("fd sharing: socket: ") + std::strerror(errno));
  setTimeouts(s, timeoutMs > 0 ? timeoutMs : 1);
  auto fail = [&](const std::string& why) {
    ::close(s);
    return Status(Code::kSystemError, "fd sharing: " + why);
  };
  sockaddr_un addr;
  const socklen_t len = abstractAddress(name, &addr);
  if (::connect(s, reinterpret_cast<sockaddr*>(&addr), len) != 0)
    return fail("no process answers for " + name + " on this host (" + std::strerror(errno) +
                "; it exited, or runs in another network namespace)");
  // A publisher that refuses this process's user answers before reading, and may have
  // closed before the request goes out: its answer is still there to read.
  const int sendError =
      ::send(s, &req, sizeof req, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof req) ? 0 : (errno ? errno : EIO);
  unsigned char status = 0xff;
  iovec iov{&status, 1};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t r;
  do r = ::recvmsg(s, &m, MSG_CMSG_CLOEXEC);
  while (r < 0 && errno == EINTR);
  int fd = -1;
  for (cmsghdr* h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
    if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS && h->cmsg_len == CMSG_LEN(sizeof(int)))
      std::memcpy(&fd, CMSG_DATA(h), sizeof fd);
  if (r != 1) {
    if (fd >= 0) ::close(fd);
    if (sendError) return fail(std::string("sending the request: ") + std::strerror(sendError));
    return fail(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
                    ? "no answer from " + name + " within " + std::to_string(timeoutMs) + " ms"
                    : "the publisher closed the connection without an answer");
  }
  if (status != kOk || fd < 0) {
    if (fd >= 0) ::close(fd);
    switch (status) {
      case kUnknown: return fail("the descriptor was withdrawn (or never published)");
      case kWrongSecret: return fail("the ticket's secret is wrong");
      case kOtherUser: return fail("the publisher hands descriptors only to processes of its own user");
      default: return fail("no descriptor came with the answer");
    }
  }
  ::close(s);
  return fd;
}

}  // namespace braid
