// A process outside a job that goes after its rendezvous store.
//
//   store_stranger probe HOST:PORT [NONCE]
//       tries to get in without a key, with a wrong key, and with a frame far larger than a
//       handshake. Each attempt must be refused: prints one "stranger refused: <why>" line
//       per attempt, or "STRANGER ADMITTED" and exits 1 if any gets in.
//   store_stranger attack HOST:PORT SECONDS
//       for SECONDS, at once: holds 2000 idle connections (reopening those the store
//       closes), sends 64 MiB frames one after another, and keeps 200 connections dribbling
//       a HELLO a byte at a time (slow loris). Prints what the store let it do.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/store_protocol.h"
#include "bootstrap/tcp_store.h"
#include "common/auth.h"

using namespace braid;
using namespace braid::bootstrap;

namespace {

int connectTo(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

std::string hugeHeader() {
  std::string h;
  proto::encodeFrame(proto::Op::kHello, {}, &h);
  const uint32_t big = proto::kMaxPayloadBytes;
  h.replace(8, 4, reinterpret_cast<const char*>(&big), 4);
  return h;
}

// Whether the store closed `fd` (EOF or reset), waiting at most `ms`.
bool closedByStore(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

// Sends a header announcing a 64 MiB HELLO and says whether the store hung up without
// waiting for (or buffering) its payload.
bool hugeFrameRefused(const std::string& host, int port) {
  int fd = connectTo(host, port);
  if (fd < 0) return false;
  const std::string h = hugeHeader();
  (void)!send(fd, h.data(), h.size(), MSG_NOSIGNAL);
  pollfd p{fd, POLLIN, 0};
  bool closed = false;
  if (poll(&p, 1, 3000) == 1) {
    char c;
    closed = recv(fd, &c, 1, 0) <= 0;
  }
  close(fd);
  return closed;
}

int attack(const std::string& host, int port, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  auto running = [&] { return std::chrono::steady_clock::now() < end; };
  std::atomic<long> floodClosed{0}, floodMax{0}, hugeTries{0}, hugeBytes{0}, lorisClosed{0};
  std::thread flood([&] {
    std::vector<int> fds(2000, -1);
    while (running()) {
      long open = 0;
      for (int& fd : fds) {
        if (fd >= 0 && closedByStore(fd, 0)) {
          close(fd);
          fd = -1;
          ++floodClosed;
        }
        if (fd < 0) fd = connectTo(host, port);
        open += fd >= 0;
      }
      if (open > floodMax) floodMax = open;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int fd : fds)
      if (fd >= 0) close(fd);
  });
  std::thread huge([&] {
    const std::string chunk(1 << 20, 'x');
    while (running()) {
      int fd = connectTo(host, port);
      if (fd < 0) continue;
      ++hugeTries;
      std::string h = hugeHeader();
      (void)!send(fd, h.data(), h.size(), MSG_NOSIGNAL);
      // The payload, as long as the store takes it (it should not take any).
      for (int i = 0; i < 64 && running(); ++i) {
        ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
        if (n <= 0) break;
        hugeBytes += n;
      }
      close(fd);
    }
  });
  std::thread loris([&] {
    std::string hello;
    proto::Request r;
    r.op = proto::Op::kHello;
    (void)proto::encodeRequest(r, &hello);
    std::vector<int> fds(200, -1);
    std::vector<size_t> sent(200, 0);
    while (running()) {
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i] >= 0 && closedByStore(fds[i], 0)) {
          close(fds[i]);
          fds[i] = -1;
          ++lorisClosed;
        }
        if (fds[i] < 0) {
          fds[i] = connectTo(host, port);
          sent[i] = 0;
        }
        // One byte per round, never the last one: the HELLO never completes.
        if (fds[i] >= 0 && sent[i] + 1 < hello.size() && send(fds[i], &hello[sent[i]], 1, MSG_NOSIGNAL) == 1) ++sent[i];
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (int fd : fds)
      if (fd >= 0) close(fd);
  });
  flood.join();
  huge.join();
  loris.join();
  std::printf("attack: flood held at most %ld connections, %ld closed by the store; %ld 64 MiB frames, %ld payload "
              "bytes sent before the store closed them (the kernel's buffers included); slow loris: %ld closed by the "
              "store\n",
              floodMax.load(), floodClosed.load(), hugeTries.load(), hugeBytes.load(), lorisClosed.load());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: store_stranger probe HOST:PORT [NONCE] | attack HOST:PORT SECONDS\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::string addr = argv[2];
  const size_t colon = addr.rfind(':');
  const std::string host = addr.substr(0, colon);
  const int port = std::atoi(addr.c_str() + colon + 1);
  if (mode == "attack") return attack(host, port, argc > 3 ? std::atof(argv[3]) : 5);
  if (mode != "probe") {
    std::fprintf(stderr, "store_stranger: unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  const uint64_t nonce = argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 0;
  int admitted = 0;
  for (bool withKey : {false, true}) {
    AuthKey key;
    if (withKey) key = randomAuthKey();
    auto c = TcpStoreClient::connect(host, port, nonce, Deadline::after(5), 5, key);
    if (c.isOk()) {
      // In: show what it could do (the abort record that once failed a whole job).
      (void)c.value()->set("braid/abort", "stranger");
      std::printf("STRANGER ADMITTED (%s)\n", withKey ? "wrong key" : "no key");
      ++admitted;
    } else {
      std::printf("stranger refused: %s: %s\n", withKey ? "wrong key" : "no key", c.status().message().c_str());
    }
  }
  if (hugeFrameRefused(host, port)) {
    std::printf("stranger refused: 64 MiB frame: closed at its header\n");
  } else {
    std::printf("STRANGER ADMITTED (64 MiB frame not closed)\n");
    ++admitted;
  }
  std::fflush(stdout);
  return admitted ? 1 : 0;
}
