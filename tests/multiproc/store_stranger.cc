// A process outside a job that tries to get into its rendezvous store: without a key, with
// a wrong key, and with a frame far larger than a handshake. Each attempt must be refused;
// prints one "stranger refused: <why>" line per attempt, or "STRANGER ADMITTED" and exits 1
// if any gets in.
//
//   store_stranger HOST:PORT [NONCE]

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "bootstrap/store_protocol.h"
#include "bootstrap/tcp_store.h"
#include "common/auth.h"

using namespace braid;
using namespace braid::bootstrap;

namespace {

// Sends a header announcing a 64 MiB HELLO and says whether the store hung up without
// waiting for (or buffering) its payload.
bool hugeFrameRefused(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
    return false;
  std::string h;
  proto::encodeFrame(proto::Op::kHello, {}, &h);
  const uint32_t big = proto::kMaxPayloadBytes;
  h.replace(8, 4, reinterpret_cast<const char*>(&big), 4);
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: store_stranger HOST:PORT [NONCE]\n");
    return 2;
  }
  const std::string addr = argv[1];
  const size_t colon = addr.rfind(':');
  const std::string host = addr.substr(0, colon);
  const int port = std::atoi(addr.c_str() + colon + 1);
  const uint64_t nonce = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 0;
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
