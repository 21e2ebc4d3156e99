#include "common/tcp_pacing.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/local_address.h"

namespace braid {

std::string tcpCongestionControl() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  if (!(in >> name)) return "";
  return name;
}

bool congestionControlPaces(const std::string& name) { return name.compare(0, 3, "bbr") == 0; }

std::string congestionControlOf(int fd) {
  char name[32] = {};
  socklen_t len = sizeof(name) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, len));
}

std::string unpaceSocket(int fd, std::string* now) {
  const std::string had = congestionControlOf(fd);
  if (!congestionControlPaces(had)) return "";
  for (const char* cc : {"cubic", "reno"}) {
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, static_cast<socklen_t>(std::strlen(cc))) == 0) {
      if (now) *now = cc;
      return had;
    }
  }
  return "";
}

bool canUnpaceSockets() {
  if (!congestionControlPaces(tcpCongestionControl())) return false;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = !unpaceSocket(fd).empty();
  close(fd);
  return ok;
}

namespace {

// The fds of this process that are sockets, with their inodes.
template <typename F>
void forEachSocket(F&& f) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  const int own = dirfd(dir);
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    f(static_cast<int>(fd), static_cast<uint64_t>(st.st_ino));
  }
  closedir(dir);
}

// Whether the peer a connected socket reaches has an address of this host (IPv4, IPv4
// mapped into IPv6, or IPv6's loopback).
bool peerIsLocal(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  if (a.ss_family == AF_INET) return isLocalIpv4Address(reinterpret_cast<sockaddr_in*>(&a)->sin_addr);
  if (a.ss_family != AF_INET6) return false;
  const in6_addr& v6 = reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  if (!IN6_IS_ADDR_V4MAPPED(&v6)) return false;
  in_addr v4;
  std::memcpy(&v4, &v6.s6_addr[12], 4);
  return isLocalIpv4Address(v4);
}

}  // namespace

std::set<uint64_t> openSocketInodes() {
  std::set<uint64_t> inodes;
  forEachSocket([&](int, uint64_t ino) { inodes.insert(ino); });
  return inodes;
}

int unpaceNewLocalSockets(const std::set<uint64_t>& before, bool listeners, std::string* had, std::string* now) {
  int switched = 0;
  forEachSocket([&](int fd, uint64_t ino) {
    if (before.count(ino)) return;
    int protocol = 0, listening = 0;
    socklen_t len = sizeof(protocol);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP) return;
    len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) return;
    if (listening ? !listeners : !peerIsLocal(fd)) return;
    std::string to;
    const std::string from = unpaceSocket(fd, &to);
    if (from.empty()) return;
    ++switched;
    if (had) *had = from;
    if (now) *now = to;
  });
  return switched;
}

}  // namespace braid
