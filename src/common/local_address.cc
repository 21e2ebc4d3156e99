#include "common/local_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <sys/socket.h>

namespace braid {

bool isLocalIpv4Address(in_addr a) {
  if ((ntohl(a.s_addr) >> 24) == 127) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool local = false;
  for (ifaddrs* i = list; i != nullptr && !local; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    local = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == a.s_addr;
  }
  freeifaddrs(list);
  return local;
}

}  // namespace braid
