#include "plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

namespace braid::plan {

using algorithms::Collective;

Link transportLink(const std::string& transport) {
  // Typical figures for one rank pair: shared memory is a cache-to-cache copy (about a
  // microsecond to notice a slot, memory bandwidth to move it); TCP is a 10 GbE NIC with a
  // kernel round trip. The loopback transport of the in-process world behaves like shm.
  if (transport == "shm" || transport == "loopback" || transport == "self" || transport == "cuda_ipc")
    return Link{1e-6, 20e9, 2e-7};
  if (transport == "rdma" || transport == "verbs" || transport == "ib") return Link{3e-6, 12e9, 5e-7};
  if (transport == "ucx") return Link{5e-6, 10e9, 1e-6};
  return Link{25e-6, 1.2e9, 2e-6};  // tcp and anything unknown
}

int Machine::nhosts() const {
  int h = 0;
  for (int x : hostOf) h = std::max(h, x + 1);
  return h;
}

int Machine::maxRanksPerHost() const {
  std::map<int, int> count;
  int m = 0;
  for (int x : hostOf) m = std::max(m, ++count[x]);
  return m;
}

Machine uniformMachine(int nhosts, int ranksPerHost, int nchannels) {
  Machine m;
  for (int h = 0; h < nhosts; ++h)
    for (int r = 0; r < ranksPerHost; ++r) m.hostOf.push_back(h);
  m.nchannels = std::max(1, nchannels);
  if (nhosts > 1) {  // the communicator's stream geometry
    m.ringSlotBytes = 64 * 1024;
    m.ringSlots = 8;
  }
  return m;
}

Machine machineForLayout(const algorithms::Layout& layout, const std::string& forcedTransport) {
  Machine m;
  m.hostOf = layout.hostOf;
  if (static_cast<int>(m.hostOf.size()) != layout.nranks) m.hostOf.assign(static_cast<size_t>(layout.nranks), 0);
  m.nchannels = std::max<int>(1, static_cast<int>(layout.rings.size()));
  const bool stream = m.nhosts() > 1 || forcedTransport == "tcp";
  // The communicator's slot geometry: stream transports use 64 KiB slots (tcp inside one
  // host kLocalTcpSlotBytes), memory ones 512 KiB; roundBytes is half the FIFO.
  m.ringSlotBytes = !stream ? 512 * 1024 : m.nhosts() > 1 ? 64 * 1024 : kLocalTcpSlotBytes;
  m.ringSlots = std::max<int>(2, static_cast<int>(2 * layout.roundBytes / m.ringSlotBytes));
  m.meshSlots = std::max<int>(2, static_cast<int>(2 * layout.smallRoundBytes / m.meshSlotBytes));
  if (!forcedTransport.empty()) m.intra = m.inter = transportLink(forcedTransport);
  // Bandwidths the topology knows (rank 0 published them, so every rank sees the same);
  // latencies and per-message overheads stay the transport table's.
  if (layout.netGBps > 0) m.inter.beta = layout.netGBps * 1e9;
  if (layout.intraGBps > 0 && forcedTransport.empty()) m.intra.beta = layout.intraGBps * 1e9;
  // The published trees chain the ranks of a host: deeper than a binary tree, with few host
  // crossings on any path.
  for (const std::vector<int>& parent : layout.treeParent) {
    if (static_cast<int>(parent.size()) != layout.nranks) continue;
    for (int r = 0; r < layout.nranks; ++r) {
      int depth = 0, cross = 0;
      for (int x = r; parent[x] >= 0 && depth <= layout.nranks; x = parent[x]) {
        ++depth;
        cross += m.hostOf[x] != m.hostOf[parent[x]];
      }
      m.treeDepth = std::max(m.treeDepth, depth);
      m.treeCrossings = std::max(m.treeCrossings, cross);
    }
  }
  return m;
}

namespace {

// Everything a formula needs, computed once per prediction.
struct Model {
  const Machine& m;
  int n;
  int hosts;
  double nicShare = 1;  // ranks of other lanes sharing each NIC (hierarchical)
  double g;   // seconds per reduced byte
  double cp;  // seconds per copied byte

  explicit Model(const Machine& mm)
      : m(mm), n(mm.nranks()), hosts(mm.nhosts()), g(1.0 / mm.reduceBeta), cp(1.0 / mm.copyBeta) {}

  // Most ranks of one host whose message to rank r+d (mod n) leaves the host.
  int crossShift(int d) const {
    if (hosts <= 1) return 0;
    std::vector<int> c(static_cast<size_t>(hosts), 0);
    int mx = 0;
    for (int r = 0; r < n; ++r)
      if (m.hostOf[r] != m.hostOf[(r + d) % n]) mx = std::max(mx, ++c[m.hostOf[r]]);
    return mx;
  }
  // The same for partners r ^ d among ranks below p.
  int crossXor(int d, int p) const {
    if (hosts <= 1) return 0;
    std::vector<int> c(static_cast<size_t>(hosts), 0);
    int mx = 0;
    for (int r = 0; r < p; ++r)
      if ((r ^ d) < p && m.hostOf[r] != m.hostOf[r ^ d]) mx = std::max(mx, ++c[m.hostOf[r]]);
    return mx;
  }
  // One exchange of `bytes` by every rank when at most `cross` ranks per host go off-host:
  // they divide the NIC; the others run at memory speed.
  double level(double bytes, int cross) const {
    if (cross > 0)
      return m.inter.alpha + 2 * m.inter.overhead + std::max(bytes / m.intra.beta, cross * bytes / m.inter.beta);
    return m.intra.alpha + 2 * m.intra.overhead + bytes / m.intra.beta;
  }
  // Message time over a level with pipelining of slices of `slot`: the first slice pays
  // the latency, the rest stream at the level's bandwidth.
  double stream(double bytes, int cross, double work) const {
    double t = level(bytes, cross);
    return std::max(t, level(0, cross) + work);
  }
  // One phase of direct exchanges: every rank sends `msgs` messages of `bytes` (of which
  // all but the host's own peers leave the host), then receives as many, doing
  // `cpuPerByte` per byte received. Per-message overheads add up; bytes pipeline.
  double directPhase(int msgs, double bytes, double cpuPerByte) const {
    if (msgs <= 0 || bytes <= 0) return 0;
    const int R = m.maxRanksPerHost();
    const int local = std::min(msgs, R - 1), remote = msgs - local;
    const double ov = 2 * (local * m.intra.overhead + remote * m.inter.overhead);
    const double share = nicShare;
    double w = std::max(msgs * bytes * (cpuPerByte + cp), local * bytes / m.intra.beta);
    if (remote > 0) w = std::max(w, 1.5 * R * share * remote * bytes / m.inter.beta);  // egress and ingress both busy
    return (remote ? m.inter.alpha : m.intra.alpha) + ov + w;
  }
  int pow2Below() const {
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
  }
  int log2Ceil() const {
    int l = 0;
    while ((1 << l) < n) ++l;
    return l;
  }
  // Hops of the host-contiguous ring that cross hosts (each host has one outgoing).
  int ringCrossings() const { return hosts > 1 ? hosts : 0; }
  double sliceCount(double bytes, size_t slot) const {
    return std::max(1.0, std::ceil(bytes / static_cast<double>(slot)));
  }

  // A pipelined ring pass: `steps` dependent steps of `chunk` bytes per channel, each step
  // costing `cpuPerByte` of local work; NIC and memory bandwidth shared as on the machine.
  // `perConn` is what each connection carries in all (default: every step's chunk).
  double ring(int steps, double chunk, int nch, double cpuPerByte, double perConn = -1) const {
    if (steps <= 0 || chunk <= 0) return 0;
    double k = sliceCount(chunk, m.ringSlotBytes);
    double s = chunk / k;
    int x = ringCrossings();
    double hop = ((n - x) * (m.intra.alpha + 2 * m.intra.overhead + s / m.intra.beta) +
                  x * (m.inter.alpha + 2 * m.inter.overhead + s / m.inter.beta)) /
                     n +
                 s * cpuPerByte;
    double total = perConn >= 0 ? perConn : steps * chunk;
    double w = std::max(total / m.intra.beta, total * cpuPerByte);
    if (x) w = std::max(w, nch * total / m.inter.beta);
    return steps * hop + w * (1 - 1 / k);
  }

  // A pipelined tree over depth `depth` moving `bytes` (mesh slots), each inner node
  // handling `fan` children, with `cpuPerByte` per byte handled.
  // `lockstep` > 0: rounds do not overlap (see allreduce tree) and each costs that many
  // passes over the tree's depth.
  // `interLevels` >= 0: that many of the levels cross hosts (a published tree); -1: the top
  // levels of a binary tree over host-contiguous ranks do.
  double tree(double bytes, int depth, int fan, double cpuPerByte, int crossPerHost, double lockstep = 0,
              int interLevels = -1) const {
    if (bytes <= 0 || depth <= 0) return 0;
    double k = sliceCount(bytes, m.meshSlotBytes);
    double s = bytes / k;
    Link hopLink = hosts > 1 ? m.inter : m.intra;
    if (interLevels < 0)
      interLevels = hosts > 1 ? std::min(depth, static_cast<int>(std::ceil(std::log2(hosts))) + 1) : 0;
    interLevels = std::min(interLevels, depth);
    double hop = (interLevels * (m.inter.alpha + 2 * m.inter.overhead + s / m.inter.beta) +
                  (depth - interLevels) * (m.intra.alpha + 2 * m.intra.overhead + s / m.intra.beta)) /
                     depth +
                 fan * s * cpuPerByte;
    (void)hopLink;
    double w = std::max(fan * bytes / m.intra.beta, fan * bytes * cpuPerByte);
    if (hosts > 1) w = std::max(w, crossPerHost * bytes / m.inter.beta);
    // Each round's parts climb the whole tree before the next round's can follow (the
    // two trees' steps interleave in one thread), so rounds add up hop by hop.
    return std::max(depth * hop + w * (1 - 1 / k), lockstep * depth * hop * k);
  }
};

double allreduce(const std::string& a, double B, const Model& md, int nch) {
  const int n = md.n;
  if (n == 1) return B * md.cp;
  const int p = md.pow2Below();
  if (a == "ring") return md.ring(2 * (n - 1), B / (n * nch), nch, md.g + 2 * md.cp);
  if (a == "recursive_doubling") {
    double t = 0;
    for (int d = 1; d < p; d *= 2) t += md.stream(B, md.crossXor(d, p), B * (md.g + md.cp));
    if (n > p) t += 2 * md.stream(B, md.crossShift(p), B * md.cp);
    return t;
  }
  if (a == "rabenseifner") {
    double t = 0, b = B;
    for (int d = p / 2; d >= 1; d /= 2) {  // halving: the biggest half goes farthest
      b /= 2;
      t += md.stream(b, md.crossXor(d, p), b * (md.g + md.cp));
    }
    for (int d = 1; d < p; d *= 2) {  // doubling back
      t += md.stream(b, md.crossXor(d, p), b * 2 * md.cp);
      b *= 2;
    }
    if (n > p) t += 2 * md.stream(B, md.crossShift(p), B * md.cp);
    return t;
  }
  if (a == "tree") {
    // Two trees, each half the data: up (reduce two children) then down (send to two).
    // The topology's trees (chains inside hosts) are deeper and cross hosts less.
    const bool published = md.m.treeDepth > 0;
    int depth = published ? md.m.treeDepth : std::max(1, md.log2Ceil());
    int inter = published ? md.m.treeCrossings : -1;
    int cross = md.hosts > 1 ? 2 : 0;
    // Each rank is inner in one tree (two children of B/2) and a leaf in the other: it
    // handles about 3/4 of B per child slot on the way up and again on the way down.
    return md.tree(0.75 * B, depth, 2, md.g + md.cp, cross, 1.5, inter) +
           md.tree(0.75 * B, depth, 2, 2 * md.cp, cross, 1.5, inter);
  }
  if (a == "direct") {
    if (B == 0) return 0;
    return md.directPhase(n - 1, B, md.g);
  }
  if (a == "two_shot") {
    if (B == 0) return 0;
    // With fewer elements than ranks the few ranks owning a shard still talk to all.
    double shard = std::max(B / n, std::min(B, 4.0));
    return md.directPhase(n - 1, shard, md.g) + md.directPhase(n - 1, shard, md.cp);
  }
  if (a == "hierarchical") {
    const int H = md.hosts;
    const int R = md.m.maxRanksPerHost();
    if (H < 2) return -1;
    // Four phases of direct exchanges: reduce-scatter inside each host (R shards), then
    // across hosts among the ranks holding the same shard (H sub-shards), then the two
    // allgathers back.
    Machine local = md.m;
    local.hostOf.assign(static_cast<size_t>(R), 0);
    Model in(local);
    Machine across = md.m;
    across.hostOf.clear();
    for (int h = 0; h < H; ++h) across.hostOf.push_back(h);
    Model out(across);
    const double shard = B / R, sub = shard / H;
    double t = in.directPhase(R - 1, shard, md.g) + in.directPhase(R - 1, shard, md.cp);
    // R lanes share every host's NIC: scale the network's bandwidth down by R.
    out.nicShare = R;
    t += out.directPhase(H - 1, sub, md.g) + out.directPhase(H - 1, sub, md.cp);
    return t;
  }
  return -1;
}

double predict(const algorithms::AlgorithmInfo& info, const algorithms::Request& req, const Machine& machine,
               int nch) {
  const Model md(machine);
  const int n = md.n;
  const std::string a = info.name;
  const double B = static_cast<double>(algorithms::requestBytes(req, n));
  const double shard = n ? B / n : 0;
  const int p = md.pow2Below();
  const int logn = md.log2Ceil();
  const int R = machine.maxRanksPerHost();
  if (B == 0 && info.coll != Collective::kBarrier) return 0;  // nothing moves
  switch (info.coll) {
    case Collective::kAllReduce:
      return allreduce(a, B, md, nch);
    case Collective::kBroadcast:
    case Collective::kReduce: {
      const bool red = info.coll == Collective::kReduce;
      if (n == 1) return B * md.cp;
      if (a == "chain") return md.ring(n - 1, B / nch, nch, red ? md.g : 2 * md.cp, B / nch);
      if (a == "tree") return md.tree(B, std::max(1, logn), 2, red ? md.g : 1.5 * md.cp, md.hosts > 1 ? 2 : 0);
      return -1;
    }
    case Collective::kAllGather:
    case Collective::kAllGatherV:
    case Collective::kReduceScatter:
    case Collective::kReduceScatterV: {
      const bool red = info.coll == Collective::kReduceScatter || info.coll == Collective::kReduceScatterV;
      const double cpu = red ? md.g + md.cp : 2 * md.cp;
      if (n == 1) return B * md.cp;
      if (a == "ring") return md.ring(n - 1, shard / nch, nch, cpu);
      if (a == "recursive_doubling" || a == "recursive_halving" || a == "bruck") {
        // log levels; level l moves 2^l shards (allgather) or the mirror (reduce-scatter).
        double t = 0;
        for (int d = 1; d < n; d *= 2) {
          double b = shard * std::min(d, n - d);
          int cross = (a == "bruck") ? md.crossShift(d) : md.crossXor(d, p);
          if (a != "bruck" && d >= p) cross = md.crossShift(d);
          t += md.stream(b, cross, b * cpu);
        }
        if (a != "bruck" && n > p) t += 2 * md.stream(B / 2, md.crossShift(p), B / 2 * md.cp);
        if (a == "bruck") t += B * md.cp;  // the final rotation
        return t;
      }
      if (a == "direct") return md.directPhase(n - 1, shard, red ? md.g : md.cp);
      return -1;
    }
    case Collective::kAllToAll:
    case Collective::kAllToAllV: {
      if (n == 1) return B * md.cp;
      double nic = md.hosts > 1 ? static_cast<double>(R) * (n - R) * shard / machine.inter.beta : 0;
      if (a == "pairwise") {
        double t = 0;
        for (int d = 1; d < n; ++d) t += md.level(shard, 0) - shard / machine.intra.beta + shard * 2 * md.cp;
        Link l = md.hosts > 1 ? machine.inter : machine.intra;
        return std::max(t, nic) + (md.hosts > 1 ? (n - 1) * (l.alpha - machine.intra.alpha) : 0);
      }
      if (a == "bruck") {
        double t = 2 * B * md.cp;
        for (int d = 1; d < n; d *= 2) t += md.stream(B / 2, md.crossShift(d), B / 2 * 2 * md.cp);
        return t;
      }
      return -1;
    }
    case Collective::kGather:
    case Collective::kScatter: {
      if (n == 1) return B * md.cp / n;
      Link l = md.hosts > 1 ? machine.inter : machine.intra;
      if (a == "direct") {
        double w = std::max((n - 1) * shard * md.cp, (n - 1) * shard / machine.intra.beta);
        if (md.hosts > 1) w = std::max(w, (n - R) * shard / machine.inter.beta);
        return l.alpha + w;
      }
      if (a == "tree") {
        double t = 0;
        for (int d = 1; d < n; d *= 2) {
          double b = shard * std::min(d, n - d);
          t += md.stream(b, md.crossXor(d, n), b * 2 * md.cp);
        }
        return t;
      }
      return -1;
    }
    case Collective::kBarrier: {
      double t = 0;
      for (int d = 1; d < n; d *= 2) t += md.level(1, md.crossShift(d));
      return t;
    }
    case Collective::kSendRecv:
      return B / (md.hosts > 1 ? machine.inter.beta : machine.intra.beta) +
             (md.hosts > 1 ? machine.inter.alpha : machine.intra.alpha);
  }
  return -1;
}

bool usesRings(const algorithms::AlgorithmInfo& a) {
  // The ring algorithms (and the chain, which rides the rings) spread over the channels.
  return !std::strcmp(a.name, "ring") || !std::strcmp(a.name, "chain") ||
         (a.coll == Collective::kAllReduce && !std::strcmp(a.name, "hierarchical"));
}

}  // namespace

int channelsFor(const algorithms::Request& req, const Machine& machine) {
  // A channel beyond the first costs a progress thread's wake-up per call (microseconds),
  // which only pays off once each channel moves enough bytes; every rank derives the same
  // count from the call's size.
  constexpr size_t kMinChannelBytes = 512 * 1024;
  size_t bytes = algorithms::requestBytes(req, machine.nranks());
  int byBytes = static_cast<int>(std::min<size_t>(bytes / kMinChannelBytes, 1024));
  return std::max(1, std::min(machine.nchannels, byBytes));
}

double predictSeconds(const algorithms::AlgorithmInfo& algo, const algorithms::Request& req, const Machine& machine,
                      int channels) {
  if (algo.coll != req.coll || machine.nranks() < 1) return -1;
  return predict(algo, req, machine, std::max(1, channels));
}

std::vector<Prediction> rankAlgorithms(const algorithms::Request& req, const Machine& machine) {
  std::vector<Prediction> out;
  for (const auto& a : algorithms::algorithmTable()) {
    if (a.coll != req.coll) continue;
    Prediction p;
    p.algo = &a;
    p.channels = usesRings(a) ? channelsFor(req, machine) : 1;
    p.sliceBytes = usesRings(a) ? machine.ringSlotBytes : machine.meshSlotBytes;
    p.seconds = predictSeconds(a, req, machine, p.channels);
    if (p.seconds < 0) continue;
    out.push_back(p);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Prediction& x, const Prediction& y) { return x.seconds < y.seconds; });
  return out;
}

}  // namespace braid::plan
