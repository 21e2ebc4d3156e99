#include "transports/tcp/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/local_address.h"
#include "common/tcp_pacing.h"

namespace braid::transport::tcp {
namespace {

// Kernel buffer per socket. Linux doubles the value and caps it at net.core.[rw]mem_max.
// Measured on loopback (16 cores, 512 KiB x 8 slots, 2 GiB streams): fixed 4 MiB buffers
// gave 7.2 GB/s best / 6.5 median on one socket against 6.3 / 5.6 with autotuning. But a
// fixed size also switches autotuning off, and on kernels whose [rw]mem_max is the old
// 208 KiB default it would be clamped far below what autotuning reaches on a real network;
// so the size is only set where the kernel allows all of it.
constexpr int kSocketBufferBytes = 4 << 20;

long readProcLong(const char* path) {
  long v = -1;
  if (FILE* f = std::fopen(path, "r")) {
    if (std::fscanf(f, "%ld", &v) != 1) v = -1;
    std::fclose(f);
  }
  return v;
}

// Keep-alive turns a silently vanished host into an error on an idle socket. Linux's
// defaults (2 h idle) are too slow to matter; these report a dead peer in about a minute,
// well before a collective's own timeout would normally fire.
constexpr int kKeepIdleSec = 30;
constexpr int kKeepIntervalSec = 5;
constexpr int kKeepCount = 6;

template <typename T>
void put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

void encodeHandshake(const Handshake& h, uint8_t out[kHandshakeBytes]) {
  put<uint32_t>(out + 0, h.magic);
  put<uint32_t>(out + 4, h.version);
  put<uint64_t>(out + 8, h.nonce);
  put<int32_t>(out + 16, h.srcRank);
  put<int32_t>(out + 20, h.dstRank);
  put<int32_t>(out + 24, h.channel);
  put<int32_t>(out + 28, h.socketIndex);
  put<int32_t>(out + 32, h.socketsPerPeer);
  put<uint32_t>(out + 36, h.flags);
  put<uint64_t>(out + 40, h.slotBytes);
  std::memcpy(out + kHandshakeSignedBytes, h.mac, sizeof(h.mac));
}

Handshake decodeHandshake(const uint8_t in[kHandshakeBytes]) {
  Handshake h;
  h.magic = get<uint32_t>(in + 0);
  h.version = get<uint32_t>(in + 4);
  h.nonce = get<uint64_t>(in + 8);
  h.srcRank = get<int32_t>(in + 16);
  h.dstRank = get<int32_t>(in + 20);
  h.channel = get<int32_t>(in + 24);
  h.socketIndex = get<int32_t>(in + 28);
  h.socketsPerPeer = get<int32_t>(in + 32);
  h.flags = get<uint32_t>(in + 36);
  h.slotBytes = get<uint64_t>(in + 40);
  std::memcpy(h.mac, in + kHandshakeSignedBytes, sizeof(h.mac));
  return h;
}

namespace {

Digest handshakeMac(const AuthKey& key, const std::string& challenge, const Handshake& h) {
  uint8_t bytes[kHandshakeBytes];
  encodeHandshake(h, bytes);
  return authProof(key, "braid tcp connection v2",
                   {std::string_view(reinterpret_cast<const char*>(bytes), kHandshakeSignedBytes), challenge});
}

}  // namespace

void signHandshake(const AuthKey& key, const std::string& challenge, Handshake* h) {
  h->flags |= kHandshakeKeyed;
  const Digest d = handshakeMac(key, challenge, *h);
  std::memcpy(h->mac, d.data(), d.size());
}

bool verifyHandshake(const AuthKey& key, const std::string& challenge, const Handshake& h) {
  if (!(h.flags & kHandshakeKeyed)) return false;
  return checkAuthProof(handshakeMac(key, challenge, h),
                        std::string_view(reinterpret_cast<const char*>(h.mac), sizeof(h.mac)));
}

bool parseAddress(const std::string& blob, sockaddr_in* out) {
  size_t colon = blob.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= blob.size() ||
      blob.size() - colon - 1 > 5) {
    return false;
  }
  std::string host = blob.substr(0, colon);
  unsigned port = 0;
  for (size_t i = colon + 1; i < blob.size(); ++i) {
    if (blob[i] < '0' || blob[i] > '9') return false;
    port = port * 10 + static_cast<unsigned>(blob[i] - '0');
  }
  if (port == 0 || port > 65535) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return false;
  *out = addr;
  return true;
}

std::string formatAddress(const sockaddr_in& addr) {
  char ip[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

std::string formatBlob(const sockaddr_in& addr, const std::string& challenge) {
  static const char kDigits[] = "0123456789abcdef";
  if (challenge.empty()) return formatAddress(addr);  // what parseBlob reads back as no challenge
  std::string s = formatAddress(addr) + "/";
  for (unsigned char c : challenge) {
    s += kDigits[c >> 4];
    s += kDigits[c & 15];
  }
  return s;
}

bool parseBlob(const std::string& blob, sockaddr_in* addr, std::string* challenge) {
  const size_t slash = blob.find('/');
  if (slash == std::string::npos) {
    challenge->clear();
    return parseAddress(blob, addr);
  }
  const std::string hex = blob.substr(slash + 1);
  if (hex.size() != 2 * kChallengeBytes) return false;
  std::string bytes;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int v = 0;
    for (size_t j = i; j < i + 2; ++j) {
      const char c = hex[j];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    bytes.push_back(static_cast<char>(v));
  }
  if (!parseAddress(blob.substr(0, slash), addr)) return false;
  *challenge = std::move(bytes);
  return true;
}

namespace {

// NCCL_SOCKET_IFNAME's syntax: entries separated by ',', a leading '^' excludes them, a
// leading '=' (after '^') asks for exact names instead of prefixes, ":port" is ignored.
bool listAllows(const std::string& spec, const std::string& name) {
  std::string s = spec;
  bool exclude = false, exact = false;
  if (!s.empty() && s[0] == '^') {
    exclude = true;
    s.erase(0, 1);
  }
  if (!s.empty() && s[0] == '=') {
    exact = true;
    s.erase(0, 1);
  }
  bool match = false;
  size_t start = 0;
  while (!match && start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string e = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    e = e.substr(0, e.find(':'));
    if (!e.empty()) match = exact ? name == e : name.compare(0, e.size(), e) == 0;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return exclude ? !match : match;
}

}  // namespace

StatusOr<in_addr> resolveBindAddress(const std::string& netIf) {
  in_addr a{};
  if (netIf.empty()) {
    a.s_addr = htonl(INADDR_ANY);
    return a;
  }
  if (inet_pton(AF_INET, netIf.c_str(), &a) == 1) return a;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return systemError("getifaddrs", errno);
  // An interface of exactly that name first (what BRAID_NET_IF always meant); else the
  // first interface the list allows, loopback only when nothing else matches.
  bool found = false;
  for (int pass = 0; pass < 3 && !found; ++pass) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      bool loop = (i->ifa_flags & IFF_LOOPBACK) != 0;
      if (pass == 0 ? netIf != i->ifa_name : (!listAllows(netIf, i->ifa_name) || loop != (pass == 2))) continue;
      a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
      found = true;
      break;
    }
  }
  freeifaddrs(list);
  if (!found) {
    return invalidArgument("tcp: network interface '" + netIf +
                           "' is neither an IPv4 address nor an interface (or list of interfaces) with one");
  }
  return a;
}

in_addr defaultAdvertisedAddress() {
  in_addr a{};
  a.s_addr = htonl(INADDR_LOOPBACK);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return a;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
    break;
  }
  freeifaddrs(list);
  return a;
}

Status setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags == -1) return systemError("fcntl(F_GETFL)", errno);
  BRAID_SYSCHECK(fcntl(fd, F_SETFL, flags | O_NONBLOCK));
  return Status::ok();
}

Status setBufferSizes(int fd) {
  static const bool setSend = readProcLong("/proc/sys/net/core/wmem_max") >= kSocketBufferBytes;
  static const bool setRecv = readProcLong("/proc/sys/net/core/rmem_max") >= kSocketBufferBytes;
  int size = kSocketBufferBytes;
  if (setSend) BRAID_SYSCHECK(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)));
  if (setRecv) BRAID_SYSCHECK(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)));
  return Status::ok();
}

Status configureDataSocket(int fd) {
  BRAID_RETURN_IF_ERROR(setNonBlocking(fd));
  int one = 1;
  BRAID_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
  BRAID_SYSCHECK(setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)));
  int idle = kKeepIdleSec, interval = kKeepIntervalSec, count = kKeepCount;
  BRAID_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)));
  BRAID_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval)));
  BRAID_SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)));
  return setBufferSizes(fd);
}

std::string unpaceLocalSocket(int fd, in_addr peer, std::string* now) {
  return isLocalIpv4Address(peer) ? unpaceSocket(fd, now) : "";
}

bool isConnectionLoss(int err) {
  switch (err) {
    case EPIPE:
    case ECONNRESET:
    case ECONNREFUSED:
    case ECONNABORTED:
    case ENOTCONN:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case EHOSTDOWN:
      return true;
    default:
      return false;
  }
}

void closeFd(int fd) {
  if (fd < 0) return;
  int saved = errno;
  close(fd);
  errno = saved;
}

}  // namespace braid::transport::tcp
