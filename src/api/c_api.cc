// The C API: argument checks, then the core; every Status becomes a braidResult_t here and
// its message is kept for braidGetLastError.

#include <cstring>
#include <mutex>
#include <new>
#include <string>

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

braid::algorithms::Request request(braid::algorithms::Collective coll, size_t count, int dtype, int op, int root,
                                   const void* send, const void* recv) {
  braid::algorithms::Request r;
  r.coll = coll;
  r.count = count;
  r.dtype = static_cast<braid::DataType>(dtype);
  r.op = static_cast<braid::ReduceOp>(op);
  r.root = root;
  r.inPlace = send == recv;
  return r;
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
  delete comm;
  return braidSuccess;
}

braidResult_t braidCommAbort(braidComm_t comm) {
  if (!comm) return report(nullptr, nullComm("braidCommAbort"));
  comm->session->abort();
  delete comm;
  return braidSuccess;
}

braidResult_t braidCommCount(const braidComm_t comm, int* count) {
  if (!comm) return report(nullptr, nullComm("braidCommCount"));
  if (!count) return report(comm, braid::invalidArgument("braidCommCount: count is NULL"));
  *count = comm->session->comm().size();
  return braidSuccess;
}

braidResult_t braidCommUserRank(const braidComm_t comm, int* rank) {
  if (!comm) return report(nullptr, nullComm("braidCommUserRank"));
  if (!rank) return report(comm, braid::invalidArgument("braidCommUserRank: rank is NULL"));
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

braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                             braidRedOp_t op, braidComm_t comm, braidStream_t stream) {
  if (!comm) return report(nullptr, nullComm("braidAllReduce"));
  return guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(comm->session->validate("braidAllReduce", sendbuff, recvbuff, count, datatype, op, 0,
                                                  /*hasOp=*/true, /*hasRoot=*/false, stream));
    return comm->session->comm().run(
        request(braid::algorithms::Collective::kAllReduce, count, datatype, op, 0, sendbuff, recvbuff), sendbuff,
        recvbuff);
  });
}

braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                             braidComm_t comm, braidStream_t stream) {
  if (!comm) return report(nullptr, nullComm("braidBroadcast"));
  return guarded(comm, [&]() -> Status {
    BRAID_RETURN_IF_ERROR(comm->session->validate("braidBroadcast", sendbuff, recvbuff, count, datatype, 0, root,
                                                  /*hasOp=*/false, /*hasRoot=*/true, stream));
    // Only the root's send buffer is read; elsewhere the call is in place on recvbuff.
    const void* in = comm->session->comm().rank() == root ? sendbuff : recvbuff;
    return comm->session->comm().run(
        request(braid::algorithms::Collective::kBroadcast, count, datatype, 0, root, in, recvbuff), in, recvbuff);
  });
}

}  // extern "C"
