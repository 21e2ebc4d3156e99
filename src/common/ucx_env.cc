#include "common/ucx_env.h"

#include <fstream>

namespace braid {

bool ucxTlsMayUseSharedMemory(const char* tls) {
  if (!tls || !*tls || tls[0] == '^') return true;
  const std::string list = std::string(",") + tls + ",";
  for (const char* shared : {"all", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "mm"}) {
    if (list.find(std::string(",") + shared + ",") != std::string::npos) return true;
  }
  return false;
}

std::string tcpCongestionControl() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  if (!(in >> name)) return "";
  return name;
}

bool congestionControlPaces(const std::string& name) { return name.compare(0, 3, "bbr") == 0; }

}  // namespace braid
