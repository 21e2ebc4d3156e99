#pragma once
// The topology graph of one host: CPUs (one node per NUMA domain), PCIe switches, GPUs,
// NICs and NVSwitch fabrics, joined by links that carry a type and a bandwidth. From the
// links the graph computes, for every pair of nodes, the best path and classifies it with
// NCCL's path types, so that rings, trees and NIC choices are made the way NCCL users
// expect (and can be checked against `nvidia-smi topo -m`).
//
// A Graph is a plain value: built by a loader (hwloc, NCCL topology XML, braid JSON),
// finalized once, then only read. Reading a finalized Graph from many threads is safe.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace braid::topology {

enum class NodeType : uint8_t {
  kCpu = 0,   // a NUMA domain: its cores and the PCIe root complex attached to it
  kPciSwitch, // a PCIe switch (or a virtual one, as in cloud topology files)
  kGpu,
  kNic,
  kNvSwitch,  // all NVSwitch chips of the host, merged into one node as NCCL does
};
constexpr int kNumNodeTypes = 5;

enum class LinkType : uint8_t {
  kLoc = 0,  // a node to itself
  kNvl,      // NVLink (GPU-GPU, GPU-NVSwitch)
  kPci,      // PCIe (device-switch, switch-switch, switch-CPU)
  kSys,      // the inter-socket / inter-NUMA fabric (UPI, Infinity Fabric)
  kNet,      // the network, between hosts
};

// NCCL's path types, ordered from closest to farthest; a path's type is the worst type of
// its hops, so comparing with < means "closer than".
enum class PathType : uint8_t {
  kLoc = 0,  // the same device
  kNvl,      // NVLink, directly or through NVSwitch
  kNvb,      // NVLink through an intermediate GPU
  kPix,      // PCIe through at most one switch
  kPxb,      // PCIe through several switches, not through the CPU
  kPhb,      // PCIe through the CPU's host bridge
  kSys,      // across the inter-socket fabric
  kNet,      // across the network (devices on different hosts)
  kDis,      // not connected
};
constexpr int kNumPathTypes = 9;

const char* nodeTypeName(NodeType t);  // "cpu", "switch", "gpu", "nic", "nvswitch"
const char* linkTypeName(LinkType t);  // "LOC", "NVL", "PCI", "SYS", "NET"
const char* pathTypeName(PathType t);  // "LOC", "NVL", "NVB", "PIX", ...
// Inverse of the *Name functions; false when `s` names nothing.
bool parseNodeType(const std::string& s, NodeType* out);
bool parseLinkType(const std::string& s, LinkType* out);
bool parsePathType(const std::string& s, PathType* out);

// Bandwidths in GB/s used where a source gives none; the same figures NCCL uses, so that
// path choices agree with it.
constexpr double kLocBw = 5000.0;
constexpr double kDefaultPciBw = 12.0;  // PCIe Gen3 x16 after protocol overhead
// Usable bandwidth of one NVLink for a GPU of compute capability `sm` (e.g. 90).
double nvlinkBwPerLink(int sm);
// PCIe bandwidth from a link speed string ("16 GT/s", "32.0 GT/s PCIe", "8.0 GT/s") and a
// lane count; 0 when the speed is not understood.
double pciBwFromSpeed(const std::string& speed, int width);
// Inter-socket bandwidth for a CPU vendor string ("GenuineIntel", "AuthenticAMD", ...) and
// model number (-1 when unknown).
double interSocketBw(const std::string& vendor, int model);

struct Node {
  NodeType type = NodeType::kCpu;
  // Unique display name: "NUMA0", "SW3", "GPU2", "NIC1", "NVS0". Assigned by finalize()
  // from the node's type and canonical position (CPUs: from their NUMA index).
  std::string name;
  std::string busId;   // PCI bus id "dddd:bb:dd.f" in lower case; empty when none
  int numa = -1;       // OS index of the NUMA node this device is attached to (CPU: its own)
  // CPU
  std::string cpus;    // CPUs of the NUMA node as a list ("0-23,48-71"); empty if unknown
  std::string arch;    // "x86_64", "aarch64", ...
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  int cpuFamily = -1;
  int cpuModel = -1;
  // GPU
  int dev = -1;        // CUDA/NVML index; -1 when unknown
  int sm = 0;          // compute capability x10 (90 = Hopper); 0 when unknown
  int rank = -1;       // rank bound to this GPU in a topology file; -1 when none
  bool gdr = false;    // GPU Direct RDMA supported (GPU and NIC)
  std::string model;   // "NVIDIA H100 80GB HBM3", NIC or switch model when known
  // NIC
  std::string hca;       // RDMA device name ("mlx5_0"); empty for a plain Ethernet NIC
  std::string ifName;    // network interface ("ib0", "eth0"); empty if unknown
  int port = 1;          // HCA port used
  int64_t speedMbps = 0; // link rate; 0 when unknown
  std::string linkLayer; // "InfiniBand", "Ethernet" or empty
  std::string state;     // "ACTIVE", "DOWN", ... or empty when unknown
  // NVSwitch
  int chips = 0;         // NVSwitch chips merged into this node

  // The name a NIC is selected by: its HCA when it has one, else its interface, else name.
  const std::string& netName() const;
  bool operator==(const Node& o) const;
  bool operator!=(const Node& o) const { return !(*this == o); }
};

// An undirected link between two nodes (indices into Graph::nodes()).
struct Link {
  int a = -1;
  int b = -1;
  LinkType type = LinkType::kPci;
  double bw = 0;   // GB/s in each direction
  int count = 1;   // NVLink: number of links bundled; 1 otherwise
  bool operator==(const Link& o) const;
};

// The best path between two nodes, as computed by Graph::finalize().
struct Path {
  PathType type = PathType::kDis;
  double bw = 0;  // bottleneck bandwidth, GB/s
  int hops = 0;   // links traversed
};

// Bounds on one host's graph, far above any machine (a node with 8 GPUs, 10 NICs and their
// PCI switches has about a hundred nodes): a topology file or a peer's published graph
// beyond them is refused by finalize() (and addLink()) with the count and the bound, before
// any per-pair work.
constexpr int kMaxGraphNodes = 4096;
constexpr int kMaxGraphLinks = 16384;

class Graph {
 public:
  // Adds a node and returns its index. Only valid before finalize().
  int addNode(Node n);
  // Adds a link between nodes `a` and `b`. A second link of the same type between the same
  // pair is merged into the first (bandwidths and counts add), which is how several
  // NVLinks to the same peer are described. kInvalidArgument for bad indices or a self
  // link. Only valid before finalize().
  [[nodiscard]] Status addLink(int a, int b, LinkType type, double bw, int count = 1);

  // Puts nodes in a canonical order (by type, then GPU dev / bus id / NUMA index), names
  // them, checks the links and computes every pairwise path. Must be called once
  // after building and before any path query; a loaded graph is already finalized.
  [[nodiscard]] Status finalize();
  bool finalized() const { return finalized_; }
  // Allows addNode()/addLink() again after finalize(), for sources that refine a graph
  // (NVML adds NVLinks, sysfs adds NICs hwloc missed). Node indices stay valid until the
  // next finalize(), which re-sorts; path queries are invalid until then.
  void reopen() { finalized_ = false; }

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Link>& links() const { return links_; }
  const Node& node(int i) const { return nodes_[i]; }
  int size() const { return static_cast<int>(nodes_.size()); }
  // Write access for loaders that learn more about a node after adding it (NVML, sysfs).
  // Changing a node's type after finalize() is not allowed; other fields may be changed.
  Node& mutableNode(int i) { return nodes_[i]; }

  // Node indices of one type in canonical order: gpus()[2] is "GPU2".
  const std::vector<int>& ofType(NodeType t) const { return byType_[static_cast<int>(t)]; }
  const std::vector<int>& gpus() const { return ofType(NodeType::kGpu); }
  const std::vector<int>& nics() const { return ofType(NodeType::kNic); }
  const std::vector<int>& cpus() const { return ofType(NodeType::kCpu); }

  // Index of the node with this name / bus id / NUMA OS index, or -1.
  int findByName(const std::string& name) const;
  int findByBusId(const std::string& busId) const;
  int findCpuOfNuma(int numa) const;

  // Best path between nodes `a` and `b` (finalized graphs only). The best path is the one
  // of the closest type, then the highest bottleneck bandwidth, then the fewest hops.
  // Computed on first use, one source node at a time (memory: size() paths per source
  // node asked about, not size() squared). Thread-safe.
  const Path& path(int a, int b) const { return pathsFrom(a)[static_cast<size_t>(b)]; }
  PathType pathType(int a, int b) const { return path(a, b).type; }

  // The NICs (node indices) closest to node `from`: those of the best path type, and among
  // them the highest path bandwidth, in canonical NIC order. Empty when the graph has none.
  std::vector<int> nearestNics(int from) const;
  // The CPU node a device hangs under, or -1.
  int cpuOf(int node) const;

  // Free text identifying the host ("node17"); not used for any decision.
  const std::string& host() const { return host_; }
  void setHost(std::string h) { host_ = std::move(h); }
  // Where the graph came from: "hwloc", "hwloc-xml:FILE", "nccl-xml:FILE", "json:FILE".
  const std::string& source() const { return source_; }
  void setSource(std::string s) { source_ = std::move(s); }

  // Same nodes and links (host and source are descriptive and not compared).
  bool operator==(const Graph& o) const;
  bool operator!=(const Graph& o) const { return !(*this == o); }

 private:
  // Best paths from `src` to every node, computed into `row` (size() entries).
  void computePathsFrom(int src, std::vector<Path>* row) const;
  const std::vector<Path>& pathsFrom(int src) const;

  // Rows of best paths by source node, filled on demand; shared by copies of a finalized
  // graph (whose nodes and links they describe), replaced by the next finalize().
  struct PathRows {
    std::mutex mu;
    std::vector<std::unique_ptr<std::vector<Path>>> rows;
  };

  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::vector<std::vector<int>> adj_;  // node -> indices into links_
  std::vector<int> byType_[kNumNodeTypes];
  std::shared_ptr<PathRows> paths_;
  std::string host_;
  std::string source_;
  bool finalized_ = false;
};

// `g` without NVLink: no NVSwitch node and no NVL links, finalized. Shows the PCIe paths
// that NVLink hides, which is what P2P over PCIe and GPU-NIC traffic use.
[[nodiscard]] StatusOr<Graph> pcieView(const Graph& g);

// Normalises a PCI bus id to "dddd:bb:dd.f" in lower case ("0:3b:0.0" -> "0000:3b:00.0").
// Returns false when `in` is not a bus id.
bool normalizeBusId(const std::string& in, std::string* out);

// Converts an NCCL/Linux hexadecimal CPU mask ("00000000,0000ffff,ffffffff") to a list
// ("0-47"). Returns false on a character that is not hex or ','.
bool cpuMaskToList(const std::string& mask, std::string* out);

}  // namespace braid::topology
