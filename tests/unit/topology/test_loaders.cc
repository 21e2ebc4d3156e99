// Each fixture machine: the devices found and the path types between them.

#include <map>
#include <set>

#include "support/catch.h"
#include "topo_test_util.h"
#include "topology/graph_json.h"
#include "topology/rings.h"
#include "topology/xml.h"

using namespace braid::topology;
using namespace braid::topology::testing;

namespace {

// The switch a device hangs from (its neighbour of type kPciSwitch), or -1.
int parentSwitch(const Graph& g, int dev) {
  for (const Link& l : g.links()) {
    int other = l.a == dev ? l.b : l.b == dev ? l.a : -1;
    if (other >= 0 && g.node(other).type == NodeType::kPciSwitch && l.type == LinkType::kPci) return other;
  }
  return -1;
}

void checkJsonRoundTrip(const Graph& g) {
  std::string text = graphToJson(g);
  auto back = parseGraphJson(text, "roundtrip.json");
  INFO(back.status().toString());
  REQUIRE(back.isOk());
  CHECK(back.value() == g);
  CHECK(graphToJson(back.value()) == text);
}

}  // namespace

TEST_CASE("hwloc DGX-2: 16 GPUs, NVSwitch, all pairs NVL", "[topology][fixtures]") {
  Graph g = load("hwloc-nvidia-dgx2.xml");
  CHECK(g.source() == "hwloc-xml:" + fixture("hwloc-nvidia-dgx2.xml"));
  REQUIRE(g.gpus().size() == 16);
  CHECK(g.nics().empty());
  REQUIRE(g.cpus().size() == 2);
  REQUIRE(g.ofType(NodeType::kNvSwitch).size() == 1);
  const Node& nvs = g.node(g.ofType(NodeType::kNvSwitch)[0]);
  CHECK(nvs.chips == 12);
  for (int i = 0; i < 16; ++i) {
    CHECK(g.node(gpu(g, i)).model == "Tesla V100-SXM3-32GB-H");
    CHECK(g.node(gpu(g, i)).numa == (i < 8 ? 0 : 1));
    for (int j = 0; j < 16; ++j)
      if (i != j) CHECK(g.pathType(gpu(g, i), gpu(g, j)) == PathType::kNvl);
  }
  int links = 0;
  for (const Link& l : g.links()) {
    if (l.type != LinkType::kNvl) continue;
    ++links;
    CHECK(l.count == 6);
    CHECK(l.bw == Approx(150));
  }
  CHECK(links == 16);
  CHECK(g.node(gpu(g, 0)).busId == "0000:34:00.0");
  checkJsonRoundTrip(g);
}

TEST_CASE("hwloc DGX-2 PCIe view: PIX under a PLX switch, PXB across, SYS across sockets", "[topology][fixtures]") {
  Graph full = load("hwloc-nvidia-dgx2.xml");
  auto pv = pcieView(full);
  REQUIRE(pv.isOk());
  const Graph& g = pv.value();
  REQUIRE(g.gpus().size() == 16);
  CHECK(g.ofType(NodeType::kNvSwitch).empty());
  int g0 = g.findByBusId("0000:34:00.0"), g1 = g.findByBusId("0000:36:00.0"), g2 = g.findByBusId("0000:39:00.0"),
      g4 = g.findByBusId("0000:57:00.0"), g8 = g.findByBusId("0000:b7:00.0");
  CHECK(g.pathType(g0, g1) == PathType::kPix);  // same second-level PLX switch
  CHECK(g.pathType(g0, g2) == PathType::kPxb);  // sibling switches under one PLX tree
  CHECK(g.pathType(g0, g4) == PathType::kPhb);  // another host bridge of socket 0
  CHECK(g.pathType(g0, g8) == PathType::kSys);  // socket 1
  // Each GPU shares its switch with exactly one other GPU.
  for (int i : g.gpus()) {
    int pix = 0;
    for (int j : g.gpus())
      if (i != j && g.pathType(i, j) == PathType::kPix) ++pix;
    CHECK(pix == 1);
  }
}

TEST_CASE("hwloc Supermicro: 3 NVIDIA GPUs, mlx5_0 and two Ethernet ports", "[topology][fixtures]") {
  Graph g = load("hwloc-supermicro-x9drg-3gpu-ib.xml");
  REQUIRE(g.gpus().size() == 3);
  REQUIRE(g.nics().size() == 3);
  REQUIRE(g.cpus().size() == 2);
  CHECK(g.node(gpu(g, 0)).busId == "0000:03:00.0");
  CHECK(g.node(gpu(g, 0)).numa == 0);
  CHECK(g.node(gpu(g, 2)).model == "Tesla K40m");
  const Node& ib = g.node(nic(g, 0));
  CHECK(ib.hca == "mlx5_0");
  CHECK(ib.ifName == "ib0");
  CHECK(ib.linkLayer == "InfiniBand");
  CHECK(ib.state == "ACTIVE");
  CHECK(ib.port == 1);
  CHECK(g.node(nic(g, 1)).ifName == "eth0");
  CHECK(g.node(nic(g, 2)).ifName == "eth1");
  CHECK(g.node(nic(g, 1)).netName() == "eth0");
  CHECK(g.pathType(gpu(g, 1), gpu(g, 2)) == PathType::kPhb);
  CHECK(g.pathType(gpu(g, 0), gpu(g, 1)) == PathType::kSys);
  CHECK(g.pathType(gpu(g, 2), nic(g, 0)) == PathType::kPhb);
  CHECK(g.pathType(gpu(g, 0), nic(g, 0)) == PathType::kSys);
  CHECK(g.nearestNics(gpu(g, 2)).size() == 3);
  checkJsonRoundTrip(g);
}

TEST_CASE("NCCL Azure ND v4: two NICs per GPU under its switch", "[topology][fixtures]") {
  Graph g = load("nccl-azure-ndv4.xml");
  REQUIRE(g.gpus().size() == 8);
  REQUIRE(g.nics().size() == 8);
  REQUIRE(g.cpus().size() == 4);
  CHECK(g.node(g.cpus()[1]).cpus == "24-47");
  for (int k = 0; k < 8; ++k) {
    int i = gpu(g, k);
    std::vector<int> near = g.nearestNics(i);
    REQUIRE(near.size() == 2);
    for (int n : near) {
      CHECK(g.pathType(i, n) == PathType::kPix);
      CHECK(parentSwitch(g, n) == parentSwitch(g, i));
      CHECK(g.node(n).linkLayer == "InfiniBand");
      CHECK(g.path(i, n).bw == Approx(24));
    }
    // Channels alternate between the two.
    RankPlace place{0, k, -1};
    CHECK(nicForChannel(g, place, 0, {}) == near[0]);
    CHECK(nicForChannel(g, place, 1, {}) == near[1]);
    CHECK(nicForChannel(g, place, 2, {}) == near[0]);
  }
  CHECK(g.pathType(gpu(g, 0), gpu(g, 1)) == PathType::kPix);
  CHECK(g.pathType(gpu(g, 0), gpu(g, 2)) == PathType::kSys);
  checkJsonRoundTrip(g);
}

TEST_CASE("NCCL Azure ND v5: each GPU's nearest NIC is the one under its switch", "[topology][fixtures]") {
  Graph g = load("nccl-azure-ndv5.xml");
  REQUIRE(g.gpus().size() == 8);
  REQUIRE(g.nics().size() == 8);
  REQUIRE(g.cpus().size() == 2);
  for (int i = 0; i < 8; ++i) {
    std::vector<int> near = g.nearestNics(gpu(g, i));
    REQUIRE(near.size() == 1);
    CHECK(near[0] == nic(g, i));
    CHECK(parentSwitch(g, near[0]) == parentSwitch(g, gpu(g, i)));
    CHECK(g.pathType(gpu(g, i), nic(g, i)) == PathType::kPix);
    CHECK(g.path(gpu(g, i), nic(g, i)).bw == Approx(48));  // Gen5 x16
    for (int c = 0; c < 4; ++c) CHECK(nicForChannel(g, RankPlace{0, i, -1}, c, {}) == nic(g, i));
  }
  CHECK(g.pathType(gpu(g, 0), gpu(g, 1)) == PathType::kPhb);
  CHECK(g.pathType(gpu(g, 0), gpu(g, 4)) == PathType::kSys);
}

TEST_CASE("NCCL AWS p4d: GPU pairs share an EFA NIC", "[topology][fixtures]") {
  Graph g = load("nccl-aws-p4d-24xl.xml");
  REQUIRE(g.gpus().size() == 8);
  REQUIRE(g.nics().size() == 4);
  for (int i = 0; i < 8; ++i) {
    std::vector<int> near = g.nearestNics(gpu(g, i));
    REQUIRE(near.size() == 1);
    CHECK(near[0] == nic(g, i / 2));
  }
  CHECK(g.pathType(gpu(g, 0), gpu(g, 1)) == PathType::kPix);
  CHECK(g.pathType(gpu(g, 0), gpu(g, 2)) == PathType::kPhb);
  CHECK(g.pathType(gpu(g, 0), gpu(g, 4)) == PathType::kSys);
  CHECK(g.path(gpu(g, 0), nic(g, 0)).bw == Approx(12));  // Gen3 x16
}

TEST_CASE("hand-made DGX-H100-like: NVSwitch, 400G NIC per GPU", "[topology][fixtures]") {
  Graph g = load("nccl-dgx-h100-like.xml");
  REQUIRE(g.gpus().size() == 8);
  REQUIRE(g.nics().size() == 8);
  REQUIRE(g.cpus().size() == 2);
  REQUIRE(g.ofType(NodeType::kNvSwitch).size() == 1);
  CHECK(g.node(g.ofType(NodeType::kNvSwitch)[0]).chips == 4);
  CHECK(g.node(g.cpus()[0]).cpus == "0-55,112-167");
  for (int i = 0; i < 8; ++i) {
    const Node& n = g.node(gpu(g, i));
    CHECK(n.sm == 90);
    CHECK(n.rank == i);
    CHECK(n.gdr);
    for (int j = 0; j < 8; ++j)
      if (i != j) CHECK(g.pathType(gpu(g, i), gpu(g, j)) == PathType::kNvl);
    const Node& ni = g.node(nic(g, i));
    CHECK(ni.hca == "mlx5_" + std::to_string(i));
    CHECK(ni.speedMbps == 400000);
    CHECK(g.nearestNics(gpu(g, i)) == std::vector<int>{nic(g, i)});
  }
  for (const Link& l : g.links()) {
    if (l.type != LinkType::kNvl) continue;
    CHECK(l.count == 18);
    CHECK(l.bw == Approx(18 * 20.6));
  }
  checkJsonRoundTrip(g);
}

TEST_CASE("hand-made 4-GPU PCIe box: PIX within a leaf switch, PXB across", "[topology][fixtures]") {
  Graph g = load("nccl-4gpu-pcie-2nic.xml");
  REQUIRE(g.gpus().size() == 4);
  REQUIRE(g.nics().size() == 2);
  CHECK(g.ofType(NodeType::kPciSwitch).size() == 3);
  CHECK(g.pathType(gpu(g, 0), gpu(g, 1)) == PathType::kPix);
  CHECK(g.pathType(gpu(g, 2), gpu(g, 3)) == PathType::kPix);
  CHECK(g.pathType(gpu(g, 0), gpu(g, 2)) == PathType::kPxb);
  CHECK(g.pathType(gpu(g, 1), nic(g, 1)) == PathType::kPxb);
  CHECK(g.pathType(gpu(g, 0), g.cpus()[0]) == PathType::kPhb);
  CHECK(g.nearestNics(gpu(g, 0)) == std::vector<int>{nic(g, 0)});
  CHECK(g.nearestNics(gpu(g, 1)) == std::vector<int>{nic(g, 0)});
  CHECK(g.nearestNics(gpu(g, 2)) == std::vector<int>{nic(g, 1)});
  CHECK(g.nearestNics(gpu(g, 3)) == std::vector<int>{nic(g, 1)});
  CHECK(g.node(nic(g, 0)).hca == "mlx5_0");
  CHECK(g.node(nic(g, 0)).linkLayer == "Ethernet");
}

TEST_CASE("hand-made CPU-only server: the NIC is local to socket 1", "[topology][fixtures]") {
  Graph g = load("nccl-2socket-cpu-100g.xml");
  CHECK(g.gpus().empty());
  REQUIRE(g.nics().size() == 1);
  REQUIRE(g.cpus().size() == 2);
  const Node& n = g.node(nic(g, 0));
  CHECK(n.ifName == "ens1f0");
  CHECK(n.hca.empty());
  CHECK(n.speedMbps == 100000);
  CHECK(n.numa == 1);
  CHECK(g.pathType(g.findCpuOfNuma(1), nic(g, 0)) == PathType::kPhb);
  CHECK(g.pathType(g.findCpuOfNuma(0), nic(g, 0)) == PathType::kSys);
  CHECK(g.path(g.findCpuOfNuma(0), nic(g, 0)).bw == Approx(16));  // AMD socket link
  CHECK(g.node(g.findCpuOfNuma(0)).cpus == "0-63,128-191");
  checkJsonRoundTrip(g);
}

TEST_CASE("this machine's lstopo export loads", "[topology][fixtures]") {
  Graph g = load("hwloc-local-vm.xml");
  REQUIRE(g.cpus().size() == 1);
  CHECK(g.node(g.cpus()[0]).cpus == "0-1");
  CHECK(g.gpus().empty());
  REQUIRE(g.nics().size() == 1);
  CHECK(g.node(nic(g, 0)).ifName == "eth0");
  CHECK(g.pathType(g.cpus()[0], nic(g, 0)) == PathType::kPhb);
  checkJsonRoundTrip(g);
}

TEST_CASE("the loader tells formats apart by content", "[topology][fixtures]") {
  std::string text;
  REQUIRE(readFile(fixture("hwloc-nvidia-dgx2.xml"), &text).isOk());
  CHECK(detectTopoFormat(text) == TopoFormat::kHwlocXml);
  REQUIRE(readFile(fixture("nccl-aws-p4d-24xl.xml"), &text).isOk());  // starts with a comment
  CHECK(detectTopoFormat(text) == TopoFormat::kNcclXml);
  CHECK(detectTopoFormat("  {\"format\": \"braid-topology\"}") == TopoFormat::kBraidJson);
  CHECK(detectTopoFormat("<html></html>") == TopoFormat::kUnknown);
  CHECK(detectTopoFormat("") == TopoFormat::kUnknown);
}
