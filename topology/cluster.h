#pragma once
// The cluster view: every host's graph and every rank's place, fused from what the ranks
// publish through the bootstrap store, so that every rank plans from the same facts.
//
//   - The first rank of each host (its "leader") publishes one host record: the host's graph
//     as compact braid JSON, or "no topology" (discovery skipped or failed), or the error
//     that loading BRAID_TOPO_FILE gave, so that every rank can report it.
//   - Every rank publishes a rank record (the GPU it asks for and its NUMA node) with its
//     peer record; its host index follows from the host ids every rank already shares.
//   - One rank fuses the records (fuseCluster), computes the ring and publishes it
//     (encodeRing); the others read it. The ring is a pure function of the published
//     records, so any rank fusing them would find the same one.
//
// Everything here is pure: no store, no environment, no blocking. The communicator does the
// publishing (src/core/communicator.cc, loadTopology).

#include <array>
#include <string>
#include <vector>

#include "common/status.h"
#include "topology/graph.h"
#include "topology/rings.h"

namespace braid::topology {

// A host record: what a host's leader publishes about the host's topology.
// The wire form starts with one letter: 'G' + compact JSON, 'N', or 'E' + code + '\n' + message.
std::string hostRecordGraph(const Graph& g);
std::string hostRecordNone();
std::string hostRecordError(const Status& error);

// Decodes a host record. Ok with `*graph` filled and `*known` true for a graph; Ok with
// `*known` false for "no topology"; the published error (its code and message) for an
// error record; kRemoteError naming `source` for anything malformed.
[[nodiscard]] Status decodeHostRecord(const std::string& record, const std::string& source, Graph* graph, bool* known);

// The compact braid JSON of `g` without the "paths" table (readers recompute it): what
// travels between hosts. parseGraphJson() reads it back to an equal graph.
std::string compactGraphJson(const Graph& g);

// What one rank tells the others about where it runs.
constexpr int kGpuNone = -1;   // a CPU rank
constexpr int kGpuLocal = -2;  // the GPU whose index is the rank's local rank, if the host has it
struct RankRecord {
  int gpu = kGpuNone;  // GPU index on the host (>= 0), kGpuNone or kGpuLocal
  int numa = -1;       // NUMA node (OS index) the rank runs on; -1 when unknown
  // The rank's CUDA_VISIBLE_DEVICES, blanks removed; "" when unset or empty.
  std::string visible;
  bool operator==(const RankRecord& o) const { return gpu == o.gpu && numa == o.numa && visible == o.visible; }
};
// Wire form: "<gpu> <numa>", then " <visible>" when there is one.
std::string encodeRankRecord(const RankRecord& r);
// kRemoteError naming `rank` when `text` is not a record.
[[nodiscard]] StatusOr<RankRecord> decodeRankRecord(const std::string& text, int rank);

// The GPU index a rank with record `r` and local rank `localRank` uses on host graph `g`:
// an explicit index must exist (kInvalidArgument naming the rank otherwise). kGpuLocal
// without CUDA_VISIBLE_DEVICES takes the local rank's GPU when the host has that many,
// else none (a CPU rank). With it, the rank drives visible device localRank % (entries)
// (several ranks may share one), and a numeric entry names the GPU whose CUDA/NVML index
// (Node::dev) it is, PCI bus order, as CUDA numbers devices with CUDA_DEVICE_ORDER=PCI_BUS_ID
// and, on a host of identical GPUs, by default; a UUID or MIG entry, or an index the graph
// lacks, leaves the rank unplaced (none). The list ends at its first invalid entry, as in
// CUDA: "-1" hides every GPU.
[[nodiscard]] StatusOr<int> resolveGpu(const RankRecord& r, int localRank, const Graph& g, int rank);

// Host index of each rank from its host id: hosts numbered in order of their lowest rank
// (the order plan::layoutFor and ringOrder use). `localRanks`, when not null, receives each
// rank's position among the ranks of its host.
std::vector<int> hostIndices(const std::vector<std::string>& hostIds, std::vector<int>* localRanks = nullptr);

struct Cluster {
  std::vector<Graph> hosts;      // by host index
  std::vector<RankPlace> ranks;  // by rank
  std::vector<const Graph*> hostPointers() const;
};

// Fuses the records: `hostOf[r]` is rank r's host index (hostIndices), `hostRecords[h]`
// host h's record, `rankRecords[r]` rank r's record. Ok(true) with `*out` filled when
// every host has a graph; Ok(false) when some host has none (then no rank plans from the
// topology); an error record's error, or kInvalidArgument for a rank asking for a GPU its
// host does not have.
[[nodiscard]] StatusOr<bool> fuseCluster(const std::vector<int>& hostOf, const std::vector<std::string>& hostRecords,
                                         const std::vector<RankRecord>& rankRecords, Cluster* out);

// A ring result as published: "R r0 r1 ...", "N" (no topology: keep the default rings), or
// an error record as above. decodeRing checks that a ring is a permutation of 0..nranks-1;
// Ok with an empty `*ring` means "N".
std::string encodeRing(const std::vector<int>& ring);
[[nodiscard]] Status decodeRing(const std::string& text, int nranks, std::vector<int>* ring);

// One line describing a ring, with '|' between host segments: "0 1 2 3 | 4 5 6 7".
std::string formatRing(const std::vector<int>& ring, const std::vector<int>& hostOf);

// Everything rank 0 derives from the fused cluster and publishes under "topo/ring", so that
// every rank plans from the same facts: the ring, the double binary tree, and the link
// bandwidths the cost model uses. All of it is a pure function of the published records.
struct ClusterPlan {
  std::vector<int> ring;                       // empty: no topology (keep the defaults)
  std::array<std::vector<int>, 2> treeParent;  // doubleBinaryTree's parents by rank (-1: root)
  // Bandwidth (GB/s) of the slowest rank's way out: min over ranks of
  // nicBandwidth(its host's graph, its place, policy). 0 when some rank has no NIC.
  double netGBps = 0;
  // Slowest hop (GB/s) between consecutive ranks of one host in the ring when every rank
  // is a GPU rank and every host holds several; 0 otherwise (shared memory: the table's).
  double intraGBps = 0;
};

// Bandwidth (GB/s) of the NIC a rank's channel 0 uses (nicForChannel): the slower of its
// port speed (speedMbps / 8000, when known) and the path from the rank's GPU or NUMA node
// to it. 0 when no NIC is allowed.
double nicBandwidth(const Graph& g, const RankPlace& place, const NicPolicy& policy);

// The channels a rank's topology asks for (0: no opinion): on a job spanning several hosts
// the number of nearest allowed NICs (one channel per NIC); for a GPU rank the number of
// NVLinks of its GPU (NCCL sizes its channels to the NVLink bandwidth).
int topologyChannels(const Graph& g, const RankPlace& place, const NicPolicy& policy, bool multiHost);

// The channel count a rank proposes (the communicator then takes the min over ranks): the
// cores rule, min(coresPerRank, 4), raised to `topoChannels` but never above
// min(2 * coresPerRank, 16).
int proposeChannels(int coresPerRank, int topoChannels);

// Computes the plan from a fused cluster: ring (ringOrder), trees (doubleBinaryTree) and
// bandwidths, with `policy` choosing each rank's NIC.
[[nodiscard]] StatusOr<ClusterPlan> planCluster(const Cluster& c, const NicPolicy& policy);

// Wire form: the ring record ("R ...", "N" or an error, as encodeRing), then when there is
// a ring one line per tree "T p0 p1 ..." and a line "B <netGBps> <intraGBps>".
// decodeClusterPlan checks the ring as decodeRing does and that each tree is a spanning
// tree (one root, parents in range, no cycle); a bare ring record decodes with no trees.
std::string encodeClusterPlan(const ClusterPlan& p);
[[nodiscard]] Status decodeClusterPlan(const std::string& text, int nranks, ClusterPlan* out);

}  // namespace braid::topology
