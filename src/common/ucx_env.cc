#include "common/ucx_env.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <algorithm>
#include <string>

#include "common/nic_filter.h"

namespace braid {

bool ucxTlsMayUseSharedMemory(const char* tls) {
  if (!tls || !*tls || tls[0] == '^') return true;
  const std::string list = std::string(",") + tls + ",";
  for (const char* shared : {"all", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "mm"}) {
    if (list.find(std::string(",") + shared + ",") != std::string::npos) return true;
  }
  return false;
}

bool ucxTlsMayUseTcp(const char* tls) {
  if (!tls || !*tls) return true;
  const bool exclude = tls[0] == '^';
  const std::string list = std::string(",") + (exclude ? tls + 1 : tls) + ",";
  const bool named = list.find(",tcp,") != std::string::npos;
  if (exclude) return !named;
  return named || list.find(",all,") != std::string::npos;
}

std::vector<NetInterface> upIpv4Interfaces() {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    const std::string name = i->ifa_name;
    if (std::any_of(out.begin(), out.end(), [&](const NetInterface& n) { return n.name == name; })) continue;
    NetInterface n;
    n.name = name;
    n.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    n.address = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
    out.push_back(n);
  }
  freeifaddrs(list);
  return out;
}

std::string ucxNetDevices(const std::vector<NetInterface>& up, bool oneHost, const std::vector<std::string>& wanted) {
  std::vector<std::string> chosen;
  auto add = [&](const std::string& name) {
    if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) chosen.push_back(name);
  };
  if (oneHost) {
    for (const NetInterface& n : up)
      if (n.loopback) return n.name;
    return "";
  }
  for (const std::string& spec : wanted) {
    if (spec.empty()) continue;
    in_addr a{};
    if (inet_pton(AF_INET, spec.c_str(), &a) == 1) {
      for (const NetInterface& n : up)
        if (!n.loopback && n.address.s_addr == a.s_addr) add(n.name);
      continue;
    }
    StatusOr<NicFilter> filter = NicFilter::parse(spec);
    if (!filter.isOk()) continue;
    for (const NetInterface& n : up)
      if (!n.loopback && filter->allows(n.name)) add(n.name);
  }
  std::string s;
  for (const std::string& name : chosen) s += (s.empty() ? "" : ",") + name;
  return s;
}

}  // namespace braid
