#pragma once
// Helpers shared by the bootstrap tests: a raw TCP socket for sending hand-made frames, and
// a stopwatch.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace braid::testing {

inline double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A blocking loopback socket with helpers to write bytes and to tell whether the peer hung up.
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RawSocket() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Writes all of `bytes`; false if the peer has already closed.
  bool send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  void shutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  // Reads until `n` bytes arrived, EOF, or `timeoutMs`; returns what arrived.
  std::string recvUpTo(size_t n, int timeoutMs) {
    std::string out;
    auto t0 = std::chrono::steady_clock::now();
    while (out.size() < n) {
      int left = timeoutMs - static_cast<int>(secondsSince(t0) * 1000);
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, left) <= 0) break;
      char buf[4096];
      ssize_t r = ::recv(fd_, buf, std::min(sizeof(buf), n - out.size()), 0);
      if (r <= 0) break;
      out.append(buf, static_cast<size_t>(r));
    }
    return out;
  }

  // True once the peer has closed the connection (EOF or reset), waiting up to `timeoutMs`.
  // Anything the peer sent before closing is discarded.
  bool closedByPeer(int timeoutMs) {
    auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      int left = timeoutMs - static_cast<int>(secondsSince(t0) * 1000);
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, left) <= 0) return false;
      char buf[4096];
      ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);
      if (r <= 0) return true;
    }
  }

 private:
  int fd_ = -1;
};

}  // namespace braid::testing
