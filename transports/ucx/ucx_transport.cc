#include "transports/ucx/ucx_transport.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <ucs/debug/log_def.h>
#include <uct/api/uct.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "common/random.h"
#include "common/tcp_pacing.h"
#include "common/ucx_env.h"
#include "transports/ucx/ucx_connection.h"

namespace braid::transport::ucx {
namespace {

constexpr uint32_t kBlobMagic = 0x58435542;  // "BUCX"
// 2: the receiver's challenge follows the address length, and hellos carry a proof.
constexpr uint32_t kBlobVersion = 2;
constexpr size_t kBlobHeaderBytes = 28 + kChallengeBytes;

// What UCX's own settings say, for error messages: a user who set UCX_TLS wants to see it.
std::string ucxSettings() {
  std::string s;
  for (const char* name : {"UCX_TLS", "UCX_NET_DEVICES"}) {
    if (const char* v = std::getenv(name)) s += std::string(s.empty() ? " (" : ", ") + name + "=" + v;
  }
  return s.empty() ? s : s + ")";
}

Status ucxError(const std::string& what, ucs_status_t st) {
  return Status(Code::kSystemError, "ucx: " + what + ": " + ucs_status_string(st) + ucxSettings());
}

// UCX's components and their memory domains, e.g. "tcp(tcp) posix(posix) ib(mlx5_0)";
// whether an RDMA-capable one (InfiniBand or RoCE through the "ib" component) has a device;
// and which of those devices software provides (Soft-RoCE's rxe).
struct Inventory {
  std::string summary;
  bool rdma = false;
  std::vector<std::string> softRoce;
};

Inventory inventory() {
  Inventory inv;
  uct_component_h* comps = nullptr;
  unsigned n = 0;
  if (uct_query_components(&comps, &n) != UCS_OK) return inv;
  for (unsigned i = 0; i < n; ++i) {
    uct_component_attr_t attr;
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(comps[i], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (!mds.empty() && uct_component_query(comps[i], &attr) != UCS_OK) continue;
    std::string devs;
    for (const auto& md : mds) devs += (devs.empty() ? "" : ",") + std::string(md.md_name);
    if (mds.empty()) continue;
    inv.summary += (inv.summary.empty() ? "" : " ") + std::string(attr.name) + "(" + devs + ")";
    if (!std::strcmp(attr.name, "ib")) {
      inv.rdma = true;
      std::vector<std::string> names;
      for (const auto& md : mds) names.emplace_back(md.md_name);
      for (std::string& d : softwareRdmaDevices(names)) inv.softRoce.push_back(std::move(d));
    }
  }
  uct_release_component_list(comps);
  return inv;
}

// UCX's description of an endpoint (its lanes among it), as ucp_ep_print_info writes it.
std::string endpointInfo(ucp_ep_h ep) {
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return "";
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  std::string out(text ? text : "", text ? len : 0);
  std::free(text);
  return out;
}

// Says at INFO which of UCX's transports carry a peer's messages ("ucx: rank 0 reaches rank
// 1 over rc_verbs, ud_verbs"), once per process for each set of them, so a job of many peers
// says it a few times, not once a peer.
void logLanes(int rank, int peer, const std::vector<std::string>& lanes) {
  if (lanes.empty()) return;
  std::string set;
  for (const std::string& l : lanes) set += (set.empty() ? "" : ", ") + l;
  static std::mutex mu;
  static std::set<std::string> said;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!said.insert(set).second) return;
  }
  BRAID_INFO("ucx: rank %d reaches rank %d over %s", rank, peer, set.c_str());
}

// braid's handler of UCX's log, installed once per process (the plugin stays loaded for the
// life of the process, as the handler must); it acts only on the thread that asks it to:
// - UCX 1.13 logs an ERROR ("no active messages transport to ...: posix/memory - no peer
//   failure handler ...") when an endpoint asks for peer error handling that none of the
//   transports to that peer offers; braid asks on purpose and then connects without it, so
//   that message is noise in every job over UCX's shared memory. While a thread makes that
//   attempt (tQuietSelection), the ERRORs UCX's endpoint selection logs from it are dropped.
// - While a thread starts UCX (tCapture), the warnings and errors UCX logs from it are kept
//   as well, for braid's error should the start fail: UCX says there why (a transport in
//   UCX_TLS that does not exist, and those that do), where its status alone says "No such
//   device".
// - While a thread makes an endpoint (tMakingEndpoint), the ERRORs of UCX's tcp connect
//   (sock.c, tcp_ep.c: "connect(...) failed: Connection refused", and advice to raise the
//   kernel's backlogs) are kept instead (tEndpointSaid): a peer that died after it published
//   its address refuses the connection, and braid reports that peer's failure itself;
//   should the endpoint fail for another reason, braid's error quotes them.
// - While a thread drives a worker of braid's outside an operation (tDrivingWorker), the
//   same tcp connect ERRORs go to braid's INFO log instead: an endpoint UCX connects in the
//   background (to a rank that died, as survivors close their old connections or ask which
//   peers failed) fails through its error callback, and braid's error names that rank.
// Everything else goes on to UCX's own logger.
thread_local bool tQuietSelection = false;
thread_local std::string* tCapture = nullptr;
thread_local bool tMakingEndpoint = false;
thread_local std::string tEndpointSaid;

void appendLine(std::string* to, const char* format, va_list ap) {
  if (!format || to->size() >= 1024) return;
  char line[512];
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(line, sizeof(line), format, copy);
  va_end(copy);
  if (n > 0) *to += (to->empty() ? "" : "; ") + std::string(line);
}

ucs_log_func_rc_t logHandler(const char* file, unsigned, const char*, ucs_log_level_t level,
                             const ucs_log_component_config_t*, const char* format, va_list ap) {
  if (level == UCS_LOG_LEVEL_ERROR && file) {
    if (tQuietSelection && std::strstr(file, "select.c")) return UCS_LOG_FUNC_RC_STOP;
    const bool tcpConnect = std::strstr(file, "sock.c") || std::strstr(file, "tcp_ep.c");
    if (tMakingEndpoint && tcpConnect) {
      appendLine(&tEndpointSaid, format, ap);
      return UCS_LOG_FUNC_RC_STOP;
    }
    if (tDrivingWorker > 0 && tcpConnect) {
      std::string said;
      appendLine(&said, format, ap);
      BRAID_INFO("ucx: UCX said: %s", said.c_str());
      return UCS_LOG_FUNC_RC_STOP;
    }
  }
  if (tCapture && level <= UCS_LOG_LEVEL_WARN) appendLine(tCapture, format, ap);
  return UCS_LOG_FUNC_RC_CONTINUE;
}

void installLogHandler() {
  static std::once_flag once;
  std::call_once(once, [] { ucs_log_push_handler(&logHandler); });
}

// What UCX logs on this thread while one lives (see logHandler), and an error that quotes it.
class LogCapture {
 public:
  LogCapture() {
    installLogHandler();
    outer_ = tCapture;
    tCapture = &said_;
  }
  ~LogCapture() { tCapture = outer_; }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  Status error(const std::string& what, ucs_status_t st) const {
    Status s = ucxError(what, st);
    return said_.empty() ? s : Status(s.code(), s.message() + "; UCX said: " + said_);
  }

 private:
  std::string said_;
  std::string* outer_ = nullptr;
};

// After a round of progress that found nothing to do, a brief pause, so that a teardown
// waiting on its own thread leaves the cores to the communicators still running.
void pauseIfIdle(unsigned progressed) {
  if (progressed == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

// Drives `worker` until request `r` completes or `seconds` pass; true if it completed.
bool awaitRequest(ucp_worker_h worker, void* r, double seconds) {
  DrivingWorker driving;
  Deadline d = Deadline::after(seconds);
  while (ucp_request_check_status(r) == UCS_INPROGRESS && !d.expired()) pauseIfIdle(ucp_worker_progress(worker));
  return ucp_request_check_status(r) != UCS_INPROGRESS;
}

// Consumes messages nobody will receive any more (the last credit a peer sent as this side
// was closing, a stranger's traffic), so the worker goes without UCX warning about them.
void drainUnexpected(ucp_worker_h worker) {
  DrivingWorker driving;
  std::vector<char> scratch;
  for (int i = 0; i < 4096; ++i) {
    ucp_worker_progress(worker);
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker, 0, 0, 1, &info);
    if (!msg) return;
    scratch.resize(std::max<size_t>(info.length, 1));
    ucp_request_param_t param;
    param.op_attr_mask = 0;
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(worker, scratch.data(), info.length, msg, &param);
    if (UCS_PTR_IS_PTR(r)) {
      if (!awaitRequest(worker, r, 0.5)) ucp_request_cancel(worker, r);
      ucp_request_free(r);
    }
  }
}

// The rendezvous threshold braid asks of UCX when the user did not set UCX_RNDV_THRESH, or
// "" to keep UCX's own choice. With an RDMA device UCX's model of its lanes decides. Without
// one, UCX's automatic threshold sends most of braid's messages (up to a 256 KiB slot) by
// rendezvous, which costs a round trip per message: over tcp an extra request before the
// data, over shared memory a wake-up of each side in turn, ruinous when ranks outnumber
// cores. Measured (docs/performance.md, "UCX"): over tcp alone, eager up to 128 KiB and
// rendezvous above it. UCX 1.13's tcp copies a rendezvous message out of its receive
// segment as it does an eager one, but only once the receive is posted; an eager message
// that comes first is copied into UCX's unexpected queue and again into place. At 4 ranks
// and 1 MiB (256 KiB messages) allgather took 0.73 of the time with eager up to 256 KiB,
// allreduce 0.87; messages of 128 KiB gained nothing by it (a 2-rank allreduce of 256 KiB
// took 1.07x as long). Where shared memory is in the set, eager up to 64 KiB (inclusive:
// the mesh's and recursive doubling's messages are often exactly that) and single-copy
// (cma) rendezvous above it. UCX's threshold is the first size that goes by rendezvous.
std::string rndvThreshold(bool rdma) {
  if (std::getenv("UCX_RNDV_THRESH") || rdma) return "";
  return ucxTlsMayUseSharedMemory(std::getenv("UCX_TLS")) ? "65537" : "131073";
}

// The receive segment of UCX's tcp transport braid asks for when the user did not set
// UCX_TCP_RX_SEG_SIZE, or "". UCX's tcp receives into segments of its own (64 KiB by
// default) and copies each message out of them; a message larger than a segment travels
// in fragments, each its own receive and hand-over; 512 KiB holds a whole slot (256 KiB).
// Measured (docs/performance.md, "UCX"):
// best of six alternating runs over UCX_TLS=tcp, 16 MiB, one-way sendrecv 4.18 -> 5.64 GB/s,
// allgather 4 ranks 0.93 -> 1.08, allreduce 4 ranks 0.79 -> 0.88 busbw; 1 MiB segments
// were slower again (sendrecv 3.99).
// Only where tcp is among UCX's transports (UCX warns of a setting no transport took) and
// there is no RDMA device (whose transports UCX's own figures suit).
std::string tcpRxSegment(bool rdma) {
  if (std::getenv("UCX_TCP_RX_SEG_SIZE") || rdma) return "";
  return ucxTlsMayUseTcp(std::getenv("UCX_TLS")) ? "512K" : "";
}

// Over tcp alone (no shared-memory transport in UCX_TLS, no RDMA device), with slots that
// post their receives on demand, payloads to reduce are reduced as they arrive
// (ArrivalLanding), and braid then sends every message of up to a slot eagerly: a receive
// posted before its message comes (announced, UcxRecvConnection::expectReduce, or peeked)
// is reduced straight out of the segments the socket was read into, one pass over the
// payload where a receive into a slot takes two, and a rendezvous's round trip is spared.
// Measured (docs/performance.md, "UCX's tcp: payloads reduced as they arrive"), paired
// rounds against rendezvous above 128 KiB into slots: allreduce 1.15-1.47x at 4 ranks and
// 0.94-1.13x at 2; reduction on arrival with the rendezvous kept was mixed (0.90 at 2 ranks
// and 64 MiB). BRAID_UCX_REDUCE_ON_ARRIVAL=0 keeps the old way.
bool arrivalOverTcp(bool rdma, size_t slotBytes) {
  const char* v = std::getenv("BRAID_UCX_REDUCE_ON_ARRIVAL");
  if (v && !std::strcmp(v, "0")) return false;
  return !rdma && !ucxTlsMayUseSharedMemory(std::getenv("UCX_TLS")) && receivesOnDemand(slotBytes);
}

// Progresses every worker once (then pauseIfIdle).
void progressAll(std::map<int, std::unique_ptr<Worker>>& workers) {
  DrivingWorker driving;
  unsigned n = 0;
  for (auto& [channel, w] : workers) n += ucp_worker_progress(w->worker);
  pauseIfIdle(n);
}

// Waits for what the workers' torn-down connections left with UCX (Worker::leftovers): up
// to 2 s for every peer together, none for a peer already known to have failed or stopped.
// A peer whose messages are still not taken then is marked stalled, so its endpoint closes
// by force (which fails its rendezvous sends), and what UCX can cancel is cancelled. Waited
// for here rather than in each connection's destructor, the caller's communicator goes at
// once: after a failed collective, a rendezvous send whose receive the peer has cancelled
// waits until the peer's worker goes, and a shrink that waited 2 s for each such peer in
// turn kept the shrunk communicator's first collective waiting on it past the timeout.
void settleLeftovers(std::map<int, std::unique_ptr<Worker>>& workers, PeerBook& peers) {
  auto pending = [&](bool liveOnly) {
    for (auto& [channel, w] : workers)
      for (auto& l : w->leftovers)
        if (l->pending() && !(liveOnly && peers.isStalled(l->peer))) return true;
    return false;
  };
  Deadline d = Deadline::after(2.0);
  while (pending(true) && !d.expired()) progressAll(workers);
  bool cancelled = false;
  for (auto& [channel, w] : workers) {
    for (auto& l : w->leftovers) {
      if (!l->pending()) continue;
      if (l->waitsForPeer()) {
        if (!peers.isStalled(l->peer))
          BRAID_INFO("ucx: rank %d took no message for 2 s at teardown; closing to it by force", l->peer);
        peers.markStalled(l->peer);
        if (l->ep) l->ep->stuck = true;
      }
      l->cancel(w->worker);
      cancelled = true;
    }
  }
  if (!cancelled) return;
  Deadline shortly = Deadline::after(0.2);
  while (pending(false) && !shortly.expired()) progressAll(workers);
}

// Flushes `ep`: true once everything sent on it has completed, false if that takes longer
// than `seconds` (the request is then left to the forced close that follows, which fails it).
bool flushed(Worker* w, ucp_ep_h ep, double seconds) {
  ucp_request_param_t param;
  param.op_attr_mask = 0;
  ucs_status_ptr_t r = ucp_ep_flush_nbx(ep, &param);
  if (r == nullptr) return true;
  if (UCS_PTR_IS_ERR(r)) return false;
  const bool done = awaitRequest(w->worker, r, seconds);
  ucp_request_free(r);  // released now, or by UCX once the forced close completes it
  return done;
}

// Closes a transport's endpoints, then its workers and its UCP context. Each endpoint is
// closed gracefully, so what this side still owes a peer (its last credit message, a
// message still in UCX's send queue) leaves before the socket does; by force if the peer is
// gone or stopped taking messages. Whether it still takes them is learnt by flushing first:
// a graceful close that cannot finish leaves its sends on the endpoint, and UCX aborts the
// process when the worker goes with them (a rendezvous send to a stopped peer waits for it
// forever). A forced close fails them instead.
void closeWorkers(std::map<int, std::unique_ptr<Worker>>& workers, ucp_context_h context, PeerBook& peers) {
  settleLeftovers(workers, peers);
  DrivingWorker driving;
  for (auto& [channel, w] : workers) {
    for (auto& e : w->endpoints) {
      bool force = e->failure != UCS_OK || e->stuck || peers.isStalled(e->peer);
      if (!force && !flushed(w.get(), e->ep, 1.0)) {
        BRAID_INFO("ucx: rank %d did not flush in 1 s at teardown; closing to it by force", e->peer);
        peers.markStalled(e->peer);
        force = true;
      }
      ucp_request_param_t param;
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      ucs_status_ptr_t r = ucp_ep_close_nbx(e->ep, &param);
      if (UCS_PTR_IS_PTR(r)) {
        if (!awaitRequest(w->worker, r, 1.0)) ucp_request_cancel(w->worker, r);
        ucp_request_free(r);
      }
    }
    drainUnexpected(w->worker);
    ucp_worker_destroy(w->worker);
    if (w->ready >= 0) close(w->ready);
    // The forced closes failed what UCX still held, and a request the worker took with it
    // calls back no more: the memory the callbacks pointed into can go.
    w->leftovers.clear();
  }
  if (context) ucp_cleanup(context);
}

// The teardowns of destroyed transports, each on a thread of its own. The process waits
// for those still running when it exits (before UCX's own library goes), and before it
// forks: a child forked while one of them is inside UCX would inherit UCX's locks held
// and its state half changed (the conformance suite's forked ranks then never met).
class Teardowns {
 public:
  Teardowns() { pthread_atfork(&Teardowns::beforeFork, nullptr, nullptr); }
  void start(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    forgetIfForked();
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    running_.push_back({std::thread([fn = std::move(fn), done] {
                          fn();
                          done->store(true);
                        }),
                        done});
  }
  ~Teardowns() { waitAll(); }

  void waitAll() {
    std::lock_guard<std::mutex> lock(mu_);
    forgetIfForked();
    for (Running& r : running_) r.thread.join();
    running_.clear();
  }

 private:
  struct Running {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  static void beforeFork();
  // In a child forked while teardowns ran (or had run) in its parent: those threads are the
  // parent's, not this process's to join.
  void forgetIfForked() {
    if (getpid() == pid_) return;
    if (!running_.empty()) new std::vector<Running>(std::move(running_));  // left to the parent
    running_.clear();
    pid_ = getpid();
  }
  std::mutex mu_;
  std::vector<Running> running_;
  pid_t pid_ = getpid();
};

Teardowns& teardowns() {
  static Teardowns t;
  return t;
}

void Teardowns::beforeFork() { teardowns().waitAll(); }

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(const TransportConfig& cfg) : cfg_(cfg) {}
  ~UcxTransport() override;

  Status init();
  Status startContext();
  const char* name() const override { return "ucx"; }
  std::string describe() const override {
    return std::string("UCX ") + ucxVersion() + "; " + (inv_.summary.empty() ? "no devices" : inv_.summary) +
           (inv_.rdma ? "; RDMA" : "; no RDMA device") +
           (rndvThresh_.empty() ? ""
                                : "; eager up to " + std::to_string(eagerMaxUnder(rndvThresh_.c_str(), 0) / 1024) +
                                      " KiB (UCX_RNDV_THRESH=" + rndvThresh_ + ")") +
           (tcpRxSeg_.empty() ? "" : "; tcp receives in " + tcpRxSeg_ + " segments (UCX_TCP_RX_SEG_SIZE)") +
           (uncheckUd_ ? "; UD destination GIDs unchecked on Soft-RoCE (UCX_UD_ETH_DGID_CHECK)" : "") +
           (netDevices_.empty() ? "" : "; network devices " + netDevices_ + " (UCX_NET_DEVICES)");
  }

  int canConnect(const PeerInfo& local, const PeerInfo& remote) const override {
    if (local.nonce != remote.nonce) return 0;
    peers_->localHost = local.hostId;
    peers_->ids[remote.rank] = {remote.hostId, remote.pid};
    // Across hosts UCX beats tcp only when it has RDMA to offer; on one host shared
    // memory (and within a process, loopback) stay ahead.
    if (local.hostId != remote.hostId) return inv_.rdma ? 50 : 5;
    return 5;
  }

  StatusOr<std::unique_ptr<Connection>> createRecv(int peer, int channel, std::string* blob) override;
  StatusOr<std::unique_ptr<Connection>> connectSend(int peer, int channel, const std::string& blob) override;
  Status establish(Deadline deadline) override;
  // A failed peer gets no flush and no drain at teardown: its endpoints close by force at
  // once, and its connections cancel what UCX holds for it without waiting for it to go.
  void peerFailed(int rank) override { peers_->markStalled(rank); }

  // An endpoint with peer error handling hears of its peer's end (tcp's socket closing) only
  // as its worker is driven: a survivor whose call ended on another rank's failure drives
  // its workers no more, so they are driven here first. Nothing may land in the caller's
  // memory then (its call returned): the receives posted there are cancelled first, and a
  // worker with one UCX is still landing is not driven.
  bool sawPeerFail(int rank) override {
    DrivingWorker driving;
    bool seen = false;
    for (auto& [channel, w] : workers_) {
      bool safe = true;
      for (UcxRecvConnection* c : w->recvs) safe &= c->dropCallerLandings();
      if (safe) w->progress();
      for (const auto& e : w->endpoints) seen |= e->peer == rank && e->watched && e->failure != UCS_OK;
    }
    return seen;
  }

 private:
  StatusOr<Worker*> worker(int channel);
  StatusOr<Endpoint*> endpoint(Worker* w, int peer, const std::string& address);
  // A peer that died after it published its address is as unreachable to ucp_ep_create as
  // one that no transport of UCX_TLS leads to: the communicator's check (a pid, the store's
  // mark of a closed connection) tells the two apart within a second, and a dead peer is
  // reported as it says, a remote error naming that rank, so that the survivors can recover.
  Status peerFailureOr(Status unreachable);
  static void onError(void* arg, ucp_ep_h ep, ucs_status_t status);

  TransportConfig cfg_;
  Inventory inv_;
  std::string rndvThresh_;  // what braid set UCX_RNDV_THRESH to, or "" (UCX's own)
  std::string tcpRxSeg_;    // what braid set UCX_TCP_RX_SEG_SIZE to, or "" (the user's)
  bool uncheckUd_ = false;  // UD destination GIDs unchecked: a Soft-RoCE device (ucx_env.h)
  ucp_context_h context_ = nullptr;
  std::map<int, std::unique_ptr<Worker>> workers_;
  // Who each peer is, as canConnect saw it, and which stopped taking messages (Worker::peers);
  // shared with the teardown, which may outlive this object (closeWorkers).
  std::shared_ptr<PeerBook> peers_ = std::make_shared<PeerBook>();
  // Per worker, the remote worker address each endpoint leads to.
  std::map<std::pair<Worker*, std::string>, Endpoint*> byAddress_;
  struct PendingRecv {
    UcxRecvConnection* conn;
    Worker* worker;
    int peer;
  };
  struct PendingSend {
    UcxSendConnection* conn;
    int peer;
  };
  std::vector<PendingRecv> pendingRecv_;
  std::vector<PendingSend> pendingSend_;
  // The sockets this process had before its first worker, when the kernel paces tcp: UCX's
  // tcp opens its own and sets no congestion control (unpaceUcxSockets).
  bool watchSockets_ = false;
  std::set<uint64_t> socketsBefore_;
  void unpaceUcxSockets(const std::set<uint64_t>& before);
  // Whether every peer scored so far shares this host.
  bool allPeersOnThisHost() const;
  UcxRecvConnection::Arrival reducesOnArrival(int peer) const;
  // UCX_NET_DEVICES as braid sets it for this context, or "" (netDevices).
  std::string netDevices_;
  std::string netDevices() const;
};

UcxTransport::~UcxTransport() {
  // On a thread of its own, which goes on driving these workers while it waits (closeWorkers):
  // the peers tear down their side of the same communicator when they get to it, which may
  // be a second later (after a grow or a shrink, a peer busy making the new communicator),
  // and their flushes wait for this side's workers as this side's wait for theirs. Torn down
  // here, in turn, a side that was first waited a second for each peer still busy, and a
  // side that came later a second for each peer already gone, while its caller, who had
  // just made the new communicator, kept its new peers waiting (over UCX, a grow by a grow
  // id failed at the first broadcast in a fifth of the runs with BRAID_TIMEOUT=2).
  auto workers = std::make_shared<std::map<int, std::unique_ptr<Worker>>>(std::move(workers_));
  teardowns().start([workers, context = context_, peers = peers_] { closeWorkers(*workers, context, *peers); });
}

// UCX 1.13's shared-memory transports (mm: posix, sysv, xpmem) keep a message's length in 16
// bits: with a segment above 65535 bytes a message of exactly 64 KiB arrives with length 0
// (and with a segment of exactly 65536, UCX asserts). Measured with sendrecv_perf over
// UCX_TLS=sm,self: UCX_POSIX_SEG_SIZE / UCX_SYSV_SEG_SIZE / UCX_MM_SEG_SIZE of 65800 and
// 131072 fail, 65535 works. So a larger setting is refused at init, naming it, rather than
// met later as a message that came empty. A size in UCX's syntax: digits, then an optional
// binary unit (b, k, m, g), case ignored.
Status checkSharedMemorySegments() {
  for (const char* name : {"UCX_MM_SEG_SIZE", "UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE", "UCX_XPMEM_SEG_SIZE"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    errno = 0;
    unsigned long long n = std::strtoull(v, &end, 10);
    if (errno || end == v) continue;  // UCX itself reports a value it cannot read
    unsigned long long unit = 1;
    switch (std::tolower(static_cast<unsigned char>(*end))) {
      case 'k': unit = 1ull << 10; break;
      case 'm': unit = 1ull << 20; break;
      case 'g': unit = 1ull << 30; break;
      default: break;
    }
    if (n > 65535 || n * unit > 65535) {
      return Status(Code::kInvalidArgument,
                    std::string("ucx: ") + name + "=" + v +
                        " is above 65535 bytes, which UCX's shared-memory transports cannot carry in one "
                        "segment (a 64 KiB message would arrive empty); set 65535 or less, or leave it unset");
    }
  }
  return Status::ok();
}

// UCX's context is the expensive part of an instance (tens of milliseconds, file
// descriptors, shared memory). Scores need only the inventory, so without an RDMA device,
// where UCX wins no peer unless BRAID_TRANSPORT asks for it, the context waits for the first
// connection; with one, it starts here, so a UCX that cannot start is known before the
// transports are chosen and the job goes on over tcp.
Status UcxTransport::init() {
  BRAID_RETURN_IF_ERROR(checkSharedMemorySegments());
  inv_ = inventory();
  rndvThresh_ = rndvThreshold(inv_.rdma);
  tcpRxSeg_ = tcpRxSegment(inv_.rdma);
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  uncheckUd_ = ucxUncheckUdDestinations(!inv_.softRoce.empty(), major, minor);
  // Payloads reduced on arrival over tcp alone: a slot's message eager (arrivalOverTcp). The
  // user's own setting stands.
  if (arrivalOverTcp(inv_.rdma, cfg_.slotBytes) && !std::getenv("UCX_RNDV_THRESH"))
    rndvThresh_ = std::to_string(cfg_.slotBytes + 1);
  return inv_.rdma ? startContext() : Status::ok();
}

Status UcxTransport::startContext() {
  if (context_) return Status::ok();
  LogCapture log;
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return log.error("reading its configuration", st);
  std::vector<std::pair<const char*, std::string>> settings;
  if (!rndvThresh_.empty()) settings.emplace_back("RNDV_THRESH", rndvThresh_);
  // A setting UCP does not know is handed to every transport's configuration that has a
  // field of that name: tcp's is RX_SEG_SIZE (UCX_TCP_RX_SEG_SIZE in the environment).
  if (!tcpRxSeg_.empty()) settings.emplace_back("RX_SEG_SIZE", tcpRxSeg_);
  // Soft-RoCE: without this UCX's UD drops every packet to an IPv4-mapped GID (ucx_env.h).
  // A setting UCP does not know goes to the transports' tables; this one is in the table
  // that ud_verbs and ud_mlx5 share, whose names start "UD_" (UCX_UD_ETH_DGID_CHECK).
  if (uncheckUd_) {
    settings.emplace_back("UD_ETH_DGID_CHECK", "n");
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true))
      BRAID_INFO("ucx: rank %d: %s is Soft-RoCE: UCX's check of each UD packet's destination GID is off "
                 "(UCX_UD_ETH_DGID_CHECK=y keeps it)",
                 cfg_.rank, inv_.softRoce.front().c_str());
  }
  netDevices_ = netDevices();
  if (!netDevices_.empty()) {
    settings.emplace_back("NET_DEVICES", netDevices_);
    static std::atomic<bool> logged{false};  // once per process: every communicator does the same
    if (!logged.exchange(true))
      BRAID_INFO("ucx: rank %d: UCX's network devices: %s (UCX_NET_DEVICES chooses others)", cfg_.rank,
                 netDevices_.c_str());
  }
  for (const auto& [name, value] : settings) {
    st = ucp_config_modify(config, name, value.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return log.error(std::string("setting ") + name + "=" + value, st);
    }
  }
  ucp_params_t params;
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;  // workers of different channels run on different threads
  params.name = "braid";
  st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (st != UCS_OK) {
    context_ = nullptr;
    return log.error("ucp_init", st);
  }
  return Status::ok();
}

StatusOr<Worker*> UcxTransport::worker(int channel) {
  auto it = workers_.find(channel);
  if (it != workers_.end()) return it->second.get();
  BRAID_RETURN_IF_ERROR(startContext());
  const bool paced = congestionControlPaces(tcpCongestionControl());
  std::set<uint64_t> before;
  if (paced) before = openSocketInodes();
  if (workers_.empty() && paced) {
    watchSockets_ = true;
    socketsBefore_ = before;
  }
  auto w = std::make_unique<Worker>();
  ucp_worker_params_t wp;
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t st;
  {
    LogCapture log;
    st = ucp_worker_create(context_, &wp, &w->worker);
    if (st != UCS_OK) return log.error("creating a worker", st);
  }
  // Its listeners leave the pacing before its address leaves this process, so that every
  // connection they accept starts off it (unpaceUcxSockets).
  if (paced) unpaceUcxSockets(before);
  if (ucp_worker_get_efd(w->worker, &w->efd) != UCS_OK) w->efd = -1;  // then waiters yield
  w->ready = eventfd(1, EFD_CLOEXEC);
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  st = ucp_worker_get_address(w->worker, &addr, &len);
  if (st != UCS_OK) {
    ucp_worker_destroy(w->worker);
    return ucxError("getting the worker's address", st);
  }
  w->address.assign(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(w->worker, addr);
  w->peers = peers_.get();
  // UCX's own choice of threshold (an RDMA device's, or "auto") is not known here: then
  // only messages up to 64 KiB, eager under every threshold braid sets, go ahead.
  w->eagerMaxBytes = eagerMaxUnder(rndvThresh_.empty() ? std::getenv("UCX_RNDV_THRESH") : rndvThresh_.c_str(),
                                   64 * 1024);
  Worker* raw = w.get();
  workers_[channel] = std::move(w);
  return raw;
}

void UcxTransport::onError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* e = static_cast<Endpoint*>(arg);
  if (e->failure == UCS_OK) {
    e->failure = status;
    BRAID_INFO("ucx: endpoint to rank %d failed: %s", e->peer, ucs_status_string(status));
  }
}

Status UcxTransport::peerFailureOr(Status unreachable) {
  if (!cfg_.abortCheck) return unreachable;
  const Deadline settle = Deadline::after(1.0);
  for (;;) {
    Status failed = cfg_.abortCheck();
    if (!failed.isOk()) return failed;
    if (settle.expired()) return unreachable;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

StatusOr<Endpoint*> UcxTransport::endpoint(Worker* w, int peer, const std::string& address) {
  auto key = std::make_pair(w, address);
  auto it = byAddress_.find(key);
  if (it != byAddress_.end()) return it->second;
  auto e = std::make_unique<Endpoint>();
  e->peer = peer;
  ucp_ep_params_t ep;
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxTransport::onError;
  ep.err_handler.arg = e.get();
  installLogHandler();
  tMakingEndpoint = true;
  tEndpointSaid.clear();
  // A peer of this host where UCX_TLS lets UCX use shared memory: asked for peer error
  // handling, which UCX 1.13's posix, sysv and cma do not offer, UCX takes tcp over loopback
  // instead (2.1-2.2 GB/s where shared memory gave 4.8-5.9 for a 2-rank allreduce of 1-8
  // MiB), so it is not asked; braid's own liveness checks watch a peer of this host.
  const auto id = peers_->ids.find(peer);
  const bool sharedMemory = id != peers_->ids.end() && id->second.first == peers_->localHost &&
                            ucxTlsMayUseSharedMemory(std::getenv("UCX_TLS"));
  ucs_status_t st = UCS_ERR_UNREACHABLE;
  if (!sharedMemory) {
    tQuietSelection = true;
    st = ucp_ep_create(w->worker, &ep, &e->ep);
    tQuietSelection = false;
  }
  e->watched = st == UCS_OK;
  if (st == UCS_ERR_UNREACHABLE) {
    // No transport to this peer offers peer error handling (UCX 1.13's posix, sysv and
    // cma do not), or shared memory is wanted: connect without it.
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    st = ucp_ep_create(w->worker, &ep, &e->ep);
    if (st == UCS_OK && !sharedMemory) BRAID_INFO("ucx: rank %d reached without peer error handling", peer);
  }
  tMakingEndpoint = false;
  if (st == UCS_OK) {
    const std::vector<std::string> lanes = ucxLaneTransports(endpointInfo(e->ep));
    e->hearsPeerEnd = e->watched && !ucxLanesOverRdma(lanes);
    logLanes(cfg_.rank, peer, lanes);
  }
  if (st != UCS_OK) {
    return peerFailureOr(Status(Code::kSystemError, "ucx: cannot reach rank " + std::to_string(peer) + ": " +
                                                        ucs_status_string(st) + ucxSettings() +
                                                        (tEndpointSaid.empty() ? "" : "; UCX said: " + tEndpointSaid)));
  }
  Endpoint* raw = e.get();
  w->endpoints.push_back(std::move(e));
  byAddress_[key] = raw;
  return raw;
}

StatusOr<std::unique_ptr<Connection>> UcxTransport::createRecv(int peer, int channel, std::string* blob) {
  BRAID_ASSIGN_OR_RETURN(Worker * w, worker(channel));
  auto conn = std::make_unique<UcxRecvConnection>(cfg_, peer, w);
  conn->setReducesOnArrival(reducesOnArrival(peer));
  const std::string challenge = randomString(kChallengeBytes);
  BRAID_RETURN_IF_ERROR(conn->start(channel, challenge));
  pendingRecv_.push_back(PendingRecv{conn.get(), w, peer});
  // [magic][version][nonce][rank][channel][address length][challenge][address]
  std::string b(28, '\0');
  const uint32_t len = static_cast<uint32_t>(w->address.size());
  const int32_t rank = cfg_.rank, ch = channel;
  std::memcpy(&b[0], &kBlobMagic, 4);
  std::memcpy(&b[4], &kBlobVersion, 4);
  std::memcpy(&b[8], &cfg_.nonce, 8);
  std::memcpy(&b[16], &rank, 4);
  std::memcpy(&b[20], &ch, 4);
  std::memcpy(&b[24], &len, 4);
  b += challenge;
  b += w->address;
  *blob = std::move(b);
  return std::unique_ptr<Connection>(std::move(conn));
}

StatusOr<std::unique_ptr<Connection>> UcxTransport::connectSend(int peer, int channel, const std::string& blob) {
  uint32_t magic = 0, version = 0, len = 0;
  uint64_t nonce = 0;
  int32_t rank = -1, ch = -1;
  auto malformed = [&](const std::string& why) {
    return invalidArgument("ucx: malformed address from rank " + std::to_string(peer) + ": " + why);
  };
  if (blob.size() < kBlobHeaderBytes) return malformed(std::to_string(blob.size()) + " bytes");
  std::memcpy(&magic, &blob[0], 4);
  std::memcpy(&version, &blob[4], 4);
  std::memcpy(&nonce, &blob[8], 8);
  std::memcpy(&rank, &blob[16], 4);
  std::memcpy(&ch, &blob[20], 4);
  std::memcpy(&len, &blob[24], 4);
  if (magic != kBlobMagic) return malformed("not a ucx address");
  if (version != kBlobVersion) return malformed("version " + std::to_string(version));
  if (len != blob.size() - kBlobHeaderBytes) return malformed("length " + std::to_string(len) + " of " + std::to_string(blob.size()));
  if (rank != peer || ch != channel) {
    return malformed("it is rank " + std::to_string(rank) + "'s, channel " + std::to_string(ch));
  }
  if (nonce != cfg_.nonce) return invalidArgument("ucx: rank " + std::to_string(peer) + " belongs to another job");
  BRAID_ASSIGN_OR_RETURN(Worker * w, worker(channel));
  BRAID_ASSIGN_OR_RETURN(Endpoint * e, endpoint(w, peer, blob.substr(kBlobHeaderBytes)));
  auto conn = std::make_unique<UcxSendConnection>(cfg_, peer, w, e);
  BRAID_RETURN_IF_ERROR(conn->sendHello(channel, blob.substr(28, kChallengeBytes)));
  pendingSend_.push_back(PendingSend{conn.get(), peer});
  return std::unique_ptr<Connection>(std::move(conn));
}

Status UcxTransport::establish(Deadline deadline) {
  // Every sender greets its receiver; a receiver opens an endpoint back to each sender so
  // that UCX tells it when that sender fails. A sender that died before its hello has no
  // endpoint to fail: the communicator's check names it (its pid, its store mark).
  AbortCheckPacer aborted(cfg_.abortCheck);
  while (!pendingRecv_.empty() || !pendingSend_.empty()) {
    for (size_t i = 0; i < pendingSend_.size();) {
      BRAID_ASSIGN_OR_RETURN(bool sent, pendingSend_[i].conn->helloSent());
      if (sent) {
        pendingSend_.erase(pendingSend_.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    for (size_t i = 0; i < pendingRecv_.size();) {
      PendingRecv& p = pendingRecv_[i];
      BRAID_ASSIGN_OR_RETURN(std::string address, p.conn->hello());
      if (address.empty()) {
        ++i;
        continue;
      }
      BRAID_ASSIGN_OR_RETURN(Endpoint * e, endpoint(p.worker, p.peer, address));
      p.conn->watch(e);
      pendingRecv_.erase(pendingRecv_.begin() + static_cast<long>(i));
    }
    if (pendingRecv_.empty() && pendingSend_.empty()) break;
    if (deadline.expired()) {
      if (!pendingRecv_.empty()) {
        const PendingRecv& p = pendingRecv_.front();
        const std::string& refused = p.conn->refusal();
        return Status(Code::kTimeout,
                      "ucx: no hello from rank " + std::to_string(p.peer) + " before the deadline" +
                          (refused.empty() ? "" : " (a hello claiming to be it was refused: " + refused + ")"),
                      p.peer);
      }
      int peer = pendingSend_.front().peer;
      return Status(Code::kTimeout, "ucx: hello to rank " + std::to_string(peer) + " not delivered before the deadline",
                    peer);
    }
    BRAID_RETURN_IF_ERROR(aborted.poll());
    for (auto& [channel, w] : workers_) w->progress();
  }
  if (watchSockets_) {
    watchSockets_ = false;
    unpaceUcxSockets(socketsBefore_);
    socketsBefore_.clear();
  }
  return Status::ok();
}

// UCX's tcp connections within one host go as braid's own do (tcp_transport.cc): off a
// congestion control that paces, which held a stream over loopback below what the kernel
// could copy and, with more data queued, had it resend and reorder segments
// (docs/performance.md, "UCX over tcp and the kernel's pacing"). UCX gives no hold of its
// sockets, so they are found as the ones opened since `before`. That is done twice. A new
// worker's listeners are taken off as soon as UCX has opened them, when every peer shares
// this host, so that every connection they accept starts off it: one accepted from a
// listener still pacing keeps the pacing, even when accept() comes after the switch.
// Otherwise they keep the kernel's choice for the peers on other hosts. Then at the end of
// establish the connections opened since the first worker, to a sender and by this side,
// are taken off one by one.
void UcxTransport::unpaceUcxSockets(const std::set<uint64_t>& before) {
  std::string had, now;
  const int n = unpaceNewLocalSockets(before, allPeersOnThisHost(), &had, &now);
  static std::atomic<bool> logged{false};  // once per process: every communicator does the same
  if (n > 0 && !logged.exchange(true))
    BRAID_INFO("ucx: rank %d: UCX's tcp connections within this host use %s, not the kernel's %s, which paces them",
               cfg_.rank, now.c_str(), had.c_str());
}

// Which payloads from `peer` are reduced as they arrive (ArrivalLanding). Where UCX moves
// them over tcp, which copies every payload out of a receive segment of its own, all of
// them: the reduction reads them there instead. Where UCX may use shared memory to the peer,
// only eager ones, which UCX copies out of its shared segment: its single-copy rendezvous
// lands a larger payload in place, which a generic datatype would forgo (measured at 2
// ranks: 0.70-0.87 of the busbw from 256 KiB up, docs/performance.md). None with an RDMA
// device. BRAID_UCX_REDUCE_ON_ARRIVAL=0 says none, 1 all.
UcxRecvConnection::Arrival UcxTransport::reducesOnArrival(int peer) const {
  using Arrival = UcxRecvConnection::Arrival;
  if (const char* v = std::getenv("BRAID_UCX_REDUCE_ON_ARRIVAL"); v && (!std::strcmp(v, "0") || !std::strcmp(v, "1")))
    return v[0] == '1' ? Arrival::kAll : Arrival::kOff;
  if (inv_.rdma) return Arrival::kOff;
  if (!ucxTlsMayUseSharedMemory(std::getenv("UCX_TLS"))) return Arrival::kAll;
  auto it = peers_->ids.find(peer);
  const bool remote = it != peers_->ids.end() && it->second.first != peers_->localHost;
  return remote ? Arrival::kAll : Arrival::kEagerOnly;
}

bool UcxTransport::allPeersOnThisHost() const {
  for (const auto& [rank, id] : peers_->ids)
    if (id.first != peers_->localHost) return false;
  return true;
}

// The network devices braid gives UCX when the user did not (common/ucx_env.h,
// ucxNetDevices): with an RDMA device UCX's own choice stands, and without tcp among its
// transports there is nothing to choose. The context starts at the first connection, when
// canConnect has seen every peer. Measured: 4 ranks on one host over UCX_TLS=tcp,self, a
// bridge with an address added before the job and deleted 4 s into it; with UCX's own
// choice the next allreduce waited until BRAID_TIMEOUT (and new communicators failed to
// connect, "Connection refused", while bridges came and went), over the loopback
// interface every call went on.
std::string UcxTransport::netDevices() const {
  if (inv_.rdma || std::getenv("UCX_NET_DEVICES") || !ucxTlsMayUseTcp(std::getenv("UCX_TLS"))) return "";
  std::vector<std::string> wanted = cfg_.channelNetIfs;
  wanted.push_back(cfg_.netIf);
  return ucxNetDevices(upIpv4Interfaces(), allPeersOnThisHost(), wanted);
}

}  // namespace

const char* ucxVersion() { return ucp_get_version_string(); }

StatusOr<std::unique_ptr<Transport>> createUcxTransport(const TransportConfig& cfg) {
  if (cfg.nranks > kMaxRanks) {
    return Status(Code::kInvalidArgument, "ucx: a job of " + std::to_string(cfg.nranks) +
                                              " ranks is more than the " + std::to_string(kMaxRanks) +
                                              " a UCX tag can name");
  }
  auto t = std::make_unique<UcxTransport>(cfg);
  BRAID_RETURN_IF_ERROR(t->init());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace braid::transport::ucx
