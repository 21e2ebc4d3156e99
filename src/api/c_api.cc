// The C API: argument checks, then the core; every Status becomes a braidResult_t here and
// its message is kept for braidGetLastError.

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "api/session.h"
#include "braid/braid.h"

struct braidComm {
  std::unique_ptr<braid::api::Session> session;
  std::mutex mu;
  std::string lastError;
};

namespace {

using braid::Code;
using braid::Status;
using braid::api::Session;
using braid::api::toResult;

thread_local std::string tlsLastError;

braidResult_t report(braidComm_t comm, const Status& s) {
  if (s.isOk()) return braidSuccess;
  std::string msg = s.message();  // the code itself is the return value
  // A fixed, parseable suffix lets C callers (and tests) tell which peer failed.
  if (s.rank() >= 0 && (s.code() == Code::kRemoteError || s.code() == Code::kTimeout || s.code() == Code::kAborted))
    msg += " (failed rank " + std::to_string(s.rank()) + ")";
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

// A bad argument of a call on a valid communicator: the message names the rank as well.
Status badArg(braidComm_t comm, const char* fn, const std::string& what) {
  return braid::invalidArgument(std::string(fn) + " on rank " + std::to_string(comm->session->comm().rank()) + ": " +
                                what);
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
    Call call;
    Status s = comm->session->prepare(a, &call);
    if (tlsGroup.depth > 0) {
      if (!s.isOk()) return noteInGroup(comm, s);
      groupEntry(comm).collectives.push_back(std::move(call));
      return Status::ok();
    }
    if (!s.isOk()) return s;
    return comm->session->run(std::move(call));
  });
}

// A send or receive: recorded inside a group, else run as a group of one.
braidResult_t pointToPoint(braidComm_t comm, const char* fn, bool isSend, const void* buf, size_t count,
                           braidDataType_t datatype, int peer, braidStream_t stream) {
  if (!comm) return report(nullptr, nullComm(fn));
  return guarded(comm, [&]() -> Status {
    auto m = comm->session->prepareP2P(fn, isSend, buf, count, datatype, peer, stream);
    if (tlsGroup.depth > 0) {
      if (!m.isOk()) return noteInGroup(comm, m.status());
      groupEntry(comm).p2p.push_back(m.value());
      return Status::ok();
    }
    if (!m.isOk()) return m.status();
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

braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId commId, int rank) {
  return initComm(comm, "braidCommInitRank", [&] { return Session::fromUniqueId(commId, nranks, rank); });
}

braidResult_t braidCommInitFromEnv(braidComm_t* comm) {
  return initComm(comm, "braidCommInitFromEnv", [] { return Session::fromEnv(); });
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
  comm->session->abort();
  delete comm;
  return braidSuccess;
}

braidResult_t braidCommGetAsyncError(braidComm_t comm, braidResult_t* asyncError) {
  if (!comm) return report(nullptr, nullComm("braidCommGetAsyncError"));
  if (!asyncError) return report(comm, badArg(comm, "braidCommGetAsyncError", "asyncError is NULL"));
  Status s = comm->session->asyncError();
  *asyncError = s.isOk() ? braidSuccess : braid::api::toResult(s.code());
  if (!s.isOk()) {
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->lastError = s.message();
  }
  return braidSuccess;
}

braidResult_t braidCommCount(const braidComm_t comm, int* count) {
  if (!comm) return report(nullptr, nullComm("braidCommCount"));
  if (!count) return report(comm, badArg(comm, "braidCommCount", "count is NULL"));
  *count = comm->session->comm().size();
  return braidSuccess;
}

braidResult_t braidCommUserRank(const braidComm_t comm, int* rank) {
  if (!comm) return report(nullptr, nullComm("braidCommUserRank"));
  if (!rank) return report(comm, badArg(comm, "braidCommUserRank", "rank is NULL"));
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
  for (size_t i = entries.size(); i-- > 0;)
    if (!statuses[i].isOk()) first = report(entries[i].comm, statuses[i]);
  return first;
}

// ---- communicators derived from others, and reduction ops

braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm) {
  if (!comm) return report(nullptr, nullComm("braidCommSplit"));
  if (!newcomm) return report(comm, badArg(comm, "braidCommSplit", "newcomm is NULL"));
  *newcomm = nullptr;
  return guarded(comm, [&]() -> Status {
    auto child = comm->session->split("braidCommSplit", color, key);
    if (!child.isOk()) return child.status();
    if (!child.value()) return Status::ok();  // BRAID_SPLIT_NOCOLOR
    auto* c = new braidComm();
    c->session = std::move(child).value();
    *newcomm = c;
    return Status::ok();
  });
}

braidResult_t braidRedOpCreatePreMulSum(braidRedOp_t* op, void* scalar, braidDataType_t datatype, braidComm_t comm) {
  if (!comm) return report(nullptr, nullComm("braidRedOpCreatePreMulSum"));
  if (!op) return report(comm, badArg(comm, "braidRedOpCreatePreMulSum", "op is NULL"));
  return guarded(comm, [&]() -> Status {
    auto v = comm->session->createPreMulSum(scalar, datatype);
    if (!v.isOk()) return v.status();
    *op = static_cast<braidRedOp_t>(v.value());
    return Status::ok();
  });
}

braidResult_t braidRedOpDestroy(braidRedOp_t op, braidComm_t comm) {
  if (!comm) return report(nullptr, nullComm("braidRedOpDestroy"));
  return guarded(comm, [&] { return comm->session->destroyPreMulSum(op); });
}

}  // extern "C"
