#include "core/communicator.h"

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <set>
#include <sstream>

#include "bootstrap/host_id.h"
#include "bootstrap/unique_id.h"
#include "common/foreign_load.h"
#include "common/log.h"
#include "common/process_state.h"
#include "common/tcp_pacing.h"
#include "common/tls.h"
#include "common/timeline.h"
#include "common/ucx_env.h"
#include "plan/planner.h"
#include "reduce/reduce.h"
#include "topology/discover.h"
#include "topology/graph_json.h"
#include "topology/json.h"
#include "topology/placement.h"
#include "topology/rings.h"

namespace braid::core {

namespace {

constexpr int64_t kStoreCheckPeriodNs = 100 * 1000 * 1000;
// The least time a store call of the failure checks is given, whatever the deadline left.
constexpr double kStoreMinWaitSec = 1.0;
// How long a rank that timed out on a peer held in another communicator waits for the
// processes' answers (askLiveStatus) before following the peer's holds; more where the
// processes check a caller's store for the question less often (a large job's,
// liveAnswerSeconds).
constexpr double kHeldAskSec = 0.5;
// How much longer than that the ask waits for a process the holds lead to that has not
// answered yet (one that runs on a loaded host answers late; one that never answers is
// stopped or cut off, and is named so after this wait).
constexpr double kHeldAnswerMoreSec = 1.5;

// Whether process `pid` (on this host) is stopped (SIGSTOP, a debugger).
bool processStopped(int64_t pid) { return stateStopped(processState(pid)); }
// `deadline`, or kStoreMinWaitSec from now where that is later: a check issued just before
// the operation's deadline still gets a fair chance, so that a store which misses only that
// deadline is not taken for a stalled one (the operation's own wait reports the timeout).
Deadline storeCheckDeadline(Deadline deadline) {
  Deadline floor = Deadline::after(kStoreMinWaitSec);
  return !deadline.never() && deadline.nanos() < floor.nanos() ? floor : deadline;
}
// Results at least this large are written with streaming stores: they outgrow a typical
// L2 + share of L3 and would otherwise cost a read for ownership per line.
constexpr size_t kStreamOutputBytes = 8u << 20;
// The mesh connection set (every peer): small-message, tree and point-to-point traffic.
// Slots and depth sized for latency and a modest footprint per peer, not for bandwidth.
constexpr size_t kMeshSlotBytes = 64 * 1024;
constexpr int kMeshSlots = 4;
constexpr size_t kUcxMeshSlotBytes = 256 * 1024;
// The message of a whole-blocks step (exec::Schedule::wholeBlocks) where every connection
// carries large messages: one message per step and round up to this size. UCX moves it
// buffer to buffer, by rendezvous (single-copy cma inside a host, zero copy over RDMA):
// against 256 KiB slices, allgather over UCX's shared memory, 2 ranks, 16 MiB, 1.18x busbw;
// alltoall, 4 ranks, 256 MiB, 1.44x (docs/performance.md, "UCX", part 4).
constexpr size_t kWholeBlockBytes = 64u << 20;
// Allreduces up to this size may use the mesh's small-message algorithms.
constexpr size_t kSmallMaxBytes = 64 * 1024;
// Channel number of the mesh, kept apart from the rings' in transport names.
constexpr int kMeshChannel = 1000;
// How often a rank that joins reads how many joining ranks' store connections ended.
constexpr int64_t kInitGoneCheckNs = 250 * 1000 * 1000;
// How many of its latest calls a failing rank publishes for its peers to decode.
constexpr size_t kPublishedCalls = 4;
// Point-to-point messages carry this tag instead of a collective's sequence number: sends
// and receives match in order per pair of ranks, whatever else each rank issued.
constexpr uint64_t kP2PTag = 0xFFFFFFFF00000000ull | 0x70327032u;

int pidfdOpen(int64_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// The second line carries the pid, then its pid namespace, the process token, the device of
// /dev/shm and the network namespace.
std::string encodePeer(const transport::PeerInfo& p) {
  return p.hostId + "\n" + std::to_string(p.pid) + " " + std::to_string(p.pidNs) + " " + std::to_string(p.process) +
         " " + std::to_string(p.shmDev) + " " + std::to_string(p.netNs) + "\n" + std::to_string(p.nonce);
}

// A peer record may carry a fourth line, the rank's topology record (cluster.h), a fifth,
// its job-wide settings (jobSettings), a sixth, its store client's id (Store::clientId),
// and a seventh, its kernel and CPUs (cpu_share.h).
Status decodePeer(const std::string& s, int rank, transport::PeerInfo* p, topology::RankRecord* place,
                  std::string* settings, uint64_t* storeClient, CpuRecord* cpus) {
  std::istringstream in(s);
  std::string pid, nonce, placement;
  if (!std::getline(in, p->hostId) || !std::getline(in, pid) || !std::getline(in, nonce))
    return Status(Code::kRemoteError, "malformed peer record from rank " + std::to_string(rank), rank);
  p->rank = rank;
  char* at = nullptr;
  p->pid = std::strtoll(pid.c_str(), &at, 10);
  p->pidNs = std::strtoull(at, &at, 10);
  p->process = std::strtoull(at, &at, 10);
  p->shmDev = std::strtoull(at, &at, 10);
  p->netNs = std::strtoull(at, nullptr, 10);
  p->nonce = std::strtoull(nonce.c_str(), nullptr, 10);
  *place = topology::RankRecord{};
  if (std::getline(in, placement)) {
    BRAID_ASSIGN_OR_RETURN(*place, topology::decodeRankRecord(placement, rank));
  }
  settings->clear();
  std::getline(in, *settings);
  std::string client;
  *storeClient = std::getline(in, client) ? std::strtoull(client.c_str(), nullptr, 10) : 0;
  std::string cpuLine;
  *cpus = std::getline(in, cpuLine) ? decodeCpuRecord(cpuLine) : CpuRecord{};
  return Status::ok();
}

// How UCX, asked for by name on one host, would move braid's messages: through shared memory
// when UCX_TLS may use it, otherwise over tcp connections, paced by the kernel when its
// congestion control is BBR's and this process cannot take UCX's sockets off it (the plugin
// does so where it can, ucx_transport.cc). Each takes other slots (Communicator::init).
enum class UcxOneHost { kSharedMemory, kTcp, kPacedTcp };

UcxOneHost ucxOneHost() {
  if (ucxTlsMayUseSharedMemory(std::getenv("UCX_TLS"))) return UcxOneHost::kSharedMemory;
  return congestionControlPaces(tcpCongestionControl()) && !canUnpaceSockets() ? UcxOneHost::kPacedTcp
                                                                                : UcxOneHost::kTcp;
}

const char* ucxOneHostName(UcxOneHost u) {
  switch (u) {
    case UcxOneHost::kSharedMemory: return "shared memory";
    case UcxOneHost::kTcp: return "tcp";
    case UcxOneHost::kPacedTcp: return "paced tcp";
  }
  return "?";
}

// The jobSettings field that says what ucxOneHost says on this rank ("shared memory", "tcp"
// or "paced tcp"), and why in parentheses. Ranks must agree on the first part, and only when
// they all share one host, where it decides the slots (exchangePeers).
const char* const kUcxOneHostSetting = "UCX on one host";

// The settings every rank of a job must share, as one line of NAME=value fields separated
// by tabs. They decide how a call is cut into slots and rounds, which algorithm runs and how
// connections are made, so a rank that differs would cut other slices than its peers (wrong
// results over shared memory) or wait for messages that never come. (BRAID_WHOLE_BLOCKS and
// BRAID_SEND_ACKS may differ: connect() turns them off for all when one rank has them off.)
std::string jobSettings(const Config& c, int nranks) {
  auto clean = [](std::string v) {
    for (char& ch : v)
      if (ch == '\t' || ch == '\n' || ch == '\r') ch = ' ';
    return v;
  };
  std::string s;
  auto add = [&](const char* name, const std::string& v) { s += std::string(s.empty() ? "" : "\t") + name + "=" + clean(v); };
  // First: a rank told another size than its peers (WORLD_SIZE, nranks) waits for ranks
  // that never come, or leaves one out; the others fail on its record at once.
  add("the world size", std::to_string(nranks));
  add("BRAID_TRANSPORT", c.transport.empty() ? "(unset)" : c.transport);
  add("BRAID_SLOT_BYTES", c.slotBytes ? std::to_string(c.slotBytes) : "auto");
  add("BRAID_NSLOTS", c.nslots ? std::to_string(c.nslots) : "auto");
  add("BRAID_ALGO", c.algo.empty() ? "(unset)" : c.algo);
  add("BRAID_SOCKETS_PER_PEER", std::to_string(c.socketsPerPeer));
  add("BRAID_TLS", c.tls ? "1" : "0");
  if (c.transport == "ucx") {
    const char* tls = std::getenv("UCX_TLS");
    const std::string cc = tcpCongestionControl();
    add(kUcxOneHostSetting, std::string(ucxOneHostName(ucxOneHost())) + " (UCX_TLS" +
                                (tls ? std::string("=") + tls : std::string(" unset")) + ", tcp congestion control " +
                                (cc.empty() ? "unknown" : cc) + ")");
  }
  return s;
}

// The value of `name` in a jobSettings line; "" when absent (a peer that sent none).
std::string settingOf(const std::string& line, const std::string& name) {
  const std::string key = name + "=";
  size_t at = 0;
  while (at < line.size()) {
    size_t end = line.find('\t', at);
    if (end == std::string::npos) end = line.size();
    if (line.compare(at, key.size(), key) == 0) return line.substr(at + key.size(), end - at - key.size());
    at = end + 1;
  }
  return "";
}

// A peer as the live view names its process.
LiveProcess liveProcessOf(const transport::PeerInfo& p) { return {p.hostId, p.pid, p.pidNs, p.process}; }

}  // namespace

std::string thisProcess() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  return "pid " + std::to_string(getpid()) + " on host " + host;
}

std::string encodeAbortRecord(const Status& s, int reporter) {
  return std::to_string(static_cast<int>(s.code())) + "\n" + std::to_string(s.rank()) + "\n" +
         std::to_string(reporter) + "\n" + s.message();
}

Status decodeAbortRecord(const std::string& v) {
  std::istringstream in(v);
  std::string code, rank, reporter, msg;
  std::getline(in, code);
  std::getline(in, rank);
  std::getline(in, reporter);
  std::getline(in, msg, '\0');
  int c = std::atoi(code.c_str());
  if (c <= 0 || (c > static_cast<int>(Code::kInternal) && c != static_cast<int>(Code::kRevoked)))
    c = static_cast<int>(Code::kRemoteError);
  int r = std::atoi(rank.c_str());
  // " reported: " marks a failure read from a record, which its reader does not publish again.
  const std::string who = reporter == "-1" ? "a process given no rank of this job" : "rank " + reporter;
  return Status(static_cast<Code>(c), who + " reported: " + msg, r);
}

uint32_t shapeHash(const algorithms::Request& req) {
  using C = algorithms::Collective;
  const bool hasOp = callHasOp(req.coll);
  const bool hasRoot = callHasRoot(req.coll);
  // What every rank must agree on; alltoallv's counts and every displacement are local.
  // A word-at-a-time multiply-xorshift mix, computed in place: this runs on every call, so
  // it must neither allocate nor loop over bytes.
  uint64_t h64 = 0x9e3779b97f4a7c15ull;
  auto mix = [&h64](uint64_t x) {
    h64 = (h64 ^ x) * 0xff51afd7ed558ccdull;
    h64 ^= h64 >> 32;
  };
  mix(static_cast<uint64_t>(req.coll));
  mix(req.count);
  mix(static_cast<uint64_t>(req.dtype));
  mix(hasOp ? static_cast<uint64_t>(req.op) : 0);
  mix(hasRoot ? static_cast<uint64_t>(static_cast<uint32_t>(req.root)) : 0);
  if (req.coll == C::kAllGatherV || req.coll == C::kReduceScatterV)
    for (size_t c : req.counts) mix(c);
  return static_cast<uint32_t>(h64 ^ (h64 >> 29));
}

namespace {
bool sameRequest(const algorithms::Request& a, const algorithms::Request& b) {
  auto sameP2P = [](const std::vector<algorithms::P2POp>& x, const std::vector<algorithms::P2POp>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].isSend != y[i].isSend || x[i].peer != y[i].peer || x[i].count != y[i].count) return false;
    return true;
  };
  return a.coll == b.coll && a.count == b.count && a.dtype == b.dtype && a.op == b.op && a.root == b.root &&
         a.inPlace == b.inPlace && a.counts == b.counts && a.displs == b.displs && a.sendCounts == b.sendCounts &&
         a.sendDispls == b.sendDispls && sameP2P(a.p2p, b.p2p);
}

// Whether a call's schedule needs acknowledgements (exec::computeAcks) for every rank to see
// a mismatched call. In allreduce, allgather, reduce-scatter, alltoall and barrier every
// rank's result depends on every rank's, so a rank cannot finish while a peer it sent to
// runs another call: that peer never passes on what the others wait for. Rooted
// collectives break that (a broadcast's root receives nothing; a reduce's leaves neither),
// and so do the v-variants where a count is zero (a rank may send what nobody returns).
bool needsAcks(const algorithms::Request& req) {
  using C = algorithms::Collective;
  switch (req.coll) {
    case C::kBroadcast:
    case C::kReduce:
    case C::kGather:
    case C::kScatter:
    case C::kAllToAllV:
      return true;
    case C::kAllGatherV:
    case C::kReduceScatterV:
      return std::find(req.counts.begin(), req.counts.end(), size_t{0}) != req.counts.end();
    default:
      return false;
  }
}
}  // namespace

// ---------------------------------------------------------------- Op

Status Op::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return status_;
}

bool Op::test(Status* status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ && status) *status = status_;
  return done_;
}

void Op::finishEmpty() {
  if (sequenced_) comm_->recorder_.finished(static_cast<uint32_t>(tag_ >> 32), true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  comm_->inflight_.fetch_sub(1);
}

void Op::completeAlone(const Status& s) {
  if (!s.isOk()) status_ = s;
  remaining_ = 0;
  if (sequenced_) comm_->recorder_.finished(static_cast<uint32_t>(tag_ >> 32), s.isOk(), s.isOk() ? -1 : s.rank());
  done_ = true;
  comm_->inflight_.fetch_sub(1);
}

void Op::complete(const Status& s) {
  bool last = false;
  Status final;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.isOk() && status_.isOk()) status_ = s;
    last = --remaining_ == 0;
    if (last) final = status_;
  }
  if (!last) return;
  // Recorded before anyone can see the op done (and perhaps destroy the communicator).
  if (sequenced_)
    comm_->recorder_.finished(static_cast<uint32_t>(tag_ >> 32), final.isOk(), final.isOk() ? -1 : final.rank());
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  comm_->inflight_.fetch_sub(1);
  cv_.notify_all();
}

// ---------------------------------------------------------------- setup

Communicator::Communicator(std::shared_ptr<bootstrap::Store> store, int rank, int nranks, CommOptions opts)
    : store_(std::move(store)), rank_(rank), nranks_(nranks), opts_(std::move(opts)) {}

StatusOr<std::unique_ptr<Communicator>> Communicator::create(std::shared_ptr<bootstrap::Store> store,
                                                             int rank, int nranks, CommOptions opts) {
  if (nranks < 1) return invalidArgument("nranks=" + std::to_string(nranks) + " must be at least 1");
  if (rank < 0 || rank >= nranks)
    return invalidArgument("rank=" + std::to_string(rank) + " must be in [0, nranks=" + std::to_string(nranks) + ")");
  if (!store) return invalidArgument("store is null");
  std::unique_ptr<Communicator> c(new Communicator(std::move(store), rank, nranks, std::move(opts)));
  timeline::setRank(rank);  // the process's first communicator names it in the trace
  Status s = c->init();
  c->heartbeat_.reset();  // joined or failed: nobody needs its watch now
  if (!s.isOk()) {
    // Peers may be blocked in setup too: tell them, so they fail now rather than at timeout.
    c->abort(s);
    return s.withContext("rank " + std::to_string(rank) + " could not join the communicator");
  }
  return c;
}

Status Communicator::init() {
  const Config& cfg = opts_.config;
  // Every step of joining waits at most the timeout for the others (a peer that is gone or
  // stalled fails it then); the whole join may take longer on a slow network.
  Deadline deadline = Deadline::after(cfg.timeoutSec);
  setLogRank(rank_);
  if (cfg.tls && !opts_.authKey.present)
    return invalidArgument("rank " + std::to_string(rank_) +
                           ": BRAID_TLS=1 needs the job's key (BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE; braidrun and "
                           "braidGetUniqueId make one)");
  if (cfg.tls && !tlsAvailable())
    return invalidArgument("rank " + std::to_string(rank_) +
                           ": BRAID_TLS=1, but this braid was built without OpenSSL (install libssl-dev and rebuild)");

  nonce_ = opts_.nonce;
  if (nonce_ == 0) {
    if (rank_ == 0) {
      nonce_ = bootstrap::randomNonce();
      BRAID_RETURN_IF_ERROR(store_->set(key("nonce"), std::to_string(nonce_)));
    } else {
      // Polled: rank 0 may never come (braidrun's exit marks, the abort record).
      bool pollFailed = false;
      auto got = bootstrap::getPolling(*store_, key("nonce"), deadline, [&] {
        Status s = initPoll(deadline);
        pollFailed = !s.isOk();
        return s;
      });
      if (!got.isOk() && got.status().code() == Code::kTimeout && !pollFailed)
        return Status(Code::kTimeout, "rank 0 never started the communicator: " + got.status().message(), 0);
      BRAID_ASSIGN_OR_RETURN(std::string v, std::move(got));
      nonce_ = std::strtoull(v.c_str(), nullptr, 10);
    }
  }
  BRAID_RETURN_IF_ERROR(claimRank(deadline));
  // A rank whose own settings were refused joined this far (with the defaults in their
  // place) only to say so: create publishes the reason, which the others read while they
  // wait for its address, rather than wait for it until the timeout.
  if (!opts_.configError.isOk()) return opts_.configError;
  // Store-side liveness: a store that serves this rank over a connection marks it gone the
  // moment that connection ends, so a survivor's agreement counts a dead rank on another
  // host as failed at once instead of at its deadline (there is no pidfd to watch there).
  // etcd does it with a lease (within BRAID_ETCD_LEASE_TTL). Stores that cannot tell
  // (PyTorch's) decline, and the deadline stays the bound.
  {
    Status s = store_->setOnClose(key("gone/" + std::to_string(rank_)), "1", deadline);
    watchedByStore_ = s.isOk();
    if (!s.isOk() && s.code() != Code::kInvalidArgument) return s;
  }
  // And while joining, one counter of the ranks whose connection ended, which every rank
  // still joining reads (initPoll): a rank on another host that dies before the exchange
  // completes (no pid to watch) then fails the others' joins at once, not at the timeout.
  // Withdrawn once this rank has joined. braid's TCP store, and etcd (within
  // BRAID_ETCD_LEASE_TTL).
  if (watchedByStore_) {
    Status s = store_->addOnClose(key("init-gone"), 1, deadline);
    initGoneCounted_ = s.isOk();
    if (!s.isOk() && s.code() != Code::kInvalidArgument) return s;
  }
  // A store that cannot tell (PyTorch's): the joining ranks watch each other's heartbeats
  // instead, so that one that dies or stops while the others wait fails them within seconds.
  if (!watchedByStore_ && nranks_ > 1 && !store_->inProcess())
    heartbeat_ = std::make_unique<InitHeartbeat>(*store_, key("beat/"), rank_, nranks_,
                                                 InitHeartbeat::silenceFor(cfg.timeoutSec, nranks_),
                                                 InitHeartbeat::periodFor(nranks_));
  {
    auto rules = plan::parseAlgoOverride(cfg.algo);
    if (!rules.isOk()) return rules.status();
    algoRules_ = std::move(rules).value();
  }
  numaNode_ = cfg.bind ? topology::Placement::local().numaNodeOfCaller() : -1;
  BRAID_RETURN_IF_ERROR(exchangePeers());
  BRAID_RETURN_IF_ERROR(loadTopology());
  {
    // Slot geometry. Stream transports want small slices so that transfer and reduction
    // overlap within a step; memory transports want large ones (fewer hand-offs); tcp inside
    // one host sits between (plan::kLocalTcpSlotBytes). Decided from facts every rank shares
    // (the host list, the forced transport) so both ends of every connection cut the same
    // slices. A step's round is half the FIFO: over tcp, 8 slots (of 64 KiB: 256 KiB
    // rounds, 512 KiB of slots per connection, which stay in the cache
    // between the copy or reduction that fills a slot and the one that drains it) made
    // allreduce and reduce-scatter 1.2-2x faster than 32 slots, at 2 and 4 ranks from 1 to
    // 64 MiB, and cost a tenth at most on a stream of sends (docs/performance.md).
    std::set<std::string> hosts;
    for (const auto& p : peers_) hosts.insert(p.hostId);
    const std::string& forced = opts_.config.transport;
    bool stream = hosts.size() > 1 || (!forced.empty() && forced != "shm" && forced != "loopback");
    size_t slotBytes = !stream ? 512 * 1024 : hosts.size() == 1 && forced == "tcp" ? plan::kLocalTcpSlotBytes : 64 * 1024;
    int nslots = 8;
    meshSlotBytes_ = kMeshSlotBytes;
    ucxPacedTcp_ = false;
    ucxSharedMemory_ = false;
    if (forced == "ucx" && hosts.size() == 1) {
      const UcxOneHost path = ucxOneHost();
      ucxPacedTcp_ = path == UcxOneHost::kPacedTcp;
      ucxSharedMemory_ = path == UcxOneHost::kSharedMemory;
      if (path == UcxOneHost::kSharedMemory) {
        // UCX inside one host moves messages through its own shared memory: each message
        // costs a match and a rendezvous, so fewer, larger ones pay (sendrecv_perf, 2 ranks:
        // 256 KiB slots 1.5x faster than 64 KiB; docs/performance.md). The same holds for
        // the mesh, which carries point-to-point traffic.
        slotBytes = 256 * 1024;
        nslots = 16;
        meshSlotBytes_ = kUcxMeshSlotBytes;
      } else {
        // Over UCX's tcp alone, slots of 1 MiB (measured when each message above UCX's
        // eager limit for tcp went by rendezvous; now a slot's message goes eager and is
        // reduced as it arrives: the plugin's arrivalOverTcp), with the same 4 MiB per
        // connection: allreduce at 2 and 4 ranks from 256 KiB to 256 MiB ran 1.06-2.1x
        // faster than a stream's 64 KiB x 8 under BBR (even at 4 ranks and 1 MiB) and than
        // 256 KiB x 16 under cubic, both sent eager and copied out of UCX's receive
        // segments; slots of 2 MiB were faster at 2 ranks and slower at 4
        // (docs/performance.md, "UCX over tcp: slots of 1 MiB"). The mesh keeps what it
        // had: a stream's slots under BBR, whose pacing spread the data a larger eager
        // queue kept in UCX's one socket per pair (segments out of order and resent, "UCX
        // over tcp and the kernel's pacing"), UCX's own otherwise.
        slotBytes = 1024 * 1024;
        nslots = 4;
        if (!ucxPacedTcp_) meshSlotBytes_ = kUcxMeshSlotBytes;
      }
    }
    userSlotBytes_ = opts_.config.slotBytes;
    userNslots_ = opts_.config.nslots;
    smallCallSliceBytes_ =
        hosts.size() == 1 && forced == "tcp" && userSlotBytes_ == 0 ? plan::kLocalTcpSmallSliceBytes : 0;
    // The mesh inside one host over tcp: slots of kLocalTcpSlotBytes as well, for the
    // calls that move more than plan::kLocalTcpSmallMeshCallBytes; smaller ones keep the
    // 64 KiB slices of a network's mesh and their rounds (plan/cost_model.h).
    meshSmallSliceBytes_ = 0;
    if (hosts.size() == 1 && forced == "tcp") {
      meshSmallSliceBytes_ = kMeshSlotBytes;
      meshSlotBytes_ = plan::kLocalTcpSlotBytes;
    }
    if (opts_.config.slotBytes == 0) opts_.config.slotBytes = slotBytes;
    if (opts_.config.nslots == 0) opts_.config.nslots = nslots;
  }

  // Channels and waiting follow the cores each local rank can count on.
  int cores = std::max(1, topology::Placement::local().numCores());
  int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  cores = std::max(cores, online > 0 ? online : 1);
  int perRank = std::max(1, cores / localSize_);
  nchannels_ = cfg.nchannels > 0 ? cfg.nchannels : std::min(perRank, 4);
  if (cfg.nchannels <= 0 && topology_) {
    // One channel per nearest NIC across hosts, per NVLink for a GPU (as NCCL sizes its
    // channels), within what the cores can drive.
    std::set<std::string> hostSet;
    for (const auto& p : peers_) hostSet.insert(p.hostId);
    nchannels_ = topology::proposeChannels(
        perRank, topology::topologyChannels(*topology_, place_, nicPolicy_, hostSet.size() > 1));
    // UCX inside one host moves every byte on the receiving channel's own thread (a
    // cross-memory copy in the rendezvous), so channels beyond the cores only take turns:
    // allreduce_perf over UCX's shared memory, 2 ranks on 2 cores, 1 MiB: 2.8 GB/s on two
    // channels, 4.1-4.8 on one (docs/performance.md).
    if (opts_.config.transport == "ucx" && hostSet.size() == 1) nchannels_ = std::min(nchannels_, perRank);
  }
  // Channel counts must agree: a rank computes it from host-local facts, so take the min.
  {
    deadline = Deadline::after(cfg.timeoutSec);
    BRAID_ASSIGN_OR_RETURN(auto all, bootstrap::allGather(*store_, key("nch"), rank_, nranks_,
                                                          std::to_string(nchannels_), deadline,
                                                          [&] { return initPoll(deadline); }));
    for (const auto& v : all) nchannels_ = std::min(nchannels_, std::max(1, std::atoi(v.c_str())));
  }
  // Spinning pays only while every busy thread has a core. An op on several channels keeps
  // one thread per channel busy on every local rank; an op on one channel (every small
  // one) keeps one per rank busy, so it may spin whenever the ranks alone fit the cores.
  // Ranks of other host ids under this kernel on the same CPUs count too (cpu_share.h):
  // three emulated hosts on 2 cores that spun had their ping-pongs take 75-150 us one way
  // instead of 6 (braid-doctor, tests/netns/doctor.sh), the spinner holding its partner off.
  auto crowded = [&](int threadsPerRank) {
    return localSize_ * threadsPerRank > cores ||
           (cpuShare_.cpus > 0 && cpuShare_.ranks * threadsPerRank > cpuShare_.cpus);
  };
  auto policy = [&](bool oversubscribed) {
    exec::WaitPolicy w;
    w.spinMicros = cfg.spinMicros >= 0 ? cfg.spinMicros : (oversubscribed ? 0 : 50);
    w.yieldMicros = cfg.yieldMicros >= 0 ? cfg.yieldMicros : (oversubscribed ? 20 : 200);
    // Where ranks share cores, a yield that the core's other rank keeps for a millisecond
    // is that rank working (4 ranks on 2 cores: now and then at 64 KiB, more at 1 MiB, where
    // pausing yields on them cost up to a third of the busbw); only where each has a core
    // does it mean something busy beside the job (common/core_yield.h).
    w.pauseYields = !oversubscribed;
    return w;
  };
  wait_ = policy(crowded(nchannels_));
  waitOneChannel_ = policy(crowded(1));
  // A ring's next round runs ahead of the last receive of the round before only where each
  // rank has a core: there the rank would otherwise sit idle between rounds (tcp, 2 ranks on
  // 2 cores: 1.14x at 1 MiB, 1.07x at 16 MiB). Where ranks share cores, the other rank on the
  // core uses that time, and running ahead cost (UCX's shared memory, 4 ranks on 2 cores:
  // 0.94x at 64 MiB; docs/performance.md). BRAID_RING_AHEAD decides otherwise.
  ringsRunAhead_ = cfg.ringAhead >= 0 ? cfg.ringAhead == 1 : !crowded(1);
  if (cpuShare_.ranks > localSize_ && crowded(1) && localSize_ <= cores)
    BRAID_INFO("rank %d: %d ranks of this job share %d CPUs under this kernel, %d of them with its host id: "
               "waiting yields instead of spinning",
               rank_, cpuShare_.ranks, cpuShare_.cpus, localSize_);

  plan::World world;
  world.rank = rank_;
  world.nranks = nranks_;
  for (const auto& p : peers_) world.hostIds.push_back(p.hostId);
  world.nchannels = nchannels_;
  world.roundBytes = cfg.slotBytes * static_cast<size_t>(cfg.nslots / 2);
  // Half the mesh's FIFO, in the slices of its small calls where those are cut finer than
  // its slots (the cost model's view of the mesh); the other calls' rounds are half the
  // FIFO in slots (useSchedule).
  world.smallRoundBytes = (meshSmallSliceBytes_ ? meshSmallSliceBytes_ : meshSlotBytes_) * (kMeshSlots / 2);
  world.smallMaxBytes = kSmallMaxBytes;
  if (!topoRing_.empty()) {
    // The topology's ring, reversed on odd channels so both directions of every link work.
    for (int c = 0; c < nchannels_; ++c) {
      world.rings.push_back(topoRing_);
      if (c % 2 == 1) std::reverse(world.rings.back().begin(), world.rings.back().end());
    }
  }
  world.treeParent = topoPlan_.treeParent;
  world.netGBps = topoPlan_.netGBps;
  world.intraGBps = topoPlan_.intraGBps;
  layout_ = plan::layoutFor(world);
  machine_ = plan::machineForLayout(layout_, cfg.transport);

  BRAID_RETURN_IF_ERROR(connect());

  workers_.resize(static_cast<size_t>(nchannels_));
  for (int c = 0; c < nchannels_; ++c) {
    workers_[c] = std::make_unique<Worker>();
    workers_[c]->thread = std::thread([this, c] { workerLoop(c); });
  }
  BRAID_RETURN_IF_ERROR(probeLinks());

  if (rank_ == 0 && logLevel() >= LogLevel::kInfo) {
    std::set<std::string> hosts;
    for (const auto& p : peers_) hosts.insert(p.hostId);
    std::string tp;
    for (int r = 0; r < nranks_; ++r) tp += (r ? "," : "") + transportNames_[r];
    BRAID_INFO("braid %d.%d.%d: %d ranks on %zu hosts, %d channels, slots %zu x %d, whole blocks %s, transports [%s], %s",
               0, 1, 0, nranks_, hosts.size(), nchannels_, cfg.slotBytes, cfg.nslots,
               wholeBlockBytes_ ? (std::to_string(wholeBlockBytes_ >> 20) + " MiB" +
                                   (ucxPacedTcp_ ? " (alltoall and point-to-point only: UCX over paced tcp)" : ""))
                                      .c_str()
                                : "off",
               tp.c_str(),
               topology::Placement::local().summary().c_str());
  }
  deadline = Deadline::after(cfg.timeoutSec);  // the link probe may have taken most of one
  if (heartbeat_) {
    heartbeat_->joined(deadline);  // no longer watched
    heartbeat_.reset();
  }
  if (initGoneCounted_) {
    // Joined: this rank's end no longer fails anyone's join (its gone/ mark stays).
    initGoneCounted_ = false;
    BRAID_RETURN_IF_ERROR(store_->addOnClose(key("init-gone"), -1, deadline));
  }
  return Status::ok();
}

Status Communicator::probeLinks() {
  const Config& cfg = opts_.config;
  int far = -1;  // the lowest rank on another host than rank 0
  for (int r = 1; r < nranks_ && far < 0; ++r)
    if (peers_[r].hostId != peers_[0].hostId) far = r;
  if (far < 0 || !cfg.probe) return Status::ok();
  Deadline deadline = Deadline::after(cfg.timeoutSec);

  std::string text;
  if (rank_ == 0 || rank_ == far) {
    const bool lead = rank_ == 0;
    // The others wait for the record at most the timeout from when the probe starts (their
    // own connections may have been ready long before rank 0's): say when it does.
    if (lead) BRAID_RETURN_IF_ERROR(store_->set(key("probe-start"), "1", deadline));
    const int other = lead ? far : 0;
    uint64_t word = 0;
    auto xfer = [&](bool send, void* buf, size_t bytes) {
      algorithms::Request r;
      r.coll = algorithms::Collective::kSendRecv;
      r.dtype = DataType::kUint8;
      r.p2p.push_back(algorithms::P2POp{send, other, bytes});
      return run(r, nullptr, nullptr, {buf});
    };
    // The leader sends `bytes` from (or the other receives them into) `buf`, and the other
    // answers with 8 bytes.
    auto roundTrip = [&](void* buf, size_t bytes) -> StatusOr<int64_t> {
      const int64_t t0 = nowNanos();
      BRAID_RETURN_IF_ERROR(xfer(/*send=*/lead, buf, bytes));
      BRAID_RETURN_IF_ERROR(xfer(/*send=*/!lead, &word, 8));
      return nowNanos() - t0;
    };
    // Latency: the median of 15 round trips after 2 for warming up, halved.
    std::vector<int64_t> rtt;
    for (int i = 0; i < 17; ++i) {
      uint64_t ping = 0;
      BRAID_ASSIGN_OR_RETURN(int64_t t, roundTrip(&ping, 8));
      if (i >= 2) rtt.push_back(t);
    }
    std::sort(rtt.begin(), rtt.end());
    const double rttSec = static_cast<double>(rtt[rtt.size() / 2]) * 1e-9;
    // Bandwidth: 1 MiB from the leader, answered by 8 bytes; the better of 2, less a round
    // trip. Short on purpose (a fast network is not saturated by it, so the topology's NIC
    // rate wins where it is known); it tells a slow link from a fast one.
    constexpr size_t kBulk = 1 << 20;
    std::vector<char> bulk(kBulk, 1);
    double best = 0;
    for (int i = 0; i < 2; ++i) {
      BRAID_ASSIGN_OR_RETURN(int64_t t, roundTrip(bulk.data(), kBulk));
      const double sec = static_cast<double>(t) * 1e-9 - rttSec;
      if (sec > 0) best = std::max(best, static_cast<double>(kBulk) / sec);
    }
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.9g %.9g", rttSec / 2, best);
    // Both ends measured; the leader's numbers are the ones every rank plans with, so that
    // every rank's planner makes the same choices.
    if (lead) {
      text = buf;
      BRAID_RETURN_IF_ERROR(store_->set(key("probe"), text));
    }
  }
  if (rank_ != 0) {
    if (rank_ != far)
      BRAID_RETURN_IF_ERROR(bootstrap::getPolling(*store_, key("probe-start"), deadline,
                                                  [&] { return initPoll(deadline); })
                                .status());
    deadline = Deadline::after(cfg.timeoutSec);
    BRAID_ASSIGN_OR_RETURN(text, bootstrap::getPolling(*store_, key("probe"), deadline,
                                                       [&] { return initPoll(deadline); }));
  }
  double alpha = 0, beta = 0;
  if (std::sscanf(text.c_str(), "%lf %lf", &alpha, &beta) != 2 || !(alpha > 0) || !(alpha < 60) || !(beta >= 0))
    return Status(Code::kRemoteError, "malformed link probe record '" + text.substr(0, 64) + "' from rank 0", 0);
  machine_.inter.alpha = alpha;
  const bool topoKnows = topoPlan_.netGBps > 0;
  if (beta > 0 && !topoKnows) machine_.inter.beta = beta;
  if (rank_ == 0)
    BRAID_INFO("probe: rank 0 <-> rank %d (another host): latency %.1f us, bandwidth %.2f GB/s%s", far, alpha * 1e6,
               beta / 1e9, topoKnows ? " (the planner keeps the topology's NIC bandwidth)" : "");
  return Status::ok();
}

Status Communicator::loadTopology() {
  // One rank per host (its first) finds the host's graph and publishes it; rank 0 fuses
  // every host's graph with every rank's record (cluster.h), computes the ring and publishes
  // it; every rank reads the ring and, when there is one, its own host's graph for the NIC
  // per channel. A missing or unusable topology is never an error (the default rings stay);
  // a BRAID_TOPO_FILE that does not load is, on every rank.
  const Config& cfg = opts_.config;
  Deadline deadline = Deadline::after(cfg.timeoutSec);
  topology_.reset();
  topoRing_.clear();
  topoPlan_ = topology::ClusterPlan{};
  {
    // BRAID_NET_IF may also be a plain address, which names no NIC of the graph.
    in_addr unused{};
    std::string netList = inet_pton(AF_INET, cfg.netIf.c_str(), &unused) == 1 ? "" : cfg.netIf;
    auto netIf = topology::NicFilter::parse(netList);
    if (!netIf.isOk()) return netIf.status().withContext("BRAID_NET_IF");
    auto ibHca = topology::NicFilter::parse(cfg.ibHca);
    if (!ibHca.isOk()) return ibHca.status().withContext("BRAID_IB_HCA");
    nicPolicy_.netIf = std::move(netIf).value();
    nicPolicy_.ibHca = std::move(ibHca).value();
  }
  std::vector<std::string> ids;
  for (const auto& p : peers_) ids.push_back(p.hostId);
  std::vector<int> localRanks;
  const std::vector<int> hostOf = topology::hostIndices(ids, &localRanks);
  const int nhosts = hostOf.empty() ? 1 : *std::max_element(hostOf.begin(), hostOf.end()) + 1;
  const int myHost = hostOf[rank_];
  auto hostKey = [&](int h) { return key("topo/host/" + std::to_string(h)); };

  std::string myRecord;  // set on host leaders only
  std::unique_ptr<topology::Graph> graph;
  if (localRank_ == 0) {
    bool gpuAsked = false;
    for (int r = 0; r < nranks_; ++r)
      if (hostOf[r] == myHost && rankRecords_[r].gpu != topology::kGpuNone) gpuAsked = true;
    // Discovery reads the whole PCI tree (about 30-40 ms on a small VM, more on a big
    // server), so by default it only runs where the answer changes something.
    const bool wanted = !cfg.topoFile.empty() || !cfg.topoDumpFile.empty() || cfg.topo == 1 ||
                        (cfg.topo < 0 && (nhosts > 1 || gpuAsked));
    if (!cfg.topoFile.empty()) {
      auto g = topology::loadTopologyFile(cfg.topoFile);
      if (g.isOk()) graph = std::make_unique<topology::Graph>(std::move(g).value());
      else myRecord = topology::hostRecordError(g.status().withContext("BRAID_TOPO_FILE=" + cfg.topoFile + " on host " + ids[rank_]));
    } else if (wanted && cfg.topo != 0) {
      int64_t t0 = nowNanos();
      auto g = topology::discoverLocal();
      if (g.isOk()) {
        graph = std::make_unique<topology::Graph>(std::move(g).value());
        BRAID_INFO("topology: discovered host %d (%s) in %.1f ms: %zu GPUs, %zu NICs, %zu NUMA nodes", myHost,
                   ids[rank_].c_str(), (nowNanos() - t0) / 1e6, graph->gpus().size(), graph->nics().size(),
                   graph->cpus().size());
      } else {
        // Containers often hide most of the machine from hwloc: plan without a topology.
        BRAID_WARN("topology: discovery failed on host %s (%s); planning without a topology", ids[rank_].c_str(),
                   g.status().toString().c_str());
      }
    }
    if (graph && !cfg.topoDumpFile.empty()) {
      Status s = topology::saveGraphJsonFile(*graph, cfg.topoDumpFile);
      if (!s.isOk()) myRecord = topology::hostRecordError(s.withContext("BRAID_TOPO_DUMP_FILE=" + cfg.topoDumpFile));
    }
    if (myRecord.empty()) myRecord = graph ? topology::hostRecordGraph(*graph) : topology::hostRecordNone();
    // Other hosts' records go to rank 0; this host's ranks read it only to place themselves.
    if (nranks_ > 1 && (nhosts > 1 || graph)) BRAID_RETURN_IF_ERROR(store_->set(hostKey(myHost), myRecord));
  }

  std::string ringText;
  if (rank_ == 0) {
    std::vector<std::string> records(static_cast<size_t>(nhosts));
    records[0] = myRecord;  // rank 0 leads host 0
    if (nhosts > 1) {
      std::vector<std::string> keys;
      for (int h = 1; h < nhosts; ++h) keys.push_back(hostKey(h));
      BRAID_RETURN_IF_ERROR(bootstrap::waitPolling(*store_, keys, deadline, [&] { return initPoll(deadline); }));
      BRAID_ASSIGN_OR_RETURN(auto rest, store_->multiGet(keys, deadline));
      for (int h = 1; h < nhosts; ++h) records[h] = rest[h - 1];
    }
    topology::Cluster cluster;
    auto fused = topology::fuseCluster(hostOf, records, rankRecords_, &cluster);
    if (!fused.isOk()) {
      ringText = topology::hostRecordError(fused.status());
    } else if (!fused.value()) {
      ringText = topology::encodeRing({});
    } else {
      auto plan = topology::planCluster(cluster, nicPolicy_);
      ringText = plan.isOk() ? topology::encodeClusterPlan(plan.value()) : topology::hostRecordError(plan.status());
    }
    if (nranks_ > 1) BRAID_RETURN_IF_ERROR(store_->set(key("topo/ring"), ringText));
  } else {
    BRAID_ASSIGN_OR_RETURN(ringText, bootstrap::getPolling(*store_, key("topo/ring"), deadline,
                                                           [&] { return initPoll(deadline); }));
  }
  BRAID_RETURN_IF_ERROR(topology::decodeClusterPlan(ringText, nranks_, &topoPlan_));
  topoRing_ = topoPlan_.ring;
  if (topoRing_.empty()) {
    if (rank_ == 0) BRAID_INFO("topology: not known on every host; rings follow ranks, hosts contiguous");
    return Status::ok();
  }

  // This rank's host graph and place, for the NIC per channel.
  if (!graph) {
    topology::Graph g;
    bool known = false;
    std::string rec = myRecord;
    if (rec.empty()) {
      BRAID_ASSIGN_OR_RETURN(rec, bootstrap::getPolling(*store_, hostKey(myHost), deadline,
                                                        [&] { return initPoll(deadline); }));
    }
    BRAID_RETURN_IF_ERROR(topology::decodeHostRecord(rec, "topology of host " + ids[rank_], &g, &known));
    if (!known) return internalError("ring published for a host without a topology");
    graph = std::make_unique<topology::Graph>(std::move(g));
  }
  place_.host = myHost;
  place_.numa = rankRecords_[rank_].numa;
  BRAID_ASSIGN_OR_RETURN(place_.gpu, topology::resolveGpu(rankRecords_[rank_], localRank_, *graph, rank_));
  topology_ = std::move(graph);
  if (rank_ == 0)
    BRAID_INFO("topology: ring (channel 0, odd channels reversed): %s; %s; network %.3g GB/s, intra-host %.3g GB/s",
               topology::formatRing(topoRing_, hostOf).c_str(),
               topoPlan_.treeParent[0].empty() ? "binary trees" : "trees from the topology",
               topoPlan_.netGBps, topoPlan_.intraGBps);
  return Status::ok();
}

Status Communicator::exchangePeers() {
  const Config& cfg = opts_.config;
  Deadline deadline = Deadline::after(cfg.timeoutSec);
  transport::PeerInfo me;
  me.rank = rank_;
  me.hostId = cfg.hostId.empty() ? bootstrap::hostId() : cfg.hostId;
  if (me.hostId.find('\n') != std::string::npos) return invalidArgument("BRAID_HOST_ID must not contain a newline");
  me.pid = getpid();
  me.pidNs = pidNamespace();
  me.process = processToken();
  me.shmDev = sharedMemoryDevice();
  me.netNs = networkNamespace();
  me.nonce = nonce_;
  // Where this rank runs travels with its peer record, so that placing ranks on the
  // topology costs no extra round trip.
  topology::RankRecord where;
  where.gpu = cfg.gpu;
  // Which physical GPU "local" means: CUDA numbers only the devices this lists.
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    for (const char* p = v; *p; ++p)
      if (!std::isspace(static_cast<unsigned char>(*p))) where.visible += *p;
  }
  where.numa = numaNode_ >= 0 ? numaNode_ : topology::Placement::local().numaNodeOfCaller();
  // Ranks on one host sign a roster before the exchange: a rank that dies while the others
  // still wait for the exchange's last records is then noticed by its neighbours on the host
  // (its pid is gone), who fail and publish why, instead of everybody waiting for the timeout.
  const std::string roster = key("roster/" + me.hostId);
  if (nranks_ > 1) {
    BRAID_ASSIGN_OR_RETURN(int64_t entry, store_->add(roster + "/n", 1, deadline));
    BRAID_RETURN_IF_ERROR(store_->set(roster + "/" + std::to_string(entry),
                                      std::to_string(rank_) + " " + std::to_string(me.pid) + " " +
                                          std::to_string(me.pidNs),
                                      deadline));
  }
  auto poll = [&]() -> Status {
    BRAID_RETURN_IF_ERROR(abortRecord(deadline));
    const Deadline check = storeCheckDeadline(deadline);
    auto n = store_->add(roster + "/n", 0, check);
    if (!n.isOk()) return storeLoss(n.status());
    for (int64_t i = 1; i <= n.value(); ++i) {
      const std::string k = roster + "/" + std::to_string(i);
      auto there = store_->check({k}, check);
      if (!there.isOk()) return storeLoss(there.status());
      if (!there.value()) continue;  // added, not yet signed
      auto v = store_->get(k, check);
      if (!v.isOk()) return storeLoss(v.status());
      int r = -1;
      long long pid = 0;
      unsigned long long ns = 0;
      const int got = std::sscanf(v.value().c_str(), "%d %lld %llu", &r, &pid, &ns);
      // A pid of another pid namespace names some other process here, or none.
      if (got < 2 || (got == 3 && ns != me.pidNs) || pid == me.pid) continue;
      if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        // It may have failed on another's account and published why just before it
        // exited, after this poll's first look at the record.
        BRAID_RETURN_IF_ERROR(abortRecord(deadline));
        return Status(Code::kRemoteError,
                      "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + " on host " + me.hostId +
                          ") exited while the ranks were exchanging their addresses",
                      r);
      }
    }
    BRAID_RETURN_IF_ERROR(initGoneCheck(deadline));  // ranks on other hosts (and, later, this one's)
    BRAID_RETURN_IF_ERROR(launcherExitCheck(deadline));  // ranks that never reached the store
    return opts_.joinWatch ? opts_.joinWatch() : Status::ok();
  };
  const std::string mySettings = jobSettings(cfg, nranks_);
  BRAID_ASSIGN_OR_RETURN(auto all, bootstrap::allGather(*store_, key("peer"), rank_, nranks_,
                                                        encodePeer(me) + "\n" + topology::encodeRankRecord(where) +
                                                            "\n" + mySettings + "\n" +
                                                            std::to_string(store_->clientId()) + "\n" +
                                                            encodeCpuRecord(localCpuRecord()),
                                                        deadline, poll));
  peers_.resize(static_cast<size_t>(nranks_));
  rankRecords_.resize(static_cast<size_t>(nranks_));
  storeClients_.assign(static_cast<size_t>(nranks_), 0);
  std::vector<CpuRecord> cpus(static_cast<size_t>(nranks_));
  std::string theirs;
  std::string ucxDiffers;  // kUcxOneHostSetting's first difference, an error on one host only
  for (int r = 0; r < nranks_; ++r) {
    BRAID_RETURN_IF_ERROR(
        decodePeer(all[r], r, &peers_[r], &rankRecords_[r], &theirs, &storeClients_[r], &cpus[static_cast<size_t>(r)]));
    if (peers_[r].nonce != nonce_)
      return Status(Code::kRemoteError, "rank " + std::to_string(r) + " belongs to another session (nonce mismatch)", r);
    if (theirs == mySettings) continue;
    // Every rank sees every record, so every rank fails here, each naming a rank that differs.
    for (size_t at = 0, end; at < mySettings.size(); at = end + 1) {
      end = std::min(mySettings.find('\t', at), mySettings.size());
      const std::string field = mySettings.substr(at, end - at);
      const std::string name = field.substr(0, field.find('='));
      const std::string mine = field.substr(name.size() + 1);
      const std::string other = settingOf(theirs, name);
      if (other == mine) continue;
      const std::string differs = name + " differs between ranks: rank " + std::to_string(r) + " has " +
                                  (other.empty() ? "no value" : other) + ", rank " + std::to_string(rank_) +
                                  " has " + mine;
      if (name != kUcxOneHostSetting) return invalidArgument(differs + "; every rank of a job must set it the same");
      // Only the decision before the reasons in parentheses counts, and only on one host (below).
      if (ucxDiffers.empty() && other.substr(0, other.find(" (")) != mine.substr(0, mine.find(" (")))
        ucxDiffers = differs + "; on one host it decides how messages are cut, so every rank needs the same";
    }
  }
  if (!ucxDiffers.empty() && std::all_of(peers_.begin(), peers_.end(),
                                         [&](const transport::PeerInfo& p) { return p.hostId == me.hostId; }))
    return invalidArgument(ucxDiffers);
  cpuShare_ = cpuShare(cpus, rank_);
  {
    std::set<int64_t> pids;
    for (int r : cpuShare_.others)  // on this kernel, whatever their host ids say
      if (peers_[r].pidNs == me.pidNs) pids.insert(peers_[r].pid);
    for (const auto& p : peers_)
      if (transport::pidMeaningfulTo(p, me)) pids.insert(p.pid);
    jobPids_.assign(pids.begin(), pids.end());
    addJobProcesses(jobPids_);
  }
  localRank_ = 0;
  localSize_ = 0;
  unwatchedLocal_.clear();
  peerPidFds_.assign(static_cast<size_t>(nranks_), -1);
  peerBye_.reset(new std::atomic<bool>[static_cast<size_t>(nranks_)]());
  for (int r = 0; r < nranks_; ++r) {
    if (peers_[r].hostId != me.hostId) continue;
    if (r < rank_) ++localRank_;
    ++localSize_;
    // Watch local peers in other processes; a pidfd reports exit even while a zombie. A peer
    // of another pid namespace cannot be watched by its pid: its deadlines and abort records
    // stand in, as for a peer of another host.
    if (transport::sameProcess(peers_[r], me)) continue;
    if (!transport::pidMeaningfulTo(peers_[r], me)) {
      unwatchedLocal_.push_back(r);
      continue;
    }
    peerPidFds_[r] = pidfdOpen(peers_[r].pid);
    if (peerPidFds_[r] < 0 && errno == ESRCH) {
      BRAID_RETURN_IF_ERROR(abortRecord(deadline));  // its own reason, or the one that ended it
      return Status(Code::kRemoteError,
                    "rank " + std::to_string(r) + " (pid " + std::to_string(peers_[r].pid) + " on host " +
                        me.hostId + ") exited during init, after publishing its address",
                    r);
    }
  }
  return Status::ok();
}

bool Communicator::peerExited(int r) const {
  if (r < 0 || r >= static_cast<int>(peerPidFds_.size()) || peerPidFds_[r] < 0) return false;
  pollfd p{peerPidFds_[r], POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

Status Communicator::memberEnded(const std::vector<int>& members, const std::string& recordPrefix,
                                 int64_t* nextStoreCheck, const std::string& during, const std::string& advice) {
  // A member on another host has no pid to watch: the store marks it gone when its
  // connection ends.
  const bool askStore = nowNanos() >= *nextStoreCheck;
  if (askStore) *nextStoreCheck = nowNanos() + kStoreCheckPeriodNs;
  for (int r : members) {
    if (r == rank_) continue;
    const bool exited = peerExited(r);
    if (!exited) {
      if (!askStore) continue;
      auto gone = store_->check({key("gone/" + std::to_string(r))}, graceDeadline());
      if (!gone.isOk() || !gone.value()) continue;  // a lost store shows in the wait itself
    }
    // One that published and then ended (it failed on another member, say) is not what
    // this wait waits for.
    auto published = store_->check({bootstrap::allGatherKey(recordPrefix, r)}, graceDeadline());
    if (!published.isOk() || published.value()) continue;
    const std::string who = "rank " + std::to_string(r) +
                            (exited ? " (pid " + std::to_string(peers_[r].pid) + " on host " + peers_[r].hostId + ") exited "
                                    : " (host " + peers_[r].hostId + ") left the job's store ");
    return Status(Code::kRemoteError, who + during + (exited ? "; " : ": its process ended; ") + advice, r);
  }
  return Status::ok();
}

// A joining rank whose connection to the store ended ("init-gone", counted by the store):
// named by its gone/ mark.
Status Communicator::initGoneCheck(Deadline deadline) {
  if (heartbeat_) {
    Status silent = heartbeat_->status();
    if (!silent.isOk()) {
      BRAID_RETURN_IF_ERROR(abortRecord(deadline));  // a reason published first wins
      return silent;
    }
  }
  if (!initGoneCounted_ || nowNanos() < nextInitGoneCheckNs_) return Status::ok();
  nextInitGoneCheckNs_ = nowNanos() + kInitGoneCheckNs;
  auto ended = store_->add(key("init-gone"), 0, deadline);
  if (!ended.isOk() || ended.value() == 0) return Status::ok();  // a lost store shows in the wait itself
  BRAID_RETURN_IF_ERROR(abortRecord(deadline));  // its own reason, if it left one
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    auto gone = store_->check({key("gone/" + std::to_string(r))}, deadline);
    if (gone.isOk() && gone.value())
      return Status(Code::kRemoteError,
                    "rank " + std::to_string(r) + " exited during init: its connection to the job's store ended", r);
  }
  return Status(Code::kRemoteError, "a rank exited during init: its connection to the job's store ended");
}

Status Communicator::initPoll(Deadline deadline) {
  if (opts_.cancel && opts_.cancel->load())
    return Status(Code::kAborted, "rank " + std::to_string(rank_) + " was aborted while joining", rank_);
  // No rank can have left cleanly during init: any local exit is a failure.
  for (int r = 0; r < static_cast<int>(peerPidFds_.size()); ++r) {
    if (peerExited(r)) {
      BRAID_RETURN_IF_ERROR(abortRecord(deadline));  // its own reason, if it left one
      return Status(Code::kRemoteError,
                    "rank " + std::to_string(r) + " (pid " + std::to_string(peers_[r].pid) + " on host " +
                        peers_[r].hostId + ") exited during init",
                    r);
    }
  }
  BRAID_RETURN_IF_ERROR(initGoneCheck(deadline));  // ranks on other hosts, no pid to watch
  BRAID_RETURN_IF_ERROR(launcherExitCheck(deadline));  // ranks that never reached the store
  if (opts_.joinWatch) BRAID_RETURN_IF_ERROR(opts_.joinWatch());
  return abortRecord(deadline);
}

// Two processes told the same rank (a launch script's RANK off by one, a copied line) would
// have the others wait for the rank nobody took until the timeout, and then name that rank,
// not the cause. Each rank claims its place, under this join's nonce (so no earlier join's
// key can count), as "pid P on host H": the second claimant fails, naming both, and its
// record fails everyone else at once. Two rank 0s draw two nonces and are not caught here
// (where rank 0 serves the store, the second cannot bind its port). A store without
// compare-and-set skips the check.
Status Communicator::claimRank(Deadline deadline) {
  // The claim names the process as the message will, then its pid namespace and token:
  // containers that share a host's name may each run a rank as the same pid.
  const std::string shown = thisProcess();
  const std::string ns = std::to_string(pidNamespace());
  const std::string me = shown + "\t" + ns + "\t" + std::to_string(processToken());
  const std::string claim = key("claim/" + std::to_string(nonce_) + "/" + std::to_string(rank_));
  auto holder = store_->compareSet(claim, "", me, storeCheckDeadline(deadline));
  if (!holder.isOk() || holder.value() == me) return Status::ok();  // taken, or no way to tell
  std::string first = holder.value(), second = shown;
  const size_t tab = first.find('\t');
  const std::string firstNs = tab == std::string::npos ? "" : first.substr(tab + 1, first.find('\t', tab + 1) - tab - 1);
  first = first.substr(0, tab);
  if (first == second) {  // the same pid and host name: told apart by their pid namespaces
    first += " (pid namespace " + (firstNs.empty() ? std::string("?") : firstNs) + ")";
    second += " (pid namespace " + ns + ")";
  }
  return invalidArgument("rank " + std::to_string(rank_) + " was given to two processes, " + first + " and " + second +
                         ": is the same rank (RANK, BRAID_RANK, the rank argument) set on two of them?");
}

// A rank whose process braidrun saw end and which has not published its record here: it
// never will. One that has is left to the checks above (its pid, its gone/ mark), so a rank
// that joined and left at once does not fail a slower peer's last step of the join.
Status Communicator::launcherExitCheck(Deadline deadline) {
  if (!opts_.launcherMarksExits || nowNanos() < nextLauncherCheckNs_) return Status::ok();
  nextLauncherCheckNs_ = nowNanos() + kInitGoneCheckNs;
  deadline = storeCheckDeadline(deadline);
  auto ended = store_->add(bootstrap::kLauncherExitsKey, 0, deadline);
  if (!ended.isOk() || ended.value() == 0) return Status::ok();  // a lost store shows in the wait itself
  auto list = store_->get(bootstrap::kLauncherExitListKey, deadline);
  if (!list.isOk()) return Status::ok();
  std::istringstream in(list.value());
  for (int r; in >> r;) {
    if (r == rank_ || r < 0 || r >= nranks_) continue;
    const std::string mark = std::string(bootstrap::kLauncherExitPrefix) + std::to_string(r);
    auto joined = store_->check({key("peer/" + std::to_string(r))}, deadline);
    if (!joined.isOk() || joined.value()) continue;
    BRAID_RETURN_IF_ERROR(abortRecord(deadline));  // its own reason, if it left one
    auto how = store_->get(mark, deadline);
    return Status(Code::kRemoteError,
                  "rank " + std::to_string(r) + " " + (how.isOk() ? how.value() : std::string("ended")) +
                      " before it joined (braidrun saw the process it started as rank " + std::to_string(r) + " end)",
                  r);
  }
  return Status::ok();
}

Status Communicator::connect() {
  const Config& cfg = opts_.config;
  // Each step waits at most the timeout for the others, from when this rank starts it:
  // starting the transports here, then the wait for the peers' addresses and for all to
  // attach, then the transports' last step (UCX's hellos, which need every peer to drive
  // its worker). One deadline for all three had a rank whose transports were slow to start
  // (UCX under load) fail every rank's last step, each with what was left of it.
  Deadline deadline = Deadline::after(cfg.timeoutSec);
  auto pollDeadline = std::make_shared<Deadline>(deadline);  // what the transports' checks see
  auto nextStep = [&] {
    deadline = Deadline::after(cfg.timeoutSec);
    *pollDeadline = deadline;
  };
  transport::TransportConfig tc;
  tc.rank = rank_;
  tc.nranks = nranks_;
  tc.nonce = nonce_;
  tc.authKey = opts_.authKey;
  tc.tls = cfg.tls;
  tc.slotBytes = cfg.slotBytes;
  tc.nslots = cfg.nslots;
  tc.numaNode = numaNode_;
  tc.connectTimeoutSec = cfg.timeoutSec > 0 ? cfg.timeoutSec : 3600;
  tc.socketsPerPeer = cfg.socketsPerPeer;
  tc.netIf = cfg.netIf;
  tc.portLo = cfg.portLo;
  tc.portHi = cfg.portHi;
  tc.abortCheck = [this, pollDeadline] { return initPoll(*pollDeadline); };
  tc.ibHca = cfg.ibHca;
  tc.ibGidIndex = cfg.ibGidIndex;
  if (topology_) {
    // Channel c listens on NIC (c mod k) of the k allowed NICs nearest this rank's GPU or
    // NUMA node. An explicit BRAID_NET_IF address overrides the topology for every channel.
    in_addr unused{};
    const bool address = inet_pton(AF_INET, cfg.netIf.c_str(), &unused) == 1;
    std::string line;
    for (int c = 0; c < nchannels_; ++c) {
      int nic = topology::nicForChannel(*topology_, place_, c, nicPolicy_);
      const topology::Node* n = nic >= 0 ? &topology_->node(nic) : nullptr;
      tc.channelNetIfs.push_back(n && !address ? n->ifName : "");
      line += " ch" + std::to_string(c) + " " +
              (n ? n->name + " " + n->netName() +
                           (n->ifName.empty() || n->ifName == n->netName() ? "" : " (" + n->ifName + ")")
                     : "none");
    }
    BRAID_INFO("topology: rank %d host %d GPU %d NUMA %d; NICs:%s", rank_, place_.host, place_.gpu, place_.numa,
               line.c_str());
  }
  transport::TransportConfig mesh = tc;
  mesh.channelNetIfs.clear();
  mesh.slotBytes = meshSlotBytes_;
  mesh.nslots = kMeshSlots;
  mesh.socketsPerPeer = 1;

  // Pick a transport per peer: the forced one, else the best score.
  std::vector<int> choice(static_cast<size_t>(nranks_), -1);
  transportNames_.assign(static_cast<size_t>(nranks_), "self");
  const auto& reg = transport::registry();
  if (!cfg.transport.empty()) {
    bool known = false;
    for (const auto& f : reg) known |= cfg.transport == f.name;
    if (!known) {
      for (const auto& failed : transport::pluginFailures())
        if (failed.name == cfg.transport)
          return invalidArgument("BRAID_TRANSPORT=" + cfg.transport + ": " + failed.reason);
      return invalidArgument("BRAID_TRANSPORT='" + cfg.transport + "' names no transport; available: " +
                             transport::availableTransports());
    }
  }
  // A transport that cannot run here (a plugin whose library finds no usable device) is
  // left out with a warning, unless it is the one BRAID_TRANSPORT asks for.
  std::vector<bool> usable(reg.size(), false);
  for (size_t i = 0; i < reg.size(); ++i) {
    const auto& f = reg[i];
    const bool forced = cfg.transport == f.name;
    if (!cfg.transport.empty() && !forced && nranks_ > 1) {
      transports_.push_back(nullptr);
      meshTransports_.push_back(nullptr);
      continue;
    }
    // The rings' instance also answers the scores; the mesh's is made below, only for a
    // transport some peer chose (an unused plugin then costs one instance, not two).
    auto rings = f.create(tc);
    meshTransports_.push_back(nullptr);
    if (!rings.isOk()) {
      if (forced) return rings.status().withContext("BRAID_TRANSPORT=" + cfg.transport);
      BRAID_WARN("transport %s unavailable: %s", f.name, rings.status().message().c_str());
      transports_.push_back(nullptr);
      continue;
    }
    usable[i] = true;
    transports_.push_back(std::move(rings).value());
  }
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    int best = 0;
    for (size_t t = 0; t < transports_.size(); ++t) {
      if (!usable[t]) continue;
      if (!cfg.transport.empty() && cfg.transport != reg[t].name) continue;
      int score = transports_[t]->canConnect(peers_[rank_], peers_[r]);
      if (score > best) {
        best = score;
        choice[r] = static_cast<int>(t);
      }
    }
    if (choice[r] < 0) {
      const bool otherShm = peers_[r].hostId == peers_[rank_].hostId && !transport::shareDevShm(peers_[r], peers_[rank_]);
      return invalidArgument("no transport can reach rank " + std::to_string(r) +
                             (cfg.transport.empty() ? "" : " with BRAID_TRANSPORT=" + cfg.transport) +
                             (otherShm ? " (it runs on this host but sees another /dev/shm: a container with IPC of "
                                         "its own, which shared memory cannot reach)"
                                       : ""));
    }
    transportNames_[r] = reg[choice[r]].name;
  }
  // Instances no peer chose hold resources (a UCX context, an RDMA device): free them now;
  // the chosen ones get their mesh instance.
  for (size_t t = 0; t < transports_.size(); ++t) {
    if (std::find(choice.begin(), choice.end(), static_cast<int>(t)) == choice.end()) {
      transports_[t].reset();
      continue;
    }
    auto meshT = reg[t].create(mesh);
    if (!meshT.isOk()) {
      return meshT.status().withContext(cfg.transport.empty() ? std::string("transport ") + reg[t].name
                                                              : "BRAID_TRANSPORT=" + cfg.transport);
    }
    meshTransports_[t] = std::move(meshT).value();
    // The mesh's instance learns its peers as the rings' did (UCX remembers by them which
    // peer processes stopped taking messages).
    for (int r = 0; r < nranks_; ++r)
      if (choice[r] == static_cast<int>(t)) (void)meshTransports_[t]->canConnect(peers_[rank_], peers_[r]);
  }

  auto emptyLinks = [&] {
    exec::ChannelLinks l;
    l.sendTo.assign(static_cast<size_t>(nranks_), nullptr);
    l.recvFrom.assign(static_cast<size_t>(nranks_), nullptr);
    return l;
  };
  links_.assign(static_cast<size_t>(nchannels_), emptyLinks());
  waitNotes_.reset(new exec::WaitNote[static_cast<size_t>(nchannels_)]);
  meshLinks_ = emptyLinks();
  if (nranks_ == 1) return Status::ok();

  // What each link set needs: the rings' neighbours per channel, and every peer (in both
  // directions) in the mesh.
  struct Want {
    exec::ChannelLinks* links;
    std::vector<std::unique_ptr<transport::Transport>>* transports;
    int channel;  // as the transports see it
    std::vector<int> from, to;
  };
  std::vector<Want> wants;
  for (int c = 0; c < nchannels_; ++c) {
    algorithms::RingPos pos = algorithms::ringPosition(layout_.rings[c], rank_);
    wants.push_back(Want{&links_[c], &transports_, c, {pos.prev}, {pos.next}});
  }
  std::vector<int> partners;
  for (int r = 0; r < nranks_; ++r)
    if (r != rank_) partners.push_back(r);
  wants.push_back(Want{&meshLinks_, &meshTransports_, kMeshChannel, partners, partners});

  auto connKey = [&](int from, int to, int ch) {
    return key("conn/" + std::to_string(from) + "/" + std::to_string(to) + "/" + std::to_string(ch));
  };
  // Phase 1: receive sides, published as "<transport>|<blob>" under conn/<from>/<to>/<ch>.
  for (Want& w : wants) {
    for (int from : w.from) {
      if (w.links->recvFrom[from]) continue;
      std::string blob;
      auto created = (*w.transports)[choice[from]]->createRecv(from, w.channel, &blob);
      if (!created.isOk()) {
        return created.status().withContext("receiving from rank " + std::to_string(from) + " over " +
                                            transportNames_[from]);
      }
      auto conn = std::move(created).value();
      w.links->recvFrom[from] = conn.get();
      connections_.push_back(std::move(conn));
      BRAID_RETURN_IF_ERROR(store_->set(connKey(from, rank_, w.channel), transportNames_[from] + "|" + blob));
    }
  }
  // Phase 2: send sides.
  nextStep();
  for (Want& w : wants) {
    for (int to : w.to) {
      if (w.links->sendTo[to]) continue;
      BRAID_ASSIGN_OR_RETURN(std::string v, bootstrap::getPolling(*store_, connKey(rank_, to, w.channel), deadline,
                                                                  [&] { return initPoll(deadline); }));
      size_t bar = v.find('|');
      std::string tname = bar == std::string::npos ? "" : v.substr(0, bar);
      if (tname != transportNames_[to]) {
        return invalidArgument("rank " + std::to_string(to) + " chose transport '" + tname + "' but rank " +
                               std::to_string(rank_) + " chose '" + transportNames_[to] +
                               "' (is BRAID_TRANSPORT set the same on every rank?)");
      }
      auto connected = (*w.transports)[choice[to]]->connectSend(to, w.channel, v.substr(bar + 1));
      if (!connected.isOk()) {
        return connected.status().withContext("connecting to rank " + std::to_string(to) + " over " +
                                              transportNames_[to]);
      }
      auto conn = std::move(connected).value();
      w.links->sendTo[to] = conn.get();
      connections_.push_back(std::move(conn));
    }
  }
  // Large messages only where every connection of every rank carries them: a rank whose
  // connections all do counts itself in before the barrier and reads the count after it;
  // a rank with one that does not (shm, tcp, a plugin without zero copy) costs nothing.
  bool carriesWhole = cfg.wholeBlocks;
  for (const auto& c : connections_) carriesWhole &= c->maxMessageBytes() >= kWholeBlockBytes;
  const std::string wholeKey = key("whole-blocks");
  if (carriesWhole) BRAID_RETURN_IF_ERROR(store_->add(wholeKey, 1).status());
  // Acknowledgements unless a rank turned them off: a rank waiting for one that its peer
  // does not send would wait for the timeout.
  const std::string noAcksKey = key("no-send-acks");
  if (!cfg.sendAcks) BRAID_RETURN_IF_ERROR(store_->add(noAcksKey, 1).status());
  // Phase 3: everyone attached; transports finish (accept, unlink).
  BRAID_RETURN_IF_ERROR(bootstrap::barrier(*store_, key("connected"), nranks_, deadline, [&] { return initPoll(deadline); }));
  nextStep();
  for (auto& t : transports_)
    if (t) BRAID_RETURN_IF_ERROR(t->establish(deadline));
  for (auto& t : meshTransports_)
    if (t) BRAID_RETURN_IF_ERROR(t->establish(deadline));
  if (carriesWhole) {
    BRAID_ASSIGN_OR_RETURN(int64_t n, store_->add(wholeKey, 0));
    if (n == nranks_) wholeBlockBytes_ = kWholeBlockBytes;
  }
  layout_.wholeBlockBytes = wholeBlockBytes_;
  // Over UCX's paced tcp on one host, allgather's whole blocks (a rendezvous each) ran slower
  // than the stream's slices: in slices it ran 1.15-1.46x faster at 2 and 4 ranks, 1-256 MiB,
  // except 2 ranks at 1 MiB. The mesh's schedules keep them: one-way sendrecv in slices ran 0.73-0.95x;
  // alltoall was mixed (0.91-1.27x) and stays as it was.
  // docs/performance.md, "UCX over tcp and the kernel's pacing". With the 1 MiB slots of UCX
  // over tcp the slices still ran as fast or faster: at 4 ranks, 16 and 256 MiB, whole blocks
  // took 1.2-1.5x as long ("UCX over tcp: slots of 1 MiB").
  layout_.wholeBlocksInRings = !ucxPacedTcp_;
  layout_.rendezvousInMemory = ucxSharedMemory_;
  BRAID_ASSIGN_OR_RETURN(int64_t noAcks, store_->add(noAcksKey, 0));
  sendAcks_ = noAcks == 0;
  if (!sendAcks_ && rank_ == 0)
    BRAID_INFO("BRAID_SEND_ACKS=0 on %lld rank(s): a rank that only sends in a rooted collective returns without "
               "its peers' acknowledgement and learns of a mismatched call at its next call",
               static_cast<long long>(noAcks));
  return Status::ok();
}

Communicator::~Communicator() {
  for (auto& w : workers_) {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->stop = true;
    }
    w->cv.notify_all();
  }
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
  // A clean goodbye: every operation of this rank is done. A peer still finishing the last
  // one (waiting on a third rank, or a slower transport) then does not take this process's
  // exit for a failure. Best effort: a lost store only means the peer sees an exit.
  if (store_ && !brokenFlag_.load(std::memory_order_acquire) && !storeLost())
    (void)store_->set(key("bye/" + std::to_string(rank_)), "1", Deadline::after(opts_.config.timeoutSec));
  // Leaving is not dying: this process may go on (and meet again under the same prefix).
  if (store_ && watchedByStore_ && !storeLost())
    (void)store_->cancelOnClose(key("gone/" + std::to_string(rank_)), Deadline::after(opts_.config.timeoutSec));
  reportFailedPeers();
  connections_.clear();
  transports_.clear();
  meshTransports_.clear();
  for (int fd : peerPidFds_)
    if (fd >= 0) close(fd);
  removeJobProcesses(jobPids_);
}

// ---------------------------------------------------------------- running

StatusOr<std::shared_ptr<Op>> Communicator::prepare(const algorithms::Request& req, const void* input, void* output,
                                                    std::vector<void*> extra, bool reuse, bool startsNow,
                                                    exec::DataMover* mover) {
  BRAID_RETURN_IF_ERROR(brokenStatus());
  std::shared_ptr<Op> op;
  if (reuse && spareOp_ && spareOp_.use_count() == 1) {
    // The previous blocking call's Op, which nobody holds any more: reset rather than
    // allocate (and construct a mutex and a condition variable) on every small call.
    op = spareOp_;
    op->scaled_.reset();
    if (!op->status_.isOk()) op->status_ = Status::ok();
    op->done_ = false;
  } else {
    op = std::make_shared<Op>();
    if (reuse) spareOp_ = op;
  }
  op->mover_ = mover;
  if (req.preMul) {
    // Scale into a private copy; the collective then reads that copy out of place. Of blocks
    // placed by displacements (a reduce_scatterv, a piece of a staged reduce-scatter) only
    // the blocks are scaled: the gaps are never read, and may be memory still being written
    // (a staged call's later pieces).
    const size_t es = dataTypeSize(req.dtype);
    const size_t elems = algorithms::inputElems(req, rank_, nranks_);
    const size_t bytes = elems * es;
    char* scaled = nullptr;
    if (mover) {
      BRAID_ASSIGN_OR_RETURN(void* w, mover->workspace(1, std::max<size_t>(bytes, 1)));
      scaled = static_cast<char*>(w);
    } else {
      op->scaled_.reset(new char[std::max<size_t>(bytes, 1)]);
      scaled = op->scaled_.get();
    }
    auto scale = [&](size_t first, size_t n) -> Status {
      const char* from = static_cast<const char*>(input) + first * es;
      if (mover) return mover->scale(scaled + first * es, from, n * es, req.dtype, req.preMulScalar);
      reduce::scale(req.dtype, scaled + first * es, from, req.preMulScalar, n);
      return Status::ok();
    };
    if (req.coll == algorithms::Collective::kReduceScatterV && !req.displs.empty()) {
      for (size_t b = 0; b < req.counts.size(); ++b)
        if (req.counts[b]) BRAID_RETURN_IF_ERROR(scale(req.displs[b], req.counts[b]));
    } else if (elems) {
      BRAID_RETURN_IF_ERROR(scale(0, elems));
    }
    input = scaled;
    algorithms::Request plain = req;
    plain.preMul = false;
    plain.inPlace = false;
    plain.op = ReduceOp::kSum;
    return prepareScheduled(std::move(op), plain, input, output, std::move(extra), startsNow);
  }
  return prepareScheduled(std::move(op), req, input, output, std::move(extra), startsNow);
}

StatusOr<std::shared_ptr<Op>> Communicator::prepareScheduled(std::shared_ptr<Op> op, const algorithms::Request& req,
                                                             const void* input, void* output,
                                                             std::vector<void*> extra, bool startsNow) {
  BRAID_RETURN_IF_ERROR(useSchedule(req));
  bindSchedule(op.get(), req);
  BRAID_RETURN_IF_ERROR(bindBuffers(op.get(), input, output, std::move(extra)));
  startOp(op.get(), startsNow);
  return op;
}

Status Communicator::useSchedule(const algorithms::Request& req) {
  if (cachedSchedule_ && sameRequest(req, plans_[currentPlan_].req)) return Status::ok();
  for (size_t i = 0; i < plans_.size(); ++i) {
    if (i != currentPlan_ && sameRequest(req, plans_[i].req)) {
      adoptPlan(i);
      return Status::ok();
    }
  }
  // A mesh cut into its slots where small calls are cut finer: rounds of half the FIFO in
  // slots, two messages per step and round as in any other mesh.
  const bool meshInSlots = meshSmallSliceBytes_ != 0 && meshSliceFor(req) == 0;
  algorithms::Layout slotRounds;
  if (meshInSlots) {
    slotRounds = layout_;
    slotRounds.smallRoundBytes = meshSlotBytes_ * (kMeshSlots / 2);
  }
  BRAID_ASSIGN_OR_RETURN(exec::Schedule sched,
                         plan::planCollective(req, meshInSlots ? slotRounds : layout_, &algoRules_, machine_));
  if (sched.channels.empty()) return internalError("planner returned a schedule without channels");
  if (sched.connectionSet == 1 && sched.channels.size() != 1)
    return internalError(sched.algorithm + ": a mesh schedule must have one channel");
  if (static_cast<int>(sched.channels.size()) > nchannels_)
    return internalError(sched.algorithm + ": more channels than the communicator has");
  if (sendAcks_ && needsAcks(req)) exec::computeAcks(&sched, nranks_);
  PlannedCall fresh;
  for (const exec::ChannelPlan& ch : sched.channels) fresh.steps += ch.steps.size();
  fresh.req = req;
  fresh.schedule = std::make_shared<const exec::Schedule>(std::move(sched));
  fresh.shapeHash = shapeHash(req);  // what it hashes, sameRequest compares
  fresh.gen = ++planGens_;
  // Room for it: the least recently used plans go (an op still running keeps its schedule).
  size_t held = 0;
  for (const PlannedCall& p : plans_) held += p.steps;
  while (!plans_.empty() && (plans_.size() >= kPlanCacheEntries || held + fresh.steps > kPlanCacheSteps)) {
    size_t oldest = 0;
    for (size_t i = 1; i < plans_.size(); ++i)
      if (plans_[i].lastUse < plans_[oldest].lastUse) oldest = i;
    held -= plans_[oldest].steps;
    plans_.erase(plans_.begin() + static_cast<std::ptrdiff_t>(oldest));
  }
  plans_.push_back(std::move(fresh));
  adoptPlan(plans_.size() - 1);
  return Status::ok();
}

uint64_t Communicator::plansMade() const {
  std::lock_guard<std::mutex> lock(submitMu_);
  return planGens_;
}

void Communicator::adoptPlan(size_t i) {
  PlannedCall& p = plans_[i];
  p.lastUse = ++planUses_;
  currentPlan_ = i;
  cachedSchedule_ = p.schedule;
  cachedShapeHash_ = p.shapeHash;
  scheduleGen_ = p.gen;
}

void Communicator::bindSchedule(Op* op, const algorithms::Request& req) {
  // Everything below follows from what sameRequest compares and from the schedule: an op
  // bound to this very schedule (a recycled one, as a loop repeats its call) keeps it all.
  if (op->boundGen_ == scheduleGen_ && op->schedule_ == cachedSchedule_) return;
  op->schedule_ = cachedSchedule_;
  op->boundGen_ = scheduleGen_;
  op->shape_ = CallShape::of(req);
  op->sequenced_ = req.coll != algorithms::Collective::kSendRecv;
  op->name_ = algorithms::collectiveName(req.coll);
  // Channels with nothing to do (a message smaller than the channel count) are not handed
  // to their progress threads: waking a thread costs more than a small collective.
  op->channels_.clear();
  for (size_t c = 0; c < op->schedule_->channels.size(); ++c) {
    bool divides = c < op->schedule_->divideRanges.size() && !op->schedule_->divideRanges[c].empty();
    // Channel 0 also carries the acknowledgements, whatever its share of the data.
    const bool acks = c == 0 && (!op->schedule_->ackTo.empty() || !op->schedule_->ackFrom.empty());
    if (!op->schedule_->channels[c].steps.empty() || divides || acks) op->channels_.push_back(static_cast<int>(c));
  }
  op->outputBytes_ = algorithms::outputElems(req, rank_, nranks_) * dataTypeSize(req.dtype);
  op->ringSliceBytes_ = ringSliceFor(req);
  op->meshSliceBytes_ = meshSliceFor(req);
  op->comm_ = this;
}

// Both ends of a connection must cut the same slices, so the choice follows the call's
// shape, which every rank shares: not for point-to-point groups or alltoallv, whose byte
// counts differ from rank to rank.
namespace {
size_t smallCallSlice(const algorithms::Request& req, int nranks, size_t slice, size_t limit) {
  if (slice == 0 || req.coll == algorithms::Collective::kSendRecv || req.coll == algorithms::Collective::kAllToAllV)
    return 0;
  return algorithms::requestBytes(req, nranks) <= limit ? slice : 0;
}
}  // namespace

size_t Communicator::ringSliceFor(const algorithms::Request& req) const {
  return smallCallSlice(req, nranks_, smallCallSliceBytes_, plan::kLocalTcpSmallCallBytes);
}

size_t Communicator::meshSliceFor(const algorithms::Request& req) const {
  return smallCallSlice(req, nranks_, meshSmallSliceBytes_, plan::kLocalTcpSmallMeshCallBytes);
}

Status Communicator::bindBuffers(Op* op, const void* input, void* output, std::vector<void*> extra) {
  op->buffers_.input = input;
  op->buffers_.output = output;
  op->buffers_.extra = std::move(extra);
  op->buffers_.scratch = nullptr;
  const size_t need = op->schedule_->scratchBytes;
  if (need && op->mover_) {
    BRAID_ASSIGN_OR_RETURN(op->buffers_.scratch, op->mover_->workspace(0, need));
    return Status::ok();
  }
  // Kept for the next call of a recycled op, so a loop of calls allocates once; one much
  // larger than this call needs (an earlier, larger call's) is given back.
  if (op->scratchCap_ < need || op->scratchCap_ / 4 > need + (64 << 10)) {
    op->scratch_.reset(need ? new char[need] : nullptr);
    op->scratchCap_ = need;
  }
  if (need) op->buffers_.scratch = op->scratch_.get();
  return Status::ok();
}

void Communicator::startOp(Op* op, bool startsNow) {
  op->fillTag_ = static_cast<uint64_t>(seq_) << 32;
  op->tag_ = op->sequenced_ ? (static_cast<uint64_t>(seq_++) << 32) | cachedShapeHash_ : kP2PTag;
  op->remaining_ = static_cast<int>(op->channels_.size());
  op->startedAtQueue_ = startsNow;
  if (op->sequenced_)
    recorder_.queued(static_cast<uint32_t>(op->tag_ >> 32), op->shape_, op->outputBytes_, op->schedule_->algorithm,
                     startsNow);
  inflight_.fetch_add(1);
}

void Communicator::enqueue(const std::shared_ptr<Op>& op, size_t first) {
  for (size_t i = first; i < op->channels_.size(); ++i) {
    Worker& w = *workers_[op->channels_[i]];
    {
      std::lock_guard<std::mutex> wl(w.mu);
      w.queue.push_back(op);
    }
    w.cv.notify_one();
  }
}

bool Communicator::slotMemory(std::vector<std::pair<void*, size_t>>* ranges) const {
  for (const auto& c : connections_) {
    const transport::Connection::MemoryRange r = c->slotMemory();
    if (!r.base) return false;
    ranges->emplace_back(r.base, r.bytes);
  }
  return true;
}

void Communicator::forEachConnection(
    const std::function<void(int set, int peer, bool send, transport::Connection*)>& fn) const {
  auto each = [&](const exec::ChannelLinks& l, int set) {
    for (size_t p = 0; p < l.sendTo.size(); ++p)
      if (l.sendTo[p]) fn(set, static_cast<int>(p), true, l.sendTo[p]);
    for (size_t p = 0; p < l.recvFrom.size(); ++p)
      if (l.recvFrom[p]) fn(set, static_cast<int>(p), false, l.recvFrom[p]);
  };
  for (size_t c = 0; c < links_.size(); ++c) each(links_[c], static_cast<int>(c));
  each(meshLinks_, -1);
}

StatusOr<std::vector<std::string>> Communicator::exchangeAll(const std::string& name, const std::string& value) {
  const Deadline deadline = Deadline::after(opts_.config.timeoutSec);
  return bootstrap::allGather(*store_, key(name), rank_, nranks_, value, deadline,
                              [&] { return healthCheck(deadline); });
}

Status Communicator::run(const algorithms::Request& req, const void* input, void* output, std::vector<void*> extra,
                         exec::DataMover* mover) {
  const int64_t t0 = timeline::on() ? timeline::nowUs() : 0;
  if (!mover && !req.preMul) {
    Status s;
    if (runAlone(req, input, output, extra, t0, &s)) return s;
  }
  std::shared_ptr<Op> op;
  bool runInline = false;
  {
    std::lock_guard<std::mutex> lock(submitMu_);
    runInline = inflight_.load() == 0;
    BRAID_ASSIGN_OR_RETURN(op, prepare(req, input, output, std::move(extra), /*reuse=*/true, runInline, mover));
    if (op->channels_.empty()) {
      op->finishEmpty();
      return Status::ok();
    }
    enqueue(op, runInline ? 1 : 0);
  }
  // Nothing is queued ahead of us, so running the first channel here keeps issue order and
  // saves the wake-up of a progress thread, which dominates small-message latency. An op
  // with that channel alone is then done: nothing to wait for.
  Status s;
  if (runInline && op->channels_.size() == 1) {
    s = execChannel(*op, op->channels_[0]);
    op->completeAlone(s);
  } else {
    if (runInline) runChannel(op, op->channels_[0]);
    s = op->wait();
  }
  if (!s.isOk()) s = s.withContext(op->name_);
  if (t0) traceCall(*op, t0, s);
  return s;
}

Status Communicator::runAgain(const algorithms::Request& req, const void* input, void* output, uint64_t* plan) {
  if (!req.preMul) {
    const int64_t t0 = timeline::on() ? timeline::nowUs() : 0;
    std::vector<void*> none;
    Status s;
    if (runAlone(req, input, output, none, t0, &s, plan)) return s;
  }
  return run(req, input, output);
}

bool Communicator::runAlone(const algorithms::Request& req, const void* input, void* output,
                            std::vector<void*>& extra, int64_t t0, Status* result, uint64_t* plan) {
  Op& op = aloneOp_;
  {
    std::lock_guard<std::mutex> lock(submitMu_);
    // Something in flight (a non-blocking call, another thread's): this call queues behind.
    if (inflight_.load(std::memory_order_relaxed) != 0) return false;
    Status s = brokenStatus();
    // Plans are numbered once (PlannedCall::gen): the current one is the one that served
    // this very request before, so the request need not be compared with its own.
    const bool samePlan = plan && *plan == scheduleGen_ && cachedSchedule_;
    if (s.isOk() && !samePlan) s = useSchedule(req);
    if (!s.isOk()) {
      *result = s;
      return true;
    }
    bindSchedule(&op, req);
    if (plan) *plan = scheduleGen_;
    // No channel with work (finishEmpty), or several: the general path.
    if (op.channels_.size() != 1) return false;
    op.mover_ = nullptr;
    // Host buffers only (a point-to-point group's are the extra ones): nothing here can fail.
    (void)bindBuffers(&op, input, output, std::move(extra));
    if (!op.status_.isOk()) op.status_ = Status::ok();
    op.done_ = false;
    // What the executor works out before running the channel, once per schedule.
    if (op.setupGen_ != op.boundGen_) {
      PlannedCall& plan = plans_[currentPlan_];  // the one op is bound to
      if (!plan.alone) {
        plan.alone = std::make_shared<const exec::ChannelSetup>(exec::prepareChannel(
            *op.schedule_, op.channels_[0], channelLinks(op, op.channels_[0]), channelContext(op, op.channels_[0])));
      }
      op.setup_ = plan.alone;
      op.aloneContext_ = channelContext(op, op.channels_[0]);
      op.setupGen_ = op.boundGen_;
      op.directSends_.valid = false;
    }
    startOp(&op, /*startsNow=*/true);
  }
  Status s = execChannel(op, op.channels_[0], op.setup_.get(), &op.directSends_, &op.aloneContext_);
  op.completeAlone(s);
  if (!s.isOk()) s = s.withContext(op.name_);
  if (t0) traceCall(op, t0, s);
  *result = std::move(s);
  return true;
}

void Communicator::traceCall(const Op& op, int64_t t0, const Status& s) const {
  timeline::span(op.name_, "call", t0, timeline::nowUs() - t0, timeline::kCallsTid,
                 "\"seq\": " + std::to_string(op.tag_ >> 32) + ", \"bytes\": " + std::to_string(op.outputBytes_) +
                     ", \"algorithm\": \"" + op.schedule_->algorithm + "\", \"channels\": " +
                     std::to_string(op.channels_.size()) + ", \"comm_rank\": " + std::to_string(rank_) +
                     (s.isOk() ? "" : ", \"error\": \"failed\""));
}

StatusOr<std::shared_ptr<Op>> Communicator::submit(const algorithms::Request& req, const void* input, void* output,
                                                   std::vector<void*> extra) {
  std::lock_guard<std::mutex> lock(submitMu_);
  BRAID_ASSIGN_OR_RETURN(auto op, prepare(req, input, output, std::move(extra)));
  if (op->channels_.empty()) op->finishEmpty();
  else enqueue(op, 0);
  return op;
}

void Communicator::runChannel(const std::shared_ptr<Op>& op, int channel) { op->complete(execChannel(*op, channel)); }

// A channel's long waits check the communicator's health; channel 0's, of a sequenced call
// with peers, also publish what this rank runs (publishCall).
class Communicator::WaitHooks final : public exec::RunHooks {
 public:
  WaitHooks(Communicator* comm, const Op* publish) : comm_(comm), publish_(publish) {}
  Status healthCheck(Deadline deadline) override { return comm_->healthCheck(deadline); }
  void longWait() override {
    if (publish_) comm_->publishCall(*publish_);
  }

 private:
  Communicator* comm_;
  const Op* publish_;
};

exec::RunContext Communicator::channelContext(const Op& op, int channel) const {
  exec::RunContext ctx;
  ctx.rank = rank_;
  const bool mesh = op.schedule_->connectionSet == 1;
  ctx.sliceBytes = mesh ? (op.meshSliceBytes_ ? op.meshSliceBytes_ : meshSlotBytes_)
                        : op.ringSliceBytes_ ? op.ringSliceBytes_ : opts_.config.slotBytes;
  ctx.wholeBlockBytes = wholeBlockBytes_;
  ctx.fifoSlots = !ringsRunAhead_ ? 0 : mesh ? kMeshSlots : opts_.config.nslots;
  ctx.tag = op.tag_;
  ctx.mismatchFill = op.fillTag_;
  ctx.wait = op.channels_.size() == 1 ? waitOneChannel_ : wait_;
  ctx.streamOutput = op.outputBytes_ >= kStreamOutputBytes;
  ctx.abortFlag = &abortFlag_;
  if (waitNotes_ && channel < nchannels_) ctx.waitNote = &waitNotes_[channel];
  if (channel == 0 && op.sequenced_) ctx.ackLinks = &meshLinks_;
  ctx.mover = op.mover_;
  return ctx;
}

const exec::ChannelLinks& Communicator::channelLinks(const Op& op, int channel) const {
  return op.schedule_->connectionSet == 1 ? meshLinks_ : links_[channel];
}

Status Communicator::execChannel(const Op& op, int channel, const exec::ChannelSetup* setup,
                                 exec::DirectSends* direct, const exec::RunContext* base) {
  Status s = brokenStatus();
  if (s.isOk()) {
    exec::RunContext ctx = base ? *base : channelContext(op, channel);
    ctx.tag = op.tag_;  // a base was made for an earlier call
    ctx.mismatchFill = op.fillTag_;
    ctx.directSends = direct;
    const bool mesh = op.schedule_->connectionSet == 1;
    ctx.deadline = Deadline::afterCoarse(opts_.config.timeoutSec);
    uint64_t peerTag = 0;
    ctx.mismatchTag = &peerTag;
    // Channel 0's thread owns both connection sets' channel-0 links: a long wait there looks
    // for a peer's mismatched call on the set this operation does not use, and says what
    // this rank is running, so that a peer finding the mismatch can decode both calls.
    const bool publishes = channel == 0 && nranks_ > 1 && op.sequenced_;
    if (publishes) ctx.otherLinks = mesh ? &links_[0] : &meshLinks_;
    WaitHooks hooks(this, publishes ? &op : nullptr);
    ctx.hooks = &hooks;
    if (op.sequenced_ && !op.startedAtQueue_) recorder_.started(static_cast<uint32_t>(op.tag_ >> 32));
    const int64_t t0 = timeline::on() ? timeline::nowUs() : 0;
    s = exec::runChannel(*op.schedule_, channel, op.buffers_, channelLinks(op, channel), ctx, setup);
    if (!s.isOk() && peerTag) s = explainMismatch(s, op, peerTag);
    if (t0) {
      timeline::span(std::string(op.name_) + " ch" + std::to_string(channel), "channel", t0, timeline::nowUs() - t0, channel,
                     "\"algorithm\": \"" + op.schedule_->algorithm + "\", \"bytes\": " +
                         std::to_string(op.outputBytes_));
    }
    if (!s.isOk()) {
      // Marked failed before fail() dumps the recorder; complete() records the final word.
      if (op.sequenced_) recorder_.finished(static_cast<uint32_t>(op.tag_ >> 32), false, s.rank());
      s = fail(s);
    }
  }
  return s;
}

void Communicator::workerLoop(int channel) {
  if (opts_.config.bind && numaNode_ >= 0) (void)topology::Placement::local().bindThreadToNuma(numaNode_);
  Worker& w = *workers_[channel];
  for (;;) {
    std::shared_ptr<Op> op;
    {
      std::unique_lock<std::mutex> lock(w.mu);
      w.cv.wait(lock, [&] { return w.stop || !w.queue.empty(); });
      if (w.queue.empty()) return;  // stop requested and drained
      op = w.queue.front();
      w.queue.pop_front();
    }
    runChannel(op, channel);
  }
}

// ---------------------------------------------------------------- failures

LiveState Communicator::liveState() const {
  LiveState s;
  s.comm = opts_.keyPrefix;
  s.rank = rank_;
  s.nranks = nranks_;
  s.epoch = epoch_;
  s.pid = static_cast<int>(getpid());
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) s.host = host;
  const FlightRecorder::Current cur = recorder_.current();
  s.busy = cur.busy;
  s.running = cur.running;
  s.op = cur.op;
  if (cur.sinceNs) s.opSeconds = (FlightRecorder::clockNanos() - cur.sinceNs) / 1e9;
  // The longest wait of any channel names the peer this rank depends on most.
  const int64_t now = nowNanos();
  for (int c = 0; waitNotes_ && c < nchannels_; ++c) {
    const exec::WaitNote& n = waitNotes_[c];
    const int peer = n.peer.load(std::memory_order_acquire);
    if (peer < 0) continue;
    const double waited = (now - n.sinceNs.load(std::memory_order_relaxed)) / 1e9;
    if (s.waitingOn >= 0 && waited <= s.waitSeconds) continue;
    static const char* const kWhat[] = {"receive from", "send to", "flush data to"};
    s.waitingOn = peer;
    s.waitWhat = kWhat[std::min(2, std::max(0, n.what.load(std::memory_order_relaxed)))];
    s.waitSeconds = waited;
    s.channel = c;
  }
  {
    // In a recovery call and no collective: that call, and the vote it waits for.
    std::lock_guard<std::mutex> lock(recoveryMu_);
    if (!recoveryCall_.empty() && !s.busy) {
      s.busy = s.running = true;
      s.op = recoveryCall_;
      s.opSeconds = static_cast<double>(now - recoverySinceNs_) / 1e9;
      if (recoveryWaitsFor_ >= 0 && s.waitingOn < 0) {
        s.waitingOn = recoveryWaitsFor_;
        s.waitWhat = "receive the vote of";
        s.waitSeconds = s.opSeconds;
        s.channel = -1;
      }
    }
  }
  const Status b = brokenStatus();
  if (!b.isOk()) s.failed = b.toString();
  if (rank_ < static_cast<int>(peers_.size())) {
    s.hostId = peers_[rank_].hostId;
    s.pidNs = peers_[rank_].pidNs;
    s.process = peers_[rank_].process;
  }
  int heldBy = s.waitingOn;
  const int failingOn = failingOn_.load(std::memory_order_acquire);
  if (b.isOk() && failingOn >= 0) {
    heldBy = failingOn;
    s.failed = "gave up waiting for rank " + std::to_string(failingOn) + " (reporting it)";
  }
  if (!b.isOk() && (b.code() == Code::kTimeout || b.code() == Code::kRemoteError)) heldBy = b.rank();
  if (heldBy >= 0 && heldBy != rank_ && heldBy < static_cast<int>(peers_.size())) {
    s.heldByPid = static_cast<int>(peers_[heldBy].pid);
    s.heldByHostId = peers_[heldBy].hostId;
    s.heldByPidNs = peers_[heldBy].pidNs;
    s.heldByProcess = peers_[heldBy].process;
  }
  return s;
}

Communicator::RecoveryNote::RecoveryNote(Communicator* c, std::string call) : c_(c) {
  std::lock_guard<std::mutex> lock(c_->recoveryMu_);
  c_->recoveryCall_ = std::move(call);
  c_->recoveryWaitsFor_ = -1;
  c_->recoverySinceNs_ = nowNanos();
}

Communicator::RecoveryNote::~RecoveryNote() {
  std::lock_guard<std::mutex> lock(c_->recoveryMu_);
  c_->recoveryCall_.clear();
  c_->recoveryWaitsFor_ = -1;
}

void Communicator::RecoveryNote::waitsFor(int rank) {
  std::lock_guard<std::mutex> lock(c_->recoveryMu_);
  c_->recoveryWaitsFor_ = rank;
}

Status Communicator::brokenStatusLocked() const {
  std::lock_guard<std::mutex> lock(errorMu_);
  return broken_;
}

Status Communicator::healthCheck(Deadline deadline) {
  // Local peers first: a pidfd becomes readable when its process exits.
  for (int r = 0; r < nranks_; ++r) {
    if (peerBye_[r].load(std::memory_order_relaxed)) continue;
    if (peerExited(r)) {
      // A peer that destroyed its communicator first has finished every operation: its exit
      // is no failure (whatever it still owed us is in the socket or shared memory already).
      if (!storeLost()) {
        auto bye = store_->check({key("bye/" + std::to_string(r))}, storeCheckDeadline(deadline));
        if (bye.isOk() && bye.value()) {
          peerBye_[r].store(true, std::memory_order_relaxed);
          continue;
        }
      }
      // A peer that aborted on purpose left a record before exiting: prefer its reason. A
      // store that is gone names its host, whose exit may be what ended this peer too.
      auto rec = abortRecord(deadline);
      if (!rec.isOk()) return rec;
      return Status(Code::kRemoteError,
                    "rank " + std::to_string(r) + " (pid " + std::to_string(peers_[r].pid) + " on host " +
                        peers_[r].hostId + ") exited",
                    r);
    }
  }
  // Then the store, at most every 100 ms across all channel threads: a peer's abort record,
  // or the loss of the store itself.
  std::unique_lock<std::mutex> lock(healthMu_, std::try_to_lock);
  if (!lock.owns_lock()) return Status::ok();
  int64_t now = nowNanos();
  if (now < nextStoreCheckNs_) return Status::ok();
  nextStoreCheckNs_ = now + kStoreCheckPeriodNs;
  BRAID_RETURN_IF_ERROR(abortRecord(deadline));
  // Local peers no pidfd watches: the store marks one gone when its connection ends, which
  // its process's end does.
  for (int r : unwatchedLocal_) {
    if (peerBye_[r].load(std::memory_order_relaxed) || storeLost()) continue;
    auto gone = store_->check({key("gone/" + std::to_string(r))}, storeCheckDeadline(deadline));
    if (!gone.isOk() || !gone.value()) continue;  // a lost store shows in abortRecord
    auto bye = store_->check({key("bye/" + std::to_string(r))}, storeCheckDeadline(deadline));
    if (bye.isOk() && bye.value()) {
      peerBye_[r].store(true, std::memory_order_relaxed);
      continue;
    }
    BRAID_RETURN_IF_ERROR(abortRecord(deadline));  // its own reason, if it left one
    return Status(Code::kRemoteError,
                  "rank " + std::to_string(r) + " (host " + peers_[r].hostId +
                      ", another pid namespace) left the job's store: its process ended",
                  r);
  }
  return Status::ok();
}

Status Communicator::abortRecord(Deadline deadline) {
  if (storeLost()) {
    std::lock_guard<std::mutex> lock(errorMu_);
    return storeLost_;
  }
  deadline = storeCheckDeadline(deadline);
  auto present = store_->check({key("abort")}, deadline);
  if (!present.isOk()) return storeLoss(present.status());
  if (present.value()) {
    Deadline five = Deadline::after(5);
    auto v = store_->get(key("abort"), !deadline.never() && deadline.nanos() < five.nanos() ? deadline : five);
    if (v.isOk()) return decodeAbortRecord(v.value());
  }
  return Status::ok();
}

Status Communicator::storeLoss(const Status& why) {
  const int owner = opts_.storeOwnerRank;
  const std::string who = owner >= 0 ? "rank " + std::to_string(owner) + ", which serves the job's store" : "";
  // A store that stopped answering is stalled (a stopped or overloaded host); one whose
  // connection broke is gone; one that shut this process out (Store::fence) is not lost at
  // all: the others left this rank out, and it must leave.
  const bool stalled = why.code() == Code::kTimeout;
  Status s;
  if (why.message().find(bootstrap::kShutOut) != std::string::npos)
    s = Status(Code::kAborted, why.message());
  else if (stalled)
    s = Status(Code::kTimeout,
               (owner >= 0 ? who + ", does not answer: " : "the job's store does not answer: ") + why.message(), owner);
  else
    s = Status(Code::kRemoteError, (owner >= 0 ? "lost " + who + ": " : "lost the job's store: ") + why.message(),
               owner);
  std::lock_guard<std::mutex> lock(errorMu_);
  if (!storeLostFlag_.load(std::memory_order_relaxed)) {
    storeLost_ = s;
    storeLostFlag_.store(true, std::memory_order_release);
  }
  return storeLost_;
}

Deadline Communicator::graceDeadline() const {
  return Deadline::after(std::min(3.0, std::max(0.5, opts_.config.timeoutSec / 2)));
}

Status Communicator::findStalledRank(const Status& timeout) {
  // Every rank that times out records whom it waited for; following those records from the
  // rank we waited for ends at the one rank that records nothing: the one that stalled.
  const int waitedFor = timeout.rank();
  if (waitedFor < 0) return timeout;
  if (storeLost()) return abortRecord(Deadline());  // the store's loss, naming its host
  Deadline deadline = graceDeadline();
  Status published = store_->set(key("stall/" + std::to_string(rank_)), std::to_string(waitedFor), deadline);
  if (!published.isOk()) return storeLoss(published);
  std::set<int> visited{rank_};
  int cur = waitedFor;
  // Half a second before giving up on a rank's record, the processes are asked where they
  // are, should that rank be held in another communicator (heldElsewhere): their answers are
  // in when the wait ends, which the ask then costs nothing.
  HeldAsk early;
  bool used = false;  // heldElsewhere took `early`
  auto settle = [&](const Status& s) {
    // A request begun for a rank that recorded after all is read (which removes its keys;
    // its answers are due by now) and its verdict, none, published for the other askers.
    if (early.asker && !used && !storeLost()) {
      if (early.begun) (void)collectLiveStatus(liveStore(), early.live);
      (void)store_->set(key("stall-far/" + std::to_string(early.cur)), "-", graceDeadline());
    }
    return s;
  };
  while (!visited.count(cur)) {
    visited.insert(cur);
    const std::string stallKey = key("stall/" + std::to_string(cur));
    StatusOr<std::string> v = Status(Code::kTimeout, "not asked");
    const int64_t askAt = deadline.nanos() - static_cast<int64_t>(heldAskSeconds() * 1e9);
    if (early.cur < 0 && askAt > nowNanos()) {
      v = store_->get(stallKey, Deadline::atNanos(askAt));
      // The claim and the request get what is left of the grace, and a quarter second at least.
      if (!v.isOk() && v.status().code() == Code::kTimeout)
        early = beginHeldAsk(cur, Deadline::atNanos(std::max(deadline.nanos(), nowNanos() + 250 * 1000 * 1000)));
    }
    if (!v.isOk() && v.status().code() == Code::kTimeout) v = store_->get(stallKey, deadline);
    if (!v.isOk()) {
      // A store that fails here (rather than answering "not there") is itself the problem:
      // a live one answers whether the key exists at once.
      if (v.status().code() != Code::kTimeout) return settle(storeLoss(v.status()));
      auto there = store_->check({stallKey}, Deadline::after(kStoreMinWaitSec));
      if (!there.isOk()) return settle(storeLoss(there.status()));
      used = early.cur == cur;
      Status far = heldElsewhere(cur, timeout, early);
      if (!far.isOk()) return settle(far);
      return settle(Status(Code::kTimeout,
                           madeNoProgress("rank " + std::to_string(cur)) + "; " + timeout.message(),
                           cur));
    }
    cur = std::atoi(v.value().c_str());
    if (cur < 0 || cur >= nranks_) break;
  }
  return settle(timeout);  // a cycle: everyone waits on everyone; report what we saw
}

std::string Communicator::madeNoProgress(const std::string& who) const {
  return who + " made no progress for " + std::to_string(static_cast<int>(opts_.config.timeoutSec)) +
         " s (BRAID_TIMEOUT)";
}

bool Communicator::mayBeHeld(int cur) {
  if (cur < 0 || cur >= nranks_ || cur == rank_ || storeLost() || !answersLiveStatus(this)) return false;
  if (cur < static_cast<int>(peerPidFds_.size()) && peerPidFds_[cur] >= 0)
    return !peerExited(cur) && !processStopped(peers_[cur].pid);
  // Unwatched: a peer of another host or pid namespace, whose state only its answer tells, or
  // of this process (not followed: it is this very process).
  return !transport::sameProcess(peers_[cur], peers_[rank_]) && !transport::pidMeaningfulTo(peers_[cur], peers_[rank_]);
}

double Communicator::heldAskSeconds() const { return std::max(kHeldAskSec, liveAnswerSeconds(this)); }

Communicator::HeldAsk Communicator::beginHeldAsk(int cur, Deadline deadline) {
  HeldAsk h;
  h.cur = cur;
  if (!mayBeHeld(cur)) return h;
  auto claim = store_->compareSet(key("stall-ask/" + std::to_string(cur)), "", std::to_string(rank_), deadline);
  if (!claim.isOk()) return h;
  h.claimed = true;
  h.asker = claim.value() == std::to_string(rank_);
  if (!h.asker) return h;
  auto live = beginLiveStatus(liveStore(), heldAskSeconds(), deadline);
  h.begun = live.isOk();
  if (h.begun) h.live = live.value();
  return h;
}

Status Communicator::heldElsewhere(int cur, const Status& timeout, const HeldAsk& early) {
  // Begun early for this rank, or now (its answers then take half a second).
  const HeldAsk ask = early.cur == cur ? early : beginHeldAsk(cur, Deadline::after(kStoreMinWaitSec));
  if (!ask.claimed) return Status::ok();
  // One rank asks per held rank (every process answers every ask); the others read its
  // verdict: "<rank>\t<text>", or "-" for none.
  const std::string verdictKey = key("stall-far/" + std::to_string(cur));
  std::string verdict;
  if (!ask.asker) {
    auto v = store_->get(verdictKey, Deadline::after(heldAskSeconds() + kHeldAnswerMoreSec + 2));
    if (!v.isOk()) return Status::ok();
    verdict = v.value();
  } else {
    if (ask.begun) {
      auto unanswered = [&](const std::vector<LiveState>& got) {
        bool missing = false;
        (void)followHolds(cur, got, &missing);
        return missing;
      };
      const Deadline more = Deadline::atNanos(ask.live.readyNs + static_cast<int64_t>(kHeldAnswerMoreSec * 1e9));
      auto states = collectLiveStatus(liveStore(), ask.live, more, unanswered);
      // A local peer that stopped or exited since the ask began is the culprit itself.
      if (states.isOk() && mayBeHeld(cur)) verdict = followHolds(cur, states.value());
    }
    (void)store_->set(verdictKey, verdict.empty() ? "-" : verdict, graceDeadline());
  }
  const size_t tab = verdict.find('\t');
  if (tab == std::string::npos) return Status::ok();
  const int named = std::atoi(verdict.c_str());
  return Status(Code::kTimeout, verdict.substr(tab + 1) + "; " + timeout.message(),
                named >= 0 && named < nranks_ ? named : cur);
}

std::string Communicator::followHolds(int cur, const std::vector<LiveState>& states, bool* unanswered) const {
  // Processes are told apart by their tokens, not their pids: ranks in containers that share
  // this host's name may all be pid 1 (LiveProcess).
  using Proc = LiveProcess;
  auto procOf = [&](int r) { return liveProcessOf(peers_[r]); };
  auto rankOf = [&](const Proc& p) {
    for (int r = 0; r < nranks_; ++r)
      if (sameLiveProcess(procOf(r), p)) return r;
    return -1;
  };
  // A process of this communicator by its rank here; another by its rank where it answered,
  // else by its pid and host name.
  auto name = [&](const Proc& p) {
    const int r = rankOf(p);
    if (r >= 0) return "rank " + std::to_string(r);
    for (const LiveState& s : states)
      if (sameLiveProcess(s.self(), p))
        return "rank " + std::to_string(s.rank) + " of communicator '" + s.comm + "' (pid " + std::to_string(p.pid) +
               ")";
    return "pid " + std::to_string(p.pid) + " on host " + p.hostId.substr(0, p.hostId.find(':'));
  };
  const Proc me = procOf(rank_);
  Proc at = procOf(cur);
  std::vector<Proc> seen{at};
  std::vector<std::pair<Proc, bool>> hops;  // each process followed, and whether it still waits
  std::string trail;
  std::string why;  // what the process at the chain's end does
  for (int hop = 0; hop < 8 && why.empty(); ++hop) {
    const LiveState* held = nullptr;
    const LiveState* any = nullptr;
    for (const LiveState& s : states) {
      if (!sameLiveProcess(s.self(), at)) continue;
      if (!any || s.busy) any = &s;
      // The first rank's record in this communicator is what led here (it recorded no
      // stall); further along, a wait here counts as one anywhere.
      if (!s.heldBy().known() || (hop == 0 && s.comm == opts_.keyPrefix)) continue;
      if (!held || (s.busy && !held->busy)) held = &s;
    }
    if (!held) {
      if (!any && unanswered) *unanswered = true;
      // Not held in another communicator: at the first step, the rank is simply not in
      // this collective (its caller is elsewhere) and is the one to name, as before.
      if (hop == 0) return "";
      if (!any) {
        // No answer: from a process of this host and pid namespace that runs, nothing to go
        // by; from one of another host or namespace, whose state cannot be read here, the
        // sign that it is stopped.
        if (pidReadableBy(at, me)) return "";
        why = "does not answer (stopped, hung, or cut off from the store)";
        break;
      }
      why = any->busy ? "is " + any->describe() + " and waits for no one"
                      : "is not in a collective (its caller is elsewhere: compute, I/O)";
      break;
    }
    const Proc next = held->heldBy();
    if (sameLiveProcess(next, me)) {
      // Held by this rank, which waits for it here: a deadlock across communicators.
      return std::to_string(cur) + "\t" + madeNoProgress("rank " + std::to_string(cur)) + ": " +
             (trail.empty() ? "it" : trail + ", " + name(at)) + " waits in communicator '" + held->comm +
             "' for rank " + std::to_string(rank_) +
             ", which waits here: ranks that call collectives on several communicators must call them in "
             "the same order";
    }
    trail += (trail.empty() ? "" : ", ") + name(at) + " " +
             (held->failed.empty() ? "waits for " : "gave up waiting for ") + name(next) + " in communicator '" +
             held->comm + "'";
    hops.emplace_back(at, held->failed.empty());
    const bool again = std::any_of(seen.begin(), seen.end(), [&](const Proc& p) { return sameLiveProcess(p, next); });
    seen.push_back(next);
    if (again) {
      // Back at a process already passed: a cycle among other processes. If every one of
      // them still waits, it is a deadlock this rank cannot end: the rank it waits for is in
      // it or held by it. (One that gave up is failing out of it; nothing more to say then.)
      bool allWait = true;
      bool inCycle = false;
      for (const auto& [proc, waits] : hops) {
        inCycle = inCycle || sameLiveProcess(proc, next);
        if (inCycle) allWait = allWait && waits;
      }
      if (!allWait) return "";
      return std::to_string(cur) + "\t" + madeNoProgress("rank " + std::to_string(cur)) + ": " + trail +
             ": a deadlock across communicators among other ranks, each waiting for the next: ranks that call "
             "collectives on several communicators must call them in the same order";
    }
    at = next;
    if (pidReadableBy(at, me)) {
      const char state = processState(at.pid);
      if (stateGone(state)) why = "has exited";
      else if (stateStopped(state)) why = "is stopped";
    }
  }
  if (why.empty()) return "";
  const int named = rankOf(at);
  // The trail reads from the rank this one waited for to the culprit.
  return std::to_string(named >= 0 ? named : cur) + "\t" + madeNoProgress(name(at)) + ": it " + why +
         (named >= 0 ? "" : " (it is not in this communicator)") + "; " + trail;
}

void Communicator::publishCall(const Op& op) {
  if (storeLost()) return;
  const uint32_t seq = static_cast<uint32_t>(op.tag_ >> 32);
  (void)store_->set(key("call/" + std::to_string(rank_) + "/" + std::to_string(seq)),
                    "#" + std::to_string(seq) + " " + describeCall(op.shape_), graceDeadline());
}

Status Communicator::explainMismatch(const Status& s, const Op& op, uint64_t peerTag) {
  const int peer = s.rank();
  const uint32_t mySeq = static_cast<uint32_t>(op.tag_ >> 32);
  const uint32_t peerSeq = static_cast<uint32_t>(peerTag >> 32);
  // Point-to-point calls carry no sequence number and publish nothing: their tag says what
  // they are.
  const char* p2p = "sends and receives (a point-to-point call)";
  // Over UCX a tag keeps only some of the sequence number's bits (the executor fills in
  // the rest from this rank's own tag): the shape part alone tells.
  const bool peerP2P = (peerTag & 0xffffffffu) == (kP2PTag & 0xffffffffu);
  std::string mine = op.sequenced_ ? "#" + std::to_string(mySeq) + " " + describeCall(op.shape_) : p2p;
  // A peer behind this rank sent a call this rank has finished: that one disagrees.
  if (op.sequenced_ && !peerP2P && peerSeq < mySeq) {
    const std::string then = recorder_.describe(peerSeq);
    if (!then.empty()) mine = then + ", then " + mine;
  }
  std::string theirs = peerP2P ? p2p : "";
  if (!peerP2P && peer >= 0 && peer < nranks_ && !storeLost()) {
    // Published first, so that a peer doing the same finds this rank's call without waiting.
    // A peer that finds nothing waits for a while and then publishes its own (publishCall).
    if (op.sequenced_) publishCall(op);
    Deadline deadline = Deadline::after(std::min(2.0, std::max(0.5, opts_.config.timeoutSec / 2)));
    auto v = store_->get(key("call/" + std::to_string(peer) + "/" + std::to_string(peerSeq)), deadline);
    if (v.isOk()) theirs = v.value();
    // A peer ahead of this rank finished this operation, with a call of its own, before it
    // sent what arrived here: that call is the one that disagrees. It publishes it when it
    // fails (fail), at the latest at its next wait.
    if (op.sequenced_ && peerSeq > mySeq && peerSeq - mySeq < kPublishedCalls) {
      auto at = store_->get(key("call/" + std::to_string(peer) + "/" + std::to_string(mySeq)), deadline);
      if (at.isOk()) theirs = at.value() + (theirs.empty() ? "" : ", then " + theirs);
    }
  }
  if (theirs.empty())
    theirs = "#" + std::to_string(peerSeq) + ", another call (shape " + std::to_string(peerTag & 0xffffffffu) +
             "; it has not said which)";
  return Status(Code::kInvalidArgument,
                "collective mismatch: rank " + std::to_string(peer) + ": " + theirs + "; rank " +
                    std::to_string(rank_) + ": " + mine +
                    "; every rank must issue the same collectives, with the same count, type, op and root, in the "
                    "same order",
                peer);
}

void Communicator::dumpFlightRecorder(const Status& why) {
  const std::string& dir = opts_.config.debugDump;
  if (dir.empty()) return;
  std::string comm = opts_.keyPrefix;
  for (char& ch : comm)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-' && ch != '_') ch = '_';
  const std::string base = dir + "/" + comm + "-rank" + std::to_string(rank_);
  const std::string host = rank_ < static_cast<int>(peers_.size()) ? peers_[rank_].hostId : std::string();
  const std::string last = recorder_.lastCompleted();
  std::string text = "braid flight recorder: rank " + std::to_string(rank_) + " of " + std::to_string(nranks_) +
                     ", communicator '" + opts_.keyPrefix + "', pid " + std::to_string(getpid()) + ", host " + host +
                     "\nerror: " + why.toString() + "\nlast completed: " + (last.empty() ? "none" : last) +
                     "\noperations, oldest first:\n" + recorder_.text();
  std::string json = "{\"rank\": " + std::to_string(rank_) + ", \"nranks\": " + std::to_string(nranks_) +
                     ", \"communicator\": " + topology::jsonQuote(opts_.keyPrefix) + ", \"pid\": " + std::to_string(getpid()) +
                     ", \"host\": " + topology::jsonQuote(host) + ", \"error\": " + topology::jsonQuote(why.message()) +
                     ", \"error_rank\": " + std::to_string(why.rank()) + ", \"last_completed\": " + topology::jsonQuote(last) +
                     ", \"operations\": " + recorder_.json() + "}\n";
  for (const auto& [path, body] : {std::pair<std::string, const std::string&>{base + ".txt", text},
                                   std::pair<std::string, const std::string&>{base + ".json", json}}) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
      BRAID_WARN("BRAID_DEBUG_DUMP: cannot write %s: %s", path.c_str(), std::strerror(errno));
      continue;
    }
    std::fwrite(body.data(), 1, body.size(), f);
    std::fclose(f);
  }
}

bool Communicator::ranSince(int64_t ns) const {
  const FlightRecorder::Current c = recorder_.current();
  return c.busy || (!c.op.empty() && c.sinceNs > ns);
}

Status Communicator::fail(const Status& s) {
  Status report = s;
  {
    std::lock_guard<std::mutex> lock(errorMu_);
    if (!broken_.isOk()) return broken_;  // a sibling channel already failed
  }
  // Following the records below takes a while; meanwhile the live view says whom this
  // rank gave up on (a rank held here by it is followed through it).
  if ((s.code() == Code::kTimeout || s.code() == Code::kRemoteError) && s.rank() >= 0 && s.rank() != rank_)
    failingOn_.store(s.rank(), std::memory_order_release);
  if (s.code() == Code::kTimeout) {
    report = findStalledRank(s);
    const std::string last = recorder_.lastCompleted();
    report = Status(report.code(),
                    report.message() + "; rank " + std::to_string(rank_) + " last completed " +
                        (last.empty() ? std::string("no operation") : "operation " + last),
                    report.rank());
  }
  if (s.code() == Code::kRemoteError) {
    // A neighbour that closed its connection may only have been reacting to the real
    // failure; its published record, or the store's loss, names the root cause.
    Status rec = abortRecord(graceDeadline());
    if (!rec.isOk() && (rec.code() != Code::kRemoteError || storeLost())) report = rec;
    else if (!rec.isOk() && rec.message().find(" reported: ") != std::string::npos) report = rec;
  }
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(errorMu_);
    if (broken_.isOk()) {
      broken_ = report;
      brokenAtNs_.store(FlightRecorder::clockNanos(), std::memory_order_release);
      brokenFlag_.store(true, std::memory_order_release);
      first = true;
    } else {
      report = broken_;
    }
  }
  abortFlag_.store(1);
  if (first) {
    BRAID_WARN("%s", report.toString().c_str());
    dumpFlightRecorder(report);
    // This rank's latest calls first, so that a peer explaining a mismatch with one of them
    // can decode it (explainMismatch): a rank that failed on a peer's record, or that
    // finished the mismatched call and failed at its next one, has not published them.
    if (!storeLost()) {
      for (const auto& call : recorder_.recent(kPublishedCalls))
        (void)store_->set(key("call/" + std::to_string(rank_) + "/" + std::to_string(call.first)), call.second,
                          graceDeadline());
    }
    // Errors that came from another rank's record need not be re-published, nor can
    // anything be through a lost store.
    if (report.message().find(" reported: ") == std::string::npos && !storeLost())
      (void)store_->set(key("abort"), encodeAbortRecord(report, rank_), graceDeadline());
  }
  return report;
}

void Communicator::abort(const Status& why) {
  Status s = why.isOk() ? Status(Code::kAborted, "aborted by rank " + std::to_string(rank_), rank_) : why;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(errorMu_);
    if (broken_.isOk()) {
      broken_ = s;
      brokenAtNs_.store(FlightRecorder::clockNanos(), std::memory_order_release);
      brokenFlag_.store(true, std::memory_order_release);
      first = true;
    }
  }
  abortFlag_.store(1);
  // A failure that came from another rank's record is already published; overwriting it
  // would hide the root cause from the ranks that have not read it yet.
  if (first && s.message().find(" reported: ") == std::string::npos && !storeLost())
    (void)store_->set(key("abort"), encodeAbortRecord(s, rank_), graceDeadline());
}

}  // namespace braid::core

namespace braid::core {

StatusOr<std::unique_ptr<Communicator>> Communicator::split(int color, int sortKey) {
  BRAID_RETURN_IF_ERROR(brokenStatus());
  const Config& cfg = opts_.config;
  Deadline deadline = Deadline::after(cfg.timeoutSec);
  const std::string base = "split" + std::to_string(splitSeq_++);
  // Everyone learns everyone's (color, key) through the store: a split is rare, and this
  // keeps it independent of the data path's state. A rank that ended before it published
  // fails the split at once, not at the timeout.
  const std::string gather = key(base + "/ck");
  std::vector<int> everyone(static_cast<size_t>(nranks_));
  std::iota(everyone.begin(), everyone.end(), 0);
  int64_t nextGoneCheck = 0;
  BRAID_ASSIGN_OR_RETURN(auto all, bootstrap::allGather(*store_, gather, rank_, nranks_,
                                                        std::to_string(color) + " " + std::to_string(sortKey), deadline,
                                                        [&] {
                                                          return memberEnded(everyone, gather, &nextGoneCheck,
                                                                             "before it joined the split",
                                                                             "shrink the communicator without it first");
                                                        }));
  if (color < 0) return std::unique_ptr<Communicator>();
  std::vector<std::pair<int, int>> members;  // (key, old rank)
  for (int r = 0; r < nranks_; ++r) {
    int c = 0, k = 0;
    if (std::sscanf(all[r].c_str(), "%d %d", &c, &k) != 2)
      return Status(Code::kRemoteError, "malformed split record from rank " + std::to_string(r), r);
    if (c == color) members.emplace_back(k, r);
  }
  std::sort(members.begin(), members.end());
  int newRank = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == rank_) newRank = static_cast<int>(i);
  CommOptions child;
  child.config = childConfig();
  child.nonce = 0;  // the child's rank 0 draws a fresh one
  child.authKey = opts_.authKey;
  // The store's owner, renumbered for the child (-1 when it is not a member).
  child.storeOwnerRank = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == opts_.storeOwnerRank) child.storeOwnerRank = static_cast<int>(i);
  child.keyPrefix = key(base + "/c" + std::to_string(color));
  return create(store_, newRank, static_cast<int>(members.size()), std::move(child));
}

void Communicator::revoke() {
  abort(Status(Code::kRevoked,
               "the communicator was revoked by rank " + std::to_string(rank_) +
                   " (braidCommRevoke); shrink or split it, or destroy it",
               rank_));
}

namespace {
std::string rankList(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "]";
}
}  // namespace

StatusOr<std::unique_ptr<Communicator>> Communicator::shrink(const std::vector<int>& exclude, bool abortPending) {
  RecoveryNote note(this, "braidCommShrink");
  const std::string me = "rank " + std::to_string(rank_);
  std::vector<bool> gone(static_cast<size_t>(nranks_), false);
  for (int r : exclude) {
    if (r < 0 || r >= nranks_)
      return invalidArgument("excludeRanks on " + me + ": " + std::to_string(r) + " is not a rank of this " +
                             std::to_string(nranks_) + "-rank communicator");
    if (gone[r]) return invalidArgument("excludeRanks on " + me + ": rank " + std::to_string(r) + " is listed twice");
    gone[r] = true;
  }
  if (gone[rank_])
    return invalidArgument("excludeRanks on " + me + " lists rank " + std::to_string(rank_) +
                           " itself: only the ranks that stay call shrink");
  std::vector<int> sorted;
  for (int r = 0; r < nranks_; ++r)
    if (gone[r]) sorted.push_back(r);
  const Config& cfg = opts_.config;
  if (abortPending) revoke();
  // Pending operations end on their own: completed, or failed by the timeout at the latest.
  {
    Deadline drain = Deadline::after(cfg.timeoutSec > 0 ? cfg.timeoutSec + 5 : 0);
    while (inflight_.load() > 0) {
      if (drain.expired())
        return Status(Code::kTimeout, me + ": operations still pending on the communicator being shrunk", rank_);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  Deadline deadline = Deadline::after(cfg.timeoutSec);
  const std::string base = "shrink" + std::to_string(shrinkSeq_++);
  // The survivors check that they exclude the same ranks: each publishes its list and reads
  // every other survivor's. Only the survivors' own exits are watched (the parent may be
  // broken, and its records would fail every wait).
  if (storeLost()) return abortRecord(Deadline());
  Status put = store_->set(key(base + "/x/" + std::to_string(rank_)), rankList(sorted), deadline);
  if (!put.isOk()) return storeLoss(put);
  const std::string listPrefix = key(base + "/x");
  std::vector<std::string> keys;
  std::vector<int> survivors;
  for (int r = 0; r < nranks_; ++r) {
    if (gone[r]) continue;
    survivors.push_back(r);
    keys.push_back(bootstrap::allGatherKey(listPrefix, r));
  }
  // One that published its list before it died is left to the new communicator's join,
  // which names it.
  int64_t nextGoneCheck = 0;
  auto watch = [&]() -> Status {
    return memberEnded(survivors, listPrefix, &nextGoneCheck, "during shrink", "agree and shrink again without it");
  };
  Status waited = bootstrap::waitPolling(*store_, keys, deadline, watch);
  if (!waited.isOk()) {
    if (waited.code() == Code::kTimeout) {
      for (size_t i = 0; i < keys.size(); ++i) {
        auto there = store_->check({keys[i]}, graceDeadline());
        if (there.isOk() && !there.value())
          return Status(Code::kTimeout,
                        "rank " + std::to_string(survivors[i]) + " did not join the shrink within " +
                            std::to_string(static_cast<int>(cfg.timeoutSec)) +
                            " s (BRAID_TIMEOUT); exclude it too, or check that it calls shrink",
                        survivors[i]);
      }
    }
    return waited.code() == Code::kRemoteError && waited.rank() < 0 ? storeLoss(waited) : waited;
  }
  auto lists = store_->multiGet(keys, deadline);
  if (!lists.isOk()) return storeLoss(lists.status());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (lists.value()[i] != rankList(sorted))
      return invalidArgument("excludeRanks differ: rank " + std::to_string(survivors[i]) + " excludes " +
                             lists.value()[i] + ", " + me + " excludes " + rankList(sorted) +
                             "; every surviving rank must pass the same list");
  }
  CommOptions child;
  child.config = childConfig();
  child.nonce = 0;  // the child's rank 0 draws a fresh one
  child.authKey = opts_.authKey;
  child.storeOwnerRank = -1;
  int newRank = -1;
  for (size_t i = 0; i < survivors.size(); ++i) {
    if (survivors[i] == rank_) newRank = static_cast<int>(i);
    if (survivors[i] == opts_.storeOwnerRank) child.storeOwnerRank = static_cast<int>(i);
  }
  child.keyPrefix = key(base);
  auto made = create(store_, newRank, static_cast<int>(survivors.size()), std::move(child));
  if (!made.isOk()) return made;
  made.value()->epoch_ = epoch_ + 1;
  if (newRank == 0) fenceExcluded(sorted, survivors);
  return made;
}

// An excluded rank that the survivors counted as failed (by an agreement, or named dead or
// stalled) may still be alive: stopped, or cut off. Its process is shut out of the store
// (Store::fence), so that what the store holds for it ends now as a dead process's would:
// its share of the live sessions that the store's host waits for before it leaves (a stopped
// process kept that host waiting up to 30 s after the survivors finished), and its on-close
// records. Nor can it come back into the job when it resumes: it is told why. A rank left out
// by choice, not failed, keeps its store. Best effort, by the new rank 0 once every survivor
// has joined: a store that cannot (etcd, which counts a stopped process out when its lease
// runs out; PyTorch's) is left as it is.
void Communicator::fenceExcluded(const std::vector<int>& excluded, const std::vector<int>& survivors) {
  std::set<int> failed;
  {
    std::lock_guard<std::mutex> lock(errorMu_);
    failed = agreedFailed_;
  }
  const std::vector<bool> known = knownFailed();
  std::set<uint64_t> staying;  // never shut out a client that a survivor shares
  for (int r : survivors)
    if (r < static_cast<int>(storeClients_.size())) staying.insert(storeClients_[r]);
  std::vector<uint64_t> ids;
  std::vector<int> ranks;
  for (int r : excluded) {
    if (!failed.count(r) && !known[r]) continue;
    const uint64_t id = r < static_cast<int>(storeClients_.size()) ? storeClients_[r] : 0;
    if (id == 0 || staying.count(id)) continue;
    ids.push_back(id);
    ranks.push_back(r);
  }
  if (ids.empty()) return;
  std::string who = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) who += (i ? ", " : "") + std::to_string(ranks[i]);
  const std::string why = who + " of communicator '" + opts_.keyPrefix +
                          "', counted as failed and left out by the others' shrink";
  auto closed = store_->fence(ids, why, graceDeadline());
  if (closed.isOk())
    BRAID_INFO("rank %d: shut %s out of the job's store, closing %lld connection%s", rank_, who.c_str(),
               static_cast<long long>(closed.value()), closed.value() == 1 ? "" : "s");
  else
    BRAID_TRACE("rank %d: %s stays in the store: %s", rank_, who.c_str(), closed.status().message().c_str());
}

std::vector<bool> Communicator::knownFailed(bool askStore) {
  std::vector<bool> failed(static_cast<size_t>(nranks_), false);
  for (int r = 0; r < nranks_; ++r) failed[r] = peerExited(r);
  // A dead or stalled peer named by this rank's own failure or by a published one. An error
  // may name a survivor (a peer that closed its connections after failing itself): a named
  // rank on this host counts only if its process is gone or stopped.
  auto names = [&](const Status& s) {
    const int r = s.rank();
    if ((s.code() != Code::kRemoteError && s.code() != Code::kTimeout) || r < 0 || r >= nranks_ || r == rank_) return;
    if (r < static_cast<int>(peerPidFds_.size()) && peerPidFds_[r] >= 0 && !failed[r] &&
        !processStopped(peers_[r].pid))
      return;
    failed[r] = true;
  };
  names(brokenStatus());
  if (askStore && !storeLost()) {
    Status published = abortRecord(graceDeadline());
    if (!storeLost()) names(published);  // a store that failed just now names only its host
  }
  return failed;
}

bool Communicator::transportsSawFail(int rank) {
  if (rank == rank_ || inflight_.load(std::memory_order_acquire) != 0) return false;
  for (const auto* set : {&transports_, &meshTransports_})
    for (const auto& t : *set)
      if (t && t->sawPeerFail(rank)) return true;
  return false;
}

Communicator::SilentAsk Communicator::beginSilentAsk(const std::string& claimKey, LiveAsk* ask) {
  if (storeLost() || !answersLiveStatus(this)) return SilentAsk::kNotNow;
  auto claim = store_->compareSet(claimKey, "", std::to_string(rank_), graceDeadline());
  if (!claim.isOk()) return SilentAsk::kNotNow;
  if (claim.value() != std::to_string(rank_)) return SilentAsk::kAnotherAsks;
  auto live = beginLiveStatus(liveStore(), heldAskSeconds(), graceDeadline());
  if (!live.isOk()) return SilentAsk::kNotNow;
  *ask = live.value();
  return SilentAsk::kBegun;
}

std::vector<int> Communicator::silentRanks(const LiveAsk& ask, const std::vector<int>& ranks) {
  auto answered = [&](const std::vector<LiveState>& got, int r) {
    for (const LiveState& s : got)
      if (sameLiveProcess(s.self(), liveProcessOf(peers_[r]))) return true;
    return false;
  };
  // A process on a loaded host answers late: read again until kHeldAnswerMoreSec while one
  // of `ranks` is missing.
  auto missing = [&](const std::vector<LiveState>& got) {
    for (int r : ranks)
      if (!answered(got, r)) return true;
    return false;
  };
  const Deadline more = Deadline::atNanos(ask.readyNs + static_cast<int64_t>(kHeldAnswerMoreSec * 1e9));
  auto states = collectLiveStatus(liveStore(), ask, more, missing);
  std::vector<int> silent;
  if (!states.isOk()) return silent;  // no verdict: the store's failure is the caller's to meet
  for (int r : ranks)
    if (!answered(states.value(), r)) silent.push_back(r);
  return silent;
}

void Communicator::reportFailedPeers() {
  std::set<int> failed;
  {
    std::lock_guard<std::mutex> lock(errorMu_);
    failed = agreedFailed_;
  }
  if (brokenFlag_.load(std::memory_order_acquire)) {
    const std::vector<bool> known = knownFailed(/*askStore=*/false);
    for (int r = 0; r < nranks_; ++r)
      if (known[r]) failed.insert(r);
  }
  // A communicator that did not break may still lead to a peer of this host that another
  // one found dead or stopped (a split child, a sibling): its process says so.
  for (int r = 0; r < nranks_ && r < static_cast<int>(peerPidFds_.size()); ++r)
    if (peerPidFds_[r] >= 0 && (peerExited(r) || processStopped(peers_[r].pid))) failed.insert(r);
  failed.erase(rank_);
  for (int r : failed) {
    for (auto& t : transports_)
      if (t) t->peerFailed(r);  // a transport no peer chose is gone
    for (auto& t : meshTransports_)
      if (t) t->peerFailed(r);
  }
}

StatusOr<Communicator::Agreement> Communicator::agree(int flag) {
  const Config& cfg = opts_.config;
  RecoveryNote note(this, "braidCommAgree (agreement " + std::to_string(agreeSeq_) + ")");
  const std::string base = key("agree" + std::to_string(agreeSeq_++));
  const std::string me = "rank " + std::to_string(rank_);
  auto vote = [&](int r) { return base + "/" + std::to_string(r); };
  if (storeLost()) return abortRecord(Deadline());
  // Every rank's vote key is written once, by compare-and-set: by the rank itself ("V" and
  // its flag), or by a survivor that gave up on it ("F"). Whichever comes first stays, so
  // every rank that reads all the keys computes the same outcome, whoever dies meanwhile.
  auto settle = [&](int r, const std::string& value) -> StatusOr<std::string> {
    auto v = store_->compareSet(vote(r), "", value, graceDeadline());
    if (!v.isOk()) {
      if (v.status().code() == Code::kInvalidArgument) return v.status();  // a store without compare-and-set
      return storeLoss(v.status());
    }
    return std::move(v).value();
  };
  BRAID_ASSIGN_OR_RETURN(std::string mine, settle(rank_, "V" + std::to_string(flag)));
  if (mine == "F")
    return Status(Code::kAborted,
                  me + " was counted as failed by the other ranks' agreement (it voted after they gave up on it: "
                       "an error named it, its connection to the store ended, its process did not answer them "
                       "after BRAID_TIMEOUT, or it had not voted by twice BRAID_TIMEOUT plus 3 s): it must leave "
                       "the communicator",
                  rank_);
  // A live rank votes once its own failing call returns, which is bounded by the timeout
  // from when it started waiting, plus the stall search (at most 3 s); ranks notice a failure
  // at different times (UCX may take seconds longer than a socket). Giving up on a silent
  // rank only after twice that keeps slow survivors in; dead and stalled ranks named by an
  // error are given up on at once.
  Deadline deadline = Deadline::after(cfg.timeoutSec > 0 ? 2 * cfg.timeoutSec + 3 : 0);
  std::vector<std::string> votes(static_cast<size_t>(nranks_));
  votes[rank_] = mine;
  int64_t nextFailureCheck = 0;
  // When each rank of this host was first seen stopped without a break, or 0.
  std::vector<int64_t> stoppedSince(static_cast<size_t>(nranks_), 0);
  const int64_t stallNs = static_cast<int64_t>(cfg.timeoutSec * 1e9);
  // Ranks of other hosts whose votes are still missing after the timeout are asked whether
  // their processes run (beginSilentAsk), again every half timeout (at least every second)
  // while any stays silent.
  const int64_t askPeriodNs = std::max<int64_t>(stallNs / 2, 1000 * 1000 * 1000);
  int64_t nextAskNs = nowNanos() + stallNs;
  LiveAsk silentAsk;
  bool asking = false;
  bool mayAsk = true;  // until another survivor is found to hold the claim
  for (;;) {
    std::vector<int> open;
    for (int r = 0; r < nranks_; ++r)
      if (votes[r].empty()) open.push_back(r);
    if (open.empty()) break;
    note.waitsFor(open.front());
    std::vector<bool> failed;
    const bool late = deadline.expired();
    if (late || nowNanos() >= nextFailureCheck) {
      failed = knownFailed();
      for (int r : open) {
        if (failed[r]) continue;
        // A rank this rank's own connections saw go. The store may not know: losing the
        // store's host loses the store connections of the ranks on it with it, and the
        // promoted standby marks only the old store's own process gone; a survivor whose
        // call ended on another rank's report drove its connections no further, and over
        // UCX an endpoint hears of its peer's end only as its worker is driven.
        failed[r] = transportsSawFail(r);
        if (failed[r]) {
          BRAID_INFO("rank %d: agreement: its connections saw rank %d fail", rank_, r);
          continue;
        }
        // A rank whose store connection ended (a remote death no pidfd shows).
        auto gone = store_->check({key("gone/" + std::to_string(r))}, graceDeadline());
        if (!gone.isOk()) return storeLoss(gone.status());
        failed[r] = gone.value();
        // A rank of this host whose process stayed stopped (SIGSTOP, a debugger) for the
        // timeout while this rank waited for its vote: stalled, as a call would have found
        // it. A stalled rank an error names is counted at once (knownFailed); one nobody
        // named (two stopped together, each survivor's call naming the first it waited for)
        // was waited for until twice the timeout plus 3 s.
        if (failed[r] || stallNs <= 0 || r >= static_cast<int>(peerPidFds_.size()) || peerPidFds_[r] < 0) continue;
        const int64_t now = nowNanos();
        if (!processStopped(peers_[r].pid)) {
          stoppedSince[r] = 0;
        } else if (stoppedSince[r] == 0) {
          stoppedSince[r] = now;
        } else if (now - stoppedSince[r] >= stallNs) {
          failed[r] = true;
          BRAID_INFO("rank %d: agreement: rank %d's process has been stopped for %.1f s", rank_, r,
                     static_cast<double>(now - stoppedSince[r]) / 1e9);
        }
      }
      // A rank of another host shows no process state here. Its process answers the live
      // view from a thread of its own, even while its caller computes or is still inside its
      // own failing call; one that gives no answer once the agreement has waited the timeout
      // is stopped, hung as a whole, or cut off from the store, and its vote cannot come:
      // counted as failed then, rather than at twice the timeout plus 3 s. One survivor
      // asks; the others read the votes it settles.
      std::vector<int> remote;
      for (int r : open)
        if (!failed[r] && peers_[r].hostId != peers_[rank_].hostId) remote.push_back(r);
      if (stallNs > 0 && !late && !remote.empty()) {
        const int64_t now = nowNanos();
        if (!asking && mayAsk && now >= nextAskNs) {
          const SilentAsk begun = beginSilentAsk(base + "/ask", &silentAsk);
          asking = begun == SilentAsk::kBegun;
          mayAsk = begun != SilentAsk::kAnotherAsks;
          nextAskNs = now + askPeriodNs;
        } else if (asking && now >= silentAsk.readyNs) {
          asking = false;
          for (int r : silentRanks(silentAsk, remote)) {
            failed[r] = true;
            BRAID_INFO("rank %d: agreement: rank %d had not voted after %.1f s, and its process (pid %lld on "
                       "host %s) did not answer",
                       rank_, r, cfg.timeoutSec, static_cast<long long>(peers_[r].pid), peers_[r].hostId.c_str());
          }
          nextAskNs = nowNanos() + askPeriodNs;
        }
      }
      nextFailureCheck = nowNanos() + kStoreCheckPeriodNs;
    }
    for (int r : open) {
      if (late || (!failed.empty() && failed[r])) {
        BRAID_ASSIGN_OR_RETURN(votes[r], settle(r, "F"));
        continue;
      }
      auto there = store_->check({vote(r)}, graceDeadline());
      if (!there.isOk()) return storeLoss(there.status());
      if (there.value()) {
        auto v = store_->get(vote(r), graceDeadline());
        if (!v.isOk()) return storeLoss(v.status());
        votes[r] = v.value();
      }
    }
    bool all = true;
    for (const auto& v : votes) all = all && !v.empty();
    if (all) break;
    // Waits for the first open vote to appear (a short wait: failures are checked between).
    for (int r = 0; r < nranks_; ++r) {
      if (!votes[r].empty()) continue;
      Deadline shortWait = Deadline::after(0.02);
      if (!deadline.never() && deadline.nanos() < shortWait.nanos()) shortWait = deadline;
      Status w = store_->wait({vote(r)}, shortWait);
      if (!w.isOk() && w.code() != Code::kTimeout) return storeLoss(w);
      break;
    }
  }
  Agreement a;
  for (int r = 0; r < nranks_; ++r) {
    const std::string& v = votes[r];
    if (v == "F") {
      a.failed.push_back(r);
      std::lock_guard<std::mutex> lock(errorMu_);
      agreedFailed_.insert(r);
    } else if (v.size() > 1 && v[0] == 'V') {
      a.flag &= std::atoi(v.c_str() + 1);
    } else {
      return Status(Code::kRemoteError, "malformed agreement vote '" + v.substr(0, 32) + "' of rank " + std::to_string(r), r);
    }
  }
  return a;
}

namespace {

std::string tokenHex(uint64_t token) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, token);
  return hex;
}

// The root-level record that maps a grow token to the communicator being grown.
std::string growKey(uint64_t token) { return "braid-grow/" + tokenHex(token); }

// How long grow waits for its record, which the rank that made the id wrote before sharing it.
Deadline growRecordDeadline(double timeoutSec) { return Deadline::after(std::min(5.0, std::max(1.0, timeoutSec))); }

struct GrowRecord {
  std::string prefix;  // the grown communicator's keys
  int oldSize = 0, newSize = 0, storeOwner = -1, epoch = 0;
};

StatusOr<GrowRecord> readGrow(bootstrap::Store& store, uint64_t token, Deadline deadline) {
  auto v = store.get(growKey(token), deadline);
  if (!v.isOk()) {
    if (v.status().code() == Code::kTimeout)
      return invalidArgument("the grow id names no open grow in this job's store (made by braidCommGetGrowId of "
                             "another job, or the store was restarted)");
    return v.status();
  }
  GrowRecord g;
  std::istringstream in(v.value());
  std::string oldSize, newSize, owner, epoch;
  if (!std::getline(in, g.prefix) || !std::getline(in, oldSize) || !std::getline(in, newSize) ||
      !std::getline(in, owner) || !std::getline(in, epoch))
    return Status(Code::kRemoteError, "malformed grow record in the store");
  g.epoch = std::atoi(epoch.c_str());
  g.oldSize = std::atoi(oldSize.c_str());
  g.newSize = std::atoi(newSize.c_str());
  g.storeOwner = std::atoi(owner.c_str());
  return g;
}

}  // namespace

Status Communicator::openGrow(uint64_t token, int newSize) {
  if (newSize <= nranks_)
    return invalidArgument("newSize=" + std::to_string(newSize) + " on rank " + std::to_string(rank_) +
                           " must be larger than the communicator's " + std::to_string(nranks_) + " ranks");
  if (storeLost()) return abortRecord(Deadline());
  const std::string record = key("grow-" + tokenHex(token)) + "\n" + std::to_string(nranks_) + "\n" +
                             std::to_string(newSize) + "\n" + std::to_string(opts_.storeOwnerRank) + "\n" +
                             std::to_string(epoch_ + 1);
  auto v = store_->compareSet(growKey(token), "", record, graceDeadline());
  if (!v.isOk()) return v.status().code() == Code::kInvalidArgument ? v.status() : storeLoss(v.status());
  if (v.value() != record) return internalError("grow token collision");
  return Status::ok();
}

StatusOr<std::unique_ptr<Communicator>> Communicator::grow(uint64_t token, int newSize) {
  const Config& cfg = opts_.config;
  RecoveryNote note(this, "braidCommGrow");
  if (storeLost()) return abortRecord(Deadline());
  BRAID_ASSIGN_OR_RETURN(GrowRecord g, readGrow(*store_, token, growRecordDeadline(cfg.timeoutSec)));
  if (g.prefix.rfind(opts_.keyPrefix + "/", 0) != 0 || g.oldSize != nranks_)
    return invalidArgument("the grow id on rank " + std::to_string(rank_) +
                           " was made for another communicator (braidCommGetGrowId on a rank of this one)");
  if (newSize != g.newSize)
    return invalidArgument("newSize=" + std::to_string(newSize) + " on rank " + std::to_string(rank_) +
                           ", but the grow id was made for " + std::to_string(g.newSize));
  CommOptions child;
  child.config = childConfig();
  child.nonce = 0;
  child.authKey = opts_.authKey;
  child.storeOwnerRank = opts_.storeOwnerRank;
  child.keyPrefix = g.prefix;
  // An old rank that ended before it joined (after the vote that admitted the joiners, say)
  // never publishes its record there, and the grown communicator knows nothing of it yet:
  // this one's pid and gone/ mark fail the join at once, naming it. Old ranks keep their
  // numbers.
  std::vector<int> old(static_cast<size_t>(nranks_));
  std::iota(old.begin(), old.end(), 0);
  // The grown communicator keeps the watch; it stops referring to this one once joined.
  auto joining = std::make_shared<std::atomic<bool>>(true);
  child.joinWatch = [this, old, records = g.prefix + "/peer", joining,
                     next = std::make_shared<int64_t>(0)]() -> Status {
    if (!joining->load()) return Status::ok();
    return memberEnded(old, records, next.get(), "before it joined the grown communicator",
                       "agree and shrink without it, then grow");
  };
  auto made = create(store_, rank_, newSize, std::move(child));
  joining->store(false);
  if (made.isOk()) made.value()->epoch_ = g.epoch;
  return made;
}

StatusOr<std::unique_ptr<Communicator>> Communicator::joinGrow(std::shared_ptr<bootstrap::Store> store,
                                                               uint64_t token, int newSize, int rank,
                                                               CommOptions opts) {
  if (!store) return invalidArgument("store is null");
  Deadline deadline = growRecordDeadline(opts.config.timeoutSec);
  BRAID_ASSIGN_OR_RETURN(GrowRecord g, readGrow(*store, token, deadline));
  if (newSize != g.newSize)
    return invalidArgument("newSize=" + std::to_string(newSize) + ", but the grow id was made for " +
                           std::to_string(g.newSize));
  if (rank < g.oldSize || rank >= g.newSize)
    return invalidArgument("rank=" + std::to_string(rank) + " must be one of the new ranks [" +
                           std::to_string(g.oldSize) + ", " + std::to_string(g.newSize) + ")");
  // Each new rank is taken once: a second process with the same rank (or a grow id used
  // twice) is refused here instead of corrupting the new communicator.
  const std::string me = "pid " + std::to_string(getpid()) + " on " + bootstrap::hostId() + ", claim " +
                         std::to_string(bootstrap::randomNonce() % 1000000);
  auto claimed = store->compareSet(g.prefix + "/claim/" + std::to_string(rank), "", me, deadline);
  if (!claimed.isOk()) return claimed.status();
  if (claimed.value() != me)
    return invalidArgument("rank " + std::to_string(rank) + " of this grow is taken already (by " + claimed.value() +
                           "): a grow id admits each new rank once");
  opts.nonce = 0;
  opts.keyPrefix = g.prefix;
  opts.storeOwnerRank = g.storeOwner;
  auto made = create(std::move(store), rank, newSize, std::move(opts));
  if (made.isOk()) made.value()->epoch_ = g.epoch;
  return made;
}

}  // namespace braid::core
