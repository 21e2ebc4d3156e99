// Hierarchical allreduce for several hosts: most bytes stay on the fast links inside a
// host, and each byte crosses between hosts only about twice.
//
//   1. reduce-scatter inside each host: the buffer is cut into m shards (m = the fewest
//      ranks any host has) and the host's i-th rank (by rank order) reduces shard i from
//      all of the host's ranks;
//   2. reduce-scatter across hosts: shard i is cut into H sub-shards (H hosts) and the i-th
//      rank of host h reduces sub-shard h from the i-th ranks of all hosts;
//   3. allgather of the sub-shards among the i-th ranks of all hosts;
//   4. allgather inside each host: the i-th rank sends shard i to the host's other ranks.
//
// Hosts with more than m ranks let their extra ranks only contribute in 1 and receive in
// 4. One host degenerates to a two-shot allreduce inside it, one rank per host to a two-shot
// across hosts. Every element is reduced by exactly one rank and then copied, so all ranks
// end with the same bits.
//
// Each stage is a phase of direct exchanges ("all sends, then all receives"), so with
// unbounded FIFOs nothing waits in a cycle, and within a phase a connection carries at most
// one part per round.

#include <algorithm>

#include "algorithms/algorithm.h"

namespace braid::algorithms {

using exec::Buf;
using exec::Prim;
using exec::Region;
using exec::Schedule;
using exec::Step;

StatusOr<Schedule> allreduceHierarchical(const Request& req, const Layout& layout) {
  const int n = layout.nranks;
  const int r = layout.rank;
  const size_t es = dataTypeSize(req.dtype);
  const size_t bytes = req.count * es;
  if (static_cast<int>(layout.hostOf.size()) != n) return invalidArgument("allreduceHierarchical: hostOf does not cover every rank");
  Schedule s = meshSchedule(req, "hierarchical");
  exec::ChannelPlan& plan = s.channels[0];
  if (req.op == ReduceOp::kAvg && n > 1) {
    s.divisor = n;
    s.divideRanges = {{Region{Buf::kOutput, 0, bytes}}};
  }
  if (bytes == 0) return s;

  // Ranks of every host in rank order; hosts numbered 0..H-1 by hostOf.
  int nhosts = 0;
  for (int h : layout.hostOf) nhosts = std::max(nhosts, h + 1);
  std::vector<std::vector<int>> members(static_cast<size_t>(nhosts));
  for (int q = 0; q < n; ++q) members[layout.hostOf[q]].push_back(q);
  members.erase(std::remove_if(members.begin(), members.end(), [](const std::vector<int>& v) { return v.empty(); }),
                members.end());
  nhosts = static_cast<int>(members.size());
  size_t m = members[0].size();
  for (const auto& v : members) m = std::min(m, v.size());
  int host = 0;
  while (std::find(members[host].begin(), members[host].end(), r) == members[host].end()) ++host;
  const std::vector<int>& local = members[host];
  const int li = static_cast<int>(std::find(local.begin(), local.end(), r) - local.begin());
  const bool owner = static_cast<size_t>(li) < m;

  // Element range of shard i, and of sub-shard g of shard i.
  auto shardLo = [&](size_t i) { return req.count * i / m; };
  auto subLo = [&](size_t i, int g) {
    size_t lo = shardLo(i), len = shardLo(i + 1) - lo;
    return lo + len * static_cast<size_t>(g) / static_cast<size_t>(nhosts);
  };
  auto region = [&](Buf buf, size_t lo, size_t hi) { return Region{buf, lo * es, (hi - lo) * es}; };
  auto shard = [&](Buf buf, size_t i) { return region(buf, shardLo(i), shardLo(i + 1)); };
  auto sub = [&](Buf buf, size_t i, int g) { return region(buf, subLo(i, g), subLo(i, g + 1)); };

  // Rounds from the largest shard / sub-shard anywhere, so both ends of every link agree.
  const size_t budget = std::max(es, layout.smallRoundBytes / es * es);
  const int shardRounds = roundsFor((req.count + m - 1) / m * es, budget);
  size_t maxSub = 0;
  for (size_t i = 0; i < m; ++i)
    for (int g = 0; g < nhosts; ++g) maxSub = std::max(maxSub, subLo(i, g + 1) - subLo(i, g));
  const int subRounds = roundsFor(maxSub * es, budget);

  size_t phaseBegin = 0;
  auto endPhase = [&](int rounds) {
    plan.phases.push_back(exec::Phase{phaseBegin, plan.steps.size() - phaseBegin, rounds});
    phaseBegin = plan.steps.size();
  };

  // 1. Reduce-scatter inside the host. In place, shards of others are overwritten only in
  // phase 4, long after their sends.
  for (size_t i = 0; i < m; ++i)
    if (static_cast<int>(i) != li && shard(Buf::kInput, i).bytes)
      plan.steps.push_back(Step{Prim::kSend, -1, local[i], shard(Buf::kInput, i), {}});
  if (owner && shard(Buf::kOutput, li).bytes) {
    const Region own = shard(Buf::kOutput, li);
    // The first reduction reads our own part from the input; a copy only where none does.
    Region partial = shard(Buf::kInput, li);
    for (size_t j = 0; j < local.size(); ++j)
      if (static_cast<int>(j) != li) {
        plan.steps.push_back(Step{Prim::kRecvReduce, local[j], -1, partial, own});
        partial = own;
      }
    if (!req.inPlace && partial.buf == Buf::kInput) plan.steps.push_back(Step{Prim::kCopy, -1, -1, partial, own});
  }
  endPhase(shardRounds);

  if (owner) {
    // 2. Reduce-scatter of shard li across hosts, among the li-th ranks.
    for (int g = 0; g < nhosts; ++g)
      if (g != host && sub(Buf::kOutput, li, g).bytes)
        plan.steps.push_back(Step{Prim::kSend, -1, members[g][li], sub(Buf::kOutput, li, g), {}});
    const Region mine = sub(Buf::kOutput, li, host);
    if (mine.bytes)
      for (int g = 0; g < nhosts; ++g)
        if (g != host) plan.steps.push_back(Step{Prim::kRecvReduce, members[g][li], -1, mine, mine});
    endPhase(subRounds);
    // 3. Allgather of the reduced sub-shards.
    if (mine.bytes)
      for (int g = 0; g < nhosts; ++g)
        if (g != host) plan.steps.push_back(Step{Prim::kSend, -1, members[g][li], mine, {}});
    for (int g = 0; g < nhosts; ++g)
      if (g != host && sub(Buf::kOutput, li, g).bytes)
        plan.steps.push_back(Step{Prim::kRecv, members[g][li], -1, {}, sub(Buf::kOutput, li, g)});
    endPhase(subRounds);
  } else {
    endPhase(subRounds);
    endPhase(subRounds);
  }

  // 4. Allgather inside the host.
  if (owner && shard(Buf::kOutput, li).bytes)
    for (size_t j = 0; j < local.size(); ++j)
      if (static_cast<int>(j) != li) plan.steps.push_back(Step{Prim::kSend, -1, local[j], shard(Buf::kOutput, li), {}});
  for (size_t i = 0; i < m; ++i)
    if (static_cast<int>(i) != li && shard(Buf::kOutput, i).bytes)
      plan.steps.push_back(Step{Prim::kRecv, local[i], -1, {}, shard(Buf::kOutput, i)});
  endPhase(shardRounds);
  plan.rounds = shardRounds;
  return s;
}

}  // namespace braid::algorithms
