// braid-topo: shows the topology braid sees, the way `nvidia-smi topo -m` does, and the
// rings, trees and NIC choices braid derives from it. Reads this machine (hwloc, NVML,
// sysfs) or a topology file, and writes braid JSON, Graphviz dot or PNG.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "topology/discover.h"
#include "topology/graph_json.h"
#include "topology/render.h"
#include "topology/rings.h"

using namespace braid::topology;

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: braid-topo [options]\n"
               "Prints the path-type matrix between GPUs, NICs and NUMA nodes, each GPU's nearest NICs\n"
               "and the ring order braid uses.\n\n"
               "  --input FILE      read FILE instead of discovering this machine: an hwloc XML export\n"
               "                    (lstopo --of xml), an NCCL topology file (NCCL_TOPO_FILE), or a\n"
               "                    braid JSON dump; the format is recognised from the content\n"
               "  --dump FILE.json  also write the graph as braid JSON to FILE.json\n"
               "  --json            print braid JSON instead of the tables\n"
               "  --dot             print Graphviz dot instead of the tables\n"
               "  --png FILE        render the graph to FILE with Graphviz (dot -Tpng)\n"
               "  --channels N      show the NIC of each GPU for channels 0..N-1 (default 2)\n"
               "  --net-if LIST     Ethernet interfaces allowed, BRAID_NET_IF syntax (eth,^docker,=eth0)\n"
               "  --ib-hca LIST     RDMA devices allowed, BRAID_IB_HCA syntax (mlx5_0:1,^mlx5_4)\n"
               "  --hosts N         show rings and trees for N hosts like this one (default 1)\n"
               "  --no-nvml         do not use NVML during discovery\n"
               "  -h, --help        this text\n");
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "braid-topo: %s\n", msg.c_str());
  return 1;
}

bool parseCount(const char* s, int lo, int hi, int* out) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

std::string joinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, dump, png, netIf, ibHca;
  bool json = false, dot = false, nvml = true;
  int channels = 2, nhosts = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "braid-topo: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--input") input = value("--input");
    else if (a == "--dump") dump = value("--dump");
    else if (a == "--png") png = value("--png");
    else if (a == "--json") json = true;
    else if (a == "--dot") dot = true;
    else if (a == "--no-nvml") nvml = false;
    else if (a == "--net-if") netIf = value("--net-if");
    else if (a == "--ib-hca") ibHca = value("--ib-hca");
    else if (a == "--channels") {
      if (!parseCount(value("--channels"), 1, 64, &channels)) return fail("--channels wants a number from 1 to 64");
    } else if (a == "--hosts") {
      if (!parseCount(value("--hosts"), 1, 4096, &nhosts)) return fail("--hosts wants a number from 1 to 4096");
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "braid-topo: unknown option '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (json && dot) return fail("--json and --dot both print to standard output; pick one");

  braid::StatusOr<Graph> loaded = [&]() -> braid::StatusOr<Graph> {
    if (!input.empty()) return loadTopologyFile(input);
    DiscoverOptions opt;
    opt.useNvml = nvml;
    return discoverLocal(opt);
  }();
  if (!loaded.isOk()) return fail(loaded.status().message());
  const Graph& g = loaded.value();

  NicPolicy policy;
  {
    auto f = NicFilter::parse(netIf);
    if (!f.isOk()) return fail(f.status().message());
    policy.netIf = f.value();
    auto h = NicFilter::parse(ibHca);
    if (!h.isOk()) return fail(h.status().message());
    policy.ibHca = h.value();
  }

  if (!dump.empty()) {
    braid::Status s = saveGraphJsonFile(g, dump);
    if (!s.isOk()) return fail(s.message());
  }
  if (!png.empty()) {
    braid::Status s = renderPng(formatDot(g), png);
    if (!s.isOk()) return fail(s.message());
  }
  if (json) {
    std::fputs(graphToJson(g).c_str(), stdout);
    return 0;
  }
  if (dot) {
    std::fputs(formatDot(g).c_str(), stdout);
    return 0;
  }

  auto plural = [](size_t n, const char* what) {
    std::string w = what;
    if (n != 1) w += w.back() == 'h' ? "es" : "s";
    return std::to_string(n) + " " + w;
  };
  std::string where = !g.host().empty() ? "Topology of " + g.host() : input.empty() ? "Topology of this machine" : "Topology";
  std::printf("%s (%s): %s, %s, %s, %s%s\n\n", where.c_str(), g.source().c_str(), plural(g.gpus().size(), "GPU").c_str(),
              plural(g.nics().size(), "NIC").c_str(), plural(g.cpus().size(), "NUMA node").c_str(),
              plural(g.ofType(NodeType::kPciSwitch).size(), "PCIe switch").c_str(),
              g.ofType(NodeType::kNvSwitch).empty() ? "" : ", NVSwitch");
  std::fputs(formatPathMatrix(g).c_str(), stdout);
  std::printf("\nNIC affinity:\n");
  std::fputs(formatNicAffinity(g).c_str(), stdout);

  // One rank per GPU (per NUMA node on a CPU-only host), on `nhosts` copies of this host.
  std::vector<const Graph*> hosts(nhosts, &g);
  std::vector<RankPlace> ranks;
  for (int h = 0; h < nhosts; ++h) {
    if (!g.gpus().empty()) {
      for (size_t k = 0; k < g.gpus().size(); ++k) ranks.push_back(RankPlace{h, static_cast<int>(k), -1});
    } else {
      for (int c : g.cpus()) ranks.push_back(RankPlace{h, -1, g.node(c).numa});
    }
  }
  if (!g.nics().empty()) {
    std::string filters;
    if (!netIf.empty()) filters += "net-if " + netIf;
    if (!ibHca.empty()) filters += (filters.empty() ? "" : ", ") + std::string("ib-hca ") + ibHca;
    std::printf("\nNIC per channel%s%s%s:\n", filters.empty() ? "" : " (", filters.c_str(), filters.empty() ? "" : ")");
    for (size_t r = 0; r < ranks.size() && ranks[r].host == 0; ++r) {
      int from = rankNode(g, ranks[r]);
      std::printf("  %-6s", g.node(from).name.c_str());
      for (int c = 0; c < channels; ++c) {
        int nic = nicForChannel(g, ranks[r], c, policy);
        std::string label = "-";
        if (nic >= 0) {
          const Node& n = g.node(nic);
          label = n.netName() == n.name ? n.name : n.name + " " + n.netName();
        }
        std::printf("  ch%d %s", c, label.c_str());
      }
      std::printf("\n");
    }
  }
  auto ring = ringOrder(hosts, ranks);
  if (!ring.isOk()) return fail(ring.status().message());
  std::printf("\nRing (%d rank%s, %d host%s, rank = host * %zu + %s): %s\n", static_cast<int>(ranks.size()),
              ranks.size() == 1 ? "" : "s", nhosts, nhosts == 1 ? "" : "s", ranks.size() / nhosts,
              g.gpus().empty() ? "NUMA position" : "GPU", joinInts(ring.value()).c_str());
  auto trees = doubleBinaryTree(hosts, ranks);
  if (!trees.isOk()) return fail(trees.status().message());
  for (int t = 0; t < 2; ++t) {
    const Tree& tr = trees.value()[t];
    std::printf("Tree %d: root %d; parents:", t, tr.root);
    for (size_t r = 0; r < tr.parent.size(); ++r) std::printf(" %d", tr.parent[r]);
    std::printf("\n");
  }
  return 0;
}
