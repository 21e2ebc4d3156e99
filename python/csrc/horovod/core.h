#pragma once
// braid's implementation of Horovod's native core: what Horovod's pure-Python front end
// (horovod/torch/*.py) drives through its extension module horovod.torch.mpi_lib_v2.
//
// Model (the one Horovod's own core follows, built here on braid's communicators):
// - The caller's thread only enqueues: an Entry per tensor, its name unique among the pending
//   ones of its process set, and a Handle the caller polls or waits on.
// - One background thread runs cycles (HOROVOD_CYCLE_TIME, default 1 ms). In a cycle each
//   process set this rank belongs to negotiates which entries every member has submitted:
//     fast path  one allreduce (bitwise AND) of a bit vector over the response cache: entries
//                whose name and signature were agreed before each have a bit; a word of
//                inverted flags in front tells whether any rank has something the cache does
//                not know (a new name, a changed shape), has joined, or is shutting down.
//     full round otherwise: every rank's pending requests are gathered (allgatherv of their
//                serialized form) and every rank computes the same responses from them:
//                ready names in the same order, mismatches turned into errors naming the
//                tensor and the ranks, join and shutdown decided.
//   Then every member executes the same responses in the same order: allreduces of one dtype,
//   op and scale factors fused into one buffer (HOROVOD_FUSION_THRESHOLD), the others one braid
//   collective each.
// - A braid error (a peer died or stalled past BRAID_TIMEOUT) fails every pending and every
//   later operation with that error; Horovod's front end raises it as HorovodInternalError.
//
// Process sets map to braid communicators made with split(); the global set is the world.

#include <ATen/ATen.h>

#include <braid/braid.hpp>

#include "env.h"
#include "timeline.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace braid_hvd {

// Horovod's reduce operations; the values are braid's own (the front end reads them through
// horovod_reduce_op_*()).
enum HvdOp : int32_t { kOpAverage = 0, kOpSum = 1, kOpAdasum = 2, kOpMin = 3, kOpMax = 4, kOpProduct = 5 };

enum class Kind : uint8_t {
  kAllreduce = 0,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter,
  kBarrier,
  kJoin,
  kAddSet,
  kRemoveSet,
};
const char* kindName(Kind k);

// What a rank asks for; the part other ranks see in a full round.
struct Request {
  Kind kind = Kind::kAllreduce;
  int32_t dtype = 0;  // at::ScalarType
  int32_t op = kOpSum;
  int32_t root = 0;   // broadcast root (rank in the process set); set id for kRemoveSet
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  std::vector<int32_t> ranks;  // kAddSet: the global ranks of the new set
  std::string name;

  void serialize(std::string* out) const;
  // Reads one request at *pos; false if the bytes are malformed.
  bool parse(const std::string& in, size_t* pos);
  // What must stay equal for a cached agreement to stay valid: everything but the name, and
  // for allgather and alltoall not the first dimension (it may differ per rank and per call).
  std::string signature() const;
};

// The caller's view of one operation (a grouped operation has several entries).
struct Handle {
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 0;
  bool done = false;
  std::string error;  // empty: success
  int32_t result = 0;  // kAddSet / kRemoveSet: the id; kJoin: the last rank to join

  void finish(const std::string& err);
};

struct Entry {
  Request req;
  at::Tensor input, output, splits, receivedSplits;
  std::shared_ptr<Handle> handle;
  std::string signature;  // req.signature(), made once at submission (every cycle compares it)
  std::chrono::steady_clock::time_point enqueued;
  bool warned = false;  // the stall warning was printed
};

class Core;

struct ProcessSet {
  int32_t id = 0;
  std::vector<int32_t> ranks;  // global ranks, ascending
  bool member = false;
  std::unique_ptr<braid::Communicator> comm;  // valid() when member
  // Guarded by Core::mu_.
  std::deque<std::shared_ptr<Entry>> queue;
  std::unordered_map<std::string, std::shared_ptr<Entry>> pending;  // name -> entry, queued or running
  uint64_t noname[16] = {};
  // Used by the background thread only.
  struct Slot {
    std::string name, signature;
    uint64_t lastUse = 0;
    bool used = false;
  };
  std::vector<Slot> cache;
  std::unordered_map<std::string, size_t> cacheIndex;
  uint64_t useClock = 0;
  uint64_t cycle = 0;
  bool removed = false;
};

class Core {
 public:
  static Core& instance();

  // horovod_init: `ranks` (empty: all) picks the world's ranks that form Horovod's world;
  // `setRanks`/`setSizes` are static process sets. Returns false and logs on failure.
  bool init(const std::vector<int32_t>& ranks, const std::vector<std::vector<int32_t>>& sets);
  void shutdown();
  bool initialized() const { return running_.load(); }

  int rank() const { return initialized() ? rank_ : -1; }
  int size() const { return initialized() ? size_ : -1; }
  int localRank() const { return initialized() ? localRank_ : -1; }
  int localSize() const { return initialized() ? localSize_ : -1; }
  int crossRank() const { return initialized() ? crossRank_ : -1; }
  int crossSize() const { return initialized() ? crossSize_ : -1; }
  bool homogeneous() const { return homogeneous_; }

  // Submission; throws std::invalid_argument for what Horovod reports as ValueError (a name
  // already pending), std::runtime_error for the rest. The entries of one call are queued
  // together, so a grouped operation is negotiated as one.
  std::shared_ptr<Handle> submit(int32_t setId, std::vector<Entry> entries);
  std::string autoName(int32_t setId, Kind kind);

  // Process sets (Horovod's error codes as in its basics.py: -1 not initialized, -2 not
  // dynamic, -3 unknown set, -4 foreign set, -5 shutting down, -6 existing set).
  int32_t addProcessSet(const std::vector<int32_t>& ranks);
  int32_t removeProcessSet(int32_t id);
  int32_t processSetRank(int32_t id);
  int32_t processSetSize(int32_t id);
  int32_t processSetRanks(int32_t id, int32_t* out);
  std::vector<int32_t> processSetIds();

  // hvd.start_timeline / stop_timeline (Horovod's codes: -1 not initialized; 1 done; 0 the
  // file cannot be written). Only rank 0 writes a timeline, as in Horovod.
  int startTimeline(const std::string& path, bool markCycles);
  int stopTimeline();

  // Elastic jobs under braidrun --min-np (BRAID_ELASTIC=1), for Horovod's elastic loop
  // (hvd.elastic.run), which on a failure or a change of hosts calls shutdown() and init():
  // shutdown() keeps the world, and the next init() recovers it instead of starting a new
  // job: the survivors agree on the lost ranks, shrink without them, and grow with the
  // replacements braidrun started (--max-np). On rank 0 the background thread looks for
  // waiting replacements every half second and, once per wait, calls `notify` from a thread
  // of its own: Horovod's front end raises HostsUpdatedInterrupt at the next commit then.
  // Set before init.
  void setJoinersNotifier(std::function<void()> notify) { joinersNotifier_ = std::move(notify); }
  // Destroys the world shutdown() kept (at exit).
  void dropKeptWorld();

 private:
  Core() = default;
  void loop();
  // One negotiation and execution on `ps`; returns whether anything ran.
  bool cycle(ProcessSet& ps);
  void failAll(const std::string& why);
  std::shared_ptr<ProcessSet> findSet(int32_t id);
  int32_t changeSets(Entry e);

  struct Response;
  void fullRound(ProcessSet& ps, const std::vector<std::shared_ptr<Entry>>& snapshot, uint32_t flags,
                 std::vector<Response>* out);
  void execute(ProcessSet& ps, std::vector<Response>& responses);
  void runAllreduces(ProcessSet& ps, std::vector<Response*>& group);
  void runAdasum(ProcessSet& ps, std::vector<Response*>& group);
  void runOne(ProcessSet& ps, Response& r);
  void complete(ProcessSet& ps, const std::shared_ptr<Entry>& e, const std::string& err);
  void remember(ProcessSet& ps, const std::string& name, const std::string& signature);
  std::unique_ptr<braid::Communicator> recover(std::unique_ptr<braid::Communicator> world);
  void watchJoiners();
  void stopNotifier();

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<bool> running_{false};
  bool stopRequested_ = false;  // guarded by mu_
  bool stopAgreed_ = false;     // background thread: a rank asked to shut down
  std::string fatal_;           // guarded by mu_: set once a braid error ended the loop
  std::thread thread_;
  std::unique_ptr<braid::Communicator> world_;  // Horovod's world (all of braid's, or a split)
  std::map<int32_t, std::shared_ptr<ProcessSet>> sets_;  // guarded by mu_
  int32_t nextSetId_ = 1;
  bool dynamicSets_ = false;

  int rank_ = -1, size_ = -1, localRank_ = -1, localSize_ = -1, crossRank_ = -1, crossSize_ = -1;
  bool homogeneous_ = true;
  std::chrono::microseconds cycleTime_{1000};
  size_t fusionThreshold_ = 128u << 20;
  size_t fuseBelow_ = 1u << 20;  // BRAID_HOROVOD_FUSE_BELOW: bigger tensors reduce in place
  size_t adasumHalvingBytes_ = 64u << 10;  // BRAID_HOROVOD_ADASUM_HALVING: Adasum halves from this size
  size_t cacheCapacity_ = 1024;
  std::chrono::seconds stallWarning_{60};

  // Elastic recovery (see setJoinersNotifier).
  bool elastic_ = false;
  std::unique_ptr<braid::Communicator> kept_;  // the world the last shutdown() kept
  std::function<void()> joinersNotifier_;
  std::chrono::steady_clock::time_point nextJoinersLook_{};  // background thread
  bool joinersNotified_ = false;                              // background thread
  std::thread notifier_;
  bool notifyPending_ = false;  // guarded by mu_
  bool notifierStop_ = false;   // guarded by mu_

  // Join (global set only), used by the background thread.
  std::shared_ptr<Entry> joinEntry_;  // guarded by mu_
  uint64_t joinCycle_ = 0;
  at::Tensor fusion_;
  Timeline timeline_;
};

}  // namespace braid_hvd
