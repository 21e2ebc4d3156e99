#include "plan/planner.h"

#include <map>

namespace braid::plan {

std::vector<int> hostContiguousRing(const std::vector<std::string>& hostIds) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> byHost;
  for (int r = 0; r < static_cast<int>(hostIds.size()); ++r) {
    auto it = byHost.find(hostIds[r]);
    if (it == byHost.end()) order.push_back(hostIds[r]);
    byHost[hostIds[r]].push_back(r);
  }
  std::vector<int> ring;
  for (const auto& h : order)
    for (int r : byHost[h]) ring.push_back(r);
  return ring;
}

algorithms::Layout layoutFor(const World& world) {
  algorithms::Layout l;
  l.rank = world.rank;
  l.nranks = world.nranks;
  l.roundBytes = world.roundBytes;
  l.smallRoundBytes = world.smallRoundBytes;
  l.smallMaxBytes = world.smallMaxBytes;
  std::vector<int> ring = hostContiguousRing(world.hostIds);
  l.rings.assign(static_cast<size_t>(world.nchannels), ring);
  return l;
}

StatusOr<exec::Schedule> planCollective(const algorithms::Request& req, const algorithms::Layout& layout) {
  switch (req.coll) {
    case algorithms::Collective::kAllReduce:
      // Small messages are latency-bound: log2(n) hops beat the ring's 2(n-1).
      if (layout.nranks > 1 && req.count * dataTypeSize(req.dtype) <= layout.smallMaxBytes)
        return algorithms::allreduceRecursiveDoubling(req, layout);
      return algorithms::allreduceRing(req, layout);
    case algorithms::Collective::kBroadcast:
      return algorithms::broadcastChain(req, layout);
  }
  return internalError("unknown collective");
}

}  // namespace braid::plan
