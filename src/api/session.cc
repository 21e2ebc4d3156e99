#include "api/session.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "bootstrap/launch_env.h"
#include "bootstrap/tcp_store.h"
#include "bootstrap/unique_id.h"
#include "common/log.h"

namespace braid::api {

namespace {

// Servers started by braidGetUniqueId live as long as the process: the id may be shared
// and used at any later time.
std::mutex gServersMu;
std::vector<std::shared_ptr<bootstrap::TcpStoreServer>>& uniqueIdServers() {
  static auto* v = new std::vector<std::shared_ptr<bootstrap::TcpStoreServer>>();
  return *v;
}

// The address other hosts can reach this one at: the first up, non-loopback IPv4
// interface, else loopback.
std::string advertisedAddress() {
  std::string best = "127.0.0.1";
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return best;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    best = buf;
    break;
  }
  freeifaddrs(ifs);
  return best;
}

}  // namespace

braidResult_t toResult(Code c) {
  switch (c) {
    case Code::kOk: return braidSuccess;
    case Code::kInvalidArgument: return braidInvalidArgument;
    case Code::kSystemError: return braidSystemError;
    case Code::kRemoteError: return braidRemoteError;
    case Code::kTimeout: return braidTimeout;
    case Code::kAborted: return braidAborted;
    case Code::kInProgress: return braidInProgress;
    case Code::kInternal:
    case Code::kWouldBlock: return braidInternalError;
  }
  return braidInternalError;
}

Status createUniqueId(braidUniqueId* id) {
  bootstrap::UniqueId u;
  u.nonce = bootstrap::randomNonce();
  u.host = advertisedAddress();
  BRAID_ASSIGN_OR_RETURN(auto server, bootstrap::TcpStoreServer::start("0.0.0.0", 0, u.nonce));
  u.port = server->port();
  bootstrap::encodeUniqueId(u, id->internal);
  std::lock_guard<std::mutex> lock(gServersMu);
  uniqueIdServers().push_back(std::shared_ptr<bootstrap::TcpStoreServer>(std::move(server)));
  return Status::ok();
}

Session::~Session() {
  if (!comm_) return;
  int rank = comm_->rank();
  int nranks = comm_->size();
  bool broken = !comm_->brokenStatus().isOk();
  comm_.reset();
  if (store_) {
    // The rank serving the store keeps it up until every rank has left, so that a slower
    // rank's last operation never mistakes the store's shutdown for a failure.
    (void)store_->add(keyPrefix_ + "/left", 1);
    if (server_ && nranks > 1) {
      double timeout = broken ? 2.0 : 30.0;
      Deadline d = Deadline::after(timeout);
      while (!d.expired()) {
        auto v = store_->add(keyPrefix_ + "/left", 0);
        if (!v.isOk() || v.value() >= nranks) break;
        usleep(2000);
      }
    }
    (void)rank;
  }
  store_.reset();
  server_.reset();
}

StatusOr<std::unique_ptr<Session>> Session::join(std::shared_ptr<bootstrap::Store> store, int rank, int nranks,
                                                 core::CommOptions opts) {
  std::unique_ptr<Session> s(new Session());
  s->store_ = store;
  s->keyPrefix_ = opts.keyPrefix;
  BRAID_ASSIGN_OR_RETURN(s->comm_, core::Communicator::create(std::move(store), rank, nranks, std::move(opts)));
  return s;
}

StatusOr<std::unique_ptr<Session>> Session::fromEnv() {
  BRAID_ASSIGN_OR_RETURN(core::Config cfg, core::Config::fromEnv());
  BRAID_ASSIGN_OR_RETURN(bootstrap::LaunchEnv env, bootstrap::detectLaunchEnv([](const char* n) { return std::getenv(n); }));
  Deadline deadline = Deadline::after(cfg.timeoutSec);
  std::shared_ptr<bootstrap::TcpStoreServer> server;
  if (env.serveStore && env.rank == 0) {
    BRAID_ASSIGN_OR_RETURN(auto srv, bootstrap::TcpStoreServer::start("0.0.0.0", env.storePort, 0));
    server = std::shared_ptr<bootstrap::TcpStoreServer>(std::move(srv));
  }
  auto client = bootstrap::TcpStoreClient::connect(env.storeHost, env.storePort, 0, deadline);
  if (!client.isOk())
    return client.status().withContext("rank " + std::to_string(env.rank) + " (from " + env.source + " environment)");
  core::CommOptions opts;
  opts.config = cfg;
  opts.storeOwnerRank = env.serveStore ? 0 : -1;
  BRAID_ASSIGN_OR_RETURN(auto s, join(std::shared_ptr<bootstrap::Store>(std::move(client).value()), env.rank,
                                      env.worldSize, std::move(opts)));
  s->server_ = std::move(server);
  return s;
}

StatusOr<std::unique_ptr<Session>> Session::fromUniqueId(const braidUniqueId& id, int nranks, int rank) {
  if (nranks < 1) return invalidArgument("nranks=" + std::to_string(nranks) + " must be at least 1");
  if (rank < 0 || rank >= nranks)
    return invalidArgument("rank=" + std::to_string(rank) + " is outside [0, nranks=" + std::to_string(nranks) + ")");
  BRAID_ASSIGN_OR_RETURN(bootstrap::UniqueId u, bootstrap::decodeUniqueId(id.internal));
  BRAID_ASSIGN_OR_RETURN(core::Config cfg, core::Config::fromEnv());
  BRAID_ASSIGN_OR_RETURN(auto client, bootstrap::TcpStoreClient::connect(u.host, u.port, u.nonce,
                                                                         Deadline::after(cfg.timeoutSec)));
  core::CommOptions opts;
  opts.config = cfg;
  opts.nonce = u.nonce;
  return join(std::shared_ptr<bootstrap::Store>(std::move(client)), rank, nranks, std::move(opts));
}

StatusOr<std::unique_ptr<Session>> Session::fromStore(std::shared_ptr<bootstrap::Store> store, int rank, int nranks,
                                                      const std::string& keyPrefix) {
  BRAID_ASSIGN_OR_RETURN(core::Config cfg, core::Config::fromEnv());
  core::CommOptions opts;
  opts.config = cfg;
  opts.keyPrefix = keyPrefix;
  return join(std::move(store), rank, nranks, std::move(opts));
}

Status Session::validate(const char* opName, const void* sendbuff, const void* recvbuff, size_t count, int datatype,
                         int op, int root, bool hasOp, bool hasRoot, braidStream_t stream) const {
  const int rank = comm_->rank();
  const int nranks = comm_->size();
  auto bad = [&](const std::string& what) {
    return invalidArgument(std::string(opName) + " on rank " + std::to_string(rank) + ": " + what);
  };
  if (!validDataType(datatype)) return bad("datatype=" + std::to_string(datatype) + " is not a braidDataType_t");
  if (hasOp && !validReduceOp(op)) return bad("op=" + std::to_string(op) + " is not a braidRedOp_t");
  if (hasRoot && (root < 0 || root >= nranks))
    return bad("root=" + std::to_string(root) + " is outside [0, nranks=" + std::to_string(nranks) + ")");
  if (stream != nullptr) return bad("stream must be NULL: this build supports host memory only");
  size_t es = dataTypeSize(static_cast<DataType>(datatype));
  if (count > static_cast<size_t>(PTRDIFF_MAX) / es)
    return bad("count=" + std::to_string(count) + " overflows the address space for " +
               dataTypeName(static_cast<DataType>(datatype)));
  if (count > 0) {
    bool rootOnlySend = hasRoot && !hasOp;  // broadcast reads sendbuff on the root only
    if (!sendbuff && (!rootOnlySend || rank == root)) return bad("sendbuff is NULL with count=" + std::to_string(count));
    if (!recvbuff) return bad("recvbuff is NULL with count=" + std::to_string(count));
    size_t bytes = count * es;
    auto s = reinterpret_cast<uintptr_t>(sendbuff);
    auto r = reinterpret_cast<uintptr_t>(recvbuff);
    if (sendbuff && s != r && s < r + bytes && r < s + bytes)
      return bad("sendbuff and recvbuff overlap without being equal (in place needs sendbuff == recvbuff)");
  }
  return Status::ok();
}

void Session::abort() { comm_->abort(Status(Code::kAborted, "rank " + std::to_string(comm_->rank()) + " aborted the communicator", comm_->rank())); }

}  // namespace braid::api
