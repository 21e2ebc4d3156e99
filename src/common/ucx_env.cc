#include "common/ucx_env.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cctype>
#include <climits>
#include <cstdlib>

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

std::vector<std::string> softwareRdmaDevices(const std::vector<std::string>& names, const std::string& sysfs) {
  std::vector<std::string> out;
  char root[PATH_MAX];
  const std::string virtualDevices = (realpath(sysfs.c_str(), root) ? std::string(root) : sysfs) + "/devices/virtual/";
  for (const std::string& name : names) {
    if (name.empty() || name.find('/') != std::string::npos) continue;
    const std::string entry = sysfs + "/class/infiniband/" + name;
    char real[PATH_MAX];
    if (!realpath(entry.c_str(), real)) continue;
    if (std::string(real).compare(0, virtualDevices.size(), virtualDevices) == 0) out.push_back(name);
  }
  return out;
}

std::vector<std::string> ucxLaneTransports(const std::string& endpointInfo) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = endpointInfo.find("lane[", at)) != std::string::npos) {
    const size_t close = endpointInfo.find("]:", at);
    at += 5;
    if (close == std::string::npos) break;
    // " 1:rc_verbs/rxe0:1.0 md[1] ...": the resource index, then TRANSPORT/DEVICE.
    size_t p = close + 2;
    while (p < endpointInfo.size() && endpointInfo[p] == ' ') ++p;
    const size_t digits = p;
    while (p < endpointInfo.size() && std::isdigit(static_cast<unsigned char>(endpointInfo[p]))) ++p;
    if (p == digits || p >= endpointInfo.size() || endpointInfo[p] != ':') continue;
    const size_t slash = endpointInfo.find('/', ++p);
    const size_t end = endpointInfo.find_first_of(" \n", p);
    if (slash == std::string::npos || slash == p || (end != std::string::npos && end < slash)) continue;
    const std::string name = endpointInfo.substr(p, slash - p);
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

bool ucxLanesOverRdma(const std::vector<std::string>& transports) {
  for (const std::string& t : transports)
    for (const char* family : {"rc_", "ud_", "dc_"})
      if (t.compare(0, 3, family) == 0) return true;
  return false;
}

bool ucxUncheckUdDestinations(bool softRoce, unsigned ucxMajor, unsigned ucxMinor) {
  if (!softRoce || ucxMajor > 1 || (ucxMajor == 1 && ucxMinor >= 19)) return false;
  for (const char* name : {"UCX_UD_ETH_DGID_CHECK", "UCX_UD_VERBS_ETH_DGID_CHECK", "UCX_UD_MLX5_ETH_DGID_CHECK"})
    if (std::getenv(name)) return false;
  return true;
}

}  // namespace braid
