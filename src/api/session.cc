#include "api/session.h"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <sstream>

#include "bootstrap/host_id.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

#include "bootstrap/etcd_store.h"
#include "bootstrap/http_kv.h"
#include "bootstrap/launch_env.h"
#include "bootstrap/memory_store.h"
#include "bootstrap/pmix_kv.h"
#include "bootstrap/tcp_store.h"
#include "bootstrap/unique_id.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/tls.h"
#include "reduce/reduce.h"
#include "transports/tcp/socket_util.h"

namespace braid::api {

namespace {

// Servers started by braidGetUniqueId live as long as the process: the id may be shared
// and used at any later time.
std::mutex gServersMu;
struct UniqueIdServer {
  uint64_t nonce = 0;  // the id's
  std::shared_ptr<bootstrap::TcpStoreServer> server;
};
std::vector<UniqueIdServer>& uniqueIdServers() {
  static auto* v = new std::vector<UniqueIdServer>();
  return *v;
}

// The store this process serves for the unique id `u`; null when another process does.
std::shared_ptr<bootstrap::TcpStoreServer> uniqueIdServerOf(const bootstrap::UniqueId& u) {
  std::lock_guard<std::mutex> lock(gServersMu);
  for (const auto& s : uniqueIdServers())
    if (s.nonce == u.nonce && s.server->port() == u.port) return s.server;
  return nullptr;
}

// The process's settings; where one is refused, *why says so and the others are kept
// (Config::fromEnvLenient), for a rank that joins only to tell the others why it fails.
core::Config settingsOrLenient(Status* why) {
  auto c = core::Config::fromEnv();
  if (c.isOk()) return std::move(c).value();
  *why = c.status();
  return core::Config::fromEnvLenient();
}

// Whether this process's own BRAID_TLS was refused. Its defaults then speak plaintext, which a
// store serving TLS turns away: a rank that joins only to tell the others why it fails tries
// both (storeTlsModes).
bool tlsRefused() {
  const char* v = std::getenv("BRAID_TLS");
  if (!v || !*v) return false;
  return !core::Config::fromEnv([v](const char* n) -> const char* { return std::strcmp(n, "BRAID_TLS") ? nullptr : v; })
              .isOk();
}

// The TLS modes in which to try a job's store, in order: the settings' own, or, where this
// process's BRAID_TLS was refused and the job has a key (TLS needs one), TLS and then
// plaintext. In that order a connection in the wrong mode fails within connect: a store
// serving TLS turns to it only after the handshake, so a plaintext client would pass that
// and fail at its first request instead.
std::vector<bool> storeTlsModes(bool tls, bool keyPresent) {
  if (keyPresent && tlsRefused()) return {true, false};
  return {tls && keyPresent};
}

// A rank whose settings were refused fails with that reason: the join's own failure where it
// carries it (naming the rank), else the reason alone (the store was not reached, say).
Status settingsFirst(const Status& joined, const Status& configError) {
  if (configError.isOk() || joined.message().find(configError.message()) != std::string::npos) return joined;
  return configError;
}
template <typename T>
StatusOr<T> settingsFirst(StatusOr<T> joined, const Status& configError) {
  if (joined.isOk()) return joined;
  return settingsFirst(joined.status(), configError);
}

// A rank whose init failed where its own process serves the job's store keeps the store up
// until each of the `nranks` ranks has connected and the others have hung up, for a quarter
// of the timeout at most: each then fails on the records it read (a setting that differs) or
// on the reason published there, not on a store that vanished under it (or was never there
// for a rank that came later) as this process exits. Not when the caller aborted the init
// (braidCommAbort returns promptly). The caller's own client has hung up already.
void lingerAfterFailedInit(const bootstrap::TcpStoreServer& server, int nranks, double timeoutSec,
                           const std::shared_ptr<std::atomic<bool>>& cancel) {
  auto aborted = [&] { return cancel && cancel->load(); };
  auto pending = [&] {
    const auto st = server.stats();
    return st.open > 0 || st.accepted < static_cast<uint64_t>(nranks);
  };
  Deadline linger = Deadline::after(timeoutSec > 0 ? std::clamp(timeoutSec / 4, 0.5, 5.0) : 5.0);
  while (pending() && !linger.expired() && !aborted()) usleep(5 * 1000);
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

// Every process counts its inits from the launcher's environment (failed ones too, so that a
// failure on one rank does not shift its count against the others'); all ranks of a job make
// them together, so the n-th init of every rank meets the n-th init of the others. The count
// keeps a second init (hvd.shutdown() then hvd.init(), a framework re-creating its world)
// apart from the first: its keys in a store that outlived the first (braidrun's) get their
// own prefix, and a store published through a key-value server (horovodrun) its own key,
// since the previous init's address is still stored there and its store is gone.
std::atomic<uint64_t> gEnvInits{0};

// Fills in env->storeHost/storePort through the launcher's key-value server, for the
// process's `init`-th such init: the rank serving the store (`server` not null) publishes
// the address of its interface towards that server; the others wait for it until
// `deadline`.
Status exchangeStoreAddress(bootstrap::LaunchEnv* env, uint64_t init, const bootstrap::TcpStoreServer* server,
                            Deadline deadline) {
  bootstrap::HttpKvClient kv(env->kvHost, env->kvPort);
  const std::string key = env->kvKey + ".i" + std::to_string(init);
  if (server) {
    BRAID_ASSIGN_OR_RETURN(std::string host, kv.localAddress());
    env->storeHost = host;
    env->storePort = server->port();
    BRAID_TRACE("publishing store %s:%d as %s/%s at %s", host.c_str(), env->storePort, env->kvScope.c_str(),
                key.c_str(), kv.address().c_str());
    return kv.put(env->kvScope, key, host + ":" + std::to_string(env->storePort), deadline);
  }
  BRAID_ASSIGN_OR_RETURN(std::string value, kv.waitGet(env->kvScope, key, deadline));
  return bootstrap::parseStoreAddress(env->kvScope + "/" + key + " at " + kv.address(), value, &env->storeHost,
                                      &env->storePort);
}

// A process of a Horovod elastic job initializing again asks horovodrun's driver for its
// place, as Horovod's own core does (gloo_context.cc): one GET of rank_and_size/<host>:<local
// rank>, which the driver answers once every worker of the job has asked or ended, with the
// new numbering. The answer is exported as horovodrun exports a new worker's (HOROVOD_RANK
// ...), so that the next reset asks under the new local rank. Waits up to
// HOROVOD_ELASTIC_TIMEOUT (Horovod's variable for its driver's waits; 600 s by default).
Status horovodElasticSlot(bootstrap::LaunchEnv* env) {
  double waitSec = 600;
  if (const char* t = std::getenv("HOROVOD_ELASTIC_TIMEOUT")) {
    char* end = nullptr;
    double v = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(v > 0))
      return invalidArgument(std::string("HOROVOD_ELASTIC_TIMEOUT='") + t + "' is not a positive number of seconds");
    waitSec = v;
  }
  bootstrap::HttpKvClient kv(env->kvHost, env->kvPort);
  const std::string key = env->hvdHostname + ":" + std::to_string(env->localRank);
  const std::string what = "rank_and_size/" + key + " at horovodrun's server " + kv.address();
  BRAID_TRACE("asking %s for this worker's place after a reset", what.c_str());
  auto answer = kv.getOnce("rank_and_size", key, Deadline::after(waitSec));
  if (!answer.isOk())
    return answer.status().withContext("horovod elastic worker " + key + " (rank " + std::to_string(env->rank) +
                                       " before the reset)");
  int cross[2];
  BRAID_RETURN_IF_ERROR(bootstrap::parseHorovodSlot(what, answer.value(), env, cross));
  env->serveStore = env->rank == 0;
  const std::pair<const char*, int> vars[] = {{"HOROVOD_RANK", env->rank},           {"HOROVOD_SIZE", env->worldSize},
                                              {"HOROVOD_LOCAL_RANK", env->localRank}, {"HOROVOD_LOCAL_SIZE", env->localSize},
                                              {"HOROVOD_CROSS_RANK", cross[0]},      {"HOROVOD_CROSS_SIZE", cross[1]}};
  for (const auto& [name, v] : vars) setenv(name, std::to_string(v).c_str(), 1);
  BRAID_INFO("horovod elastic: %s is now rank %d of %d", key.c_str(), env->rank, env->worldSize);
  return Status::ok();
}

// The same through the launcher's PMIx server (mpirun across hosts): every rank fences, the
// store's owner having put the address of the interface braid's tcp transport listens on
// (BRAID_NET_IF when set, else the first non-loopback one).
Status exchangeStoreAddressPmix(bootstrap::LaunchEnv* env, uint64_t init, const bootstrap::TcpStoreServer* server,
                                const core::Config& cfg, Deadline deadline) {
  const std::string key = env->pmixKey + ".i" + std::to_string(init);
  std::string value;
  if (server) {
    std::string host = advertisedAddress();
    if (!cfg.netIf.empty()) {
      BRAID_ASSIGN_OR_RETURN(in_addr a, transport::tcp::resolveBindAddress(cfg.netIf));
      if (a.s_addr != htonl(INADDR_ANY)) {
        char buf[INET_ADDRSTRLEN];
        host = inet_ntop(AF_INET, &a, buf, sizeof buf);
      }
    }
    value = host + ":" + std::to_string(server->port());
    BRAID_TRACE("publishing store %s as PMIx key %s", value.c_str(), key.c_str());
    BRAID_RETURN_IF_ERROR(bootstrap::pmixExchange(key, &value, 0, &value, deadline));
  } else {
    BRAID_RETURN_IF_ERROR(bootstrap::pmixExchange(key, nullptr, 0, &value, deadline));
  }
  return bootstrap::parseStoreAddress("PMIx key " + key, value, &env->storeHost, &env->storePort);
}

// The job's key from the environment, for a rank of a job started by a launcher (not a
// unique id); rank 0 of a job without one says once that it is unauthenticated.
StatusOr<AuthKey> jobKey(int rank, int nranks) {
  StatusOr<AuthKey> key = authKeyFromEnv();
  if (!key.isOk()) return key.status().withContext("rank " + std::to_string(rank));
  if (!key.value().present && nranks > 1 && rank == 0) warnUnauthenticatedOnce("rank 0");
  return key;
}

// A store that rank 0 serves on a fixed port (torchrun, mpirun, Slurm) is served again by
// the next init, on the same port, while a faster rank may already be connecting: the store
// checks the init's number in the handshake (a generation tag, not a secret), so a rank that
// reaches the previous init's store is refused (or reset, as that store closes) and tries
// again, rather than waiting there for keys that never come.
uint64_t envStoreGeneration(const bootstrap::LaunchEnv& env, uint64_t init) {
  return env.rankZeroServes ? 0x6272616964000000ull + init + 1 : 0;
}

// A client of the store a launcher's ranks meet at (`env`). The previous init's store
// refuses the handshake, or resets it while closing: tried again until the new one answers
// (or the deadline passes, the last reason then given). A store that failed authentication
// is the job's and will not change its mind. Where the job may use either TLS mode
// (storeTlsModes), each is tried once at least, and `*tls` becomes the one that answered.
StatusOr<std::unique_ptr<bootstrap::TcpStoreClient>> connectEnvStore(const bootstrap::LaunchEnv& env,
                                                                     uint64_t generation, const AuthKey& key,
                                                                     Deadline deadline, bool* tls) {
  const std::vector<bool> tlsModes = storeTlsModes(*tls, key.present);
  size_t attempts = 0;
  auto connect = [&] {
    const bool mode = tlsModes[attempts++ % tlsModes.size()];
    auto c = bootstrap::TcpStoreClient::connect(env.storeHost, env.storePort, generation, deadline,
                                                bootstrap::TcpStoreClient::kDefaultOpTimeoutSec, key, mode);
    if (c.isOk() && tlsModes.size() > 1) *tls = mode;  // the job's, as far as this rank can tell
    return c;
  };
  auto client = connect();
  while (!client.isOk() && (generation != 0 || attempts < tlsModes.size()) && !deadline.expired() &&
         (client.status().message().find("authentication failed") == std::string::npos ||
          attempts < tlsModes.size())) {
    usleep(20 * 1000);
    client = connect();
  }
  return client;
}

// The key prefix of a process's `init`-th communicator from the launcher's environment: its
// keys never meet those of an earlier init in a store that outlives it.
std::string initKeyPrefix(uint64_t init) {
  std::string prefix = core::CommOptions().keyPrefix;
  if (init > 0) prefix += ".i" + std::to_string(init);
  return prefix;
}

// How long a process given no rank of the job tries to leave its reason in the store.
constexpr double kRefusedRankTellSec = 10;

// A process whose own rank variable was refused (LaunchEnv::rankError) has no rank to join
// with. Where it knows the job's store, it leaves the reason as the job's abort record,
// which the ranks read while they wait to join (Communicator::initPoll): they fail at once,
// naming this process, instead of waiting the timeout for the rank it should have been.
// Best effort, for a few seconds at most; the process fails with its own reason either way.
Status tellJobRankRefused(const bootstrap::LaunchEnv& env, const core::Config& cfg, uint64_t init) {
  const Status& why = env.rankError;
  if (env.worldSize <= 1 || (env.storeUrl.empty() && env.storeHost.empty())) return why;
  // An untagged run's etcd prefix outlives the run: a record left there would fail the next.
  if (!env.storeUrl.empty() && env.jobTag.empty()) return why;
  StatusOr<AuthKey> key = authKeyFromEnv();
  if (!key.isOk()) return why;
  const Deadline deadline =
      Deadline::after(cfg.timeoutSec > 0 ? std::min(cfg.timeoutSec, kRefusedRankTellSec) : kRefusedRankTellSec);
  std::unique_ptr<bootstrap::Store> store;
  if (!env.storeUrl.empty()) {
    auto etcd = bootstrap::EtcdStore::connectForJob(env.storeUrl, env.jobTag, deadline);
    if (!etcd.isOk()) return why;
    store = std::move(etcd).value();
  } else {
    bool tls = cfg.tls;
    auto client = connectEnvStore(env, envStoreGeneration(env, init), key.value(), deadline, &tls);
    if (!client.isOk()) return why;
    store = std::move(client).value();
  }
  const Status told(why.code(), why.message() + " (" + core::thisProcess() + ")");
  (void)store->set(initKeyPrefix(init) + "/abort", core::encodeAbortRecord(told, -1), deadline);
  return why;
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
    case Code::kRevoked: return braidRevoked;
    case Code::kInternal:
    case Code::kWouldBlock: return braidInternalError;
  }
  return braidInternalError;
}

Status createUniqueId(braidUniqueId* id) {
  bootstrap::UniqueId u;
  u.nonce = bootstrap::randomNonce();
  u.host = advertisedAddress();
  // The job's key travels inside the id: the user's own when set, else a fresh one, so
  // braidGetUniqueId jobs are authenticated with nothing to configure.
  BRAID_ASSIGN_OR_RETURN(u.key, authKeyFromEnv());
  if (!u.key.present) u.key = randomAuthKey();
  BRAID_ASSIGN_OR_RETURN(core::Config cfg, core::Config::fromEnv());
  BRAID_ASSIGN_OR_RETURN(auto server, bootstrap::TcpStoreServer::start("0.0.0.0", 0, u.nonce, u.key, cfg.tls));
  u.port = server->port();
  bootstrap::encodeUniqueId(u, id->internal);
  std::lock_guard<std::mutex> lock(gServersMu);
  uniqueIdServers().push_back({u.nonce, std::shared_ptr<bootstrap::TcpStoreServer>(std::move(server))});
  return Status::ok();
}

Session::~Session() {
  // Nothing may ask the communicator where it is once it starts going away.
  if (announced_) core::removeLiveStatus(comm_.get());
  // Enqueued device work runs the communicator: it goes first (its proxy finishes what the
  // streams have reached, bounded by the timeout), and graphs' replays stop using it (a
  // replay running now finishes first).
  {
    std::lock_guard<std::mutex> lock(captureGuard_->runMu);
    captureGuard_->alive = false;
  }
  deviceQueue_.reset();
  mover_.reset();  // unregisters the slots while the communicator still maps them
  dropDeviceSlots();
  const bool broken = comm_ && !comm_->brokenStatus().isOk();
  if (broken) {
    const int64_t at = comm_->brokenAtNanos();
    int64_t was = familyBrokenNs_->load();
    while (at > was && !familyBrokenNs_->compare_exchange_weak(was, at)) {
    }
  }
  // A communicator that ran nothing since another of the family broke (the world of a job
  // whose split child failed) ends a failed job as a broken one does; one that ran since (a
  // shrink's survivors going on) ends as a healthy one.
  const int64_t familyBroken = familyBrokenNs_->load();
  const bool failedJob = broken || (comm_ && familyBroken > 0 && !comm_->ranSince(familyBroken));
  // A store that failed a call already is not asked again: each request would wait out
  // its timeout, and nothing here needs the answer.
  const bool storeLost = comm_ && comm_->storeLost();
  comm_.reset();
  if (store_ && counted_ && !storeLost) {
    // The process serving the store keeps it up until every session of the job (children
    // of splits included) has left, so that a slower rank's last operation never mistakes
    // the store's shutdown for a failure. Only the last session here holding the server
    // waits: the others leave it running.
    Deadline d = Deadline::after(failedJob ? 2.0 : 30.0);
    // Withdrawn from what the store would count down at this process's close first: the
    // count down itself is the last request the serving rank may wait for.
    (void)store_->addOnClose(rootPrefix_ + "/live", +1, d);
    auto left = store_->add(rootPrefix_ + "/live", -1, d);
    // An etcd store outlives the job: the last session to leave takes the job's keys
    // away, so that nothing is left behind a run that finished. A rank that died is counted
    // down once its lease runs out; if the last survivor leaves before that, the keys stay,
    // for `etcdctl del --prefix`.
    if (auto* etcd = dynamic_cast<bootstrap::EtcdStore*>(store_.get()); etcd && left.isOk() && left.value() <= 0)
      (void)etcd->deletePrefix(rootPrefix_ + "/", Deadline::after(5));
    // So does rank 1 once its standby serves in place of rank 0's lost store.
    const bool serving = (server_ && server_.use_count() == 1) ||
                         (standby_ && standby_.use_count() == 1 && standby_->stats().promoted);
    if (serving) {
      while (!d.expired()) {
        auto v = store_->add(rootPrefix_ + "/live", 0, d);
        if (!v.isOk() || v.value() <= 0) break;
        usleep(2000);
      }
    }
  }
  store_.reset();
  server_.reset();
  standby_.reset();
}

void Session::announce() {
  if (!comm_ || !comm_->config().liveStatus) return;
  // An etcd cluster: the responder watches for the next request on connections of its own
  // (EtcdStore::get), with the job's credentials.
  if (auto* etcd = dynamic_cast<bootstrap::EtcdStore*>(store_.get())) {
    const bootstrap::EtcdUrl url = etcd->url();
    core::addLiveStatus(
        bootstrap::formatEtcdUrl(url),
        [url]() -> StatusOr<std::unique_ptr<bootstrap::Store>> {
          BRAID_ASSIGN_OR_RETURN(auto credentials, bootstrap::EtcdCredentials::fromEnv());
          BRAID_ASSIGN_OR_RETURN(auto c, bootstrap::EtcdStore::connect(url, Deadline::after(5), std::move(credentials)));
          return std::unique_ptr<bootstrap::Store>(std::move(c));
        },
        comm_.get());
    announced_ = true;
    return;
  }
  // A caller's store (PyTorch's) that opens connections to its root: the question and the
  // answers go there, beside every other communicator on that root (each torch group has
  // a prefix of its own; a rank held in one group is followed from another).
  if (storeId_.port == 0 || storeId_.host.empty()) {
    bootstrap::Store::LiveRoot root = store_ ? store_->liveRoot() : bootstrap::Store::LiveRoot{};
    if (root.name.empty() || !root.connect) return;
    auto asker = root.connect();
    if (!asker.isOk()) {
      BRAID_INFO("live status: no connection to the root of the caller's store %s: %s", root.name.c_str(),
                 asker.status().message().c_str());
      return;
    }
    std::shared_ptr<bootstrap::Store> rootStore(std::move(asker).value());
    auto closings = core::liveViewClosings(*rootStore);
    if (!closings.isOk()) {
      BRAID_INFO("live status: the root of the caller's store %s does not answer: %s", root.name.c_str(),
                 closings.status().message().c_str());
      return;
    }
    comm_->setLiveStore(rootStore);
    BRAID_INFO("live status: through the caller's store %s, which this process %s", root.name.c_str(),
               root.hosts > 0 ? "hosts" : root.hosts == 0 ? "does not host" : "may host");
    core::addLiveStatus("caller:" + root.name, std::move(root.connect), comm_.get(), closings.value(), root.hosts);
    announced_ = true;
    return;
  }
  // Otherwise braid's own TCP store.
  const bootstrap::UniqueId id = storeId_;
  const bool tls = comm_->config().tls && id.key.present;
  core::addLiveStatus(
      id.host + ":" + std::to_string(id.port) + "#" + std::to_string(id.nonce),
      [id, tls]() -> StatusOr<std::unique_ptr<bootstrap::Store>> {
        BRAID_ASSIGN_OR_RETURN(auto c, bootstrap::TcpStoreClient::connect(
                                           id.host, id.port, id.nonce, Deadline::after(5),
                                           bootstrap::TcpStoreClient::kDefaultOpTimeoutSec, id.key, tls));
        c->setQuiet();  // the store going away ends the responder, which is not news
        return std::unique_ptr<bootstrap::Store>(std::move(c));
      },
      comm_.get());
  announced_ = true;
}

void Session::countLive(int delta) {
  // A store served by something that outlives the ranks (braidrun, torch's own store, the
  // unique id's server) needs no count, and a rank leaving late must not touch a store its
  // owner may have closed already (torch logs a stack trace for each such call).
  if (!trackLive_) return;
  // Best effort: a store that fails here fails the rendezvous right after, with a message.
  if (store_ && store_->add(rootPrefix_ + "/live", delta).isOk()) {
    counted_ = delta > 0;
    // A process that dies leaves no count behind where the store can tell (braid's own,
    // etcd through its lease):
    // the store takes its sessions off when its connection ends, so the process serving
    // the store does not wait for them at the end.
    (void)store_->addOnClose(rootPrefix_ + "/live", -delta);
  }
}

StatusOr<std::unique_ptr<Session>> Session::join(std::shared_ptr<bootstrap::Store> store, int rank, int nranks,
                                                 core::CommOptions opts, bool trackLive) {
  std::unique_ptr<Session> s(new Session());
  s->trackLive_ = trackLive;
  s->store_ = store;
  s->rootPrefix_ = opts.keyPrefix;
  // Counted before joining: the store's owner finishes joining only after every rank has
  // started to, so by then every rank's count is in.
  s->countLive(+1);
  BRAID_ASSIGN_OR_RETURN(s->comm_, core::Communicator::create(std::move(store), rank, nranks, std::move(opts)));
  return s;
}

namespace {

// Points a client at the standby whose address ("host:port") was set under kStandbyKey.
void useStandby(bootstrap::TcpStoreClient& c, const std::string& at, double silenceSec) {
  const size_t colon = at.rfind(':');
  if (colon != std::string::npos) c.setStandby(at.substr(0, colon), std::atoi(at.c_str() + colon + 1), silenceSec);
}

// Where the store keeps standbys, rank 0 writes the job's silence and standby wait here, so
// that a process joining later through a grow id knows them, and that it takes its turn
// keeping a standby after a shrink as the others do.
constexpr const char* kStandbyPolicy = "braid-store-standby/policy";

}  // namespace

// A store that rank 0 serves would die with rank 0, and recovery with it. One rank keeps a
// standby that mirrors every write and serves when rank 0's store is gone, or has sent
// nothing for half of BRAID_TIMEOUT (stopped, or cut off: then the survivors' operations,
// which fail at the timeout naming rank 0, find the store again first); every rank's client
// knows it and goes there when it loses the store, or when a request has waited a quarter of
// that silence and the standby says it serves. Rank 1 keeps it: launchers number ranks host
// by host, so rank 1 usually shares rank 0's host, and a network partition between hosts
// cannot make the standby serve while rank 0's store serves on (ranks cut off from rank 0
// are cut off from its standby too). The price is that losing rank 0's whole host loses
// the store. BRAID_STORE_STANDBY=host makes the other choice: the lowest rank on another
// host than rank 0's keeps it (rank 1 when the job has one host), and the store survives
// the loss of rank 0's host, but a partition between the two hosts then splits the job in
// two, each half with a store. Chosen after joining, when every rank knows every rank's host
// and so picks the same rank.
Status Session::standBy(bootstrap::TcpStoreClient& c, const bootstrap::LaunchEnv& env, const core::Config& cfg) {
  const std::vector<int>& hostOf = comm_->hostOfRanks();
  int keeper = 1;
  for (int r = 1; cfg.storeStandbyOtherHost && r < static_cast<int>(hostOf.size()); ++r) {
    if (hostOf[r] != hostOf[0]) {
      keeper = r;
      break;
    }
  }
  const std::string who = "rank " + std::to_string(env.rank) + " (from " + env.source + " environment)";
  Deadline deadline = Deadline::after(cfg.timeoutSec);
  if (env.rank == 0) {
    char policy[64];
    std::snprintf(policy, sizeof policy, "%.17g %.17g", standbySilenceSec_, standbyWaitSec_);
    BRAID_RETURN_IF_ERROR(c.set(kStandbyPolicy, policy, deadline).withContext(who + ": the store's standby"));
  }
  if (env.rank == keeper) {
    auto at = startStandby(c, deadline);
    if (!at.isOk()) return at.status().withContext(who + ": the store's standby");
  }
  auto at = c.get(bootstrap::kStandbyKey, deadline);
  if (!at.isOk())
    return at.status().withContext(who + ": waiting for rank " + std::to_string(keeper) +
                                   " to name the store's standby (BRAID_STORE_STANDBY=0 does without)");
  useStandby(c, at.value(), standbySilenceSec_);
  if (env.rank == 0) BRAID_INFO("the store's standby is in rank %d, at %s", keeper, at.value().c_str());
  return Status::ok();
}

StatusOr<std::unique_ptr<Session>> Session::fromEnv(double timeoutSec, std::shared_ptr<std::atomic<bool>> cancel) {
  Status configError;
  core::Config cfg = settingsOrLenient(&configError);
  if (timeoutSec > 0) cfg.timeoutSec = timeoutSec;
  BRAID_ASSIGN_OR_RETURN(bootstrap::LaunchEnv env,
                         bootstrap::detectLaunchEnvLenient([](const char* n) { return std::getenv(n); }));
  if (!env.rankError.isOk()) return tellJobRankRefused(env, cfg, gEnvInits.fetch_add(1));
  if (configError.isOk()) configError = env.placeError;
  return settingsFirst(joinFromEnv(std::move(env), std::move(cfg), configError, std::move(cancel)), configError);
}

StatusOr<std::unique_ptr<Session>> Session::joinFromEnv(bootstrap::LaunchEnv env, core::Config cfg,
                                                        const Status& configError,
                                                        std::shared_ptr<std::atomic<bool>> cancel) {
  // A rank whose settings or local placement were refused still joins far enough to tell
  // the others why (CommOptions::configError); alone, or where nobody waits for it, it
  // fails at once.
  if (!configError.isOk() && (env.source == "none" || env.worldSize <= 1)) return configError;
  if (env.source == "none") {
    BRAID_INFO("no launcher environment (looked for %s): a world of size 1", bootstrap::kLauncherVariables);
    core::CommOptions opts;
    opts.config = cfg;
    return join(std::make_shared<bootstrap::MemoryStore>(), 0, 1, std::move(opts));
  }
  StatusOr<AuthKey> key = jobKey(env.rank, env.worldSize);
  if (!key.isOk()) return key.status();
  Deadline deadline = Deadline::after(cfg.timeoutSec);
  uint64_t init = gEnvInits.fetch_add(1);
  if (env.horovodElastic) {
    // horovodrun --min-np/--max-np: after a reset the driver renumbers the survivors and
    // starts new workers, and clears its key-value server, so every init of an elastic job
    // meets there as a first one (a worker just started has made no init before).
    if (init > 0) {
      Status s = horovodElasticSlot(&env);
      if (!s.isOk()) return s;
      key = jobKey(env.rank, env.worldSize);
      if (!key.isOk()) return key.status();
      deadline = Deadline::after(cfg.timeoutSec);  // the driver's answer may take long
    }
    init = 0;
  }
  if (!env.storeUrl.empty()) return fromEtcd(env, cfg, configError, key.value(), init, std::move(cancel));
  const uint64_t generation = envStoreGeneration(env, init);
  std::shared_ptr<bootstrap::TcpStoreServer> server;
  if (env.serveStore && env.rank == 0) {
    // Port 0 (a store published through a key-value server) binds an ephemeral port.
    // A rank whose BRAID_TLS was refused serves a store that speaks either (the others
    // connect as the job's setting says), only so that they read why it fails.
    const bool tlsEither = key.value().present && tlsRefused() && tlsAvailable();
    BRAID_ASSIGN_OR_RETURN(auto srv, bootstrap::TcpStoreServer::start("0.0.0.0", env.storePort, generation, key.value(),
                                                                      (cfg.tls && key.value().present) || tlsEither,
                                                                      false, tlsEither));
    server = std::shared_ptr<bootstrap::TcpStoreServer>(std::move(srv));
  }
  if (!env.kvHost.empty()) {
    Status s = exchangeStoreAddress(&env, init, server.get(), deadline);
    if (!s.isOk())
      return s.withContext("rank " + std::to_string(env.rank) + " (from " + env.source +
                           " environment, the store's address through HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT)");
  }
  if (!env.pmixKey.empty()) {
    Status s = exchangeStoreAddressPmix(&env, init, server.get(), cfg, deadline);
    if (!s.isOk())
      return s.withContext("rank " + std::to_string(env.rank) + " (from " + env.source +
                           " environment across hosts, the store's address through PMIx; or set MASTER_ADDR and "
                           "MASTER_PORT)");
  }
  auto client = connectEnvStore(env, generation, key.value(), deadline, &cfg.tls);
  if (!client.isOk())
    return client.status().withContext("rank " + std::to_string(env.rank) + " (from " + env.source + " environment)");
  if (server) server->setLocalClient(client.value()->clientId());
  const bool standing = env.rankZeroServes && env.worldSize > 1 && cfg.storeStandby;
  const double silence = cfg.timeoutSec > 0 ? std::max(1.0, cfg.timeoutSec / 2) : 0;
  // A stopped standby holds the store that serves at most a quarter of the timeout (once:
  // then the store drops it), so the survivors still find whoever stalled. Rank 0's store
  // waits that long, and so does every standby once it serves (startStandby).
  const double standbyWait = cfg.timeoutSec > 0 ? std::clamp(cfg.timeoutSec / 4, 0.5, 5.0) : 0;
  if (standing && server && standbyWait > 0) server->setStandbyWait(standbyWait);
  std::shared_ptr<bootstrap::TcpStoreClient> tcpClient(std::move(client).value());
  if (const char* j = std::getenv("BRAID_ELASTIC_JOIN"); j && std::string(j) == "1") {
    if (!configError.isOk()) return configError;
    // A replacement braidrun started for an elastic job: it joins the running ranks at
    // their next grow instead of starting a communicator of its own (and learns of the
    // store's standby as every process that joins by growing does, joinGrowWith).
    return joinAsReplacement(tcpClient, cfg);
  }
  core::CommOptions opts;
  opts.config = cfg;
  opts.authKey = key.value();
  opts.storeOwnerRank = env.rankZeroServes ? 0 : -1;
  opts.cancel = cancel;
  opts.configError = configError;
  opts.launcherMarksExits = env.source == "braid" && !env.rankZeroServes;  // braidrun serves the store
  opts.keyPrefix = initKeyPrefix(init);
  auto joined = join(tcpClient, env.rank, env.worldSize, std::move(opts), env.rankZeroServes);
  if (!joined.isOk()) {
    if (server) {
      tcpClient.reset();
      lingerAfterFailedInit(*server, env.worldSize, cfg.timeoutSec, cancel);
    }
    return joined.status();
  }
  std::unique_ptr<Session> s = std::move(joined).value();
  s->server_ = std::move(server);
  s->storeId_.host = env.storeHost;
  s->storeId_.port = env.storePort;
  s->storeId_.nonce = generation;
  s->storeId_.key = key.value();
  if (standing) {
    s->standing_ = true;
    s->standbySilenceSec_ = silence;
    s->standbyWaitSec_ = standbyWait;
    Status st = s->standBy(*tcpClient, env, cfg);
    if (!st.isOk()) return st;
  }
  s->announce();
  return s;
}

StatusOr<std::unique_ptr<Session>> Session::fromEtcd(const bootstrap::LaunchEnv& env, const core::Config& cfg,
                                                     const Status& configError, const AuthKey& key, uint64_t init,
                                                     std::shared_ptr<std::atomic<bool>> cancel) {
  const std::string who = "rank " + std::to_string(env.rank) + " (from " + env.source + " environment, BRAID_STORE)";
  auto etcd = bootstrap::EtcdStore::connectForJob(env.storeUrl, env.jobTag, Deadline::after(cfg.timeoutSec));
  if (!etcd.isOk()) return etcd.status().withContext(who);
  std::shared_ptr<bootstrap::Store> store(std::move(etcd).value());
  // New processes find this store again through their own BRAID_STORE (grow ids).
  bootstrap::UniqueId storeId;
  storeId.host = "etcd";
  storeId.port = 2379;
  storeId.nonce = bootstrap::kEtcdStoreNonce;
  storeId.key = key;
  if (const char* j = std::getenv("BRAID_ELASTIC_JOIN"); j && std::string(j) == "1") {
    if (!configError.isOk()) return configError;
    auto s = joinAsReplacement(std::move(store), cfg);
    if (s.isOk()) s.value()->storeId_ = storeId;
    return s;
  }
  core::CommOptions opts;
  opts.config = cfg;
  opts.authKey = key;
  opts.storeOwnerRank = -1;  // nobody in the job serves it
  opts.cancel = std::move(cancel);
  opts.configError = configError;
  opts.launcherMarksExits = env.source == "braid";  // braidrun's ranks: it marks their ends there too
  opts.keyPrefix = initKeyPrefix(init);
  BRAID_ASSIGN_OR_RETURN(auto s, join(std::move(store), env.rank, env.worldSize, std::move(opts), true));
  s->storeId_ = storeId;
  s->announce();
  return s;
}

StatusOr<std::unique_ptr<Session>> Session::fromUniqueId(const braidUniqueId& id, int nranks, int rank,
                                                         double timeoutSec, std::shared_ptr<std::atomic<bool>> cancel) {
  if (nranks < 1) return invalidArgument("nranks=" + std::to_string(nranks) + " must be at least 1");
  if (rank < 0 || rank >= nranks)
    return invalidArgument("rank=" + std::to_string(rank) + " is outside [0, nranks=" + std::to_string(nranks) + ")");
  BRAID_ASSIGN_OR_RETURN(bootstrap::UniqueId u, bootstrap::decodeUniqueId(id.internal));
  if (u.growToken != 0)
    return invalidArgument("the id is a grow id (braidCommGetGrowId): new processes pass it to braidCommGrow");
  Status configError;
  core::Config cfg = settingsOrLenient(&configError);
  if (!configError.isOk() && nranks == 1) return configError;
  if (timeoutSec > 0) cfg.timeoutSec = timeoutSec;
  StatusOr<std::unique_ptr<bootstrap::TcpStoreClient>> client = invalidArgument("no store tried");
  const Deadline connectBy = Deadline::after(cfg.timeoutSec);
  for (bool tls : storeTlsModes(cfg.tls, u.key.present)) {
    client = bootstrap::TcpStoreClient::connect(u.host, u.port, u.nonce, connectBy,
                                                bootstrap::TcpStoreClient::kDefaultOpTimeoutSec, u.key, tls);
    if (client.isOk()) break;
  }
  if (!client.isOk()) return configError.isOk() ? client.status() : configError;
  core::CommOptions opts;
  opts.config = cfg;
  opts.nonce = u.nonce;
  opts.authKey = u.key;
  opts.cancel = cancel;
  opts.configError = configError;
  auto joined = join(std::shared_ptr<bootstrap::Store>(std::move(client).value()), rank, nranks, std::move(opts));
  if (!joined.isOk()) {
    if (auto server = uniqueIdServerOf(u)) lingerAfterFailedInit(*server, nranks, cfg.timeoutSec, cancel);
    return settingsFirst(joined.status(), configError);
  }
  std::unique_ptr<Session> s = std::move(joined).value();
  s->storeId_ = u;
  s->announce();
  return s;
}

StatusOr<std::unique_ptr<Session>> Session::fromStore(std::shared_ptr<bootstrap::Store> store, int rank, int nranks,
                                                      const std::string& keyPrefix, double timeoutSec) {
  Status configError;
  core::Config cfg = settingsOrLenient(&configError);
  if (!configError.isOk() && nranks == 1) return configError;
  if (timeoutSec > 0) cfg.timeoutSec = timeoutSec;
  core::CommOptions opts;
  opts.config = cfg;
  opts.keyPrefix = keyPrefix;
  opts.configError = configError;
  // The store is the caller's (torch's); the data connections still prove the job's key.
  BRAID_ASSIGN_OR_RETURN(opts.authKey, jobKey(rank, nranks));
  auto joined = settingsFirst(join(std::move(store), rank, nranks, std::move(opts)), configError);
  if (joined.isOk()) joined.value()->announce();
  return joined;
}

namespace {

using algorithms::Collective;

std::string num(size_t v) { return std::to_string(v); }

bool mulOverflows(size_t a, size_t b, size_t* out) { return __builtin_mul_overflow(a, b, out); }
bool addOverflows(size_t a, size_t b, size_t* out) { return __builtin_add_overflow(a, b, out); }

// The scalar a pre-multiplied sum was created with, read as `dt`.
double scalarValue(const void* p, DataType dt) {
  switch (dt) {
    case DataType::kInt8: { int8_t v; std::memcpy(&v, p, 1); return v; }
    case DataType::kUint8: { uint8_t v; std::memcpy(&v, p, 1); return v; }
    case DataType::kInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DataType::kUint32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case DataType::kInt64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DataType::kUint64: { uint64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DataType::kFloat16: { uint16_t v; std::memcpy(&v, p, 2); return reduce::halfToFloat(v); }
    case DataType::kBFloat16: { uint16_t v; std::memcpy(&v, p, 2); return reduce::bfloat16ToFloat(v); }
    case DataType::kFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case DataType::kFloat64: { double v; std::memcpy(&v, p, 8); return v; }
    case DataType::kFloat8E4M3: { uint8_t v; std::memcpy(&v, p, 1); return reduce::fp8e4m3ToFloat(v); }
    case DataType::kFloat8E5M2: { uint8_t v; std::memcpy(&v, p, 1); return reduce::fp8e5m2ToFloat(v); }
    case DataType::kInt16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DataType::kUint16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
  }
  return 0;
}

const char* opText(int op) {
  return op >= 0 && op < kNumReduceOps ? reduceOpName(static_cast<ReduceOp>(op)) : "?";
}

// The in-place rule of each collective, for messages: which pointer relation makes a call
// in place (NCCL's conventions, see the Request comment in algorithms/algorithm.h).
const char* inPlaceRule(Collective c) {
  switch (c) {
    case Collective::kAllGather: return "in place needs sendbuff == recvbuff + rank*sendcount";
    case Collective::kReduceScatter: return "in place needs recvbuff == sendbuff + rank*recvcount";
    case Collective::kGather: return "in place needs sendbuff == recvbuff + root*count at the root";
    case Collective::kScatter: return "in place needs recvbuff == sendbuff + root*count at the root";
    case Collective::kAllGatherV: return "in place needs sendbuff == recvbuff + displs[rank]";
    case Collective::kReduceScatterV:
      return "in place needs recvbuff == sendbuff + the sum of recvcounts before this rank";
    case Collective::kAllToAllV: return "alltoallv has no in-place form";
    default: return "in place needs sendbuff == recvbuff";
  }
}

// Whether a collective's input (or output) holds one block per rank, so that a piece of a
// device call covers the same range of each (device_queue.h, blockwise calls).
bool inputInBlocks(Collective c) { return c == Collective::kReduceScatter || c == Collective::kAllToAll; }
bool outputInBlocks(Collective c) { return c == Collective::kAllGather || c == Collective::kAllToAll; }

// Whether a side of a call cut in pieces holds a block per rank (each piece a range of every
// block), or one block (or, elementwise, the whole buffer: the piece a range of it).
bool inputHoldsBlocks(Collective c) {
  return inputInBlocks(c) || c == Collective::kReduceScatterV || c == Collective::kScatter ||
         c == Collective::kAllToAllV;
}
bool outputHoldsBlocks(Collective c) {
  return outputInBlocks(c) || c == Collective::kAllGatherV || c == Collective::kGather || c == Collective::kAllToAllV;
}

// One piece of a device call staged in pieces (device_queue.h): elements [first, first +
// elements) of an elementwise call, or of every rank's block of an allgather,
// reduce-scatter or alltoall, which is then that range of each block as a v-variant (of an
// alltoallv: piece number `first` of each block, as device_queue.h cuts them): the
// same call on every rank, whatever its path (a staged rank's host copies and a direct
// rank's device buffers have the same layout).
algorithms::Request pieceRequest(const algorithms::Request& req, int nranks, size_t first, size_t elements) {
  algorithms::Request piece = req;
  if (req.coll == Collective::kAllToAllV) {
    // Piece `first` of every block on both sides, each cut by its own size
    // (DeviceQueue::pairPieceBytes), which the block's sender and receiver both know.
    const size_t es = dataTypeSize(req.dtype), n = req.counts.size();
    const auto cut = [&](const std::vector<size_t>& counts, const std::vector<size_t>& displs, std::vector<size_t>* c,
                         std::vector<size_t>* d) {
      for (size_t b = 0; b < n; ++b) {
        const size_t step = device::DeviceQueue::pairPieceBytes(counts[b] * es, n) / es, from = first * step;
        (*c)[b] = from < counts[b] ? std::min(step, counts[b] - from) : 0;
        (*d)[b] = displs[b] + std::min(from, counts[b]);
      }
    };
    cut(req.sendCounts, req.sendDispls, &piece.sendCounts, &piece.sendDispls);
    cut(req.counts, req.displs, &piece.counts, &piece.displs);
    return piece;
  }
  if (req.coll == Collective::kGather || req.coll == Collective::kScatter) {
    // The range of each of the root's blocks, which then lie apart (Request::displs).
    piece.count = elements;
    piece.displs.resize(static_cast<size_t>(nranks));
    for (size_t b = 0; b < piece.displs.size(); ++b) piece.displs[b] = b * req.count + first;
    return piece;
  }
  if (req.coll == Collective::kAllGatherV || req.coll == Collective::kReduceScatterV) {
    // Unequal blocks: the range of each, clipped to its end (some then hold none of it).
    size_t at = 0;
    piece.displs.resize(req.counts.size());
    for (size_t b = 0; b < req.counts.size(); ++b) {
      const size_t c = req.counts[b];
      piece.counts[b] = first < c ? std::min(elements, c - first) : 0;
      piece.displs[b] = (req.displs.empty() ? at : req.displs[b]) + first;
      at += c;
    }
    return piece;
  }
  piece.count = elements;
  if (inputInBlocks(req.coll) || outputInBlocks(req.coll)) {
    piece.coll = req.coll == Collective::kAllGather       ? Collective::kAllGatherV
                 : req.coll == Collective::kReduceScatter ? Collective::kReduceScatterV
                                                          : Collective::kAllToAllV;
    const size_t n = static_cast<size_t>(nranks);
    piece.counts.assign(n, elements);
    piece.displs.resize(n);
    for (size_t b = 0; b < n; ++b) piece.displs[b] = b * req.count + first;
    if (req.coll == Collective::kAllToAll) {
      piece.sendCounts = piece.counts;
      piece.sendDispls = piece.displs;
    }
  }
  return piece;
}

// How one piece of `req` runs (device_queue.h, PieceRun): on the host copies, or, with a
// mover, on GPU `gpu`'s buffers.
device::DeviceQueue::PieceRun piecesOf(const algorithms::Request& req, core::Communicator* comm,
                                       device::DeviceMover* mover, int gpu) {
  return [comm, req, mover, gpu](const void* in, void* out, size_t first, size_t elements) {
    algorithms::Request piece = pieceRequest(req, comm->size(), first, elements);
    const size_t at = first * dataTypeSize(req.dtype);
    // A side of one block (both sides of an elementwise call) starts at the piece; a side
    // this rank has none of (an empty block of its own) stays null.
    if (in && !inputHoldsBlocks(req.coll)) in = static_cast<const char*>(in) + at;
    if (out && !outputHoldsBlocks(req.coll)) out = static_cast<char*>(out) + at;
    if (mover) mover->setDevice(gpu);
    return comm->run(piece, in, out, {}, mover);
  };
}

// The last blocking host collective a thread prepared (Session::runRepeated): its arguments
// and what prepare() built from them, which follows from the arguments alone when they name
// host memory, no stream, no count arrays and no pre-multiplied sum's handle. Such a request
// has no vectors, so its scalars are all there is to keep; and a record of plain fields is
// set up with the thread, where one with a destructor would be checked for at every access.
struct RepeatedCall {
  uint64_t session = 0;  // Session::repeatId_; 0: none
  CallArgs args;
  // A request without count arrays: its scalars are all of it (the call's shape, whether
  // it runs in place, a pre-multiplied sum's scalar).
  core::CallShape shape;
  bool inPlace = false;
  double preMulScalar = 1.0;
  const void* input = nullptr;
  void* output = nullptr;
  bool readsSend = false;   // sendbuff holds elements to read: its memory kind was checked
  bool writesRecv = false;  // recvbuff likewise
  uint64_t plan = 0;        // Communicator::runAgain's, for this request
};
static_assert(std::is_trivially_destructible_v<RepeatedCall>);
thread_local RepeatedCall tlsRepeated;

// This thread's record. The compiler looks a thread_local's address up again at almost every
// use in a shared library (a call to __tls_get_addr each time); hiding the pointer from it
// makes the one lookup serve the whole call.
RepeatedCall* repeatedCall() {
  RepeatedCall* r = &tlsRepeated;
  asm("" : "+r"(r));
  return r;
}

bool sameArgs(const CallArgs& x, const CallArgs& y) {
  // Names every field: a field added to CallArgs stops this binding from compiling until it
  // is compared below too.
  [[maybe_unused]] const auto& [coll, fn, send, recv, count, countName, dtype, op, cxxPreMul, cxxScalar, root,
                                recvCounts, recvDispls, sendCounts, sendDispls, stream] = x;
  return x.coll == y.coll && x.fn == y.fn && x.send == y.send && x.recv == y.recv && x.count == y.count &&
         x.dtype == y.dtype && x.op == y.op && x.cxxPreMul == y.cxxPreMul && x.cxxScalar == y.cxxScalar &&
         x.root == y.root && x.countName == y.countName && x.recvCounts == y.recvCounts &&
         x.recvDispls == y.recvDispls && x.sendCounts == y.sendCounts && x.sendDispls == y.sendDispls &&
         x.stream == y.stream;
}

}  // namespace

uint64_t Session::nextRepeatId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool Session::runRepeated(const CallArgs& a, Status* result) {
  RepeatedCall& r = *repeatedCall();
  if (r.session != repeatId_ || !sameArgs(r.args, a)) return false;
  // Device calls may still wait for their streams: Session::run orders this one after them.
  if (deviceQueueMade_.load(std::memory_order_acquire)) return false;
  // Host memory then; the same addresses may have become device memory since.
  device::Runtime& rt = device::runtime();
  if ((r.readsSend && rt.pointerInfo(a.send).kind == device::MemoryKind::kDevice) ||
      (r.writesRecv && rt.pointerInfo(a.recv).kind == device::MemoryKind::kDevice))
    return false;
  algorithms::Request req;
  req.coll = r.shape.coll;
  req.count = r.shape.count;
  req.dtype = r.shape.dtype;
  req.op = r.shape.op;
  req.root = r.shape.root;
  req.preMul = r.shape.preMul;
  req.inPlace = r.inPlace;
  req.preMulScalar = r.preMulScalar;
  *result = comm_->runAgain(req, r.input, r.output, &r.plan);
  return true;
}

Status Session::resolveOp(const CallArgs& a, algorithms::Request* req, const CallSite& site) const {
  const auto where = [&site] { return site.str(); };
  const DataType dt = static_cast<DataType>(a.dtype);
  if (a.cxxPreMul) {
    req->op = ReduceOp::kSum;
    req->preMul = true;
    req->preMulScalar = a.cxxScalar;
    return Status::ok();
  }
  if (validReduceOp(a.op)) {
    const ReduceOp op = static_cast<ReduceOp>(a.op);
    if (isBitwiseOp(op) && isFloatType(dt))
      return invalidArgument(where() + "op=" + reduceOpName(op) + " is bitwise, for integer types only, and datatype=" +
                             dataTypeName(dt) + " is a floating-point type");
    req->op = op;
    return Status::ok();
  }
  if (a.op >= kNumReduceOps) {
    std::lock_guard<std::mutex> lock(preMulMu_);
    auto it = preMuls_.find(a.op);
    if (it != preMuls_.end()) {
      const PreMul& p = it->second;
      if (!p.live) return invalidArgument(where() + "op=" + std::to_string(a.op) + " was destroyed by braidRedOpDestroy");
      if (p.dtype != dt)
        return invalidArgument(where() + "op=" + std::to_string(a.op) + " is a pre-multiplied sum created for datatype=" +
                               dataTypeName(p.dtype) + ", not datatype=" + dataTypeName(dt));
      req->op = ReduceOp::kSum;
      req->preMul = true;
      req->preMulScalar = p.scalar;
      return Status::ok();
    }
  }
  return invalidArgument(where() + "op=" + std::to_string(a.op) +
                         " is neither a braidRedOp_t nor a pre-multiplied sum of this communicator");
}

Status Session::prepare(const CallArgs& a, Call* out) const {
  const int rank = comm_->rank();
  const int nranks = comm_->size();
  const size_t n = static_cast<size_t>(nranks);
  // Formatted only on an error path: every call passes through here.
  const CallSite where{a.fn, rank};
  auto bad = [&](const std::string& what) { return invalidArgument(where.str() + what); };

  if (!validDataType(a.dtype)) return bad("datatype=" + std::to_string(a.dtype) + " is not a braidDataType_t");
  const DataType dt = static_cast<DataType>(a.dtype);
  const size_t es = dataTypeSize(dt);

  Call& call = *out;
  call.name = a.fn;
  algorithms::Request& req = call.req;
  req.coll = a.coll;
  req.dtype = dt;
  const Collective c = a.coll;
  const bool hasOp = c == Collective::kAllReduce || c == Collective::kReduce || c == Collective::kReduceScatter ||
                     c == Collective::kReduceScatterV;
  const bool hasRoot = c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
                       c == Collective::kScatter;
  if (hasOp) BRAID_RETURN_IF_ERROR(resolveOp(a, &req, where));
  if (hasRoot) {
    if (a.root < 0 || a.root >= nranks)
      return bad("root=" + std::to_string(a.root) + " is outside [0, nranks=" + std::to_string(nranks) + ")");
    req.root = a.root;
  }
  const bool isRoot = hasRoot && rank == a.root;

  // `count` times `blocks` elements, checked against the address space.
  auto elems = [&](size_t count, size_t blocks, size_t* out) -> Status {
    size_t e = 0, bytes = 0;
    if (mulOverflows(count, blocks, &e) || mulOverflows(e, es, &bytes) || bytes > static_cast<size_t>(PTRDIFF_MAX))
      return bad(std::string(a.countName) + "=" + num(count) + " overflows the address space (" +
                 (blocks > 1 ? "nranks*" + std::string(a.countName) + "*" : std::string(a.countName) + "*") +
                 "element size, " + dataTypeName(dt) + ")");
    *out = e;
    return Status::ok();
  };
  // The furthest element counts[i] elements at displs[i] reach, checked likewise.
  auto extent = [&](const size_t* counts, const char* countsName, const size_t* displs, const char* displsName,
                    size_t* out) -> Status {
    size_t hi = 0;
    for (size_t i = 0; i < n; ++i) {
      size_t end = 0, bytes = 0;
      if (addOverflows(displs[i], counts[i], &end) || mulOverflows(end, es, &bytes) ||
          bytes > static_cast<size_t>(PTRDIFF_MAX))
        return bad(std::string(displsName) + "[" + num(i) + "]=" + num(displs[i]) + " + " + countsName + "[" +
                   num(i) + "]=" + num(counts[i]) + " overflows the address space");
      hi = std::max(hi, end);
    }
    *out = hi;
    return Status::ok();
  };
  auto needArray = [&](const size_t* p, const char* name) -> Status {
    if (!p) return bad(std::string(name) + " is NULL");
    return Status::ok();
  };

  // Elements this rank reads from sendbuff and writes to recvbuff, and the pointer relation
  // that makes the call in place: sendbuff == recvbuff + sendAt elements, or recvbuff ==
  // sendbuff + recvAt elements (at most one of the two is used).
  size_t sendElems = 0, recvElems = 0;
  bool hasSendAt = false, hasRecvAt = false;
  size_t sendAt = 0, recvAt = 0;
  const size_t r = static_cast<size_t>(rank);

  switch (c) {
    case Collective::kAllReduce:
      BRAID_RETURN_IF_ERROR(elems(a.count, 1, &sendElems));
      recvElems = sendElems;
      hasSendAt = true;
      break;
    case Collective::kBroadcast:
      BRAID_RETURN_IF_ERROR(elems(a.count, 1, &recvElems));
      sendElems = isRoot ? recvElems : 0;
      hasSendAt = isRoot;
      break;
    case Collective::kReduce:
      BRAID_RETURN_IF_ERROR(elems(a.count, 1, &sendElems));
      recvElems = isRoot ? sendElems : 0;
      hasSendAt = isRoot;
      break;
    case Collective::kAllGather:
      BRAID_RETURN_IF_ERROR(elems(a.count, 1, &sendElems));
      BRAID_RETURN_IF_ERROR(elems(a.count, n, &recvElems));
      hasSendAt = true;
      sendAt = r * a.count;
      break;
    case Collective::kReduceScatter:
      BRAID_RETURN_IF_ERROR(elems(a.count, n, &sendElems));
      BRAID_RETURN_IF_ERROR(elems(a.count, 1, &recvElems));
      hasRecvAt = true;
      recvAt = r * a.count;
      break;
    case Collective::kAllToAll:
      BRAID_RETURN_IF_ERROR(elems(a.count, n, &sendElems));
      recvElems = sendElems;
      hasSendAt = true;
      break;
    case Collective::kGather:
      BRAID_RETURN_IF_ERROR(elems(a.count, n, &recvElems));
      sendElems = a.count;
      if (!isRoot) recvElems = 0;
      hasSendAt = isRoot;
      sendAt = static_cast<size_t>(a.root) * a.count;
      break;
    case Collective::kScatter:
      BRAID_RETURN_IF_ERROR(elems(a.count, n, &sendElems));
      recvElems = a.count;
      if (!isRoot) sendElems = 0;
      hasRecvAt = isRoot;
      recvAt = static_cast<size_t>(a.root) * a.count;
      break;
    case Collective::kAllGatherV: {
      BRAID_RETURN_IF_ERROR(needArray(a.recvCounts, "recvcounts"));
      BRAID_RETURN_IF_ERROR(needArray(a.recvDispls, "displs"));
      BRAID_RETURN_IF_ERROR(elems(a.count, 1, &sendElems));
      if (a.recvCounts[r] != a.count)
        return bad("recvcounts[" + num(r) + "]=" + num(a.recvCounts[r]) + " differs from sendcount=" + num(a.count));
      BRAID_RETURN_IF_ERROR(extent(a.recvCounts, "recvcounts", a.recvDispls, "displs", &recvElems));
      req.counts.assign(a.recvCounts, a.recvCounts + n);
      req.displs.assign(a.recvDispls, a.recvDispls + n);
      hasSendAt = true;
      sendAt = a.recvDispls[r];
      break;
    }
    case Collective::kReduceScatterV: {
      BRAID_RETURN_IF_ERROR(needArray(a.recvCounts, "recvcounts"));
      size_t total = 0;
      for (size_t i = 0; i < n; ++i) {
        if (i == r) recvAt = total;
        size_t bytes = 0;
        if (addOverflows(total, a.recvCounts[i], &total) || mulOverflows(total, es, &bytes) ||
            bytes > static_cast<size_t>(PTRDIFF_MAX))
          return bad("recvcounts overflow the address space (their sum, at recvcounts[" + num(i) + "]=" +
                     num(a.recvCounts[i]) + ")");
      }
      sendElems = total;
      recvElems = a.recvCounts[r];
      req.counts.assign(a.recvCounts, a.recvCounts + n);
      hasRecvAt = true;
      break;
    }
    case Collective::kAllToAllV: {
      BRAID_RETURN_IF_ERROR(needArray(a.sendCounts, "sendcounts"));
      BRAID_RETURN_IF_ERROR(needArray(a.sendDispls, "sdispls"));
      BRAID_RETURN_IF_ERROR(needArray(a.recvCounts, "recvcounts"));
      BRAID_RETURN_IF_ERROR(needArray(a.recvDispls, "rdispls"));
      BRAID_RETURN_IF_ERROR(extent(a.sendCounts, "sendcounts", a.sendDispls, "sdispls", &sendElems));
      BRAID_RETURN_IF_ERROR(extent(a.recvCounts, "recvcounts", a.recvDispls, "rdispls", &recvElems));
      req.counts.assign(a.recvCounts, a.recvCounts + n);
      req.displs.assign(a.recvDispls, a.recvDispls + n);
      req.sendCounts.assign(a.sendCounts, a.sendCounts + n);
      req.sendDispls.assign(a.sendDispls, a.sendDispls + n);
      break;
    }
    case Collective::kBarrier:
      break;
    case Collective::kSendRecv:
      return internalError(where.str() + "point-to-point calls go through prepareP2P");
  }
  // The v-variants' sizes are in their count arrays; `count` must not differ between ranks
  // (it is part of the shape every rank checks), so it is left 0 there.
  const bool vVariant = c == Collective::kAllGatherV || c == Collective::kReduceScatterV || c == Collective::kAllToAllV;
  req.count = vVariant || c == Collective::kBarrier ? 0 : a.count;

  if (sendElems > 0 && !a.send) return bad("sendbuff is NULL with " + num(sendElems) + " elements to read");
  if (recvElems > 0 && !a.recv) return bad("recvbuff is NULL with " + num(recvElems) + " elements to write");

  const auto s = reinterpret_cast<uintptr_t>(a.send);
  const auto d = reinterpret_cast<uintptr_t>(a.recv);
  const bool inPlace = (hasSendAt && a.send && a.recv && s == d + sendAt * es) ||
                       (hasRecvAt && a.send && a.recv && d == s + recvAt * es);
  if (sendElems > 0 && recvElems > 0 && !inPlace) {
    const size_t sb = sendElems * es, db = recvElems * es;
    if (s < d + db && d < s + sb) return bad(std::string("sendbuff and recvbuff overlap (") + inPlaceRule(c) + ")");
  }
  req.inPlace = inPlace;

  // Device buffers, or a stream: the call goes in stream order through staging. One call
  // uses one kind of memory.
  device::Runtime& rt = device::runtime();
  const bool sendDev = sendElems > 0 && rt.pointerInfo(a.send).kind == device::MemoryKind::kDevice;
  const bool recvDev = recvElems > 0 && rt.pointerInfo(a.recv).kind == device::MemoryKind::kDevice;
  if (a.stream != nullptr || sendDev || recvDev) {
    Status avail = rt.available();
    if (!avail.isOk()) {
      return bad(std::string(a.stream ? "stream is not NULL" : "the buffers are device memory") +
                 " but device buffers cannot be used here: " + avail.message());
    }
    if (sendElems > 0 && recvElems > 0 && sendDev != recvDev)
      return bad(std::string("sendbuff is ") + (sendDev ? "device" : "host") + " memory and recvbuff is " +
                 (recvDev ? "device" : "host") + " memory; one call takes one kind");
    call.onDevice = true;
    call.device.stream = a.stream;
    call.device.input = a.send;
    call.device.inputBytes = sendElems * es;
    call.device.output = a.recv;
    call.device.outputBytes = recvElems * es;
    // v-variants may leave gaps; a non-root's broadcast reads recvbuff.
    call.device.writesWholeOutput = !vVariant;
    // Allreduce, broadcast and reduce are elementwise, allgather, reduce-scatter and
    // alltoall blockwise: they may be staged in pieces that overlap the copies.
    if (c == Collective::kAllReduce || c == Collective::kBroadcast || c == Collective::kReduce ||
        inputInBlocks(c) || outputInBlocks(c))
      call.device.elementBytes = es;
    if (inputInBlocks(c) || outputInBlocks(c)) call.device.blocks = static_cast<size_t>(comm_->size());
    // Allgatherv and reduce_scatterv, blocks of the sizes every rank's counts give, may be
    // staged in pieces too. So may gather and scatter: the root holds the blocks, the others
    // their own alone. Alltoallv's counts are each rank's own: it is cut block by block and
    // the ranks agree how many pieces it runs (device_queue.h).
    if (c == Collective::kAllGatherV || c == Collective::kReduceScatterV || c == Collective::kGather ||
        c == Collective::kScatter) {
      const bool rooted = c == Collective::kGather || c == Collective::kScatter;
      call.device.elementBytes = es;
      call.device.blocks = n;
      call.device.ownBlock = r;
      call.device.blocksOnOutput = c == Collective::kAllGatherV || c == Collective::kGather;
      size_t at = 0;
      for (size_t b = 0; b < n; ++b) {
        const size_t elems = rooted ? a.count : req.counts[b];
        const size_t displ = c == Collective::kAllGatherV ? req.displs[b] : at;
        call.device.blockRanges.emplace_back(displ * es, elems * es);
        at += elems;
      }
    }
    if (c == Collective::kAllToAllV) {
      call.device.elementBytes = es;
      call.device.pairwise = true;
      for (size_t b = 0; b < n; ++b) {
        call.device.inputRanges.emplace_back(req.sendDispls[b] * es, req.sendCounts[b] * es);
        call.device.outputRanges.emplace_back(req.displs[b] * es, req.counts[b] * es);
      }
    }
    if (c == Collective::kBroadcast && !isRoot) {
      call.device.input = a.recv;
      call.device.inputBytes = recvElems * es;
    }
  }

  // The core reads `input` only where this rank has something to send (broadcast: the root);
  // elsewhere a broadcast runs in place on recvbuff, as the chain expects.
  call.input = a.send;
  call.output = a.recv;
  if (c == Collective::kBroadcast && !isRoot) {
    call.input = a.recv;
    req.inPlace = true;
  }
  // Kept for runRepeated where the request follows from the arguments alone.
  if (!call.onDevice && !vVariant && !a.stream && !(hasOp && a.op >= kNumReduceOps) && req.counts.empty() &&
      req.displs.empty() && req.sendCounts.empty() && req.sendDispls.empty() && req.p2p.empty()) {
    RepeatedCall& rep = *repeatedCall();
    rep.session = repeatId_;
    rep.args = a;
    rep.shape = core::CallShape::of(req);
    rep.inPlace = req.inPlace;
    rep.preMulScalar = req.preMulScalar;
    rep.input = call.input;
    rep.output = call.output;
    rep.readsSend = sendElems > 0;
    rep.writesRecv = recvElems > 0;
    rep.plan = 0;
  }
  return Status::ok();
}

StatusOr<P2PMessage> Session::prepareP2P(const char* fn, bool isSend, const void* buf, size_t count, int datatype,
                                         int peer, braidStream_t stream) const {
  const int rank = comm_->rank();
  const int nranks = comm_->size();
  auto bad = [&](const std::string& what) {
    return invalidArgument(std::string(fn) + " on rank " + std::to_string(rank) + ": " + what);
  };
  if (!validDataType(datatype)) return bad("datatype=" + std::to_string(datatype) + " is not a braidDataType_t");
  if (peer < 0 || peer >= nranks)
    return bad("peer=" + std::to_string(peer) + " is outside [0, nranks=" + std::to_string(nranks) + ")");
  const DataType dt = static_cast<DataType>(datatype);
  size_t bytes = 0;
  if (mulOverflows(count, dataTypeSize(dt), &bytes) || bytes > static_cast<size_t>(PTRDIFF_MAX))
    return bad("count=" + num(count) + " overflows the address space (count*element size, " + dataTypeName(dt) + ")");
  if (count > 0 && !buf) return bad(std::string(isSend ? "sendbuff" : "recvbuff") + " is NULL with count=" + num(count));
  const bool onDevice = count > 0 && device::runtime().pointerInfo(buf).kind == device::MemoryKind::kDevice;
  if (stream != nullptr || onDevice) {
    Status avail = device::runtime().available();
    if (!avail.isOk()) {
      return bad(std::string(stream ? "stream is not NULL" : "the buffer is device memory") +
                 " but device buffers cannot be used here: " + avail.message());
    }
  }
  P2PMessage m;
  m.onDevice = stream != nullptr || onDevice;
  m.stream = stream;
  m.isSend = isSend;
  m.buf = const_cast<void*>(buf);  // a send only reads it
  m.bytes = bytes;
  m.peer = peer;
  return m;
}

Call Session::p2pCall(const std::vector<P2PMessage>& msgs, const char* name) {
  // One request in bytes: a group may mix data types, and the wire only needs sizes.
  Call call;
  call.name = name;
  call.req.coll = Collective::kSendRecv;
  call.req.dtype = DataType::kUint8;
  call.req.p2p.reserve(msgs.size());
  call.extra.reserve(msgs.size());
  for (const P2PMessage& m : msgs) {
    call.req.p2p.push_back(algorithms::P2POp{m.isSend, m.peer, m.bytes});
    call.extra.push_back(m.buf);
  }
  // On the device path every message is staged, all on one stream.
  for (const P2PMessage& m : msgs) {
    if (!m.onDevice) continue;
    call.onDevice = true;
    call.device.stream = m.stream;
    break;
  }
  if (call.onDevice) {
    for (const P2PMessage& m : msgs) {
      if (!m.onDevice && m.bytes > 0) {
        call.invalid = invalidArgument(std::string(name) + ": a group mixes host and device buffers in its sends and receives");
      } else if (m.stream != call.device.stream) {
        call.invalid =
            invalidArgument(std::string(name) + ": the sends and receives of a group on device buffers must use one stream");
      }
      call.device.extra.push_back(device::DeviceExtra{m.buf, m.bytes, m.isSend});
    }
  }
  return call;
}

Status Session::run(Call&& call) {
  if (!call.invalid.isOk()) return call.invalid;
  if (!call.onDevice) {
    // Made once, kept until the session goes: no lock for host calls.
    device::DeviceQueue* q = deviceQueueMade_.load(std::memory_order_acquire);
    if (!q) return comm_->run(call.req, call.input, call.output, std::move(call.extra));
    // Device calls before this one may still be waiting for their streams: the communicator
    // must see this call after them, on every rank alike.
    return q->runInOrder([&] { return comm_->run(call.req, call.input, call.output, std::move(call.extra)); });
  }
  return enqueueOnDevice(std::move(call), nullptr);
}

Status Session::enqueueOnDevice(Call&& call, std::shared_ptr<device::DeviceDone> done) {
  // Built only for a message.
  auto where = [&] { return std::string(call.name) + " on rank " + std::to_string(comm_->rank()); };
  // A replay of a captured call that failed fails the calls after it, as enqueued work does.
  {
    std::lock_guard<std::mutex> lock(captureGuard_->errorMu);
    if (!captureGuard_->error.isOk()) return captureGuard_->error;
  }
  if (call.device.pairwise) {
    // How many pieces an alltoallv runs: the most any rank's blocks take (device_queue.h),
    // agreed on the host, in the communicator's order of calls.
    core::Communicator* comm = comm_.get();
    call.device.agreePieces = [comm](size_t own) -> StatusOr<size_t> {
      algorithms::Request most;
      most.coll = Collective::kAllReduce;
      most.dtype = DataType::kUint64;
      most.op = ReduceOp::kMax;
      most.count = 1;
      most.inPlace = true;
      uint64_t v = own;
      Status st = comm->run(most, &v, &v);
      if (!st.isOk())
        return Status(st.code(),
                      "agreeing with the other ranks on how many pieces an alltoallv on device buffers runs (an "
                      "allreduce of one uint64, which every rank makes that passes device buffers to it): " +
                          st.message(),
                      st.rank());
      return static_cast<size_t>(v);
    };
  }
  // Before anything touches the stream: a stream being captured into a CUDA graph gets the
  // call as graph nodes (device_queue.h, "Captured calls"), staged calls only.
  auto captured = device::runtime().capturing(call.device.stream);
  if (!captured.isOk())
    return invalidArgument(where() + ": stream cannot be queried: " + captured.status().message());
  if (captured.value()) {
    // Staged whatever BRAID_CUDA_PATH says: the host node may not launch the kernels of the
    // direct paths. Every rank capturing the same calls, each replay is a host call on every
    // rank, which the direct paths' connections carry as they carry any (ipc: through the
    // shared-memory slots beside the device ones).
    const char* path = std::getenv("BRAID_CUDA_PATH");
    bool undecided = false;
    {
      std::lock_guard<std::mutex> lock(deviceMu_);
      undecided = directState_ == 0;
    }
    // The ipc path's device slots are set up by every rank's first device call, with CUDA
    // allocations a capture may not make, and switch the connections over: not while a
    // replay could be running on them.
    if (path && std::string(path) == "ipc" && undecided)
      return invalidArgument(where() + ": stream is being captured into a CUDA graph before any device call of this " +
                             "communicator outside a capture; with BRAID_CUDA_PATH=ipc that first call sets up the " +
                             "device slots of every rank (CUDA allocations a capture does not allow): make one device " +
                             "call before capturing");
    if (call.device.stream == nullptr)
      return invalidArgument(where() + ": the legacy default stream would join another stream's CUDA graph capture; " +
                             "pass the capturing stream");
    if (done)
      return invalidArgument(where() + ": stream is being captured into a CUDA graph, where the call runs at each " +
                             "replay: an asynchronous Work cannot wait for it (use the blocking form)");
    core::Communicator* comm = comm_.get();
    algorithms::Request req = call.req;
    // Cut as the same call uncaptured would be, so that peers issuing it so see the same calls.
    Status st = device::DeviceQueue::enqueueCaptured(
        device::runtime(), call.device,
        [comm, req](const void* in, void* out, const std::vector<void*>& extra) {
          return comm->run(req, in, out, extra);
        },
        piecesOf(req, comm, nullptr, -1), captureGuard_);
    if (!st.isOk()) return invalidArgument(where() + ": could not capture the call into the CUDA graph: " + st.message());
    return Status::ok();
  }
  device::DeviceQueue* q = nullptr;
  device::DeviceMover* mover = nullptr;
  int gpu = -1;
  {
    std::lock_guard<std::mutex> lock(deviceMu_);
    if (!deviceQueue_) {
      deviceQueue_ = std::make_unique<device::DeviceQueue>(device::runtime(), comm_->timeoutSeconds());
      deviceQueueMade_.store(deviceQueue_.get(), std::memory_order_release);
    }
    q = deviceQueue_.get();
    const void* any = call.device.input ? call.device.input : call.device.output;
    for (size_t i = 0; !any && i < call.device.extra.size(); ++i) any = call.device.extra[i].buf;
    gpu = any ? device::runtime().pointerInfo(any).device : -1;
    if (gpu >= 0) {
      BRAID_ASSIGN_OR_RETURN(bool direct, takesDirectPath(gpu));
      if (direct) mover = mover_.get();
    }
  }
  // Staged: the host collective runs on the host copies, laid out like the device buffers
  // (an in-place call stays in place). Direct: on the device buffers, through the mover.
  call.device.direct = mover != nullptr;
  algorithms::Request req = call.req;
  core::Communicator* comm = comm_.get();
  device::DeviceQueue::PieceRun pieceRun;
  if (call.device.elementBytes > 0) pieceRun = piecesOf(req, comm, mover, gpu);
  return q->enqueue(
      call.device,
      [comm, req, mover, gpu](const void* in, void* out, const std::vector<void*>& extra) {
        if (mover) mover->setDevice(gpu);
        return comm->run(req, in, out, extra, mover);
      },
      std::move(pieceRun), std::move(done));
}

StatusOr<bool> Session::takesDirectPath(int gpu) {
  if (directState_ == 0) {
    // BRAID_CUDA_PATH: staged (the default) or direct, where every connection's slots are
    // host memory it gives (shared memory, loopback, tcp, plugins of ABI version 5 or later: UCX,
    // verbs) and the GPU reaches registered host memory; otherwise staged, saying why once.
    const char* v = std::getenv("BRAID_CUDA_PATH");
    const std::string path = v && *v ? v : "staged";
    if (path != "staged" && path != "direct" && path != "ipc")
      return invalidArgument("BRAID_CUDA_PATH=" + path + " on rank " + std::to_string(comm_->rank()) +
                             ": expected staged, direct or ipc");
    directState_ = 2;
    if (path != "staged") {
      device::Runtime& rt = device::runtime();
      std::vector<std::pair<void*, size_t>> ranges;
      Status why = rt.directSupport(gpu);
      if (why.isOk() && !comm_->slotMemory(&ranges))
        why = Status(Code::kInvalidArgument,
                     "a peer is reached through a transport plugin that gives no slot memory (plugin ABI "
                     "version 4 or older)");
      if (why.isOk()) {
        auto m = std::make_unique<device::DeviceMover>(rt);
        why = m->registerSlots(ranges);
        if (why.isOk()) {
          mover_ = std::move(m);
          directState_ = 1;
          BRAID_INFO("BRAID_CUDA_PATH=%s: device buffers run on GPU %d on rank %d, %zu slot regions registered",
                     path.c_str(), gpu, comm_->rank(), ranges.size());
        }
      }
      if (directState_ != 1)
        BRAID_WARN("BRAID_CUDA_PATH=%s: device buffers are staged instead on rank %d: %s", path.c_str(),
                   comm_->rank(), why.message().c_str());
      // Every rank takes part, whether it can use them or not: all ranks or none.
      if (path == "ipc") BRAID_RETURN_IF_ERROR(setupDeviceSlots(gpu, directState_ == 1));
    }
  }
  return directState_ == 1;
}

// BRAID_CUDA_PATH=ipc, at the first device call of every rank: each rank makes a device
// area for each shared-memory connection it receives on and names it (CUDA IPC or a cuMem
// handle), or, where the transport registers areas with its NIC (GPUDirect RDMA), one for
// each connection it sends or receives on, registered and named by the connection; once
// every rank has made its own, each opens (or attaches) its peers' for the connections it
// sends on; once every rank has done that, all those connections take them. Connections of
// transports without areas (tcp, UCX) keep their registered host slots. Any rank that
// cannot (no direct path, no memory, a peer's GPU its own cannot reach, a NIC that cannot
// register GPU memory) makes every rank keep the shared-memory slots.
Status Session::setupDeviceSlots(int gpu, bool canTake) {
  using Kind = transport::Connection::DeviceAreaKind;
  device::Runtime& rt = device::runtime();
  const int me = comm_->rank();
  struct End {
    int set, peer;
    transport::Connection* c;
    void* area = nullptr;
  };
  std::vector<End> recvs, sends;
  // Connections without device areas (tcp, UCX) keep their registered host slots, as on the
  // direct path; the executor picks per connection (Connection::deviceData).
  comm_->forEachConnection([&](int set, int peer, bool send, transport::Connection* c) {
    if (c->deviceAreaKind() != Kind::kNone) (send ? sends : recvs).push_back(End{set, peer, c});
  });
  std::string why = canTake ? "" : "no direct path";
  bool rdma = false;
  for (const std::vector<End>* ends : {&recvs, &sends})
    for (const End& e : *ends) rdma |= e.c->deviceAreaKind() == Kind::kRegistered;
  if (why.empty() && rdma) {
    Status st = rt.rdmaSupport(gpu);
    if (!st.isOk()) why = st.message();
  }
  // An area of this rank's own, named: by CUDA IPC, or registered by its connection.
  auto makeArea = [&](End& e, std::string* name) -> Status {
    const Kind kind = e.c->deviceAreaKind();
    size_t bytes = e.c->deviceAreaBytes();
    if (bytes == 0) return Status(Code::kInvalidArgument, "a connection without device slots");
    // Whole 2 MiB pages of GPU memory: what a dmabuf of it needs, and where cudaMalloc puts
    // allocations of that size.
    if (kind == Kind::kRegistered) bytes = (bytes + kDeviceAreaAlign - 1) / kDeviceAreaAlign * kDeviceAreaAlign;
    BRAID_ASSIGN_OR_RETURN(e.area, rt.allocDevice(bytes, gpu));
    slotAreas_.push_back(e.area);
    if (kind == Kind::kShared) {
      BRAID_ASSIGN_OR_RETURN(*name, rt.exportDevice(e.area));
      return Status::ok();
    }
    transport::Connection::DeviceMemory m;
    m.base = e.area;
    auto dmabuf = rt.dmabufOf(e.area, bytes);
    if (dmabuf.isOk()) {
      m.dmabufFd = dmabuf.value().fd;
      m.dmabufOffset = dmabuf.value().offset;
    } else {
      BRAID_INFO("BRAID_CUDA_PATH=ipc: rank %d registers its device area for rank %d by address: %s", me, e.peer,
                 dmabuf.status().message().c_str());
    }
    auto named = e.c->registerDeviceArea(m);
    if (m.dmabufFd >= 0) ::close(m.dmabufFd);
    BRAID_RETURN_IF_ERROR(named.status());
    slotConns_.push_back(e.c);
    *name = named.value();
    return Status::ok();
  };
  // Round 1: "ok" and "set|from|name;" per receive connection, or "no: why".
  std::string mine;
  for (End& e : recvs) {
    if (!why.empty()) break;
    std::string name;
    Status st = makeArea(e, &name);
    if (!st.isOk()) {
      why = st.message();
      break;
    }
    mine += std::to_string(e.set) + "|" + std::to_string(e.peer) + "|" + name + ";";
  }
  for (End& e : sends) {
    if (!why.empty() || e.c->deviceAreaKind() != Kind::kRegistered) continue;
    std::string unused;
    Status st = makeArea(e, &unused);
    if (!st.isOk()) why = st.message();
  }
  BRAID_ASSIGN_OR_RETURN(auto made, comm_->exchangeAll("dslots/made", why.empty() ? "ok;" + mine : "no: " + why));
  for (size_t r = 0; r < made.size() && why.empty(); ++r)
    if (made[r].compare(0, 3, "ok;") != 0) why = "rank " + std::to_string(r) + " has none (" + made[r] + ")";
  // Round 2: open (or attach) the peers' areas this rank sends into.
  for (End& e : sends) {
    if (!why.empty()) break;
    const std::string want = ";" + std::to_string(e.set) + "|" + std::to_string(me) + "|";
    const std::string& theirs = made[static_cast<size_t>(e.peer)];
    const size_t at = theirs.find(want, 2);
    const size_t end = at == std::string::npos ? at : theirs.find(';', at + want.size());
    if (end == std::string::npos) {
      why = "rank " + std::to_string(e.peer) + " named no device slots for rank " + std::to_string(me);
      break;
    }
    const std::string name = theirs.substr(at + want.size(), end - at - want.size());
    if (e.c->deviceAreaKind() == Kind::kRegistered) {
      Status st = e.c->attachPeerDeviceArea(name);
      if (!st.isOk()) why = st.message();
      continue;
    }
    auto area = rt.importDevice(name, gpu);
    if (!area.isOk()) {
      why = "rank " + std::to_string(e.peer) + "'s device slots: " + area.status().message();
      break;
    }
    e.area = area.value();
    slotImports_.push_back(e.area);
  }
  BRAID_ASSIGN_OR_RETURN(auto opened, comm_->exchangeAll("dslots/opened", why.empty() ? "ok" : "no: " + why));
  for (size_t r = 0; r < opened.size() && why.empty(); ++r)
    if (opened[r] != "ok") why = "rank " + std::to_string(r) + " could not open its peers' (" + opened[r] + ")";
  if (!why.empty()) {
    BRAID_WARN("BRAID_CUDA_PATH=ipc: rank %d keeps the shared-memory slots: %s", me, why.c_str());
    dropDeviceSlots();
    return Status::ok();
  }
  // Every peer has opened what this rank exported.
  for (const End& e : recvs)
    if (e.c->deviceAreaKind() == Kind::kShared) rt.exportsTaken(e.area);
  for (End& e : recvs) e.c->setDeviceArea(e.area);
  for (End& e : sends) e.c->setDeviceArea(e.area);
  if (recvs.empty() && sends.empty())
    BRAID_INFO("BRAID_CUDA_PATH=ipc: rank %d has no connection with device slots (its transports give none): its "
               "device calls run on the registered host slots, as with direct",
               me);
  else
    BRAID_INFO("BRAID_CUDA_PATH=ipc: rank %d moves device calls through %zu device slot areas of its own and %zu of "
               "its peers'%s",
               me, slotAreas_.size(), slotImports_.size(),
               slotConns_.empty() ? "" : ", registered with the NIC (GPUDirect RDMA) where a peer is across the network");
  return Status::ok();
}

// Registrations go before the memory they cover.
void Session::dropDeviceSlots() {
  device::Runtime& rt = device::runtime();
  for (transport::Connection* c : slotConns_) c->releaseDeviceArea();
  for (void* p : slotImports_) rt.closeImported(p);
  for (void* p : slotAreas_) rt.freeDevice(p);
  slotConns_.clear();
  slotImports_.clear();
  slotAreas_.clear();
}

Status Session::asyncError() {
  {
    std::lock_guard<std::mutex> lock(deviceMu_);
    if (deviceQueue_) BRAID_RETURN_IF_ERROR(deviceQueue_->asyncError());
  }
  {
    std::lock_guard<std::mutex> lock(captureGuard_->errorMu);
    if (!captureGuard_->error.isOk()) return captureGuard_->error;
  }
  return comm_->brokenStatus();
}

StatusOr<std::shared_ptr<core::Op>> Session::submit(Call&& call) {
  if (!call.invalid.isOk()) return call.invalid;
  if (call.onDevice) {
    return invalidArgument(std::string(call.name) + " on rank " + std::to_string(comm_->rank()) +
                           ": device buffers are enqueued with submitOnDevice");
  }
  // As in run(): after the device calls enqueued before it.
  if (device::DeviceQueue* q = deviceQueueMade_.load(std::memory_order_acquire)) q->drain();
  return comm_->submit(call.req, call.input, call.output, std::move(call.extra));
}

StatusOr<std::shared_ptr<device::DeviceDone>> Session::submitOnDevice(Call&& call) {
  if (!call.invalid.isOk()) return call.invalid;
  auto done = std::make_shared<device::DeviceDone>(comm_->timeoutSeconds());
  BRAID_RETURN_IF_ERROR(enqueueOnDevice(std::move(call), done));
  return done;
}

StatusOr<std::unique_ptr<Session>> Session::split(const char* fn, int color, int key) {
  std::unique_ptr<Session> child = derived();
  // Counted before the split's exchange, for the same reason as in join().
  if (color >= 0) child->countLive(+1);
  auto c = comm_->split(color, key);
  if (!c.isOk()) return c.status().withContext(std::string(fn) + " on rank " + std::to_string(comm_->rank()));
  if (!c.value()) return std::unique_ptr<Session>();
  child->comm_ = std::move(c).value();
  child->announce();
  return child;
}

StatusOr<int> Session::createPreMulSum(const void* scalar, int datatype) {
  const std::string where = "braidRedOpCreatePreMulSum on rank " + std::to_string(comm_->rank()) + ": ";
  if (!validDataType(datatype))
    return invalidArgument(where + "datatype=" + std::to_string(datatype) + " is not a braidDataType_t");
  if (!scalar) return invalidArgument(where + "scalar is NULL");
  const DataType dt = static_cast<DataType>(datatype);
  // Process-wide, so that handles of different communicators never coincide.
  static std::atomic<int> next{kNumReduceOps};
  int handle = next.fetch_add(1);
  if (handle < kNumReduceOps) return invalidArgument(where + "no pre-multiplied sum handles left in this process");
  std::lock_guard<std::mutex> lock(preMulMu_);
  preMuls_[handle] = PreMul{scalarValue(scalar, dt), dt, true};
  return handle;
}

Status Session::destroyPreMulSum(int op) {
  const std::string where = "braidRedOpDestroy on rank " + std::to_string(comm_->rank()) + ": ";
  std::lock_guard<std::mutex> lock(preMulMu_);
  auto it = preMuls_.find(op);
  if (it == preMuls_.end())
    return invalidArgument(where + "op=" + std::to_string(op) + " (" + opText(op) +
                           ") is not a pre-multiplied sum of this communicator");
  if (!it->second.live) return invalidArgument(where + "op=" + std::to_string(op) + " was already destroyed");
  // Kept (not erased), so that a later use says "destroyed" rather than "unknown".
  it->second.live = false;
  return Status::ok();
}

void Session::revoke() { comm_->revoke(); }

std::unique_ptr<Session> Session::derived() const {
  std::unique_ptr<Session> child(new Session());
  child->server_ = server_;
  child->standby_ = standby_;
  child->store_ = store_;
  child->familyBrokenNs_ = familyBrokenNs_;
  child->rootPrefix_ = rootPrefix_;
  child->trackLive_ = trackLive_;
  child->storeId_ = storeId_;
  child->standing_ = standing_;
  child->standbySilenceSec_ = standbySilenceSec_;
  child->standbyWaitSec_ = standbyWaitSec_;
  return child;
}

StatusOr<std::unique_ptr<Session>> Session::shrink(const char* fn, const std::vector<int>& exclude,
                                                   bool abortPending) {
  // The device queue's work runs on the communicator being shrunk: it ends first.
  if (device::DeviceQueue* q = deviceQueueMade_.load(std::memory_order_acquire)) q->drain();
  std::unique_ptr<Session> child = derived();
  child->countLive(+1);
  auto c = comm_->shrink(exclude, abortPending);
  if (!c.isOk()) return c.status().withContext(std::string(fn) + " on rank " + std::to_string(comm_->rank()));
  child->comm_ = std::move(c).value();
  BRAID_RETURN_IF_ERROR(child->rearmStandby(fn));
  child->announce();
  return child;
}

bool Session::hostsStore() const {
  return (server_ && !server_->stats().superseded) || (standby_ && standby_->stats().promoted);
}

// Every survivor of a shrink calls this with the new communicator. Its rank 0 reads whether
// the store still names a standby (the store forgets it when it drops its standby, and a
// standby that takes over forgets itself), and if not names the rank to start one: the
// lowest that does not host the store. That rank starts it for the store its client uses
// now and names it; every rank's client then goes there when it loses the store, as it went
// to the first one (a client that went over already may go over again).
Status Session::rearmStandby(const char* fn) {
  auto* c = dynamic_cast<bootstrap::TcpStoreClient*>(store_.get());
  if (!standing_ || !c || comm_->size() < 2) return Status::ok();
  const int rank = comm_->rank();
  const std::string where = std::string(fn) + " on rank " + std::to_string(rank) + ": the store's next standby";
  const Deadline deadline = Deadline::after(comm_->config().timeoutSec);
  const std::string decided = comm_->keyPrefix() + "/store-standby";
  if (rank == 0) {
    auto named = c->check({bootstrap::kStandbyKey}, deadline);
    if (!named.isOk()) return named.status().withContext(where);
    const std::string keeper = named.value() ? "-" : hostsStore() ? "1" : "0";
    BRAID_RETURN_IF_ERROR(c->set(decided, keeper, deadline).withContext(where));
  }
  auto keeper = c->get(decided, deadline);
  if (!keeper.isOk()) return keeper.status().withContext(where);
  if (keeper.value() == "-") return Status::ok();
  // The keeper says where its standby is ("" if it could not start one: the store goes on
  // without, as before) under a key of this shrink's, which the others wait for.
  if (rank == std::atoi(keeper.value().c_str())) {
    auto here = startStandby(*c, deadline);
    if (!here.isOk())
      BRAID_WARN("%s: %s; the store goes on without one", where.c_str(), here.status().message().c_str());
    BRAID_RETURN_IF_ERROR(c->set(decided + "/at", here.isOk() ? here.value() : "", deadline).withContext(where));
  }
  auto at = c->get(decided + "/at", deadline);
  if (!at.isOk()) return at.status().withContext(where);
  if (!at.value().empty()) useStandby(*c, at.value(), standbySilenceSec_);
  return Status::ok();
}

// A process joining a running job whose store keeps standbys (kStandbyPolicy): it goes to
// the one named now should the store be lost (none is named while the store has lost its
// standby and the survivors have not started the next: it learns of that one at the next
// shrink, rearmStandby, as they do), and it keeps one itself when its turn comes.
Status Session::learnStandby(bootstrap::TcpStoreClient& c, Deadline deadline) {
  auto policy = c.check({kStandbyPolicy}, deadline);
  if (!policy.isOk()) return policy.status().withContext("the store's standby");
  if (!policy.value()) return Status::ok();
  auto text = c.get(kStandbyPolicy, deadline);
  if (!text.isOk()) return text.status().withContext("the store's standby");
  double silence = 0, wait = 0;
  if (std::sscanf(text.value().c_str(), "%lf %lf", &silence, &wait) != 2 || !(silence >= 0) || !(wait >= 0))
    return Status(Code::kRemoteError, "malformed standby record '" + text.value().substr(0, 64) + "' in the store");
  standing_ = true;
  standbySilenceSec_ = silence;
  standbyWaitSec_ = wait;
  auto named = c.check({bootstrap::kStandbyKey}, deadline);
  if (!named.isOk()) return named.status().withContext("the store's standby");
  if (!named.value()) return Status::ok();
  auto at = c.get(bootstrap::kStandbyKey, deadline);
  if (!at.isOk()) return at.status().withContext("the store's standby");
  useStandby(c, at.value(), silence);
  return Status::ok();
}

// Starts a standby for the store that `c` uses now (rank 0's, or the standby that serves in
// its place) and names it there, where the store attaches it before it answers; its address.
// Once it serves, it waits for a standby of its own as rank 0's store does, and the client of
// its own process is the one whose SET_ON_CLOSE keys that standby keeps for the day this
// process dies too.
StatusOr<std::string> Session::startStandby(bootstrap::TcpStoreClient& c, Deadline deadline) {
  std::string host;
  int port = 0;
  if (!c.servingStandby(&host, &port)) {
    host = storeId_.host;
    port = storeId_.port;
  }
  const bool tls = comm_->config().tls && storeId_.key.present;
  BRAID_ASSIGN_OR_RETURN(auto srv, bootstrap::TcpStoreServer::start("0.0.0.0", 0, storeId_.nonce, storeId_.key, tls, true));
  std::shared_ptr<bootstrap::TcpStoreServer> standby(std::move(srv));
  standby->setLocalClient(c.clientId());
  if (standbyWaitSec_ > 0) standby->setStandbyWait(standbyWaitSec_);
  standby->standFor(host, port, standbySilenceSec_);
  const std::string here = c.localHost();
  if (here.empty()) return Status(Code::kRemoteError, "lost the store while naming a standby for it");
  const std::string at = here + ":" + std::to_string(standby->port());
  BRAID_RETURN_IF_ERROR(c.set(bootstrap::kStandbyKey, at, deadline));
  standby_ = std::move(standby);
  BRAID_INFO("the store at %s:%d has a standby in this rank, at %s", host.c_str(), port, at.c_str());
  return at;
}

Status Session::agree(const char* fn, int* flag) {
  auto a = comm_->agree(*flag);
  if (!a.isOk()) return a.status().withContext(std::string(fn) + " on rank " + std::to_string(comm_->rank()));
  *flag = a.value().flag;
  std::lock_guard<std::mutex> lock(agreeMu_);
  failedRanks_ = a.value().failed;
  return Status::ok();
}

std::vector<int> Session::failedRanks() const {
  std::lock_guard<std::mutex> lock(agreeMu_);
  return failedRanks_;
}

Status Session::growId(int newSize, braidUniqueId* id) {
  const std::string where = "braidCommGetGrowId on rank " + std::to_string(comm_->rank());
  if (storeId_.port == 0)
    return invalidArgument(where + ": this communicator's store is the caller's (a PyTorch store), which new processes "
                                   "cannot be sent to; grow needs braid's store (braidrun, a unique id, "
                                   "BRAID_STORE_ADDR or MASTER_ADDR)");
  if (storeId_.host.size() > bootstrap::kGrowIdMaxHost)
    return invalidArgument(where + ": the store's host name '" + storeId_.host + "' is longer than a grow id holds (" +
                           std::to_string(bootstrap::kGrowIdMaxHost) + " bytes); give its address instead");
  bootstrap::UniqueId g = storeId_;
  // Rank 0's store may be gone and its standby serving: new processes go there.
  if (auto* t = dynamic_cast<bootstrap::TcpStoreClient*>(store_.get())) (void)t->servingStandby(&g.host, &g.port);
  g.growToken = bootstrap::randomNonce();
  BRAID_RETURN_IF_ERROR(comm_->openGrow(g.growToken, newSize).withContext(where));
  bootstrap::encodeUniqueId(g, id->internal);
  return Status::ok();
}

namespace {
StatusOr<bootstrap::UniqueId> decodeGrowId(const char* fn, const braidUniqueId& id) {
  auto u = bootstrap::decodeUniqueId(id.internal);
  if (!u.isOk()) return u.status().withContext(fn);
  if (u.value().growToken == 0)
    return invalidArgument(std::string(fn) + ": growId is a unique id for init, not a grow id (braidCommGetGrowId)");
  return u;
}
}  // namespace

StatusOr<std::unique_ptr<Session>> Session::grow(const char* fn, int newSize, const braidUniqueId& id) {
  BRAID_ASSIGN_OR_RETURN(bootstrap::UniqueId u, decodeGrowId(fn, id));
  std::unique_ptr<Session> child = derived();
  child->countLive(+1);
  auto c = comm_->grow(u.growToken, newSize);
  if (!c.isOk()) return c.status().withContext(std::string(fn) + " on rank " + std::to_string(comm_->rank()));
  child->comm_ = std::move(c).value();
  child->announce();
  return child;
}

StatusOr<std::unique_ptr<Session>> Session::joinGrow(const char* fn, int newSize, const braidUniqueId& id, int rank) {
  BRAID_ASSIGN_OR_RETURN(bootstrap::UniqueId u, decodeGrowId(fn, id));
  // A new rank whose own setting is refused joins the grow only to tell the running ranks
  // why, as a rank of a first init does: they fail at once instead of at the timeout.
  Status configError;
  core::Config cfg = settingsOrLenient(&configError);
  std::shared_ptr<bootstrap::Store> store;
  if (u.nonce == bootstrap::kEtcdStoreNonce) {
    // The running ranks' store is an etcd cluster: this process names it as they do.
    const std::string who = std::string(fn) + " (rank " + std::to_string(rank) + ")";
    const char* url = std::getenv("BRAID_STORE");
    if (!url)
      return invalidArgument(who + ": the grow id is of a job whose store is etcd; set BRAID_STORE (and BRAID_JOB_ID "
                                   "or the launcher's job variables) as the running ranks have them");
    auto env = bootstrap::detectLaunchEnvLenient([](const char* n) { return std::getenv(n); });
    auto etcd = bootstrap::EtcdStore::connectForJob(url, env.isOk() ? env.value().jobTag : "",
                                                    Deadline::after(cfg.timeoutSec));
    if (!etcd.isOk()) return settingsFirst(etcd.status().withContext(who), configError);
    store = std::move(etcd).value();
  } else {
    auto client = bootstrap::TcpStoreClient::connect(u.host, u.port, u.nonce, Deadline::after(cfg.timeoutSec),
                                                     bootstrap::TcpStoreClient::kDefaultOpTimeoutSec, u.key,
                                                     cfg.tls && u.key.present);
    if (!client.isOk())
      return settingsFirst(client.status().withContext(std::string(fn) + " (rank " + std::to_string(rank) + ")"),
                           configError);
    store = std::move(client).value();
  }
  auto s = joinGrowWith(std::move(store), u, newSize, rank, cfg, configError);
  if (!s.isOk())
    return settingsFirst(s.status().withContext(std::string(fn) + " (new rank " + std::to_string(rank) + ")"),
                         configError);
  return s;
}

StatusOr<std::unique_ptr<Session>> Session::joinGrowWith(std::shared_ptr<bootstrap::Store> store,
                                                          const bootstrap::UniqueId& u, int newSize, int rank,
                                                          const core::Config& cfg, const Status& configError) {
  core::CommOptions opts;
  opts.config = cfg;
  opts.authKey = u.key;
  opts.configError = configError;
  std::unique_ptr<Session> s(new Session());
  s->store_ = std::move(store);
  s->storeId_ = u;
  s->storeId_.growToken = 0;
  if (auto* c = dynamic_cast<bootstrap::TcpStoreClient*>(s->store_.get()))
    BRAID_RETURN_IF_ERROR(s->learnStandby(*c, Deadline::after(cfg.timeoutSec)));
  BRAID_ASSIGN_OR_RETURN(s->comm_, core::Communicator::joinGrow(s->store_, u.growToken, newSize, rank, std::move(opts)));
  s->announce();
  return s;
}

namespace {
constexpr const char* kJoiners = "braid-elastic/joiners";    // tickets drawn by replacements
constexpr const char* kSettled = "braid-elastic/settled";  // tickets admitted or found gone so far
std::string joinerKey(int64_t ticket) { return "braid-elastic/joiner/" + std::to_string(ticket); }

bool fromHex(const std::string& s, char* out, size_t n) {
  if (s.size() != 2 * n) return false;
  auto v = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (size_t i = 0; i < n; ++i) {
    int hi = v(s[2 * i]), lo = v(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return true;
}
}  // namespace

StatusOr<std::unique_ptr<Session>> Session::joinAsReplacement(std::shared_ptr<bootstrap::Store> store,
                                                               const core::Config& cfg) {
  // A grow that fails on another's account (a running rank died before it joined: the
  // running ranks shrink it away and grow again) leaves this replacement as good as before:
  // it waits to be admitted again, with a new ticket, rather than end.
  for (int attempt = 1;; ++attempt) {
    auto joined = joinOnce(store, cfg);
    if (joined.isOk() || joined.status().code() != Code::kRemoteError || attempt == kJoinAttempts) return joined;
    BRAID_WARN("replacement: admission %d of %d failed (%s); waiting to be admitted again", attempt, kJoinAttempts,
               joined.status().message().c_str());
  }
}

StatusOr<std::unique_ptr<Session>> Session::joinOnce(std::shared_ptr<bootstrap::Store> store,
                                                     const core::Config& cfg) {
  Deadline deadline = Deadline::after(cfg.timeoutSec);
  BRAID_ASSIGN_OR_RETURN(int64_t ticket, store->add(kJoiners, 1, deadline));
  const std::string admitKey = joinerKey(ticket) + "/admit";
  // If this process dies while it waits, on any host, the store says so in its admission
  // key (a store that cannot tell leaves that to the running ranks' pid check, same host).
  Status watched = store->setOnClose(admitKey, "gone", deadline);
  if (!watched.isOk() && watched.code() != Code::kInvalidArgument) return watched;
  // The record: pid, host, and braidrun's index for this replacement (its BRAID_REPLACEMENT;
  // a remote one's pid is not the ssh client's that braidrun knows).
  const char* index = std::getenv("BRAID_REPLACEMENT");
  BRAID_RETURN_IF_ERROR(store->set(joinerKey(ticket),
                                   std::to_string(getpid()) + " " + bootstrap::hostId() + " " +
                                       (index && *index ? index : "-"),
                                   deadline));
  // The running ranks admit waiting replacements when they next grow (braidCommGrowJoiners),
  // at a step boundary that may be far off: no deadline here (braidrun stops replacements
  // nobody needs, and a replacement dies with braidrun).
  StatusOr<std::string> admission = Status(Code::kTimeout, "");
  for (;;) {
    admission = store->get(admitKey, Deadline::after(1));
    if (admission.isOk() || admission.status().code() != Code::kTimeout) break;
  }
  if (!admission.isOk()) return admission.status();
  if (watched.isOk()) (void)store->cancelOnClose(admitKey, Deadline::after(5));
  if (admission.value() == "gone")
    return Status(Code::kAborted, "this replacement (ticket " + std::to_string(ticket) +
                                      ") was taken for dead by the running ranks and not admitted");
  std::istringstream in(admission.value());
  std::string idHex, rank, size;
  braidUniqueId id;
  if (!std::getline(in, idHex) || !std::getline(in, rank) || !std::getline(in, size) ||
      !fromHex(idHex, id.internal, sizeof id.internal))
    return Status(Code::kRemoteError, "malformed admission record for replacement ticket " + std::to_string(ticket));
  BRAID_ASSIGN_OR_RETURN(bootstrap::UniqueId u, decodeGrowId("braidCommInitFromEnv", id));
  return joinGrowWith(std::move(store), u, std::atoi(size.c_str()), std::atoi(rank.c_str()), cfg);
}

StatusOr<int> Session::joinersWaiting() {
  Deadline d = Deadline::after(std::min(5.0, std::max(1.0, comm_->timeoutSeconds())));
  auto drawn = store_->add(kJoiners, 0, d);
  if (!drawn.isOk()) return drawn.status();
  auto settled = store_->add(kSettled, 0, d);
  if (!settled.isOk()) return settled.status();
  return static_cast<int>(std::max<int64_t>(0, drawn.value() - settled.value()));
}

StatusOr<std::vector<int64_t>> Session::settleJoiners() {
  // Every ticket not settled yet, in order: a replacement still alive is kept for admission;
  // one whose process is gone (on this host: no such pid) is marked "gone" so that it is
  // never waited for. A ticket whose record is not written yet ends the walk (next time).
  Deadline d = Deadline::after(5);
  BRAID_ASSIGN_OR_RETURN(int64_t drawn, store_->add(kJoiners, 0, d));
  BRAID_ASSIGN_OR_RETURN(int64_t settled, store_->add(kSettled, 0, d));
  const std::string here = bootstrap::hostId();
  std::vector<int64_t> live;
  int64_t t = settled + 1;
  for (; t <= drawn; ++t) {
    // Marked gone already: by the store, when the replacement's connection to it ended
    // (before it wrote its record, perhaps).
    BRAID_ASSIGN_OR_RETURN(bool marked, store_->check({joinerKey(t) + "/admit"}, d));
    if (marked) continue;
    BRAID_ASSIGN_OR_RETURN(bool written, store_->check({joinerKey(t)}, d));
    if (!written) break;
    BRAID_ASSIGN_OR_RETURN(std::string rec, store_->get(joinerKey(t), d));
    long long pid = 0;
    char host[256] = "";
    const bool parsed = std::sscanf(rec.c_str(), "%lld %255s", &pid, host) == 2;
    if (parsed && here == host && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      BRAID_RETURN_IF_ERROR(store_->compareSet(joinerKey(t) + "/admit", "", "gone", d).status());
      continue;
    }
    live.push_back(t);
  }
  if (t - 1 > settled) BRAID_RETURN_IF_ERROR(store_->add(kSettled, t - 1 - settled, d).status());
  return live;
}

StatusOr<std::unique_ptr<Session>> Session::growJoiners(const char* fn) {
  core::Communicator& c = *comm_;
  const std::string where = std::string(fn) + " on rank " + std::to_string(c.rank());
  const double timeout = c.timeoutSeconds();
  // Rank 0 decides which replacements come in and tells the others: one grow id. It always
  // writes a decision, so that the others never wait on one that did not come.
  const std::string decision = c.keyPrefix() + "/elastic" + std::to_string(growCalls_++);
  braidUniqueId id{};
  int k = 0;
  if (c.rank() == 0) {
    Status failed;
    std::string text = "0";
    auto live = settleJoiners();
    if (!live.isOk()) failed = live.status();
    k = live.isOk() ? static_cast<int>(live.value().size()) : 0;
    if (k > 0) {
      failed = growId(c.size() + k, &id);
      for (int i = 0; i < k && failed.isOk(); ++i) {
        const std::string record = braid::hex(id.internal, sizeof id.internal) + "\n" + std::to_string(c.size() + i) +
                                   "\n" + std::to_string(c.size() + k);
        failed = store_->compareSet(joinerKey(live.value()[i]) + "/admit", "", record, Deadline::after(5)).status();
      }
      if (failed.isOk()) text = std::to_string(k) + "\n" + braid::hex(id.internal, sizeof id.internal);
      else k = 0;
    }
    Status told = store_->set(decision, text, Deadline::after(5));
    if (!failed.isOk()) return failed.withContext(where);
    BRAID_RETURN_IF_ERROR(told.withContext(where));
  } else {
    auto v = store_->get(decision, Deadline::after(timeout));
    if (!v.isOk()) return v.status().withContext(where + ": waiting for rank 0's decision");
    std::istringstream in(v.value());
    std::string count, idHex;
    std::getline(in, count);
    k = std::atoi(count.c_str());
    if (k > 0 && (!std::getline(in, idHex) || !fromHex(idHex, id.internal, sizeof id.internal)))
      return Status(Code::kRemoteError, where + ": malformed grow decision from rank 0", 0);
  }
  if (k == 0) return std::unique_ptr<Session>();
  return grow(fn, c.size() + k, id);
}

void Session::abort() { comm_->abort(Status(Code::kAborted, "rank " + std::to_string(comm_->rank()) + " aborted the communicator", comm_->rank())); }

}  // namespace braid::api
