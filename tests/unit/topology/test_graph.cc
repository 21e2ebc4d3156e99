// The graph model on small hand-built graphs: path classification, best-path choice,
// canonical order, helpers.

#include "support/catch.h"
#include "topology/graph.h"

using namespace braid::topology;

namespace {

Node make(NodeType t, const std::string& bus = "", int numa = 0) {
  Node n;
  n.type = t;
  n.busId = bus;
  n.numa = numa;
  return n;
}

// cpu0 - sw(a) - {gpu0, gpu1, nic0}; cpu0 - swTop - {swB - gpu2, swC - gpu3}; cpu0 - cpu1 - gpu4
struct Box {
  Graph g;
  int cpu0, cpu1, swA, swTop, swB, swC, g0, g1, g2, g3, g4, n0;
  Box() {
    cpu0 = g.addNode(make(NodeType::kCpu, "", 0));
    cpu1 = g.addNode(make(NodeType::kCpu, "", 1));
    swA = g.addNode(make(NodeType::kPciSwitch, "0000:10:00.0"));
    swTop = g.addNode(make(NodeType::kPciSwitch, "0000:20:00.0"));
    swB = g.addNode(make(NodeType::kPciSwitch, "0000:21:00.0"));
    swC = g.addNode(make(NodeType::kPciSwitch, "0000:22:00.0"));
    g0 = g.addNode(make(NodeType::kGpu, "0000:11:00.0"));
    g1 = g.addNode(make(NodeType::kGpu, "0000:12:00.0"));
    g2 = g.addNode(make(NodeType::kGpu, "0000:23:00.0"));
    g3 = g.addNode(make(NodeType::kGpu, "0000:24:00.0"));
    g4 = g.addNode(make(NodeType::kGpu, "0000:81:00.0", 1));
    n0 = g.addNode(make(NodeType::kNic, "0000:13:00.0"));
    REQUIRE(g.addLink(cpu0, cpu1, LinkType::kSys, 10).isOk());
    REQUIRE(g.addLink(cpu0, swA, LinkType::kPci, 24).isOk());
    REQUIRE(g.addLink(swA, g0, LinkType::kPci, 24).isOk());
    REQUIRE(g.addLink(swA, g1, LinkType::kPci, 24).isOk());
    REQUIRE(g.addLink(swA, n0, LinkType::kPci, 12).isOk());
    REQUIRE(g.addLink(cpu0, swTop, LinkType::kPci, 24).isOk());
    REQUIRE(g.addLink(swTop, swB, LinkType::kPci, 24).isOk());
    REQUIRE(g.addLink(swTop, swC, LinkType::kPci, 24).isOk());
    REQUIRE(g.addLink(swB, g2, LinkType::kPci, 24).isOk());
    REQUIRE(g.addLink(swC, g3, LinkType::kPci, 24).isOk());
    REQUIRE(g.addLink(cpu1, g4, LinkType::kPci, 24).isOk());
  }
  // Node index after finalize(), by bus id (finalize re-sorts nodes).
  int at(const char* bus) const { return g.findByBusId(bus); }
};

}  // namespace

TEST_CASE("path types follow NCCL's classification", "[topology][graph]") {
  Box b;
  REQUIRE(b.g.finalize().isOk());
  const Graph& g = b.g;
  int g0 = b.at("0000:11:00.0"), g1 = b.at("0000:12:00.0"), g2 = b.at("0000:23:00.0"), g3 = b.at("0000:24:00.0"),
      g4 = b.at("0000:81:00.0"), n0 = b.at("0000:13:00.0");
  CHECK(g.pathType(g0, g0) == PathType::kLoc);
  CHECK(g.pathType(g0, g1) == PathType::kPix);
  CHECK(g.pathType(g0, n0) == PathType::kPix);
  CHECK(g.pathType(g2, g3) == PathType::kPxb);
  CHECK(g.pathType(g0, g2) == PathType::kPhb);
  CHECK(g.pathType(g0, g4) == PathType::kSys);
  CHECK(g.pathType(g0, g.findCpuOfNuma(0)) == PathType::kPhb);
  CHECK(g.pathType(g4, g.findCpuOfNuma(0)) == PathType::kSys);
  // Bottleneck bandwidth and hop count of the PIX path through the NIC's narrower link.
  CHECK(g.path(g0, n0).bw == Approx(12));
  CHECK(g.path(g0, n0).hops == 2);
  CHECK(g.path(g2, g3).hops == 4);
  // Symmetric.
  for (int a = 0; a < g.size(); ++a)
    for (int c = 0; c < g.size(); ++c) CHECK(g.pathType(a, c) == g.pathType(c, a));
}

TEST_CASE("NVLink beats PCIe, and a GPU forwards NVLink only", "[topology][graph]") {
  Box b;
  // gpu0 = NVLink = gpu2 = NVLink = gpu3: gpu0-gpu3 is NVB (through gpu2), never a
  // PCIe path through a GPU.
  REQUIRE(b.g.addLink(b.g0, b.g2, LinkType::kNvl, 40, 2).isOk());
  REQUIRE(b.g.addLink(b.g2, b.g3, LinkType::kNvl, 40, 2).isOk());
  REQUIRE(b.g.finalize().isOk());
  const Graph& g = b.g;
  int g0 = b.at("0000:11:00.0"), g1 = b.at("0000:12:00.0"), g2 = b.at("0000:23:00.0"), g3 = b.at("0000:24:00.0");
  CHECK(g.pathType(g0, g2) == PathType::kNvl);
  CHECK(g.pathType(g0, g3) == PathType::kNvb);
  CHECK(g.path(g0, g3).bw == Approx(40));
  CHECK(g.pathType(g1, g2) == PathType::kPhb);  // gpu0 does not forward PCIe to NVLink
}

TEST_CASE("best path prefers the closer type even when narrower", "[topology][graph]") {
  // Two routes from gpu to nic: one PIX (one switch) at 8 GB/s and one through the CPU at
  // 24 GB/s. NCCL takes the closer type; so does braid.
  Graph g;
  int cpu = g.addNode(make(NodeType::kCpu));
  int sw = g.addNode(make(NodeType::kPciSwitch, "0000:01:00.0"));
  int gp = g.addNode(make(NodeType::kGpu, "0000:02:00.0"));
  int ni = g.addNode(make(NodeType::kNic, "0000:03:00.0"));
  REQUIRE(g.addLink(cpu, sw, LinkType::kPci, 24).isOk());
  REQUIRE(g.addLink(sw, gp, LinkType::kPci, 24).isOk());
  REQUIRE(g.addLink(sw, ni, LinkType::kPci, 8).isOk());
  REQUIRE(g.addLink(cpu, ni, LinkType::kPci, 24).isOk());
  REQUIRE(g.finalize().isOk());
  const Path& p = g.path(g.findByBusId("0000:02:00.0"), g.findByBusId("0000:03:00.0"));
  CHECK(p.type == PathType::kPix);
  CHECK(p.bw == Approx(8));
}

TEST_CASE("finalize orders and names nodes canonically", "[topology][graph]") {
  Graph g;
  g.addNode(make(NodeType::kGpu, "0000:81:00.0", 1));
  g.addNode(make(NodeType::kCpu, "", 1));
  g.addNode(make(NodeType::kGpu, "0000:01:00.0", 0));
  g.addNode(make(NodeType::kCpu, "", 0));
  REQUIRE(g.finalize().isOk());
  REQUIRE(g.gpus().size() == 2);
  CHECK(g.node(g.gpus()[0]).busId == "0000:01:00.0");
  CHECK(g.node(g.gpus()[0]).name == "GPU0");
  CHECK(g.node(g.gpus()[1]).name == "GPU1");
  CHECK(g.node(g.cpus()[0]).name == "NUMA0");
  CHECK(g.node(g.cpus()[1]).name == "NUMA1");
  CHECK(g.findByName("GPU1") == g.gpus()[1]);
  // Unconnected devices are DIS, not a crash.
  CHECK(g.pathType(g.gpus()[0], g.gpus()[1]) == PathType::kDis);
}

TEST_CASE("addLink and finalize reject bad input", "[topology][graph]") {
  Graph g;
  int a = g.addNode(make(NodeType::kCpu, "", 0));
  int n = g.addNode(make(NodeType::kNic, "0000:01:00.0"));
  CHECK(g.addLink(a, a, LinkType::kPci, 1).code() == braid::Code::kInvalidArgument);
  CHECK(g.addLink(a, 7, LinkType::kPci, 1).code() == braid::Code::kInvalidArgument);
  CHECK(g.addLink(a, n, LinkType::kPci, -1).code() == braid::Code::kInvalidArgument);
  REQUIRE(g.addLink(a, n, LinkType::kNvl, 20).isOk());
  braid::Status s = g.finalize();
  CHECK(s.code() == braid::Code::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("NVLink"));

  Graph dup;
  dup.addNode(make(NodeType::kCpu, "", 3));
  dup.addNode(make(NodeType::kCpu, "", 3));
  CHECK_THAT(dup.finalize().message(), Catch::Contains("NUMA node 3"));
}

TEST_CASE("repeated NVLinks to one peer add up", "[topology][graph]") {
  Graph g;
  int a = g.addNode(make(NodeType::kGpu, "0000:01:00.0"));
  int b = g.addNode(make(NodeType::kGpu, "0000:02:00.0"));
  REQUIRE(g.addLink(a, b, LinkType::kNvl, 20, 1).isOk());
  REQUIRE(g.addLink(b, a, LinkType::kNvl, 40, 2).isOk());
  REQUIRE(g.finalize().isOk());
  REQUIRE(g.links().size() == 1);
  CHECK(g.links()[0].count == 3);
  CHECK(g.links()[0].bw == Approx(60));
}

TEST_CASE("bus ids, CPU masks and bandwidth tables", "[topology][graph]") {
  std::string out;
  CHECK(normalizeBusId("0000:3B:00.0", &out));
  CHECK(out == "0000:3b:00.0");
  CHECK(normalizeBusId("3b:00.1", &out));
  CHECK(out == "0000:3b:00.1");
  CHECK(normalizeBusId("00000000:3B:00.0", &out));  // NVML's 8-digit domain
  CHECK(out == "0000:3b:00.0");
  CHECK(normalizeBusId("10000:01:00.0", &out));      // VMD domains
  CHECK(out == "10000:01:00.0");
  CHECK_FALSE(normalizeBusId("", &out));
  CHECK_FALSE(normalizeBusId("0000:3b:00", &out));
  CHECK_FALSE(normalizeBusId("0000:3b:00.8", &out));
  CHECK_FALSE(normalizeBusId("0000:3b:20.0", &out));
  CHECK_FALSE(normalizeBusId("zz:00.0", &out));
  CHECK_FALSE(normalizeBusId("0000:3b:00.0 ", &out));

  CHECK(cpuMaskToList("00000000,0000ffff,ffffffff", &out));
  CHECK(out == "0-47");
  CHECK(cpuMaskToList("ffffff00,0000ffff,ff000000", &out));
  CHECK(out == "24-47,72-95");
  CHECK(cpuMaskToList("0x5", &out));
  CHECK(out == "0,2");
  CHECK(cpuMaskToList("0", &out));
  CHECK(out.empty());
  CHECK_FALSE(cpuMaskToList("00ff,zz", &out));

  CHECK(pciBwFromSpeed("16 GT/s", 16) == Approx(24));
  CHECK(pciBwFromSpeed("32.0 GT/s PCIe", 16) == Approx(48));
  CHECK(pciBwFromSpeed("8 GT/s", 16) == Approx(12));
  CHECK(pciBwFromSpeed("8.0 GT/s", 8) == Approx(6));
  CHECK(pciBwFromSpeed("fast", 16) == 0);
  CHECK(nvlinkBwPerLink(90) == Approx(20.6));
  CHECK(nvlinkBwPerLink(70) == Approx(20));
  CHECK(interSocketBw("AuthenticAMD", 1) == Approx(16));
  CHECK(interSocketBw("GenuineIntel", 143) == Approx(22));

  for (int t = 0; t < kNumPathTypes; ++t) {
    PathType p;
    REQUIRE(parsePathType(pathTypeName(static_cast<PathType>(t)), &p));
    CHECK(static_cast<int>(p) == t);
  }
}
