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
  std::map<std::string, int> hostIndex;
  for (const std::string& h : world.hostIds) {
    int next = static_cast<int>(hostIndex.size());
    if (!hostIndex.count(h)) hostIndex[h] = next;
    l.hostOf.push_back(hostIndex[h]);
  }
  if (l.hostOf.empty()) l.hostOf.assign(static_cast<size_t>(world.nranks), 0);
  return l;
}

StatusOr<exec::Schedule> planCollective(const algorithms::Request& req, const algorithms::Layout& layout,
                                        const std::vector<AlgoRule>* rules) {
  if (rules) {
    if (const AlgoRule* r = findRule(*rules, req.coll, algorithms::requestBytes(req, layout.nranks)))
      return r->algo->build(req, layout);
  }
  switch (req.coll) {
    case algorithms::Collective::kAllReduce:
      // Small messages are latency-bound: log2(n) hops beat the ring's 2(n-1).
      if (layout.nranks > 1 && req.count * dataTypeSize(req.dtype) <= layout.smallMaxBytes)
        return algorithms::allreduceRecursiveDoubling(req, layout);
      return algorithms::allreduceRing(req, layout);
    default:
      break;
  }
  for (const auto& a : algorithms::algorithmTable())
    if (a.coll == req.coll) return a.build(req, layout);
  return internalError(std::string("no algorithm for ") + algorithms::collectiveName(req.coll));
}

}  // namespace braid::plan
