#include "plan/planner.h"

#include <algorithm>
#include <map>
#include <string>

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
  for (size_t c = 0; c < l.rings.size() && !world.rings.empty(); ++c) l.rings[c] = world.rings[c % world.rings.size()];
  std::map<std::string, int> hostIndex;
  for (const std::string& h : world.hostIds) {
    int next = static_cast<int>(hostIndex.size());
    if (!hostIndex.count(h)) hostIndex[h] = next;
    l.hostOf.push_back(hostIndex[h]);
  }
  if (l.hostOf.empty()) l.hostOf.assign(static_cast<size_t>(world.nranks), 0);
  for (int t = 0; t < 2; ++t)
    if (static_cast<int>(world.treeParent[t].size()) == world.nranks) l.treeParent[t] = world.treeParent[t];
  if (l.treeParent[0].empty() || l.treeParent[1].empty()) l.treeParent = {};  // both or neither
  l.netGBps = world.netGBps;
  l.intraGBps = world.intraGBps;
  return l;
}

namespace {

// Where every connection moves a whole block as one message from the sender's memory through
// shared memory (UCX's rendezvous there), each step of an allreduce pays a handshake before
// its bytes move, and the ring's 2(n-1) steps cost more than Rabenseifner's 2 log2(n). At 4
// ranks on one host, 512 KiB-4 MiB, Rabenseifner took 0.72-0.93 of the ring's time over
// UCX_TLS=sm,self; at 2 ranks the two were even, at 3 and 8 ranks and from 8 MiB the ring
// was as fast or faster. Over UCX's tcp the ring was as fast or faster too, with blocks
// sent whole in the rings or not (4 ranks, 1 MiB, medians of six runs: 1775 against 2109
// µs). docs/performance.md, "The allreduce over UCX's shared memory at 4 ranks" and "UCX's
// tcp off the kernel's pacing".
bool rendezvousHalving(const algorithms::Layout& layout, size_t bytes) {
  return layout.nranks == 4 && layout.wholeBlockBytes > 0 && layout.wholeBlocksInRings && layout.rendezvousInMemory &&
         bytes >= (512u << 10) && bytes <= (4u << 20);
}

// Over UCX's shared memory (rendezvousInMemory), 4 ranks, 64-256 KiB: two-shot (a direct
// reduce-scatter, then a direct allgather) takes two rounds like recursive doubling, where
// the ring takes six, yet each rank sends 1.5 times the buffer instead of twice and reduces
// 0.75 of it instead of twice. Against the default (recursive doubling at 64 KiB, the ring
// above), alternated run by run over UCX_TLS=sm,self with 4 ranks on 2 cores, medians of
// five or six paired runs of 9-15 rounds: 64 KiB 1.29x busbw (1.09-1.30), 128 KiB 1.08x
// (0.73-1.35), 256 KiB 1.16x (0.97-1.59). At 32 and 48 KiB recursive doubling was as fast
// or faster (0.84-1.20), at 512 KiB Rabenseifner (0.96), at 3, 5 and 6 ranks neither was
// clearly ahead (0.93-1.21), and over braid's shm and UCX's tcp two-shot lost at 64 KiB.
// docs/performance.md, "Two-shot at 4 ranks over UCX's shared memory".
bool ucxMemoryTwoShot(const algorithms::Layout& layout, size_t bytes) {
  return layout.nranks == 4 && layout.rendezvousInMemory && bytes >= (64u << 10) && bytes <= (256u << 10);
}

// An allgather of at most 64 KiB in all (the small-message size, layout.smallMaxBytes) at 4
// or more ranks, a power of two: recursive doubling's log2(n) exchanges on the mesh beat the
// ring's n-1 steps where hops cost more than bytes. Against the ring, alternated run by run
// on 2 cores, median busbw ratios of 9-15 paired rounds at 16-64 KiB: 4 ranks 1.07-1.10
// over shm, 1.31-1.34 over tcp and 0.95-1.32 over UCX's shared memory (six runs of eight
// above 1.05); 8 ranks 1.42-1.56 over shm and 1.37-1.53 over UCX. At 128-256 KiB the ring
// was ahead over tcp and UCX (0.75-0.88), and at 3 ranks, where recursive doubling folds the
// extra rank in and out, at 16 and 64 KiB too (0.71, 0.83). docs/performance.md, "Small
// allgathers".
bool smallAllgather(const algorithms::Layout& layout, size_t bytes) {
  const int n = layout.nranks;
  return n >= 4 && (n & (n - 1)) == 0 && bytes <= layout.smallMaxBytes;
}

bool isDefault(const algorithms::AlgorithmInfo& a, const algorithms::Request& req, const algorithms::Layout& layout) {
  if (req.coll == algorithms::Collective::kAllGather &&
      smallAllgather(layout, algorithms::requestBytes(req, layout.nranks))) {
    return std::string(a.name) == "recursive_doubling";
  }
  if (req.coll == algorithms::Collective::kAllReduce) {
    // Small messages are latency-bound: log2(n) hops beat the ring's 2(n-1).
    const size_t bytes = req.count * dataTypeSize(req.dtype);
    if (ucxMemoryTwoShot(layout, bytes)) return std::string(a.name) == "two_shot";
    bool small = layout.nranks > 1 && bytes <= layout.smallMaxBytes;
    if (!small && rendezvousHalving(layout, bytes)) return std::string(a.name) == "rabenseifner";
    return std::string(a.name) == (small ? "recursive_doubling" : "ring");
  }
  for (const auto& t : algorithms::algorithmTable())
    if (t.coll == req.coll) return &t == &a;
  return false;
}

// `layout` with only the first `channels` rings.
algorithms::Layout withChannels(const algorithms::Layout& layout, int channels) {
  algorithms::Layout l = layout;
  if (channels >= 1 && channels < static_cast<int>(l.rings.size())) l.rings.resize(static_cast<size_t>(channels));
  return l;
}

}  // namespace

StatusOr<Plan> choosePlan(const algorithms::Request& req, const algorithms::Layout& layout, const Machine& machine,
                          const std::vector<AlgoRule>* rules, exec::Schedule* schedule) {
  if (rules) {
    if (const AlgoRule* r = findRule(*rules, req.coll, algorithms::requestBytes(req, layout.nranks))) {
      Plan p;
      p.algo = r->algo;
      p.overridden = true;
      p.channels = channelsFor(req, machine);
      p.predicted = predictSeconds(*r->algo, req, machine, p.channels);
      if (schedule) {
        BRAID_ASSIGN_OR_RETURN(*schedule, r->algo->build(req, withChannels(layout, p.channels)));
        p.channels = static_cast<int>(schedule->channels.size());
        p.sliceBytes = schedule->connectionSet == 1 ? machine.meshSlotBytes : machine.ringSlotBytes;
      }
      return p;
    }
  }
  std::vector<Prediction> ranked = rankAlgorithms(req, machine);
  if (machine.nhosts() <= 1) {
    // Keep the measured default unless the model is clearly for something else.
    auto def = std::find_if(ranked.begin(), ranked.end(),
                            [&](const Prediction& p) { return isDefault(*p.algo, req, layout); });
    if (def != ranked.end() && def != ranked.begin() && ranked.front().seconds > kSwitchFactor * def->seconds)
      std::rotate(ranked.begin(), def, def + 1);
  }
  // Anything the model does not cover still gets a try, after the modelled ones.
  for (const auto& a : algorithms::algorithmTable()) {
    if (a.coll != req.coll) continue;
    if (std::none_of(ranked.begin(), ranked.end(), [&](const Prediction& p) { return p.algo == &a; }) &&
        !(a.coll == algorithms::Collective::kAllReduce && std::string(a.name) == "hierarchical")) {
      Prediction p;
      p.algo = &a;
      p.channels = static_cast<int>(layout.rings.size());
      p.seconds = -1;
      ranked.push_back(p);
    }
  }
  Status last = internalError(std::string("no algorithm for ") + algorithms::collectiveName(req.coll));
  for (const Prediction& c : ranked) {
    auto built = c.algo->build(req, withChannels(layout, c.channels));
    if (!built.isOk()) {
      last = built.status();  // not available (yet): the next cheapest
      continue;
    }
    Plan p;
    p.algo = c.algo;
    p.channels = static_cast<int>(built->channels.size());
    p.sliceBytes = built->connectionSet == 1 ? machine.meshSlotBytes : machine.ringSlotBytes;
    p.predicted = c.seconds;
    if (schedule) *schedule = std::move(built).value();
    return p;
  }
  return last;
}

StatusOr<exec::Schedule> planCollective(const algorithms::Request& req, const algorithms::Layout& layout,
                                        const std::vector<AlgoRule>* rules, const Machine& machine) {
  exec::Schedule s;
  BRAID_RETURN_IF_ERROR(choosePlan(req, layout, machine, rules, &s).status());
  return s;
}

StatusOr<exec::Schedule> planCollective(const algorithms::Request& req, const algorithms::Layout& layout,
                                        const std::vector<AlgoRule>* rules) {
  return planCollective(req, layout, rules, machineForLayout(layout));
}

}  // namespace braid::plan
