#include "algorithms/algorithm.h"

#include <algorithm>

namespace braid::algorithms {

RingPos ringPosition(const std::vector<int>& ring, int rank) {
  RingPos p;
  int n = static_cast<int>(ring.size());
  p.index = static_cast<int>(std::find(ring.begin(), ring.end(), rank) - ring.begin());
  p.prev = ring[(p.index + n - 1) % n];
  p.next = ring[(p.index + 1) % n];
  return p;
}

size_t wholeBlockRound(const Layout& layout, const exec::Schedule& s, size_t roundBytes) {
  // One message per step and round then uses one slot where roundBytes of slot-sized
  // messages used half the FIFO, so no wait that the slot-cut schedule avoided can form.
  return s.wholeBlocks && layout.wholeBlockBytes > roundBytes ? layout.wholeBlockBytes : roundBytes;
}

int roundsFor(size_t maxStepBytes, size_t roundBytes) {
  if (roundBytes == 0 || maxStepBytes == 0) return 1;
  size_t r = (maxStepBytes + roundBytes - 1) / roundBytes;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(r, 1u << 30)));
}

}  // namespace braid::algorithms

namespace braid::algorithms {

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllGather: return "allgather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "alltoall";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kAllGatherV: return "allgatherv";
    case Collective::kReduceScatterV: return "reduce_scatterv";
    case Collective::kAllToAllV: return "alltoallv";
    case Collective::kBarrier: return "barrier";
    case Collective::kSendRecv: return "sendrecv";
  }
  return "?";
}

namespace {
size_t extent(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  size_t m = 0;
  for (size_t i = 0; i < counts.size() && i < displs.size(); ++i)
    if (counts[i]) m = std::max(m, displs[i] + counts[i]);
  return m;
}
size_t sum(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
}
}  // namespace

size_t requestBytes(const Request& req, int nranks) {
  const size_t es = dataTypeSize(req.dtype);
  const size_t n = static_cast<size_t>(nranks);
  switch (req.coll) {
    case Collective::kAllReduce: case Collective::kBroadcast: case Collective::kReduce: return req.count * es;
    case Collective::kAllGather: case Collective::kReduceScatter: case Collective::kAllToAll:
    case Collective::kGather: case Collective::kScatter:
      return n * req.count * es;
    case Collective::kAllGatherV: case Collective::kReduceScatterV: return sum(req.counts) * es;
    case Collective::kAllToAllV: return std::max(sum(req.counts), sum(req.sendCounts)) * es;
    case Collective::kBarrier: return 0;
    case Collective::kSendRecv: {
      size_t b = 0;
      for (const P2POp& m : req.p2p) b += m.count * es;
      return b;
    }
  }
  return 0;
}

size_t inputElems(const Request& req, int rank, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  switch (req.coll) {
    case Collective::kAllReduce: case Collective::kReduce: case Collective::kAllGather:
    case Collective::kGather:
      return req.count;
    case Collective::kBroadcast: return rank == req.root ? req.count : 0;
    case Collective::kReduceScatter: case Collective::kAllToAll: return n * req.count;
    case Collective::kScatter:
      if (rank != req.root) return 0;
      return req.displs.empty() ? n * req.count : extent(std::vector<size_t>(n, req.count), req.displs);
    case Collective::kAllGatherV: return static_cast<size_t>(rank) < req.counts.size() ? req.counts[rank] : 0;
    case Collective::kReduceScatterV: return req.displs.empty() ? sum(req.counts) : extent(req.counts, req.displs);
    case Collective::kAllToAllV: return extent(req.sendCounts, req.sendDispls);
    case Collective::kBarrier: case Collective::kSendRecv: return 0;
  }
  return 0;
}

size_t outputElems(const Request& req, int rank, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  switch (req.coll) {
    case Collective::kAllReduce: case Collective::kBroadcast: case Collective::kReduceScatter:
    case Collective::kScatter:
      return req.count;
    case Collective::kReduce: return rank == req.root ? req.count : 0;
    case Collective::kAllGather: case Collective::kAllToAll: return n * req.count;
    case Collective::kGather:
      if (rank != req.root) return 0;
      return req.displs.empty() ? n * req.count : extent(std::vector<size_t>(n, req.count), req.displs);
    case Collective::kAllGatherV: case Collective::kAllToAllV: return extent(req.counts, req.displs);
    case Collective::kReduceScatterV: return static_cast<size_t>(rank) < req.counts.size() ? req.counts[rank] : 0;
    case Collective::kBarrier: case Collective::kSendRecv: return 0;
  }
  return 0;
}

const std::vector<AlgorithmInfo>& algorithmTable() {
  using C = Collective;
  static const std::vector<AlgorithmInfo> table = {
      {C::kAllReduce, "ring", &allreduceRing},
      {C::kAllReduce, "recursive_doubling", &allreduceRecursiveDoubling},
      {C::kAllReduce, "tree", &allreduceTree},
      {C::kAllReduce, "rabenseifner", &allreduceRabenseifner},
      {C::kAllReduce, "direct", &allreduceDirect},
      {C::kAllReduce, "two_shot", &allreduceTwoShot},
      {C::kAllReduce, "hierarchical", &allreduceHierarchical},
      {C::kBroadcast, "chain", &broadcastChain},
      {C::kBroadcast, "tree", &broadcastTree},
      {C::kReduce, "chain", &reduceChain},
      {C::kReduce, "tree", &reduceTree},
      {C::kAllGather, "ring", &allgatherRing},
      {C::kAllGather, "recursive_doubling", &allgatherRecursiveDoubling},
      {C::kAllGather, "bruck", &allgatherBruck},
      {C::kReduceScatter, "ring", &reduceScatterRing},
      {C::kReduceScatter, "recursive_halving", &reduceScatterRecursiveHalving},
      {C::kReduceScatter, "direct", &reduceScatterDirect},
      {C::kAllToAll, "pairwise", &alltoallPairwise},
      {C::kAllToAll, "bruck", &alltoallBruck},
      {C::kGather, "direct", &gatherDirect},
      {C::kGather, "tree", &gatherTree},
      {C::kScatter, "direct", &scatterDirect},
      {C::kScatter, "tree", &scatterTree},
      {C::kAllGatherV, "ring", &allgatherVRing},
      {C::kReduceScatterV, "ring", &reduceScatterVRing},
      {C::kAllToAllV, "pairwise", &alltoallVPairwise},
      {C::kBarrier, "dissemination", &barrierDissemination},
      {C::kSendRecv, "group", &sendRecvGroup},
  };
  return table;
}

namespace {
exec::Schedule emptySchedule(const Request& req, const char* name, int connectionSet, size_t nchannels) {
  exec::Schedule s;
  s.dtype = req.dtype;
  s.op = req.op;
  s.algorithm = name;
  s.connectionSet = connectionSet;
  s.channels.resize(nchannels);
  return s;
}
}  // namespace

exec::Schedule meshSchedule(const Request& req, const char* name) { return emptySchedule(req, name, 1, 1); }

StatusOr<exec::Schedule> ringSchedule(const Request& req, const char* name, const Layout& layout) {
  if (layout.rings.empty()) return invalidArgument(std::string(name) + " " + collectiveName(req.coll) + ": no rings");
  return emptySchedule(req, name, 0, layout.rings.size());
}

Status checkRoot(const char* coll, int root, int n) {
  if (root >= 0 && root < n) return Status::ok();
  return invalidArgument(std::string(coll) + ": root=" + std::to_string(root) + " is outside [0, " +
                         std::to_string(n) + ")");
}

Status checkBlockDispls(const char* coll, const Request& req, int n) {
  if (req.displs.empty() || req.displs.size() == static_cast<size_t>(n)) return Status::ok();
  return invalidArgument(std::string(coll) + ": displs needs one entry per rank (" + std::to_string(n) + "), got " +
                         std::to_string(req.displs.size()));
}

const AlgorithmInfo* findAlgorithm(Collective coll, const std::string& name) {
  for (const AlgorithmInfo& a : algorithmTable())
    if (a.coll == coll && name == a.name) return &a;
  return nullptr;
}

}  // namespace braid::algorithms
