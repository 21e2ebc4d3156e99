// Discovery on the machine running the tests, JSON dump/reload, placement, and the sysfs
// reader against a fake /sys tree.

#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "support/catch.h"
#include "topo_test_util.h"
#include "topology/graph_json.h"
#include "topology/placement.h"
#include "topology/render.h"
#include "topology/rings.h"
#include "topology/sysfs_net.h"

using namespace braid::topology;
using namespace braid::topology::testing;

namespace {

// A scratch directory removed at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/braid-topo-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    REQUIRE(mkdtemp(buf.data()) != nullptr);
    path_ = buf.data();
  }
  ~TempDir() {
    std::string cmd = "rm -rf '" + path_ + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", path_.c_str());
  }
  const std::string& path() const { return path_; }

  void mkdirs(const std::string& rel) {
    std::string p = path_;
    size_t i = 0;
    while (i <= rel.size()) {
      size_t j = rel.find('/', i);
      if (j == std::string::npos) j = rel.size();
      p += "/" + rel.substr(i, j - i);
      mkdir(p.c_str(), 0755);
      i = j + 1;
    }
  }
  void write(const std::string& rel, const std::string& text) {
    size_t slash = rel.rfind('/');
    if (slash != std::string::npos) mkdirs(rel.substr(0, slash));
    std::ofstream(path_ + "/" + rel) << text << "\n";
  }
  void link(const std::string& rel, const std::string& target) {
    size_t slash = rel.rfind('/');
    if (slash != std::string::npos) mkdirs(rel.substr(0, slash));
    REQUIRE(symlink(target.c_str(), (path_ + "/" + rel).c_str()) == 0);
  }

 private:
  std::string path_;
};

}  // namespace

TEST_CASE("discovery on this machine, dumped to JSON and reloaded, is the same graph", "[topology][discover]") {
  DiscoverReport rep;
  auto g = discoverLocal({}, &rep);
  INFO(g.status().toString());
  REQUIRE(g.isOk());
  const Graph& local = g.value();
  REQUIRE_FALSE(local.cpus().empty());
  CHECK(local.source() == "hwloc");
  CHECK_FALSE(local.host().empty());
  CHECK(static_cast<int>(local.cpus().size()) == Placement::local().numNumaNodes());
  // Every device is connected to some CPU.
  for (int i = 0; i < local.size(); ++i) CHECK(local.cpuOf(i) >= 0);
  // NVML is optional: absent here means no GPUs reported by it, not an error.
  if (!rep.nvml.loaded) CHECK(rep.nvml.gpus == 0);
  else CHECK(rep.nvml.gpus >= static_cast<int>(rep.nvml.gpusAdded));

  TempDir dir;
  std::string file = dir.path() + "/local.json";
  REQUIRE(saveGraphJsonFile(local, file).isOk());
  auto back = loadTopologyFile(file);
  INFO(back.status().toString());
  REQUIRE(back.isOk());
  CHECK(back.value() == local);
  CHECK(back.value().host() == local.host());
  CHECK(back.value().source() == local.source());
  // And the views render.
  CHECK_THAT(formatPathMatrix(local), Catch::Contains("NUMA0"));
  CHECK_THAT(formatDot(local), Catch::StartsWith("graph topology {"));
  // A ring over the ranks this host could run.
  std::vector<RankPlace> ranks;
  for (size_t k = 0; k < local.gpus().size(); ++k) ranks.push_back(RankPlace{0, static_cast<int>(k), -1});
  for (int c : local.cpus()) ranks.push_back(RankPlace{0, -1, local.node(c).numa});
  std::vector<const Graph*> hosts{&local};
  auto ring = ringOrder(hosts, ranks);
  REQUIRE(ring.isOk());
  CHECK(ring.value().size() == ranks.size());
}

TEST_CASE("discovery without NVML or sysfs still finds CPUs", "[topology][discover]") {
  DiscoverOptions opt;
  opt.useNvml = false;
  opt.useSysfs = false;
  auto g = discoverLocal(opt);
  REQUIRE(g.isOk());
  CHECK_FALSE(g.value().cpus().empty());
}

TEST_CASE("placement on this machine", "[topology][placement]") {
  Placement& p = Placement::local();
  CHECK(&p == &Placement::local());
  CHECK(p.numCores() >= 1);
  CHECK(p.numNumaNodes() >= 1);
  REQUIRE(p.numaNodes().size() == static_cast<size_t>(p.numNumaNodes()));
  int total = 0;
  for (int n : p.numaNodes()) total += p.coresOfNuma(n);
  CHECK(total <= p.numCores());
  CHECK(p.coresOfNuma(12345) == 0);
  int here = p.numaNodeOfCaller();
  CHECK(std::find(p.numaNodes().begin(), p.numaNodes().end(), here) != p.numaNodes().end());
  CHECK(p.bindThreadToNuma(-1).isOk());
  CHECK(p.bindMemoryToNuma(nullptr, 0, 0).isOk());

  int first = p.numaNodes()[0];
  cpu_set_t before;
  REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
  braid::Status s = p.bindThreadToNuma(first);
  CHECK(s.isOk());
  if (p.numNumaNodes() > 1) {
    CHECK(p.numaNodeOfCaller() == first);
    CHECK(p.bindThreadToNuma(12345).code() == braid::Code::kInvalidArgument);
  }
  std::vector<char> buf(1 << 20, 1);
  braid::Status m = p.bindMemoryToNuma(buf.data(), buf.size(), first);
  // mbind may be refused in restricted containers; it must say so, not crash.
  if (!m.isOk()) CHECK(m.code() == braid::Code::kSystemError);
  REQUIRE(sched_setaffinity(0, sizeof before, &before) == 0);
  CHECK_THAT(p.summary(), Catch::Contains("NUMA node"));
}

TEST_CASE("sysfs: IB rate, link layer and state, and NICs hwloc missed are added", "[topology][sysfs]") {
  TempDir sys;
  // An HDR HCA on socket 0 that the topology file does not list, with its netdev.
  sys.write("devices/pci0000:00/0000:3b:00.0/numa_node", "0");
  sys.mkdirs("devices/pci0000:00/0000:3b:00.0/net/ib0");
  sys.link("class/infiniband/mlx5_0/device", "../../../devices/pci0000:00/0000:3b:00.0");
  sys.write("class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)");
  sys.write("class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand");
  sys.write("class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE");
  // A second port that is down: port 1 stays chosen.
  sys.write("class/infiniband/mlx5_0/ports/2/rate", "10 Gb/sec (4X SDR)");
  sys.write("class/infiniband/mlx5_0/ports/2/state", "1: DOWN");
  // The file's own NIC, annotated through its interface name.
  sys.write("class/net/ens1f0/speed", "100000");
  sys.write("class/net/ens1f0/operstate", "up");
  // A virtual interface without a PCI device: ignored.
  sys.write("class/net/docker0/speed", "-1");
  sys.write("class/net/lo/operstate", "unknown");

  Graph g = load("nccl-2socket-cpu-100g.xml");
  SysfsNetReport rep;
  braid::Status s = addSysfsNetInfo(&g, &rep, sys.path());
  INFO(s.toString());
  REQUIRE(s.isOk());
  CHECK(rep.added == 1);
  REQUIRE(g.finalized());
  REQUIRE(g.nics().size() == 2);
  int ib = -1, eth = -1;
  for (int n : g.nics()) (g.node(n).hca == "mlx5_0" ? ib : eth) = n;
  REQUIRE(ib >= 0);
  REQUIRE(eth >= 0);
  const Node& hca = g.node(ib);
  CHECK(hca.busId == "0000:3b:00.0");
  CHECK(hca.numa == 0);
  CHECK(hca.port == 1);
  CHECK(hca.speedMbps == 200000);
  CHECK(hca.linkLayer == "InfiniBand");
  CHECK(hca.state == "ACTIVE");
  CHECK(hca.ifName == "ib0");
  CHECK(g.pathType(g.findCpuOfNuma(0), ib) == PathType::kPhb);
  CHECK(g.node(eth).state == "UP");
  CHECK(g.node(eth).speedMbps == 100000);
  // NUMA0 ranks now have a local NIC.
  CHECK(nicForChannel(g, RankPlace{0, -1, 0}, 0, {}) == ib);
  CHECK(nicForChannel(g, RankPlace{0, -1, 1}, 0, {}) == eth);

  CHECK(parseIbRate("100 Gb/sec (4X EDR)") == 100000);
  CHECK(parseIbRate("2.5 Gb/sec (1X SDR)") == 2500);
  CHECK(parseIbRate("") == 0);
  CHECK(parseIbRate("fast") == 0);
}

TEST_CASE("sysfs: an absent tree changes nothing", "[topology][sysfs]") {
  Graph g = load("nccl-azure-ndv5.xml");
  Graph before = g;
  SysfsNetReport rep;
  REQUIRE(addSysfsNetInfo(&g, &rep, "/nonexistent-sysfs-root").isOk());
  CHECK(rep.added == 0);
  CHECK(g == before);
}
