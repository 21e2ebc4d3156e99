#pragma once
// A TCP forwarder on loopback standing between a client and a server: an attacker on the
// path. Forwards one connection both ways, records what the client sends, and can flip one
// byte of it on the way, or pass the server's bytes on slowly. Tests point the client at
// port() instead of the server.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

namespace braid::testing {

class Wiretap {
 public:
  // Forwards to `to`; flips bit 6 of the client's byte at offset `flipAt` (-1: none).
  explicit Wiretap(const sockaddr_in& to, long flipAt = -1) : to_(to), flipAt_(flipAt) {
    listen_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr_);
    ok_ = bind(listen_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 && ::listen(listen_, 4) == 0 &&
          getsockname(listen_, reinterpret_cast<sockaddr*>(&addr_), &len) == 0;
    if (ok_) thread_ = std::thread([this] { run(); });
  }
  // Forwards to 127.0.0.1:`port`.
  static sockaddr_in loopback(int port) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return to;
  }
  ~Wiretap() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    close(listen_);
  }
  bool ok() const { return ok_; }
  const sockaddr_in& address() const { return addr_; }
  int port() const { return ntohs(addr_.sin_port); }
  // Passes the server's bytes to the client at about `bytesPerSecond` from now on (0: at
  // once): a slow link on the way back.
  void slowReplies(long bytesPerSecond) { replyRate_ = bytesPerSecond; }
  // Everything the client has sent so far.
  std::string seen() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }

 private:
  static bool sendAll(int fd, const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  void run() {
    pollfd lp{listen_, POLLIN, 0};
    while (!stop_ && poll(&lp, 1, 50) <= 0) {
    }
    if (stop_) return;
    int a = accept(listen_, nullptr, nullptr);
    int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (a < 0 || connect(b, reinterpret_cast<const sockaddr*>(&to_), sizeof(to_)) != 0) {
      if (a >= 0) close(a);
      close(b);
      return;
    }
    char buf[65536];
    long forwarded = 0;
    while (!stop_) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2 && !stop_; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const long rate = i == 1 ? replyRate_.load() : 0;
        // A slow link passes a twentieth of a second's bytes at a time.
        const size_t most = rate > 0 ? std::min<size_t>(sizeof(buf), std::max<long>(1, rate / 20)) : sizeof(buf);
        ssize_t n = recv(p[i].fd, buf, most, 0);
        if (n <= 0) {
          stop_ = true;
          break;
        }
        if (i == 0) {
          if (flipAt_ >= forwarded && flipAt_ < forwarded + n) buf[flipAt_ - forwarded] ^= 0x40;
          forwarded += n;
          std::lock_guard<std::mutex> l(mu_);
          seen_.append(buf, static_cast<size_t>(n));
        }
        (void)sendAll(i == 0 ? b : a, buf, static_cast<size_t>(n));
        if (rate > 0) std::this_thread::sleep_for(std::chrono::microseconds(n * 1000000 / rate));
      }
    }
    close(a);
    close(b);
  }

  sockaddr_in to_{};
  sockaddr_in addr_{};
  long flipAt_;
  std::atomic<long> replyRate_{0};
  int listen_ = -1;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::string seen_;
};

}  // namespace braid::testing
