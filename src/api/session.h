#pragma once
// What a public communicator handle owns: the store it rendezvoused through (and the
// server, when this process serves it) and the core communicator. Shared by the C and C++
// APIs; this is also where arguments are checked and a Status becomes a result.

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "bootstrap/store.h"
#include "bootstrap/unique_id.h"
#include "core/communicator.h"
#include "braid/braid.h"
#include "device/device_mover.h"
#include "device/device_queue.h"

namespace braid::bootstrap {
class TcpStoreClient;
class TcpStoreServer;
struct LaunchEnv;
}

namespace braid::api {

// A public collective call's arguments as the C and C++ APIs receive them, before any check.
// Buffer and count names in error messages are the C API's (sendbuff, recvcounts, ...).
struct CallArgs {
  algorithms::Collective coll = algorithms::Collective::kAllReduce;
  const char* fn = "";          // the API function, e.g. "braidReduce" or "reduce" (a literal)
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;             // count / sendcount / recvcount (see countName)
  const char* countName = "count";
  int dtype = 0;
  int op = 0;                   // a braidRedOp_t, possibly a pre-multiplied sum's handle
  bool cxxPreMul = false;       // the C++ Reduction::preMulSum: `op` is kSum, scale by cxxScalar
  double cxxScalar = 1.0;
  int root = 0;
  // v-variants: allgatherv (recvcounts, displs), reduce_scatterv (recvcounts),
  // alltoallv (all four). Arrays of nranks entries.
  const size_t* recvCounts = nullptr;
  const size_t* recvDispls = nullptr;
  const size_t* sendCounts = nullptr;
  const size_t* sendDispls = nullptr;
  braidStream_t stream = nullptr;
};

// A checked call, ready for the core: the request and the buffers the core must see (for
// example a non-root's broadcast reads recvbuff, not its unused sendbuff).
struct Call {
  algorithms::Request req;
  const void* input = nullptr;
  void* output = nullptr;
  std::vector<void*> extra;  // point-to-point groups: one buffer per message
  const char* name = "";    // the API function, for error context (a literal: no copy per call)
  // Device buffers (or a stream given): the call is enqueued on `device.stream` and staged
  // through host memory (device/device_queue.h).
  bool onDevice = false;
  device::DeviceCall device;
  // A problem found while building the call (p2pCall), reported when it runs.
  Status invalid;
};

// One message of a point-to-point batch, in bytes (a batch may mix types).
struct P2PMessage {
  bool isSend = true;
  void* buf = nullptr;
  size_t bytes = 0;
  int peer = 0;
  bool onDevice = false;  // device memory, or a stream given: staged like a collective
  braidStream_t stream = nullptr;
};

class Session {
 public:
  ~Session();

  // `timeoutSec` > 0 replaces BRAID_TIMEOUT (braidConfig_t.timeoutSeconds); `cancel`, when
  // given and set while joining, ends the join with kAborted at its next poll.
  static StatusOr<std::unique_ptr<Session>> fromEnv(double timeoutSec = 0,
                                                    std::shared_ptr<std::atomic<bool>> cancel = nullptr);
  static StatusOr<std::unique_ptr<Session>> fromUniqueId(const braidUniqueId& id, int nranks, int rank,
                                                         double timeoutSec = 0,
                                                         std::shared_ptr<std::atomic<bool>> cancel = nullptr);
  // `timeoutSec` > 0 replaces BRAID_TIMEOUT.
  static StatusOr<std::unique_ptr<Session>> fromStore(std::shared_ptr<bootstrap::Store> store, int rank,
                                                      int nranks, const std::string& keyPrefix,
                                                      double timeoutSec = 0);

  core::Communicator& comm() { return *comm_; }

  // Checks a collective's arguments and builds the core's request into `*call` (a fresh
  // Call; built in place, as every call passes through here). kInvalidArgument names the
  // function, the offending argument and this rank. Thread-safe.
  Status prepare(const CallArgs& a, Call* call) const;
  // A blocking collective on host buffers made again with the same arguments, by the same
  // thread (a training loop's allreduce of one gradient buffer): runs it with the request
  // prepare() built the last time, and returns true with its result in `*result`. Returns
  // false, having done nothing, when the call differs from this thread's last one here or
  // may not take this path (device memory now at those addresses, a stream, a v-variant
  // whose count arrays may have changed, a pre-multiplied sum's handle, device calls in
  // flight); the caller then prepares and runs it as usual.
  bool runRepeated(const CallArgs& a, Status* result);

  // Checks one send or receive (`fn` names the API function) and converts it to bytes.
  StatusOr<P2PMessage> prepareP2P(const char* fn, bool isSend, const void* buf, size_t count, int datatype,
                                  int peer, braidStream_t stream) const;
  // One point-to-point group of `msgs` as a single core request.
  static Call p2pCall(const std::vector<P2PMessage>& msgs, const char* name);

  // Runs `call` and blocks until it is done on this rank; a device call is enqueued on its
  // stream and returns at once.
  Status run(Call&& call);
  // The first failure of enqueued device work, else the communicator's broken state.
  Status asyncError();
  // Queues `call`; its buffers must stay valid until the Op completes. Host buffers only.
  StatusOr<std::shared_ptr<core::Op>> submit(Call&& call);
  // Enqueues a device call on its stream, as run() does, and gives what tells a host thread
  // when it is done (the C++ API's Work on device buffers).
  StatusOr<std::shared_ptr<device::DeviceDone>> submitOnDevice(Call&& call);

  // MPI_Comm_split over this communicator (collective). A negative color gives null. The
  // child shares this session's store (and store server) so that they outlive it.
  StatusOr<std::unique_ptr<Session>> split(const char* fn, int color, int key);

  // Pre-multiplied sums: the op handle is braidNumOps + a number drawn from a process-wide
  // counter, so a handle is never reused (a destroyed one stays invalid) and one created on
  // another communicator is never mistaken for one of this. Thread-safe.
  StatusOr<int> createPreMulSum(const void* scalar, int datatype);
  Status destroyPreMulSum(int op);

  // Fails everything now and tells the peers.
  void abort();

  // braidCommRevoke: this communicator's operations fail with kRevoked on every rank.
  void revoke();
  // braidCommShrink over this communicator: the survivors' new session without `exclude`,
  // sharing this one's store (and server), as split's children do.
  StatusOr<std::unique_ptr<Session>> shrink(const char* fn, const std::vector<int>& exclude, bool abortPending);
  // braidCommAgree: `*flag` becomes the AND over the ranks that voted; the failed ranks are
  // kept for failedRanks().
  Status agree(const char* fn, int* flag);
  // The ranks the last agreement counted as failed, ascending.
  std::vector<int> failedRanks() const;

  // braidCommGetGrowId: opens a grow to `newSize` ranks and describes it in `*id` (where
  // this job's store is, its key, the grow's token).
  Status growId(int newSize, braidUniqueId* id);
  // braidCommGrow on a rank of this communicator (keeps its rank) ...
  StatusOr<std::unique_ptr<Session>> grow(const char* fn, int newSize, const braidUniqueId& id);
  // ... and in a new process, as rank `rank` of the grown communicator.
  static StatusOr<std::unique_ptr<Session>> joinGrow(const char* fn, int newSize, const braidUniqueId& id, int rank);

  // Elastic jobs (braidrun --max-np): replacements wait in the store until the running
  // ranks admit them. How many wait now (any rank may ask; cheap) ...
  StatusOr<int> joinersWaiting();
  // ... and the collective that admits them: rank 0 takes every waiting one, gives each a
  // rank after the current ones and grows; null when none waited.
  StatusOr<std::unique_ptr<Session>> growJoiners(const char* fn);

 private:
  Status enqueueOnDevice(Call&& call, std::shared_ptr<device::DeviceDone> done);
  struct PreMul {
    double scalar;
    DataType dtype;
    bool live;
  };

  Session() = default;
  // Names this session in the thread's record of its last call (runRepeated): never reused,
  // so a record left by a destroyed session matches no other.
  const uint64_t repeatId_ = nextRepeatId();
  static uint64_t nextRepeatId();
  // `trackLive`: a rank of this job serves braid's store and must keep it up until every
  // session has left (see ~Session); only then do sessions count themselves in it.
  static StatusOr<std::unique_ptr<Session>> join(std::shared_ptr<bootstrap::Store> store, int rank, int nranks,
                                                 core::CommOptions opts, bool trackLive = false);
  // A session for a communicator derived from this one's (split, shrink, grow): the same
  // store, server and job, not counted live yet, no communicator yet.
  std::unique_ptr<Session> derived() const;
  // Where rank 0 serves the store: starts the store's standby in the rank that keeps it and
  // points this rank's client `c` at it (see session.cc).
  Status standBy(bootstrap::TcpStoreClient& c, const bootstrap::LaunchEnv& env, const core::Config& cfg);
  // After a shrink: where the store has lost its standby (the standby's rank died, or took
  // over from rank 0 and now serves), the survivors start another in a rank that does not
  // host the store, so that the job survives the next loss of that host too.
  Status rearmStandby(const char* fn);
  StatusOr<std::string> startStandby(bootstrap::TcpStoreClient& c, Deadline deadline);
  Status learnStandby(bootstrap::TcpStoreClient& c, Deadline deadline);
  // Whether this process serves the job's store now: rank 0's server, or a standby that
  // took over.
  bool hostsStore() const;
  // A rank of a job whose store is an etcd cluster (BRAID_STORE, in `env`).
  static StatusOr<std::unique_ptr<Session>> fromEtcd(const bootstrap::LaunchEnv& env, const core::Config& cfg,
                                                     const Status& configError, const AuthKey& key, uint64_t init,
                                                     std::shared_ptr<std::atomic<bool>> cancel);
  // fromEnv with the settings and the launcher's variables read: `configError` says why one
  // of this rank's own settings or its place on the host was refused (`cfg` and `env` then
  // hold the rest), which it joins only to tell the others.
  static StatusOr<std::unique_ptr<Session>> joinFromEnv(bootstrap::LaunchEnv env, core::Config cfg,
                                                        const Status& configError,
                                                        std::shared_ptr<std::atomic<bool>> cancel);
  static StatusOr<std::unique_ptr<Session>> joinGrowWith(std::shared_ptr<bootstrap::Store> store,
                                                         const bootstrap::UniqueId& u, int newSize, int rank,
                                                         const core::Config& cfg, const Status& configError = Status());
  // BRAID_ELASTIC_JOIN=1 (a replacement braidrun started): waits to be admitted, then joins.
  // The admission's grow id names the store this process reached through the environment.
  // An admission whose grow fails with a remote error (a running rank died before joining
  // it) is waited for again, up to kJoinAttempts admissions in all.
  static StatusOr<std::unique_ptr<Session>> joinAsReplacement(std::shared_ptr<bootstrap::Store> store,
                                                              const core::Config& cfg);
  static constexpr int kJoinAttempts = 3;
  // One admission: draws a ticket, waits for the running ranks to admit it, joins the grow.
  static StatusOr<std::unique_ptr<Session>> joinOnce(std::shared_ptr<bootstrap::Store> store, const core::Config& cfg);
  // Rank 0 of growJoiners: the tickets of the replacements to admit now (those found dead
  // are marked gone); every ticket walked is counted settled.
  StatusOr<std::vector<int64_t>> settleJoiners();
  // Records one more live session of this job in the store (see ~Session); nothing unless
  // trackLive_.
  void countLive(int delta);
  // Lets braid-info --status ask this communicator where it is (core/live_status.h), when
  // its store is braid's TCP store and BRAID_LIVE_STATUS allows.
  void announce();
  // Resolves `a.op` (a plain op or a pre-multiplied sum) into `req`.
  // "fn on rank r: ", the prefix of every argument error, built only when one is reported.
  struct CallSite {
    const char* fn;
    int rank;
    std::string str() const { return std::string(fn) + " on rank " + std::to_string(rank) + ": "; }
  };
  // Whether a device call on GPU `device` takes the direct path (under deviceMu_); an error
  // for a BRAID_CUDA_PATH braid does not know.
  StatusOr<bool> takesDirectPath(int device);
  Status resolveOp(const CallArgs& a, algorithms::Request* req, const CallSite& site) const;

  std::shared_ptr<bootstrap::TcpStoreServer> server_;
  std::shared_ptr<bootstrap::TcpStoreServer> standby_;  // the standby for rank 0's server_ (BRAID_STORE_STANDBY)
  // Set where the job keeps a standby at all (rank 0 serves, BRAID_STORE_STANDBY not 0): how
  // long a standby lets the store be silent, how long the store waits for its standby.
  bool standing_ = false;
  double standbySilenceSec_ = 0;
  double standbyWaitSec_ = 0;
  std::shared_ptr<bootstrap::Store> store_;
  std::unique_ptr<core::Communicator> comm_;
  // The key prefix of the communicator every split descends from: its "live" counter
  // tracks every session of the job, children included.
  std::string rootPrefix_ = "braid";
  bool trackLive_ = false;
  bool counted_ = false;
  // When a communicator of this session's family (itself, a parent, its split children,
  // shrunk and grown ones: sessions sharing the store) broke, the latest of those whose
  // sessions have gone; 0 when none has.
  std::shared_ptr<std::atomic<int64_t>> familyBrokenNs_ = std::make_shared<std::atomic<int64_t>>(0);
  bool announced_ = false;  // registered with the live-status responder
  std::mutex deviceMu_;
  std::unique_ptr<device::DeviceQueue> deviceQueue_;  // made by the first device call
  // Shared with the calls captured into CUDA graphs (device_queue.h).
  std::shared_ptr<device::CaptureGuard> captureGuard_ = std::make_shared<device::CaptureGuard>();
  // The direct path (BRAID_CUDA_PATH=direct, device_mover.h), under deviceMu_: 0 not yet
  // decided, 1 taken (mover_ holds the registered slots), 2 not taken.
  int directState_ = 0;
  std::unique_ptr<device::DeviceMover> mover_;
  // BRAID_CUDA_PATH=ipc: the device slots this rank made (its receive connections') and
  // opened (its peers', for its send connections), all in use or none.
  std::vector<void*> slotAreas_;
  std::vector<void*> slotImports_;
  // The connections that registered an area with their NIC (GPUDirect RDMA).
  std::vector<transport::Connection*> slotConns_;
  static constexpr size_t kDeviceAreaAlign = size_t{2} << 20;
  Status setupDeviceSlots(int gpu, bool canTake);
  void dropDeviceSlots();
  // deviceQueue_.get() once made, for host calls to check without taking deviceMu_.
  std::atomic<device::DeviceQueue*> deviceQueueMade_{nullptr};
  mutable std::mutex preMulMu_;
  std::map<int, PreMul> preMuls_;  // by op handle
  // Where this job's store is (host, port, the nonce its HELLO wants, the key), for grow
  // ids; port 0 when the store is the caller's (a foreign store new processes cannot reach).
  bootstrap::UniqueId storeId_;
  uint32_t growCalls_ = 0;  // growJoiners calls on this session, to name each decision
  mutable std::mutex agreeMu_;
  std::vector<int> failedRanks_;  // the last agreement's, under agreeMu_
};

braidResult_t toResult(Code c);

// Starts (once per call) a store server for braidGetUniqueId and fills `id`.
Status createUniqueId(braidUniqueId* id);

}  // namespace braid::api
