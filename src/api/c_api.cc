// The C API: argument checks, then the core; every Status becomes a braidResult_t here and
// its message is kept for braidGetLastError.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "api/session.h"
#include "braid/braid.h"
#include "core/config.h"

struct braidComm {
  // Set once joined; a non-blocking init sets it on its own thread, then `joined`.
  std::unique_ptr<braid::api::Session> session;
  std::mutex mu;
  std::string lastError;
  bool blocking = true;
  // Non-blocking mode: the init's thread (joined before anything else goes), its outcome,
  // and the calls that run in the background until braidCommGetAsyncError reaps them.
  std::thread joiner;
  std::atomic<bool> joined{true};
  std::shared_ptr<std::atomic<bool>> cancel;
  braid::Status initError;                                // under mu
  std::vector<std::shared_ptr<braid::core::Op>> pending;  // under mu
  braid::Status asyncError;                               // under mu: a background call's failure

  ~braidComm() {
    if (joiner.joinable()) joiner.join();
    // Background calls end before their communicator does.
    for (auto& op : pending) (void)op->wait();
  }
};

namespace {

using braid::Code;
using braid::Status;
using braid::api::Session;
using braid::api::toResult;

thread_local std::string tlsLastError;

// The message braidGetLastError shows: the code itself is the return value; a fixed,
// parseable suffix lets C callers (and tests) tell which peer failed.
std::string errorText(const Status& s) {
  std::string msg = s.message();
  if (s.rank() >= 0 && (s.code() == Code::kRemoteError || s.code() == Code::kTimeout || s.code() == Code::kAborted))
    msg += " (failed rank " + std::to_string(s.rank()) + ")";
  return msg;
}

braidResult_t report(braidComm_t comm, const Status& s) {
  if (s.isOk()) return braidSuccess;
  if (s.code() == Code::kInProgress) return braidInProgress;  // not an error: nothing to keep
  std::string msg = errorText(s);
  if (comm) {
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->lastError = msg;
  }
  tlsLastError = msg;
  return toResult(s.code());
}

// Runs `f` (returning a Status) so that nothing escapes into C callers; allocation failure
// is the only way C++ code below can throw.
template <typename F>
braidResult_t guarded(braidComm_t comm, F&& f) {
  try {
    return report(comm, f());
  } catch (const std::bad_alloc&) {
    return report(comm, Status(Code::kSystemError, "out of memory"));
  } catch (...) {
    return report(comm, Status(Code::kInternal, "unexpected exception"));
  }
}

template <typename MakeSession>
braidResult_t initComm(braidComm_t* comm, const char* fn, MakeSession&& make) {
  if (!comm) return report(nullptr, braid::invalidArgument(std::string(fn) + ": comm is NULL"));
  *comm = nullptr;
  return guarded(nullptr, [&]() -> Status {
    auto s = make();
    if (!s.isOk()) return s.status().withContext(fn);
    auto* c = new braidComm();
    c->session = std::move(s).value();
    *comm = c;
    return Status::ok();
  });
}

Status nullComm(const char* fn) { return braid::invalidArgument(std::string(fn) + ": comm is NULL"); }

// Whether `comm` can be used: joined, and joined successfully (a non-blocking init may still
// run, or have failed).
Status ready(braidComm_t comm, const char* fn) {
  if (!comm->joined.load(std::memory_order_acquire))
    return braid::invalidArgument(std::string(fn) +
                                  ": the communicator is still joining (non-blocking init); poll "
                                  "braidCommGetAsyncError until it no longer returns braidInProgress");
  if (!comm->session) {
    std::lock_guard<std::mutex> lock(comm->mu);
    return Status(comm->initError.code(), std::string(fn) + ": the communicator failed to join: " +
                                              comm->initError.message(), comm->initError.rank());
  }
  return Status::ok();
}

// A bad argument of a call on a valid communicator: the message names the rank as well.
Status badArg(braidComm_t comm, const char* fn, const std::string& what) {
  const bool known = comm->joined.load(std::memory_order_acquire) && comm->session;
  return braid::invalidArgument(std::string(fn) + " on rank " +
                                (known ? std::to_string(comm->session->comm().rank()) : std::string("?")) + ": " +
                                what);
}

// Non-blocking mode: keeps `op` for braidCommGetAsyncError and says braidInProgress, unless
// it finished already.
braidResult_t inBackground(braidComm_t comm, const std::shared_ptr<braid::core::Op>& op) {
  Status s;
  if (op->test(&s)) {
    if (s.isOk()) return braidSuccess;
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->asyncError.isOk()) comm->asyncError = s;
    return braidSuccess;  // reported by braidCommGetAsyncError, as a failure in the background
  }
  std::lock_guard<std::mutex> lock(comm->mu);
  comm->pending.push_back(op);
  return braidInProgress;
}

// The settings a config and the environment give a new communicator.
struct InitMode {
  bool blocking = true;
  double timeoutSec = 0;  // 0: BRAID_TIMEOUT
};

Status initMode(const braidConfig_t* config, const char* fn, InitMode* m) {
  auto env = braid::core::Config::fromEnv();
  m->blocking = env.isOk() ? env.value().blocking : true;  // a bad variable fails the join itself
  if (!config) return Status::ok();
  const std::string where = std::string(fn) + ": config";
  if (config->magic != BRAID_CONFIG_MAGIC || config->size < offsetof(braidConfig_t, timeoutSeconds) + sizeof(int))
    return braid::invalidArgument(where + " was not set up with BRAID_CONFIG_INITIALIZER");
  if (config->blocking != BRAID_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1)
      return braid::invalidArgument(where + "->blocking=" + std::to_string(config->blocking) + " must be 0 or 1");
    m->blocking = config->blocking == 1;
  }
  if (config->timeoutSeconds != BRAID_CONFIG_UNDEF_INT) {
    if (config->timeoutSeconds <= 0)
      return braid::invalidArgument(where + "->timeoutSeconds=" + std::to_string(config->timeoutSeconds) +
                                    " must be positive");
    m->timeoutSec = config->timeoutSeconds;
  }
  return Status::ok();
}

// Creates the communicator with `make(timeoutSec, cancel)`: at once, or on a thread of its
// own in non-blocking mode (*comm is then set at once and the call says braidInProgress).
template <typename MakeSession>
braidResult_t initConfigured(braidComm_t* comm, const char* fn, const braidConfig_t* config, MakeSession make) {
  if (!comm) return report(nullptr, braid::invalidArgument(std::string(fn) + ": comm is NULL"));
  *comm = nullptr;
  InitMode mode;
  Status bad = initMode(config, fn, &mode);
  if (!bad.isOk()) return report(nullptr, bad);
  if (mode.blocking) {
    return initComm(comm, fn, [&] { return make(mode.timeoutSec, nullptr); });
  }
  return guarded(nullptr, [&]() -> Status {
    auto* c = new braidComm();
    c->blocking = false;
    c->joined.store(false);
    c->cancel = std::make_shared<std::atomic<bool>>(false);
    c->joiner = std::thread([c, make, fn, timeoutSec = mode.timeoutSec] {
      braid::StatusOr<std::unique_ptr<Session>> s = Status(braid::Code::kInternal, "not joined");
      try {
        s = make(timeoutSec, c->cancel);
      } catch (const std::bad_alloc&) {
        s = Status(braid::Code::kSystemError, "out of memory");
      }
      std::lock_guard<std::mutex> lock(c->mu);
      if (s.isOk()) c->session = std::move(s).value();
      else c->initError = s.status().withContext(fn);
      c->joined.store(true, std::memory_order_release);
    });
    *comm = c;
    return Status(braid::Code::kInProgress, "");
  });
}

using braid::algorithms::Collective;
using braid::api::Call;
using braid::api::CallArgs;
using braid::api::P2PMessage;

// ---- groups
// braidGroupStart/End are per thread and nest. Inside a group each call is checked and
// recorded per communicator, in issue order; the outermost braidGroupEnd runs them.
struct GroupEntry {
  braidComm_t comm = nullptr;
  std::vector<Call> collectives;
  std::vector<P2PMessage> p2p;
  Status error;  // the first error a recorded call returned; the group then runs nothing here
};
struct GroupState {
  int depth = 0;
  std::vector<GroupEntry> entries;  // in the order communicators first appeared
};
thread_local GroupState tlsGroup;

GroupEntry& groupEntry(braidComm_t comm) {
  for (GroupEntry& e : tlsGroup.entries)
    if (e.comm == comm) return e;
  tlsGroup.entries.emplace_back();
  tlsGroup.entries.back().comm = comm;
  return tlsGroup.entries.back();
}

// Inside a group, keeps the first failure of a recorded call for braidGroupEnd.
Status noteInGroup(braidComm_t comm, const Status& s) {
  if (!s.isOk()) {
    GroupEntry& e = groupEntry(comm);
    if (e.error.isOk()) e.error = s;
  }
  return s;
}

// Checks a collective, then runs it, or records it inside a group.
braidResult_t collective(braidComm_t comm, const CallArgs& a) {
  if (!comm) return report(nullptr, nullComm(a.fn));
  return guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(ready(comm, a.fn));
    const bool grouped = tlsGroup.depth > 0;
    // A loop repeating one call skips its checks and preparation, done the first time.
    Status repeated;
    if (!grouped && comm->blocking && comm->session->runRepeated(a, &repeated)) return repeated;
    Call call;
    Status s = comm->session->prepare(a, &call);
    if (grouped) {
      if (!s.isOk()) return noteInGroup(comm, s);
      groupEntry(comm).collectives.push_back(std::move(call));
      return Status::ok();
    }
    if (!s.isOk()) return s;
    if (!comm->blocking && !call.onDevice) {
      auto op = comm->session->submit(std::move(call));
      if (!op.isOk()) return op.status();
      return inBackground(comm, op.value()) == braidInProgress ? Status(Code::kInProgress, "") : Status::ok();
    }
    return comm->session->run(std::move(call));
  });
}

// A send or receive: recorded inside a group, else run as a group of one.
braidResult_t pointToPoint(braidComm_t comm, const char* fn, bool isSend, const void* buf, size_t count,
                           braidDataType_t datatype, int peer, braidStream_t stream) {
  if (!comm) return report(nullptr, nullComm(fn));
  return guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(ready(comm, fn));
    auto m = comm->session->prepareP2P(fn, isSend, buf, count, datatype, peer, stream);
    if (tlsGroup.depth > 0) {
      if (!m.isOk()) return noteInGroup(comm, m.status());
      std::vector<P2PMessage>& p2p = groupEntry(comm).p2p;
      if (p2p.empty()) p2p.reserve(4);  // a send and a receive, mostly: one allocation
      p2p.push_back(m.value());
      return Status::ok();
    }
    if (!m.isOk()) return m.status();
    if (!comm->blocking && !m.value().onDevice) {
      auto op = comm->session->submit(Session::p2pCall({m.value()}, fn));
      if (!op.isOk()) return op.status();
      return inBackground(comm, op.value()) == braidInProgress ? Status(Code::kInProgress, "") : Status::ok();
    }
    return comm->session->run(Session::p2pCall({m.value()}, fn));
  });
}

// Runs a finished group: per communicator its collectives in issue order, then all its
// sends and receives as one request. Everything is queued before anything is waited for,
// so communicators progress independently. Returns one Status per entry.
std::vector<Status> runGroup(std::vector<GroupEntry>& entries) {
  struct Pending {
    size_t entry;
    std::shared_ptr<braid::core::Op> op;
    std::string name;
  };
  std::vector<Status> result(entries.size());
  // One blocking communicator: its calls run one after the other on this thread, as they
  // would from its queue, without waking a progress thread for each (the wake-up was most of
  // a small group's time). Several communicators must progress at once, so they queue.
  if (entries.size() == 1 && entries[0].comm->blocking && entries[0].error.isOk()) {
    GroupEntry& e = entries[0];
    auto runOne = [&](Call&& c) {
      const char* name = c.name;
      Status st = e.comm->session->run(std::move(c));
      if (!st.isOk()) result[0] = st.withContext(name);
      return st.isOk();  // after a failure, later calls would only meet peers out of step
    };
    for (Call& c : e.collectives)
      if (!runOne(std::move(c))) return result;
    if (!e.p2p.empty()) runOne(Session::p2pCall(e.p2p, "braidGroupEnd (sends and receives)"));
    return result;
  }
  std::vector<Pending> pending;
  for (size_t i = 0; i < entries.size(); ++i) {
    GroupEntry& e = entries[i];
    if (!e.error.isOk()) {
      result[i] = e.error;
      continue;
    }
    std::vector<Call> calls = std::move(e.collectives);
    if (!e.p2p.empty()) calls.push_back(Session::p2pCall(e.p2p, "braidGroupEnd (sends and receives)"));
    for (Call& c : calls) {
      std::string name = c.name;
      if (c.onDevice || !c.invalid.isOk()) {
        // Enqueued on its stream; completes there, in issue order with the rest.
        Status st = e.comm->session->run(std::move(c));
        if (!st.isOk()) {
          result[i] = st.withContext(name);
          break;
        }
        continue;
      }
      auto op = e.comm->session->submit(std::move(c));
      if (!op.isOk()) {
        result[i] = op.status().withContext(name);
        break;  // later calls would only meet peers out of step
      }
      pending.push_back(Pending{i, op.value(), name});
    }
  }
  for (Pending& p : pending) {
    braidComm_t comm = entries[p.entry].comm;
    if (!comm->blocking) {
      // In the background; the group's result says so unless something failed already.
      if (inBackground(comm, p.op) == braidInProgress && result[p.entry].isOk())
        result[p.entry] = Status(Code::kInProgress, "");
      continue;
    }
    Status s = p.op->wait();
    if (!s.isOk() && result[p.entry].isOk()) result[p.entry] = s.withContext(p.name);
  }
  return result;
}

// Forgets what this thread recorded for `comm`, which is going away.
void dropFromGroup(braidComm_t comm) {
  auto& v = tlsGroup.entries;
  v.erase(std::remove_if(v.begin(), v.end(), [&](const GroupEntry& e) { return e.comm == comm; }), v.end());
}

}  // namespace

extern "C" {

braidResult_t braidGetVersion(int* version) {
  if (!version) return report(nullptr, braid::invalidArgument("braidGetVersion: version is NULL"));
  *version = BRAID_VERSION_CODE;
  return braidSuccess;
}

braidResult_t braidGetUniqueId(braidUniqueId* uniqueId) {
  if (!uniqueId) return report(nullptr, braid::invalidArgument("braidGetUniqueId: uniqueId is NULL"));
  return guarded(nullptr, [&] { return braid::api::createUniqueId(uniqueId).withContext("braidGetUniqueId"); });
}

namespace {
braidResult_t initRank(braidComm_t* comm, const char* fn, int nranks, const braidUniqueId& id, int rank,
                       const braidConfig_t* config) {
  // Checked here, so that a non-blocking init reports them at once too.
  if (nranks < 1)
    return report(nullptr, braid::invalidArgument(std::string(fn) + ": nranks=" + std::to_string(nranks) +
                                                  " must be at least 1"));
  if (rank < 0 || rank >= nranks)
    return report(nullptr, braid::invalidArgument(std::string(fn) + ": rank=" + std::to_string(rank) +
                                                  " is outside [0, nranks=" + std::to_string(nranks) + ")"));
  return initConfigured(comm, fn, config,
                        [id, nranks, rank](double timeoutSec, std::shared_ptr<std::atomic<bool>> cancel) {
                          return Session::fromUniqueId(id, nranks, rank, timeoutSec, std::move(cancel));
                        });
}
}  // namespace

braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId commId, int rank) {
  return initRank(comm, "braidCommInitRank", nranks, commId, rank, nullptr);
}

braidResult_t braidCommInitRankConfig(braidComm_t* comm, int nranks, braidUniqueId commId, int rank,
                                      const braidConfig_t* config) {
  return initRank(comm, "braidCommInitRankConfig", nranks, commId, rank, config);
}

braidResult_t braidCommInitFromEnv(braidComm_t* comm) { return braidCommInitFromEnvConfig(comm, nullptr); }

braidResult_t braidCommInitFromEnvConfig(braidComm_t* comm, const braidConfig_t* config) {
  return initConfigured(comm, config ? "braidCommInitFromEnvConfig" : "braidCommInitFromEnv", config,
                        [](double timeoutSec, std::shared_ptr<std::atomic<bool>> cancel) {
                          return Session::fromEnv(timeoutSec, std::move(cancel));
                        });
}

braidResult_t braidCommDestroy(braidComm_t comm) {
  if (!comm) return report(nullptr, nullComm("braidCommDestroy"));
  dropFromGroup(comm);
  delete comm;
  return braidSuccess;
}

braidResult_t braidCommAbort(braidComm_t comm) {
  if (!comm) return report(nullptr, nullComm("braidCommAbort"));
  dropFromGroup(comm);
  if (comm->cancel) comm->cancel->store(true);
  if (comm->joiner.joinable()) comm->joiner.join();
  if (comm->session) comm->session->abort();
  delete comm;
  return braidSuccess;
}

braidResult_t braidCommGetAsyncError(braidComm_t comm, braidResult_t* asyncError) {
  if (!comm) return report(nullptr, nullComm("braidCommGetAsyncError"));
  if (!asyncError) return report(comm, badArg(comm, "braidCommGetAsyncError", "asyncError is NULL"));
  if (!comm->joined.load(std::memory_order_acquire)) {
    *asyncError = braidInProgress;
    return braidSuccess;
  }
  Status s = ready(comm, "braidCommGetAsyncError");
  if (s.isOk()) {
    // Reaps the background calls that finished: the first failure stays.
    std::lock_guard<std::mutex> lock(comm->mu);
    auto& v = comm->pending;
    v.erase(std::remove_if(v.begin(), v.end(),
                           [&](const std::shared_ptr<braid::core::Op>& op) {
                             Status done;
                             if (!op->test(&done)) return false;
                             if (!done.isOk() && comm->asyncError.isOk()) comm->asyncError = done;
                             return true;
                           }),
            v.end());
    if (!comm->asyncError.isOk()) s = comm->asyncError;
    else if (!v.empty()) s = Status(Code::kInProgress, "");
  }
  if (s.isOk()) s = comm->session->asyncError();
  if (s.code() == Code::kInProgress) {
    *asyncError = braidInProgress;
    return braidSuccess;
  }
  *asyncError = s.isOk() ? braidSuccess : braid::api::toResult(s.code());
  if (!s.isOk()) {
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->lastError = errorText(s);
  }
  return braidSuccess;
}

braidResult_t braidCommCount(const braidComm_t comm, int* count) {
  if (!comm) return report(nullptr, nullComm("braidCommCount"));
  if (!count) return report(comm, badArg(comm, "braidCommCount", "count is NULL"));
  if (Status r = ready(comm, "braidCommCount"); !r.isOk()) return report(comm, r);
  *count = comm->session->comm().size();
  return braidSuccess;
}

braidResult_t braidCommUserRank(const braidComm_t comm, int* rank) {
  if (!comm) return report(nullptr, nullComm("braidCommUserRank"));
  if (!rank) return report(comm, badArg(comm, "braidCommUserRank", "rank is NULL"));
  if (Status r = ready(comm, "braidCommUserRank"); !r.isOk()) return report(comm, r);
  *rank = comm->session->comm().rank();
  return braidSuccess;
}

const char* braidGetErrorString(braidResult_t result) {
  switch (result) {
    case braidSuccess: return "no error";
    case braidInvalidArgument: return "invalid argument";
    case braidSystemError: return "system error";
    case braidRemoteError: return "remote error (a peer failed or disconnected)";
    case braidTimeout: return "timeout (a peer made no progress)";
    case braidAborted: return "aborted";
    case braidInternalError: return "internal error";
    case braidInProgress: return "operation in progress";
    case braidRevoked: return "communicator revoked (shrink it, or destroy it)";
  }
  return "unknown result code";
}

const char* braidGetLastError(braidComm_t comm) {
  if (!comm) return tlsLastError.c_str();
  // The string lives in the communicator; copy it to thread-local storage so that a
  // concurrent error on another thread cannot change it under the caller.
  std::lock_guard<std::mutex> lock(comm->mu);
  tlsLastError = comm->lastError;
  return tlsLastError.c_str();
}

// ---- collectives: each fills CallArgs with the C names of its arguments (for messages).

}  // extern "C": the helper below returns a C++ type

namespace {
CallArgs args(Collective coll, const char* fn, const void* send, void* recv, size_t count, braidDataType_t dt,
              braidStream_t stream) {
  CallArgs a;
  a.coll = coll;
  a.fn = fn;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dt;
  a.stream = stream;
  return a;
}
}  // namespace

extern "C" {

braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                             braidRedOp_t op, braidComm_t comm, braidStream_t stream) {
  CallArgs a = args(Collective::kAllReduce, "braidAllReduce", sendbuff, recvbuff, count, datatype, stream);
  a.op = op;
  return collective(comm, a);
}

braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                             braidComm_t comm, braidStream_t stream) {
  CallArgs a = args(Collective::kBroadcast, "braidBroadcast", sendbuff, recvbuff, count, datatype, stream);
  a.root = root;
  return collective(comm, a);
}

braidResult_t braidReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                          braidRedOp_t op, int root, braidComm_t comm, braidStream_t stream) {
  CallArgs a = args(Collective::kReduce, "braidReduce", sendbuff, recvbuff, count, datatype, stream);
  a.op = op;
  a.root = root;
  return collective(comm, a);
}

braidResult_t braidAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, braidDataType_t datatype,
                             braidComm_t comm, braidStream_t stream) {
  CallArgs a = args(Collective::kAllGather, "braidAllGather", sendbuff, recvbuff, sendcount, datatype, stream);
  a.countName = "sendcount";
  return collective(comm, a);
}

braidResult_t braidReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, braidDataType_t datatype,
                                 braidRedOp_t op, braidComm_t comm, braidStream_t stream) {
  CallArgs a = args(Collective::kReduceScatter, "braidReduceScatter", sendbuff, recvbuff, recvcount, datatype, stream);
  a.countName = "recvcount";
  a.op = op;
  return collective(comm, a);
}

braidResult_t braidAllToAll(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                            braidComm_t comm, braidStream_t stream) {
  return collective(comm, args(Collective::kAllToAll, "braidAllToAll", sendbuff, recvbuff, count, datatype, stream));
}

braidResult_t braidGather(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                          braidComm_t comm, braidStream_t stream) {
  CallArgs a = args(Collective::kGather, "braidGather", sendbuff, recvbuff, count, datatype, stream);
  a.root = root;
  return collective(comm, a);
}

braidResult_t braidScatter(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                           braidComm_t comm, braidStream_t stream) {
  CallArgs a = args(Collective::kScatter, "braidScatter", sendbuff, recvbuff, count, datatype, stream);
  a.root = root;
  return collective(comm, a);
}

braidResult_t braidAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts,
                              const size_t* displs, braidDataType_t datatype, braidComm_t comm,
                              braidStream_t stream) {
  CallArgs a = args(Collective::kAllGatherV, "braidAllGatherV", sendbuff, recvbuff, sendcount, datatype, stream);
  a.countName = "sendcount";
  a.recvCounts = recvcounts;
  a.recvDispls = displs;
  return collective(comm, a);
}

braidResult_t braidReduceScatterV(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                  braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                                  braidStream_t stream) {
  CallArgs a = args(Collective::kReduceScatterV, "braidReduceScatterV", sendbuff, recvbuff, 0, datatype, stream);
  a.countName = "recvcounts";
  a.recvCounts = recvcounts;
  a.op = op;
  return collective(comm, a);
}

braidResult_t braidAllToAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls, void* recvbuff,
                             const size_t* recvcounts, const size_t* rdispls, braidDataType_t datatype,
                             braidComm_t comm, braidStream_t stream) {
  CallArgs a = args(Collective::kAllToAllV, "braidAllToAllV", sendbuff, recvbuff, 0, datatype, stream);
  a.sendCounts = sendcounts;
  a.sendDispls = sdispls;
  a.recvCounts = recvcounts;
  a.recvDispls = rdispls;
  return collective(comm, a);
}

braidResult_t braidBarrier(braidComm_t comm) {
  return collective(comm, args(Collective::kBarrier, "braidBarrier", nullptr, nullptr, 0, braidUint8, nullptr));
}

// ---- point to point and groups

braidResult_t braidSend(const void* sendbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                        braidStream_t stream) {
  return pointToPoint(comm, "braidSend", /*isSend=*/true, sendbuff, count, datatype, peer, stream);
}

braidResult_t braidRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                        braidStream_t stream) {
  return pointToPoint(comm, "braidRecv", /*isSend=*/false, recvbuff, count, datatype, peer, stream);
}

braidResult_t braidGroupStart(void) {
  ++tlsGroup.depth;
  return braidSuccess;
}

braidResult_t braidGroupEnd(void) {
  if (tlsGroup.depth == 0)
    return report(nullptr, braid::invalidArgument("braidGroupEnd: no braidGroupStart to match on this thread"));
  if (--tlsGroup.depth > 0) return braidSuccess;
  // Taken out first: whatever happens below, the next group starts empty.
  std::vector<GroupEntry> entries = std::move(tlsGroup.entries);
  tlsGroup.entries.clear();
  std::vector<Status> statuses;
  braidResult_t rc = guarded(nullptr, [&]() -> Status {
    statuses = runGroup(entries);
    return Status::ok();
  });
  if (rc != braidSuccess) return rc;
  // Each failing communicator keeps its own error; walking backwards leaves the first
  // failure as the one braidGetLastError(NULL) shows.
  braidResult_t first = braidSuccess;
  bool background = false;
  for (size_t i = entries.size(); i-- > 0;) {
    if (statuses[i].code() == Code::kInProgress) background = true;
    else if (!statuses[i].isOk()) first = report(entries[i].comm, statuses[i]);
  }
  return first == braidSuccess && background ? braidInProgress : first;
}

// ---- communicators derived from others, and reduction ops

braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm) {
  if (!comm) return report(nullptr, nullComm("braidCommSplit"));
  if (!newcomm) return report(comm, badArg(comm, "braidCommSplit", "newcomm is NULL"));
  *newcomm = nullptr;
  if (Status r = ready(comm, "braidCommSplit"); !r.isOk()) return report(comm, r);
  return guarded(comm, [&]() -> Status {
    auto child = comm->session->split("braidCommSplit", color, key);
    if (!child.isOk()) return child.status();
    if (!child.value()) return Status::ok();  // BRAID_SPLIT_NOCOLOR
    auto* c = new braidComm();
    c->session = std::move(child).value();
    c->blocking = comm->blocking;
    *newcomm = c;
    return Status::ok();
  });
}

braidResult_t braidCommRevoke(braidComm_t comm) {
  if (!comm) return report(nullptr, nullComm("braidCommRevoke"));
  if (Status r = ready(comm, "braidCommRevoke"); !r.isOk()) return report(comm, r);
  return guarded(comm, [&] {
    comm->session->revoke();
    return Status::ok();
  });
}

braidResult_t braidCommShrink(braidComm_t comm, const int* excludeRanks, int excludeCount, braidComm_t* newcomm,
                              int flags) {
  if (!comm) return report(nullptr, nullComm("braidCommShrink"));
  if (!newcomm) return report(comm, badArg(comm, "braidCommShrink", "newcomm is NULL"));
  *newcomm = nullptr;
  if (excludeCount < 0)
    return report(comm, badArg(comm, "braidCommShrink", "excludeCount=" + std::to_string(excludeCount) + " is negative"));
  if (excludeCount > 0 && !excludeRanks)
    return report(comm, badArg(comm, "braidCommShrink",
                               "excludeRanks is NULL with excludeCount=" + std::to_string(excludeCount)));
  if (flags != BRAID_SHRINK_DEFAULT && flags != BRAID_SHRINK_ABORT)
    return report(comm, badArg(comm, "braidCommShrink",
                               "flags=" + std::to_string(flags) + " is not BRAID_SHRINK_DEFAULT or BRAID_SHRINK_ABORT"));
  if (Status r = ready(comm, "braidCommShrink"); !r.isOk()) return report(comm, r);
  return guarded(comm, [&]() -> Status {
    std::vector<int> exclude(excludeRanks, excludeRanks + excludeCount);
    auto child = comm->session->shrink("braidCommShrink", exclude, flags == BRAID_SHRINK_ABORT);
    if (!child.isOk()) return child.status();
    auto* c = new braidComm();
    c->session = std::move(child).value();
    c->blocking = comm->blocking;
    *newcomm = c;
    return Status::ok();
  });
}

braidResult_t braidCommAgree(braidComm_t comm, int* flag) {
  if (!comm) return report(nullptr, nullComm("braidCommAgree"));
  if (!flag) return report(comm, badArg(comm, "braidCommAgree", "flag is NULL"));
  if (Status r = ready(comm, "braidCommAgree"); !r.isOk()) return report(comm, r);
  return guarded(comm, [&] { return comm->session->agree("braidCommAgree", flag); });
}

braidResult_t braidCommGetFailedRanks(braidComm_t comm, int* failedRanks, int capacity, int* count) {
  if (!comm) return report(nullptr, nullComm("braidCommGetFailedRanks"));
  if (!count) return report(comm, badArg(comm, "braidCommGetFailedRanks", "count is NULL"));
  if (capacity < 0)
    return report(comm, badArg(comm, "braidCommGetFailedRanks", "capacity=" + std::to_string(capacity) + " is negative"));
  if (capacity > 0 && !failedRanks)
    return report(comm, badArg(comm, "braidCommGetFailedRanks",
                               "failedRanks is NULL with capacity=" + std::to_string(capacity)));
  if (Status r = ready(comm, "braidCommGetFailedRanks"); !r.isOk()) return report(comm, r);
  return guarded(comm, [&] {
    std::vector<int> failed = comm->session->failedRanks();
    for (size_t i = 0; i < failed.size() && i < static_cast<size_t>(capacity); ++i) failedRanks[i] = failed[i];
    *count = static_cast<int>(failed.size());
    return Status::ok();
  });
}

braidResult_t braidCommGetGrowId(braidComm_t comm, int newSize, braidUniqueId* growId) {
  if (!comm) return report(nullptr, nullComm("braidCommGetGrowId"));
  if (!growId) return report(comm, badArg(comm, "braidCommGetGrowId", "growId is NULL"));
  if (Status r = ready(comm, "braidCommGetGrowId"); !r.isOk()) return report(comm, r);
  return guarded(comm, [&] { return comm->session->growId(newSize, growId); });
}

braidResult_t braidCommGrow(braidComm_t comm, int newSize, const braidUniqueId* growId, int rank,
                            braidComm_t* newcomm) {
  const char* fn = "braidCommGrow";
  if (!newcomm) return report(comm, comm ? badArg(comm, fn, "newcomm is NULL") : braid::invalidArgument(std::string(fn) + ": newcomm is NULL"));
  *newcomm = nullptr;
  if (!growId)
    return report(comm, comm ? badArg(comm, fn, "growId is NULL") : braid::invalidArgument(std::string(fn) + ": growId is NULL"));
  if (comm) {
    if (Status r = ready(comm, fn); !r.isOk()) return report(comm, r);
  }
  return guarded(comm, [&]() -> Status {
    auto child = comm ? comm->session->grow(fn, newSize, *growId) : Session::joinGrow(fn, newSize, *growId, rank);
    if (!child.isOk()) return child.status();
    auto* c = new braidComm();
    c->session = std::move(child).value();
    if (comm) c->blocking = comm->blocking;
    *newcomm = c;
    return Status::ok();
  });
}

braidResult_t braidCommGetJoiners(braidComm_t comm, int* waiting) {
  if (!comm) return report(nullptr, nullComm("braidCommGetJoiners"));
  if (!waiting) return report(comm, badArg(comm, "braidCommGetJoiners", "waiting is NULL"));
  if (Status r = ready(comm, "braidCommGetJoiners"); !r.isOk()) return report(comm, r);
  return guarded(comm, [&]() -> Status {
    auto n = comm->session->joinersWaiting();
    if (!n.isOk()) return n.status().withContext("braidCommGetJoiners");
    *waiting = n.value();
    return Status::ok();
  });
}

braidResult_t braidCommGrowJoiners(braidComm_t comm, braidComm_t* newcomm) {
  if (!comm) return report(nullptr, nullComm("braidCommGrowJoiners"));
  if (!newcomm) return report(comm, badArg(comm, "braidCommGrowJoiners", "newcomm is NULL"));
  *newcomm = nullptr;
  if (Status r = ready(comm, "braidCommGrowJoiners"); !r.isOk()) return report(comm, r);
  return guarded(comm, [&]() -> Status {
    auto child = comm->session->growJoiners("braidCommGrowJoiners");
    if (!child.isOk()) return child.status();
    if (!child.value()) return Status::ok();
    auto* c = new braidComm();
    c->session = std::move(child).value();
    c->blocking = comm->blocking;
    *newcomm = c;
    return Status::ok();
  });
}

braidResult_t braidCommGetEpoch(braidComm_t comm, int* epoch) {
  if (!comm) return report(nullptr, nullComm("braidCommGetEpoch"));
  if (!epoch) return report(comm, badArg(comm, "braidCommGetEpoch", "epoch is NULL"));
  if (Status r = ready(comm, "braidCommGetEpoch"); !r.isOk()) return report(comm, r);
  *epoch = comm->session->comm().epoch();
  return braidSuccess;
}

braidResult_t braidRedOpCreatePreMulSum(braidRedOp_t* op, void* scalar, braidDataType_t datatype, braidComm_t comm) {
  if (!comm) return report(nullptr, nullComm("braidRedOpCreatePreMulSum"));
  if (!op) return report(comm, badArg(comm, "braidRedOpCreatePreMulSum", "op is NULL"));
  if (Status r = ready(comm, "braidRedOpCreatePreMulSum"); !r.isOk()) return report(comm, r);
  return guarded(comm, [&]() -> Status {
    auto v = comm->session->createPreMulSum(scalar, datatype);
    if (!v.isOk()) return v.status();
    *op = static_cast<braidRedOp_t>(v.value());
    return Status::ok();
  });
}

braidResult_t braidRedOpDestroy(braidRedOp_t op, braidComm_t comm) {
  if (!comm) return report(nullptr, nullComm("braidRedOpDestroy"));
  if (Status r = ready(comm, "braidRedOpDestroy"); !r.isOk()) return report(comm, r);
  return guarded(comm, [&] { return comm->session->destroyPreMulSum(op); });
}

}  // extern "C"
