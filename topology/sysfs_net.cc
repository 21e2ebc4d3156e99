#include "topology/sysfs_net.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace braid::topology {

namespace {

// First line of a small sysfs file, trimmed; empty when unreadable.
std::string readLine(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!f || !std::getline(f, s)) return "";
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// PCI bus id of the device a class entry points to (…/device -> …/0000:3b:00.0), or "".
std::string busIdOfDeviceLink(const std::string& classEntry) {
  char buf[4096];
  ssize_t n = readlink((classEntry + "/device").c_str(), buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  std::string target(buf);
  size_t slash = target.find_last_of('/');
  std::string base = slash == std::string::npos ? target : target.substr(slash + 1);
  std::string bus;
  return normalizeBusId(base, &bus) ? bus : "";
}

int readInt(const std::string& path, int dflt) {
  std::string s = readLine(path);
  if (s.empty()) return dflt;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  return end == s.c_str() ? dflt : static_cast<int>(v);
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

class SysfsReader {
 public:
  SysfsReader(Graph* g, SysfsNetReport* r, const std::string& root) : g_(g), r_(r), root_(root) {}

  Status run() {
    g_->reopen();
    for (const std::string& hca : listDir(root_ + "/class/infiniband")) BRAID_RETURN_IF_ERROR(rdmaDevice(hca));
    for (const std::string& ifn : listDir(root_ + "/class/net")) {
      if (ifn == "lo") continue;
      BRAID_RETURN_IF_ERROR(netDevice(ifn));
    }
    return g_->finalize();
  }

 private:
  int findNic(const std::string& hca, const std::string& ifName, const std::string& bus) {
    for (int i = 0; i < g_->size(); ++i) {
      const Node& n = g_->node(i);
      if (n.type != NodeType::kNic) continue;
      if (!hca.empty() && n.hca == hca) return i;
      if (!ifName.empty() && n.ifName == ifName) return i;
    }
    if (bus.empty()) return -1;
    for (int i = 0; i < g_->size(); ++i) {
      const Node& n = g_->node(i);
      // A PCI function already named for another HCA/interface is a different port.
      if (n.type == NodeType::kNic && n.busId == bus && ((hca.empty() || n.hca.empty()) && (ifName.empty() || n.ifName.empty())))
        return i;
    }
    return -1;
  }

  Status addNic(const std::string& entry, const std::string& bus, Node n, int* out) {
    n.type = NodeType::kNic;
    n.busId = bus;
    n.numa = readInt(entry + "/device/numa_node", -1);
    int cpu = -1;
    for (int i = 0; i < g_->size(); ++i) {
      const Node& c = g_->node(i);
      if (c.type == NodeType::kCpu && (cpu < 0 || c.numa == n.numa)) cpu = i;
    }
    if (cpu >= 0 && n.numa < 0) n.numa = g_->node(cpu).numa;
    *out = g_->addNode(n);
    ++r_->added;
    if (cpu >= 0) BRAID_RETURN_IF_ERROR(g_->addLink(cpu, *out, LinkType::kPci, kDefaultPciBw));
    return Status::ok();
  }

  Status rdmaDevice(const std::string& hca) {
    std::string entry = root_ + "/class/infiniband/" + hca;
    std::string bus = busIdOfDeviceLink(entry);
    int id = findNic(hca, "", bus);
    if (id < 0) {
      if (bus.empty()) return Status::ok();  // soft RDMA (rxe/siw) without a PCI device
      Node n;
      n.hca = hca;
      BRAID_RETURN_IF_ERROR(addNic(entry, bus, n, &id));
    }
    Node& n = g_->mutableNode(id);
    if (n.hca.empty()) n.hca = hca;
    // Prefer the port already chosen, else the first ACTIVE one, else the first listed.
    std::vector<std::string> ports = listDir(entry + "/ports");
    std::string port;
    for (const std::string& p : ports)
      if (p == std::to_string(n.port)) port = p;
    if (port.empty() || readLine(entry + "/ports/" + port + "/state").find("ACTIVE") == std::string::npos) {
      for (const std::string& p : ports) {
        if (readLine(entry + "/ports/" + p + "/state").find("ACTIVE") != std::string::npos) {
          port = p;
          break;
        }
      }
    }
    if (port.empty() && !ports.empty()) port = ports[0];
    if (!port.empty()) {
      std::string dir = entry + "/ports/" + port;
      n.port = std::atoi(port.c_str());
      int64_t rate = parseIbRate(readLine(dir + "/rate"));
      if (rate > 0) n.speedMbps = rate;
      std::string ll = readLine(dir + "/link_layer");
      if (!ll.empty()) n.linkLayer = ll;
      // "4: ACTIVE" -> "ACTIVE"
      std::string st = readLine(dir + "/state");
      size_t colon = st.find(':');
      if (colon != std::string::npos) st = st.substr(colon + 1);
      while (!st.empty() && st.front() == ' ') st.erase(st.begin());
      if (!st.empty()) n.state = st;
      ++r_->annotated;
    }
    if (n.ifName.empty()) {
      std::vector<std::string> nets = listDir(entry + "/device/net");
      if (!nets.empty()) n.ifName = nets[0];
    }
    return Status::ok();
  }

  Status netDevice(const std::string& ifn) {
    std::string entry = root_ + "/class/net/" + ifn;
    std::string bus = busIdOfDeviceLink(entry);
    int id = findNic("", ifn, bus);
    if (id < 0) {
      if (bus.empty()) return Status::ok();  // virtual: bridges, veth, docker0, tunnels
      Node n;
      n.ifName = ifn;
      n.linkLayer = "Ethernet";
      BRAID_RETURN_IF_ERROR(addNic(entry, bus, n, &id));
    }
    Node& n = g_->mutableNode(id);
    if (n.ifName.empty()) n.ifName = ifn;
    // An RDMA port's rate is authoritative; sysfs speed is -1 for virtual and down links.
    int speed = readInt(entry + "/speed", -1);
    if (n.speedMbps == 0 && speed > 0) n.speedMbps = speed;
    if (n.state.empty()) {
      std::string op = readLine(entry + "/operstate");
      if (!op.empty() && op != "unknown") n.state = upper(op);
    }
    ++r_->annotated;
    return Status::ok();
  }

  Graph* g_;
  SysfsNetReport* r_;
  const std::string& root_;
};

}  // namespace

int64_t parseIbRate(const std::string& rate) {
  std::istringstream in(rate);
  double v = 0;
  std::string unit;
  if (!(in >> v) || !(v > 0)) return 0;
  in >> unit;
  if (unit.rfind("Gb", 0) == 0) return static_cast<int64_t>(v * 1000.0 + 0.5);
  if (unit.rfind("Mb", 0) == 0) return static_cast<int64_t>(v + 0.5);
  return 0;
}

Status addSysfsNetInfo(Graph* g, SysfsNetReport* report, const std::string& sysRoot) {
  *report = SysfsNetReport{};
  SysfsReader r(g, report, sysRoot);
  return r.run();
}

}  // namespace braid::topology
