#pragma once
// The communicator: rank, size, peers, connections, the op queue and its progress threads,
// and everything about failure (deadlines, peer liveness, abort propagation).
//
// Threads: the user thread validates (in src/api) and calls run() or submit(). A blocking
// call with nothing in flight runs channel 0 on the caller's own thread (no hand-off
// latency); everything else goes to one progress thread per channel, which executes
// operations in issue order. Collectives must be issued in the same order on every rank;
// each slot carries the operation's sequence number and shape hash so a mismatch fails
// cleanly.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "bootstrap/store.h"
#include "common/auth.h"
#include "common/status.h"
#include "core/config.h"
#include "core/cpu_share.h"
#include "exec/executor.h"
#include "plan/algo_override.h"
#include "plan/cost_model.h"
#include "topology/cluster.h"
#include "core/flight_recorder.h"
#include "core/init_heartbeat.h"
#include "core/live_status.h"
#include "topology/graph.h"
#include "transports/transport.h"

namespace braid::core {

class Communicator;

// One collective in flight. Completed exactly once; wait() may be called from any thread.
class Op {
 public:
  // Blocks until every channel finished; returns the first error.
  Status wait();
  // Non-blocking: true (and *status set) once finished.
  bool test(Status* status);

 private:
  friend class Communicator;
  void complete(const Status& s);
  // The op's only channel, run on the thread that issued it, finished with `s`: nobody
  // else holds the op or waits on it (Communicator::run), so no lock and no wake-up.
  void completeAlone(const Status& s);
  void finishEmpty();  // an op with no channel to run: done at once

  std::shared_ptr<const exec::Schedule> schedule_;  // shared with the communicator's plan cache
  // The communicator's scheduleGen_ when the fields that follow from the request and its
  // schedule (shape_ ... outputBytes_) were last set: a repeated call leaves them be.
  uint64_t boundGen_ = 0;
  // Communicator::runAlone's (where the op runs without a mover): exec::prepareChannel's
  // for channels_[0], and the boundGen_ it was made for.
  std::shared_ptr<const exec::ChannelSetup> setup_;  // the plan's (Communicator::PlannedCall)
  uint64_t setupGen_ = 0;
  // Communicator::channelContext for channels_[0], made with setup_: what of it follows from
  // the schedule and the communicator, copied for each call and completed with the call's own.
  exec::RunContext aloneContext_;
  // The executor's decisions of the last run with setup_, for the same buffers next time.
  exec::DirectSends directSends_;
  exec::Buffers buffers_;
  std::unique_ptr<char[]> scratch_;   // Schedule::scratchBytes
  size_t scratchCap_ = 0;             // bytes scratch_ holds, kept between repeated calls
  std::unique_ptr<char[]> scaled_;    // a pre-multiplied copy of the input
  exec::DataMover* mover_ = nullptr;  // device buffers: what touches their bytes
  uint64_t tag_ = 0;
  // What fills in the tag bits a transport does not carry when a peer's mismatched tag is
  // reported (RunContext::mismatchFill): tag_, or for point-to-point the sequence number the
  // next collective takes.
  uint64_t fillTag_ = 0;
  CallShape shape_;
  bool sequenced_ = false;  // a collective (point-to-point groups carry no sequence number)
  bool startedAtQueue_ = false;  // recorded as running when queued (run on the caller's thread)
  size_t outputBytes_ = 0;
  // The slice the rings cut this call's steps into where it is not the slot (0: the slot;
  // Communicator::ringSliceFor).
  size_t ringSliceBytes_ = 0;
  // Likewise for the mesh (Communicator::meshSliceFor).
  size_t meshSliceBytes_ = 0;
  const char* name_ = "";  // the collective's name (a literal): no string to build per call
  std::vector<int> channels_;  // the schedule's channels that have work
  int remaining_ = 0;  // channels still running, guarded by mu_
  std::mutex mu_;
  std::condition_variable cv_;
  Status status_;
  bool done_ = false;
  Communicator* comm_ = nullptr;
};

struct CommOptions {
  Config config;
  // Session nonce all connections must carry; 0 = rank 0 draws one and shares it.
  uint64_t nonce = 0;
  // The job's key (common/auth.h): tcp data connections prove it; absent = unauthenticated.
  AuthKey authKey;
  // The rank that serves the store in-process (its death takes the store down), or -1.
  int storeOwnerRank = -1;
  // Namespace for this communicator's keys in the store.
  std::string keyPrefix = "braid";
  // Set from another thread while joining (a non-blocking init being aborted): the join
  // ends with kAborted at its next poll.
  std::shared_ptr<std::atomic<bool>> cancel;
  // Why this rank's own settings were refused (Config::fromEnv; `config` then holds
  // Config::fromEnvLenient's): init fails with it once rank 0's nonce is there, and create
  // publishes it, so the others fail at once naming this rank instead of waiting for it.
  Status configError;
  // The store is the launcher's (braidrun's, or the etcd cluster braidrun's ranks use) and
  // this communicator's ranks are the launcher's: braidrun marks every rank process that
  // ends under "braidrun/exit/<rank>", so a rank that ends before it joined (a malformed
  // variable of its own, a crash before init, a wrong program) fails the others' joins at
  // once, naming it, instead of at the timeout.
  bool launcherMarksExits = false;
  // Run at every poll while joining, besides the join's own checks (a grow's old ranks
  // watching one another through the communicator they grow from).
  std::function<Status()> joinWatch;
};

class Communicator {
 public:
  // Joins the communicator: exchanges peer info through `store`, wires up connections,
  // starts progress threads. Blocks until every rank has joined or the timeout passes.
  static StatusOr<std::unique_ptr<Communicator>> create(std::shared_ptr<bootstrap::Store> store,
                                                        int rank, int nranks, CommOptions opts);
  // Waits for queued operations, then tears down. Never blocks on peers beyond the timeout.
  ~Communicator();

  int rank() const { return rank_; }
  const Config& config() const { return opts_.config; }
  int size() const { return nranks_; }
  // BRAID_TIMEOUT (or the configured timeout), in seconds.
  double timeoutSeconds() const { return opts_.config.timeoutSec; }
  int nchannels() const { return nchannels_; }
  // How many calls the planner has made schedules for (a call whose shape is still in the
  // plan cache reuses its schedule).
  uint64_t plansMade() const;
  // The host index of every rank (ranks of one host share one), as the layout has it.
  const std::vector<int>& hostOfRanks() const { return layout_.hostOf; }

  // Runs a collective and blocks until it finishes on this rank. `extra` are the buffers of
  // a point-to-point group (Request::p2p), one per message. With `mover`, the buffers are
  // device memory that only the mover touches (exec::DataMover; its workspace holds the
  // scratch and a pre-multiplied input), over connections whose slots it reaches
  // (slotMemory()).
  Status run(const algorithms::Request& req, const void* input, void* output,
             std::vector<void*> extra = {}, exec::DataMover* mover = nullptr);
  // run() for host buffers, for a caller that made a call with this very request before:
  // `*plan` holds what the last such call left there (0 at first), which spares comparing
  // the request with the current plan's while that plan is the one the call used.
  Status runAgain(const algorithms::Request& req, const void* input, void* output, uint64_t* plan);
  // Queues a collective; the buffers must stay valid until the Op completes.
  StatusOr<std::shared_ptr<Op>> submit(const algorithms::Request& req, const void* input, void* output,
                                       std::vector<void*> extra = {});

  // The memory every connection's slots live in (transport::Connection::slotMemory), for
  // the direct device path to register; false when some connection has none (tcp, UCX, a
  // plugin), where device buffers must be staged.
  bool slotMemory(std::vector<std::pair<void*, size_t>>* ranges) const;
  // Every connection with where it leads (device slots): `set` is the ring channel, or -1
  // for the mesh; `peer` the rank at the other end; `send` its direction.
  void forEachConnection(const std::function<void(int set, int peer, bool send, transport::Connection*)>& fn) const;
  // Every rank's `value` under `name` (a name serves once), bounded by the communicator's
  // timeout; a failed peer ends the wait.
  StatusOr<std::vector<std::string>> exchangeAll(const std::string& name, const std::string& value);

  // Splits this communicator as MPI_Comm_split: ranks with the same `color` form a new
  // communicator, ordered by (`key`, old rank). A negative color joins none (result null).
  // Collective over this communicator; blocks until the new one is wired up.
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key);

  // Fails pending and future operations with `why` and tells every other rank. Idempotent;
  // does not block on peers.
  void abort(const Status& why);

  // Revokes the communicator on every rank (NCCL's ncclCommRevoke, ULFM's MPIX_Comm_revoke):
  // this rank's pending and later operations fail at once with kRevoked, and the other ranks'
  // within about 100 ms of their next wait (they read the published record). Connections and
  // the store stay, so the communicator can still be shrunk or split. Any thread; idempotent;
  // never blocks on peers (one store write, bounded by a short grace).
  void revoke();

  // The survivors' new communicator without `exclude` (NCCL's ncclCommShrink): every rank
  // not excluded calls it with the same list and gets contiguous ranks in the old order. It
  // meets through this communicator's store, without the excluded ranks and whatever state
  // this one is in (broken, revoked). `abortPending` revokes this one first; otherwise
  // pending operations are waited for (they end within the timeout). Blocks until the new
  // communicator is wired up, or the timeout.
  StatusOr<std::unique_ptr<Communicator>> shrink(const std::vector<int>& exclude, bool abortPending);

  // ULFM's MPIX_Comm_agree: every rank that takes part gets the same AND of the `flag`s of
  // the ranks that voted, and the same ranks counted as failed — those that had died, were
  // stalled or named as failed by a published error, or had not voted by twice the timeout
  // plus 3 s — even
  // when ranks die during the agreement. Works on a broken or revoked communicator; needs
  // the store (and its compare-and-set). A rank the others counted as failed before it
  // voted gets kAborted: it must leave.
  struct Agreement {
    int flag = ~0;
    std::vector<int> failed;  // ascending
  };
  StatusOr<Agreement> agree(int flag);

  // Growing (NCCL 2.29's ncclCommGrow): one rank opens grow `token` for a communicator of
  // `newSize` ranks (a record at the store's root, so that new processes holding only the
  // token find this communicator); then every rank of this one calls grow() and keeps its
  // rank, and each new process calls joinGrow() with a rank in [size(), newSize). Each new
  // rank can be claimed once. Both block until the new communicator is wired up.
  Status openGrow(uint64_t token, int newSize);
  StatusOr<std::unique_ptr<Communicator>> grow(uint64_t token, int newSize);
  static StatusOr<std::unique_ptr<Communicator>> joinGrow(std::shared_ptr<bootstrap::Store> store, uint64_t token,
                                                          int newSize, int rank, CommOptions opts);
  // 0 for a communicator made by init; each shrink or grow adds one to its parent's.
  int epoch() const { return epoch_; }
  // The namespace of this communicator's keys in the store.
  const std::string& keyPrefix() const { return opts_.keyPrefix; }

  // The error that broke the communicator, or Ok.
  Status brokenStatus() const {
    if (!brokenFlag_.load(std::memory_order_acquire)) return Status::ok();  // every call: inline
    return brokenStatusLocked();
  }
  // When it broke (FlightRecorder::clockNanos), 0 while it has not.
  int64_t brokenAtNanos() const { return brokenAtNs_.load(std::memory_order_acquire); }
  // Whether this communicator has an operation in flight, or completed one after `ns` (same
  // clock as brokenAtNanos).
  bool ranSince(int64_t ns) const;
  // What this rank is doing now, for a live view of the job (braid-info --status), from any
  // thread: the operation in flight and whom each channel has waited for longer than 100 ms,
  // or "not in a collective" and the last one completed.
  LiveState liveState() const;
  // Where this communicator asks the job's processes for their live states, when that is
  // not its own store: the root of a caller's store (bootstrap::Store::liveRoot), which
  // the processes answer at. Set once, before the communicator is used; null: store_.
  void setLiveStore(std::shared_ptr<bootstrap::Store> s) { liveStore_ = std::move(s); }
  // Whether a call to the store failed (timed out or lost the connection): the store's
  // host is dead or stalled, and teardown should not wait on it.
  bool storeLost() const { return storeLostFlag_.load(std::memory_order_acquire); }

  // Transport chosen for each peer ("self" for this rank), for logs and tests.
  const std::vector<std::string>& transportPerPeer() const { return transportNames_; }

 private:
  friend class Op;
  class WaitHooks;
  struct Worker {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::shared_ptr<Op>> queue;
    bool stop = false;
  };

  Communicator(std::shared_ptr<bootstrap::Store> store, int rank, int nranks, CommOptions opts);
  Status init();
  Status exchangePeers();
  Status loadTopology();
  // On a job spanning hosts: rank 0 and the first rank of another host time round trips and
  // a transfer, and every rank's cost model takes the published latency (and bandwidth).
  Status probeLinks();
  Status connect();
  // `reuse`: the caller blocks until the Op is done (run()), so the Op may be recycled.
  // `startsNow`: the caller runs it at once (recorded as running from the start).
  StatusOr<std::shared_ptr<Op>> prepare(const algorithms::Request& req, const void* input, void* output,
                                        std::vector<void*> extra, bool reuse = false, bool startsNow = false,
                                        exec::DataMover* mover = nullptr);
  StatusOr<std::shared_ptr<Op>> prepareScheduled(std::shared_ptr<Op> op, const algorithms::Request& req,
                                                 const void* input, void* output, std::vector<void*> extra,
                                                 bool startsNow);
  // The parts of preparing an op, under submitMu_. useSchedule plans `req` unless it
  // repeats the cached request; bindSchedule sets what follows from the request and that
  // schedule on `op` (nothing when `op` was bound to it already); bindBuffers points the
  // op at the caller's buffers; startOp numbers the op and records it queued or running.
  Status useSchedule(const algorithms::Request& req);
  void bindSchedule(Op* op, const algorithms::Request& req);
  Status bindBuffers(Op* op, const void* input, void* output, std::vector<void*> extra);
  void startOp(Op* op, bool startsNow);
  // run()'s common case: a blocking call on host buffers with nothing in flight and one
  // channel to run, done on the caller's thread with aloneOp_ (no allocation, no reference
  // count, no progress thread to wake). False when the call does not qualify (nothing is
  // done then); otherwise *result is the call's outcome. `t0`: BRAID_TIMELINE's start, or 0.
  // `extra` (a point-to-point group's buffers) is taken only when it runs.
  bool runAlone(const algorithms::Request& req, const void* input, void* output, std::vector<void*>& extra, int64_t t0,
                Status* result, uint64_t* plan = nullptr);
  // Hands op->channels_[first...] to their progress threads.
  void enqueue(const std::shared_ptr<Op>& op, size_t first);
  // Runs one channel of `op` and completes it there (Op::complete).
  void runChannel(const std::shared_ptr<Op>& op, int channel);
  // Runs one channel of `op`: what it ended with, failures recorded, the op not completed.
  // `setup`: exec::prepareChannel's for this channel of op's schedule, or null.
  // `direct`: with `setup`, where the executor keeps its decisions between runs
  // (exec::DirectSends).
  // `base`: channelContext(op, channel) made before (Op::aloneContext_), or null.
  Status execChannel(const Op& op, int channel, const exec::ChannelSetup* setup = nullptr,
                     exec::DirectSends* direct = nullptr, const exec::RunContext* base = nullptr);
  // The run context of `op`'s channel `channel`, less what each run adds (its deadline,
  // hooks and mismatch report), and the links it runs on.
  exec::RunContext channelContext(const Op& op, int channel) const;
  const exec::ChannelLinks& channelLinks(const Op& op, int channel) const;
  // BRAID_TIMELINE: the span of one blocking call, from issue to completion.
  void traceCall(const Op& op, int64_t t0, const Status& s) const;
  void workerLoop(int channel);
  // Reports a local peer's exit, a peer's abort record or the store's loss; store calls
  // wait no longer than `deadline` (the running operation's).
  Status healthCheck(Deadline deadline);
  // While joining: a local peer's exit (none may leave during init), a peer's abort record
  // or the store's loss.
  Status initPoll(Deadline deadline);
  Status initGoneCheck(Deadline deadline);
  Status launcherExitCheck(Deadline deadline);
  // Fails when another process took this rank already in this join, naming both.
  Status claimRank(Deadline deadline);
  // A peer's published failure as a Status (Ok when there is none), or the store's loss.
  Status abortRecord(Deadline deadline);
  // Records that the store failed a call with `why` and returns the error every later check
  // reports instead of asking the store again: it names the rank that serves the store, when
  // one does.
  Status storeLoss(const Status& why);
  // Bounds the store calls of failure handling: long enough for a live store to answer,
  // short next to the operation's timeout.
  Deadline graceDeadline() const;
  Status fail(const Status& s);
  // A collective mismatch found by the executor (`peerTag`: what the peer sent) as both
  // ranks' calls, decoded: each rank that finds one publishes its own call, then reads the
  // peer's, waiting briefly (the peer usually finds the same mismatch at once).
  Status explainMismatch(const Status& s, const Op& op, uint64_t peerTag);
  // Publishes the call `op` runs ("#seq allreduce count=..."), for peers decoding a mismatch.
  void publishCall(const Op& op);
  // BRAID_DEBUG_DUMP: writes the flight recorder and `why` to the folder, text and JSON.
  void dumpFlightRecorder(const Status& why);
  Status findStalledRank(const Status& timeout);
  // "<who> made no progress for <BRAID_TIMEOUT> s (BRAID_TIMEOUT)", as a timeout names its culprit.
  std::string madeNoProgress(const std::string& who) const;
  // One ask per rank that may be held (below): the rank that claims it asks the processes
  // where they are and publishes the verdict; the others read it.
  struct HeldAsk {
    int cur = -1;         // the rank it is for; -1 when none was begun
    bool claimed = false; // `cur` may be held, and the store answered the claim
    bool asker = false;   // this rank asks (and publishes the verdict)
    bool begun = false;   // ... and its request is out: `live` holds it
    LiveAsk live;
  };
  // Whether `cur` may be held in another communicator: a running peer of this host in
  // another process (a stopped or exited one is the culprit itself), or a peer of another
  // host (which only its answer tells from a stopped one). Needs the live view.
  bool mayBeHeld(int cur);
  // Claims the ask for `cur` and, claimed, sends it; its store calls bounded by `deadline`.
  // A store that fails them leaves nothing claimed (its failure is the caller's to report).
  HeldAsk beginHeldAsk(int cur, Deadline deadline);
  // How long the ask waits for the processes' answers (kHeldAskSec, or more on a large job's
  // polled store: liveAnswerSeconds).
  double heldAskSeconds() const;
  // findStalledRank's last step, for rank `cur` that recorded nothing here: it may be held in
  // another communicator (waiting there, or failed there, on a third process). Asks the
  // processes where they are (askLiveStatus; `early` when begun for `cur` already) and
  // follows the holds to a process that is stopped, has exited, waits for no one, or does
  // not answer; the error then names that one (its rank here, when it has one) and the
  // trail. Ok when there is nothing to follow.
  Status heldElsewhere(int cur, const Status& timeout, const HeldAsk& early);
  // The verdict of following `cur`'s holds through `states`: "<rank>\t<message>", or "".
  // `unanswered`, where given, is set when the holds lead to a process that gave no answer.
  std::string followHolds(int cur, const std::vector<LiveState>& states, bool* unanswered = nullptr) const;
  // Whether local peer `r`'s process has exited (its pidfd is readable); false for a peer
  // not watched (another host, this process).
  bool peerExited(int r) const;
  // The agreement's question for ranks of other hosts whose votes are missing, where no
  // process state can be read: one survivor (the first to claim `claimKey`) asks every
  // process at the store where it is (beginLiveStatus), and those of `ranks` whose process
  // gave no answer within the wait are stopped, hung as a whole, or cut off from the store.
  // Begun by beginSilentAsk; read by silentRanks once `ask.readyNs` has passed.
  enum class SilentAsk { kBegun, kAnotherAsks, kNotNow /* no live view, or the store failed */ };
  SilentAsk beginSilentAsk(const std::string& claimKey, LiveAsk* ask);
  std::vector<int> silentRanks(const LiveAsk& ask, const std::vector<int>& ranks);
  // While shrink, split or a grow's join waits for `members`' records (member r's under
  // bootstrap::allGatherKey(recordPrefix, r)): the first other member that ended without
  // publishing, as a kRemoteError naming it ("rank R ... <during>; <advice>"). A local one
  // by its pid, a remote one by its gone/ mark, read at most every kStoreCheckPeriodNs
  // (`*nextStoreCheck`). Ok otherwise.
  Status memberEnded(const std::vector<int>& members, const std::string& recordPrefix, int64_t* nextStoreCheck,
                     const std::string& during, const std::string& advice);
  // A rank agree() may count as failed without waiting for its vote: a local peer whose
  // process exited, or the rank a published or local error names as dead or stalled.
  // Without `askStore`, only what this process knows (no published error is read).
  std::vector<bool> knownFailed(bool askStore = true);
  // Whether a transport of this communicator saw `rank` fail (Transport::sawPeerFail): a
  // connection of its own to or from that rank found it gone. False while an operation is
  // in flight, when the channels' threads hold the connections.
  bool transportsSawFail(int rank);
  // Teardown: tells every transport which peers failed (Transport::peerFailed), so that none
  // waits for them: a peer of this host whose process exited or is stopped, every
  // agreement's failed ranks, and on a broken communicator the ranks knownFailed() names
  // without asking the store.
  void reportFailedPeers();
  // shrink's last step on the new rank 0: the excluded ranks counted as failed are shut out
  // of the store (Store::fence).
  void fenceExcluded(const std::vector<int>& excluded, const std::vector<int>& survivors);
  std::string key(const std::string& k) const { return opts_.keyPrefix + "/" + k; }
  // This communicator's configuration for a child (split, shrink, grow): the slot geometry
  // as the user set it.
  Config childConfig() const {
    Config c = opts_.config;
    c.slotBytes = userSlotBytes_;
    c.nslots = userNslots_;
    return c;
  }

  std::shared_ptr<bootstrap::Store> store_;
  std::shared_ptr<bootstrap::Store> liveStore_;  // setLiveStore; null: store_
  bootstrap::Store& liveStore() const { return liveStore_ ? *liveStore_ : *store_; }
  const int rank_;
  const int nranks_;
  CommOptions opts_;
  uint64_t nonce_ = 0;
  int nchannels_ = 1;
  // The mesh's slot size (every rank decides it from the same facts, as the rings' slots).
  size_t meshSlotBytes_ = 0;
  // UCX on one host over tcp the kernel paces (ucxOneHost): a stream's slots in the mesh,
  // and whole blocks only for the mesh's schedules (alltoall, point-to-point groups).
  bool ucxPacedTcp_ = false;
  // UCX on one host through its shared memory (ucxOneHost): whole blocks move by a
  // handshake, then one copy (Layout::rendezvousInMemory).
  bool ucxSharedMemory_ = false;
  // The rings' slot geometry as the user set it (0 = auto), before init resolved it into
  // opts_.config: what children start from, so that every rank of a child, new processes of
  // a grow included, resolves it from the child's own hosts.
  size_t userSlotBytes_ = 0;
  int userNslots_ = 0;
  // Slices smaller than the ring slot for small calls (tcp inside one host with automatic
  // slots: plan::kLocalTcpSlotBytes): what a call of that shape is cut into, 0 = the slot.
  size_t smallCallSliceBytes_ = 0;
  size_t ringSliceFor(const algorithms::Request& req) const;
  // The mesh's counterpart: its small calls' slices where they are finer than its slots
  // (tcp inside one host), 0 = the slot.
  size_t meshSmallSliceBytes_ = 0;
  size_t meshSliceFor(const algorithms::Request& req) const;
  // Messages of wholeBlocks schedules, when every connection of every rank carries messages
  // larger than a slot (agreed in connect()); 0 = slot-sized slices everywhere.
  size_t wholeBlockBytes_ = 0;
  // Acknowledgements in rooted collectives (exec::computeAcks): BRAID_SEND_ACKS on every
  // rank (agreed in connect()).
  bool sendAcks_ = true;
  int localRank_ = 0;
  int localSize_ = 1;
  int numaNode_ = -1;
  exec::WaitPolicy wait_;            // ops that run on several channels
  exec::WaitPolicy waitOneChannel_;  // ops that run on one
  bool ringsRunAhead_ = true;  // RunContext::fifoSlots set: rings' rounds may overlap
  std::vector<transport::PeerInfo> peers_;
  std::vector<std::string> transportNames_;
  std::vector<std::unique_ptr<transport::Transport>> transports_;
  std::vector<std::unique_ptr<transport::Connection>> connections_;
  std::vector<exec::ChannelLinks> links_;                 // per channel: ring neighbours
  std::unique_ptr<exec::WaitNote[]> waitNotes_;           // per channel, for liveState()
  std::vector<std::unique_ptr<transport::Transport>> meshTransports_;
  exec::ChannelLinks meshLinks_;                           // every peer, small slots
  algorithms::Layout layout_;
  std::vector<plan::AlgoRule> algoRules_;  // BRAID_ALGO
  plan::Machine machine_;                  // the cost model's view of the links
  std::vector<int> peerPidFds_;  // per rank, -1 where not watched
  // Ranks of this host in other processes whose pids this process cannot watch (another pid
  // namespace: a container sharing the host's name and /dev/shm): the health check asks the
  // store whether their connection to it ended instead.
  std::vector<int> unwatchedLocal_;
  // Per rank: exited after a clean goodbye (its "bye" record), so no longer watched. Set by
  // whichever channel thread's health check finds it first.
  std::unique_ptr<std::atomic<bool>[]> peerBye_;
  // The topology planning uses (loadTopology): this host's graph, this rank's place on it,
  // and the ring every rank agreed on; all empty when no topology is known cluster-wide.
  std::unique_ptr<topology::Graph> topology_;
  topology::RankPlace place_;
  std::vector<topology::RankRecord> rankRecords_;  // by rank, from the peer records
  CpuShare cpuShare_;  // who else waits on this rank's CPUs, from the peer records
  // Their processes, and this rank's host's (common/foreign_load.h: the job's CPU time is
  // not something else keeping the CPUs busy); removed from the process's list when done.
  std::vector<int64_t> jobPids_;
  std::vector<uint64_t> storeClients_;  // by rank, from the peer records: Store::clientId, 0 unknown
  std::vector<int> topoRing_;
  topology::ClusterPlan topoPlan_;  // rank 0's plan: ring, trees, bandwidths
  topology::NicPolicy nicPolicy_;  // BRAID_NET_IF / BRAID_IB_HCA

  mutable std::mutex submitMu_;
  std::shared_ptr<Op> spareOp_;  // run()'s last Op, recycled once nobody else holds it
  Op aloneOp_;                   // runAlone's, used only while inflight_ is 0 before it
  uint32_t seq_ = 0;       // collectives issued (point-to-point groups do not count)
  uint32_t splitSeq_ = 0;  // splits issued, to name each child's keys
  uint32_t shrinkSeq_ = 0;  // shrinks issued, to name each child's keys
  uint32_t agreeSeq_ = 0;   // agreements, to name each one's votes
  int epoch_ = 0;
  std::atomic<int> inflight_{0};
  std::vector<std::unique_ptr<Worker>> workers_;

  // Planned calls: a Schedule depends only on the request and the (fixed) layout, and
  // training loops repeat their shapes, often several in turn (gradient buckets of different
  // sizes, a scalar between them), so each is planned once while it stays in use. At most
  // kPlanCacheEntries, holding at most kPlanCacheSteps steps in all besides the newest; the
  // least recently used goes first.
  struct PlannedCall {
    algorithms::Request req;
    std::shared_ptr<const exec::Schedule> schedule;
    uint32_t shapeHash = 0;  // shapeHash(req)
    uint64_t gen = 0;        // its scheduleGen_, unique to it
    uint64_t lastUse = 0;
    size_t steps = 0;        // in all its channels
    // exec::prepareChannel's for the channel runAlone runs, once it ran there.
    std::shared_ptr<const exec::ChannelSetup> alone;
  };
  static constexpr size_t kPlanCacheEntries = 64;
  static constexpr size_t kPlanCacheSteps = size_t{1} << 16;
  std::vector<PlannedCall> plans_;
  size_t currentPlan_ = 0;  // the plans_ entry cachedSchedule_ comes from (when there is one)
  uint64_t planUses_ = 0;
  uint64_t planGens_ = 0;  // also the count plansMade() reports
  // The plan in use: makes plans_[i] the current one.
  void adoptPlan(size_t i);
  // The current plan's schedule, its shapeHash and its gen: what the hot path reads.
  std::shared_ptr<const exec::Schedule> cachedSchedule_;
  uint32_t cachedShapeHash_ = 0;
  uint64_t scheduleGen_ = 0;  // the current plan's gen (Op::boundGen_)

  std::atomic<int> abortFlag_{0};
  std::atomic<bool> brokenFlag_{false};  // lets the hot path skip errorMu_
  Status brokenStatusLocked() const;  // brokenStatus once the flag is set
  std::atomic<int64_t> brokenAtNs_{0};
  // The store sets "gone/<rank>" if this rank's connection to it ends (setOnClose).
  bool watchedByStore_ = false;
  // Until joined, the store adds 1 to "init-gone" if this rank's connection ends; initPoll
  // reads it (at most every kInitGoneCheckNs).
  bool initGoneCounted_ = false;
  int64_t nextInitGoneCheckNs_ = 0;
  int64_t nextLauncherCheckNs_ = 0;
  // Until joined, through a store that cannot tell (setOnClose refused) and is not in this
  // process: this rank's heartbeat, and its watch on the next rank's (init_heartbeat.h).
  std::unique_ptr<InitHeartbeat> heartbeat_;
  mutable std::mutex errorMu_;
  Status broken_;
  std::mutex healthMu_;
  int64_t nextStoreCheckNs_ = 0;
  FlightRecorder recorder_;
  std::atomic<bool> storeLostFlag_{false};
  Status storeLost_;  // under errorMu_
  std::set<int> agreedFailed_;  // every agreement's failed ranks, under errorMu_
  std::atomic<int> failingOn_{-1};  // the peer fail() is reporting on, while it does (liveState)
  // The recovery call this rank is in (agree, shrink, grow), for liveState(), which shows it
  // as the operation in flight: what it is ("" when none), the rank whose vote it waits for
  // (-1: none), and since when (nowNanos). Under recoveryMu_.
  mutable std::mutex recoveryMu_;
  std::string recoveryCall_;
  int recoveryWaitsFor_ = -1;
  int64_t recoverySinceNs_ = 0;
  // The note for the life of one recovery call (a local of that call).
  class RecoveryNote {
   public:
    RecoveryNote(Communicator* c, std::string call);
    ~RecoveryNote();
    void waitsFor(int rank);  // the rank whose vote an agreement waits for now

   private:
    Communicator* c_;
  };
};

// FNV-1a of a call's shape; travels in every slot with the sequence number.
uint32_t shapeHash(const algorithms::Request& req);

// The abort record the ranks of a communicator read while they wait (`<prefix>/abort`):
// the failure's code, the rank it names and the rank that reported it, which decoding puts
// in front of the message ("rank 2 reported: ..."). Reporter -1 is a process given no rank
// of the job (a refused RANK), which leaves its reason there before it exits.
std::string encodeAbortRecord(const Status& s, int reporter);
// This process as error messages name it: "pid P on host H".
std::string thisProcess();
Status decodeAbortRecord(const std::string& record);

}  // namespace braid::core
