#include "common/tcp_pacing.h"

#include <fstream>

namespace braid {

std::string tcpCongestionControl() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  if (!(in >> name)) return "";
  return name;
}

bool congestionControlPaces(const std::string& name) { return name.compare(0, 3, "bbr") == 0; }

}  // namespace braid
