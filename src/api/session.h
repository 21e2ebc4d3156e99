#pragma once
// What a public communicator handle owns: the store it rendezvoused through (and the
// server, when this process serves it) and the core communicator. Shared by the C and C++
// APIs; this is also where arguments are checked and a Status becomes a result.

#include <memory>
#include <string>

#include "algorithms/algorithm.h"
#include "bootstrap/store.h"
#include "core/communicator.h"
#include "braid/braid.h"

namespace braid::bootstrap {
class TcpStoreServer;
}

namespace braid::api {

class Session {
 public:
  ~Session();

  static StatusOr<std::unique_ptr<Session>> fromEnv();
  static StatusOr<std::unique_ptr<Session>> fromUniqueId(const braidUniqueId& id, int nranks, int rank);
  static StatusOr<std::unique_ptr<Session>> fromStore(std::shared_ptr<bootstrap::Store> store, int rank,
                                                      int nranks, const std::string& keyPrefix);

  core::Communicator& comm() { return *comm_; }

  // Checks a call's arguments; kInvalidArgument names the offending one. `opName` is the
  // API function, e.g. "braidAllReduce".
  Status validate(const char* opName, const void* sendbuff, const void* recvbuff, size_t count,
                  int datatype, int op, int root, bool hasOp, bool hasRoot, braidStream_t stream) const;

  // Fails everything now and tells the peers.
  void abort();

 private:
  Session() = default;
  static StatusOr<std::unique_ptr<Session>> join(std::shared_ptr<bootstrap::Store> store, int rank, int nranks,
                                                 core::CommOptions opts);
  std::shared_ptr<bootstrap::TcpStoreServer> server_;
  std::shared_ptr<bootstrap::Store> store_;
  std::unique_ptr<core::Communicator> comm_;
  std::string keyPrefix_ = "braid";
};

braidResult_t toResult(Code c);

// Starts (once per call) a store server for braidGetUniqueId and fills `id`.
Status createUniqueId(braidUniqueId* id);

}  // namespace braid::api
