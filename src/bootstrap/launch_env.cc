#include "bootstrap/launch_env.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "bootstrap/etcd_store.h"

namespace braid::bootstrap {

namespace {

using Getenv = std::function<const char*(const char*)>;

// An unset and an empty variable mean the same: launchers and shells often export empty
// values rather than unsetting them.
const char* lookup(const Getenv& getenv, const char* name) {
  const char* v = getenv(name);
  return v && *v ? v : nullptr;
}

Status badValue(const char* name, const char* value, const std::string& why) {
  return invalidArgument(std::string(name) + "='" + value + "' " + why);
}

// A whole-string decimal integer in [lo, hi].
Status parseInt(const char* name, const char* value, long lo, long hi, int* out) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || errno == ERANGE || value[0] == ' ' || value[0] == '+')
    return badValue(name, value, "is not an integer");
  if (v < lo || v > hi) {
    if (v < 0 && lo >= 0) return badValue(name, value, "must not be negative");
    return badValue(name, value, "is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = static_cast<int>(v);
  return Status::ok();
}

Status requireInt(const Getenv& getenv, const char* name, const std::string& launcher, long lo, long hi, int* out) {
  const char* v = lookup(getenv, name);
  if (!v) return invalidArgument(launcher + " launch: " + name + " is not set");
  return parseInt(name, v, lo, hi, out);
}

Status optionalInt(const Getenv& getenv, const char* name, long lo, long hi, int* out) {
  const char* v = lookup(getenv, name);
  if (!v) return Status::ok();
  return parseInt(name, v, lo, hi, out);
}

constexpr long kMaxRanks = 1 << 24;

// "host:port"; the last colon splits, so a bracketed IPv6 literal would not be mistaken for
// a port (IPv4 and host names are what the store supports).
Status parseStoreAddr(const char* name, const char* value, std::string* host, int* port) {
  const char* colon = std::strrchr(value, ':');
  if (!colon) return badValue(name, value, "is not host:port");
  *host = std::string(value, colon);
  if (host->empty()) return badValue(name, value, "has no host (want host:port)");
  Status ps = parseInt("port", colon + 1, 1, 65535, port);
  if (!ps.isOk()) return badValue(name, value, "has a bad port: " + ps.message());
  return Status::ok();
}

Status parseBool(const char* name, const char* value, bool* out) {
  if (!std::strcmp(value, "1") || !strcasecmp(value, "true") || !strcasecmp(value, "yes")) {
    *out = true;
    return Status::ok();
  }
  if (!std::strcmp(value, "0") || !strcasecmp(value, "false") || !strcasecmp(value, "no")) {
    *out = false;
    return Status::ok();
  }
  return badValue(name, value, "is not a boolean (1/0, true/false)");
}

Status checkRank(const LaunchEnv& e, const char* rankVar, const char* sizeVar) {
  if (e.rank >= e.worldSize)
    return invalidArgument(std::string(rankVar) + "=" + std::to_string(e.rank) + " must be less than " + sizeVar + "=" +
                           std::to_string(e.worldSize));
  return Status::ok();
}

// The variables that place the rank on its host. One that is malformed or contradicts the
// others is this rank's own fault (LaunchEnv::placeError): its rank, the world size and the
// store stand, so it can still tell the job why it fails. `localSizeVar` is read when
// `readLocalSize` (Slurm has no per-rank local size; the name is for the message).
Status localPlace(const Getenv& getenv, LaunchEnv& e, const char* sizeVar, const char* localRankVar,
                  const char* localSizeVar, bool readLocalSize = true) {
  BRAID_RETURN_IF_ERROR(optionalInt(getenv, localRankVar, 0, kMaxRanks, &e.localRank));
  if (readLocalSize) BRAID_RETURN_IF_ERROR(optionalInt(getenv, localSizeVar, 1, kMaxRanks, &e.localSize));
  if (e.localSize > e.worldSize)
    return invalidArgument(std::string(localSizeVar) + "=" + std::to_string(e.localSize) + " exceeds " + sizeVar + "=" +
                           std::to_string(e.worldSize));
  if (e.localRank >= 0 && e.localSize > 0 && e.localRank >= e.localSize)
    return invalidArgument(std::string(localRankVar) + "=" + std::to_string(e.localRank) + " must be less than " +
                           localSizeVar + "=" + std::to_string(e.localSize));
  return Status::ok();
}

// BRAID_STORE=etcd://...: a store outside the job, which nobody serves. Returns whether
// it is set (a malformed URL is an error in `status`).
bool externalStore(const Getenv& getenv, LaunchEnv* e, Status* status) {
  const char* url = lookup(getenv, "BRAID_STORE");
  if (!url) return false;
  auto u = parseEtcdUrl("BRAID_STORE", url);
  if (!u.isOk()) {
    *status = u.status();
    return true;
  }
  e->storeUrl = url;
  e->storeHost.clear();
  e->storePort = 0;
  e->serveStore = false;
  e->rankZeroServes = false;
  return true;
}

// The run's tag from `parts`' values that are set, joined with '.', outside
// [A-Za-z0-9._-] replaced by '_'.
std::string tagFrom(const Getenv& getenv, std::initializer_list<const char*> parts) {
  std::string tag;
  for (const char* name : parts) {
    const char* v = lookup(getenv, name);
    if (!v || !*v) continue;
    if (!tag.empty()) tag += '.';
    for (const char* c = v; *c && tag.size() < 96; ++c)
      tag += std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '_' || *c == '-' ? *c : '_';
  }
  return tag;
}

// BRAID_STORE_ADDR (honouring BRAID_STORE_EXTERNAL), else MASTER_ADDR:MASTER_PORT.
// A store the launcher's own variables locate when neither BRAID_STORE_ADDR nor MASTER_ADDR
// is set: a host rank 0 runs on, and a port derived from the job's id (the same on every
// rank), served by rank 0. `why` says what was missing when the launcher cannot tell.
struct DerivedStore {
  std::string host;
  int port = 0;
  std::string pmixKey;  // instead of host and port: the address goes through PMIx
  std::string why;
};
using Deriver = std::function<DerivedStore()>;

// Ports for derived stores: 20000-59999, from the job's (and step's) id.
// Below 32768, where Linux's default ephemeral range (net.ipv4.ip_local_port_range, 32768-60999)
// begins: servers that bind port 0 and outgoing connections take their ports there, so a
// derived port in it may be held by an unrelated process on rank 0's host. Consecutive job ids
// get distinct ports (1596 of them before one repeats), and so do a job's first eight steps.
int derivedPort(uint64_t job, uint64_t step) { return 20000 + static_cast<int>((job * 8 + step) % 12768); }

Status storeFromBraidOrMaster(const Getenv& getenv, const std::string& launcher, LaunchEnv* e,
                              const Deriver& derive = nullptr) {
  Status external;
  if (externalStore(getenv, e, &external)) return external;
  if (const char* addr = lookup(getenv, "BRAID_STORE_ADDR")) {
    BRAID_RETURN_IF_ERROR(parseStoreAddr("BRAID_STORE_ADDR", addr, &e->storeHost, &e->storePort));
    bool external = false;
    if (const char* x = lookup(getenv, "BRAID_STORE_EXTERNAL")) BRAID_RETURN_IF_ERROR(parseBool("BRAID_STORE_EXTERNAL", x, &external));
    e->rankZeroServes = !external;
    e->serveStore = e->rank == 0 && e->rankZeroServes;
    return Status::ok();
  }
  const char* host = lookup(getenv, "MASTER_ADDR");
  const char* port = lookup(getenv, "MASTER_PORT");
  if (host && port) {
    e->storeHost = host;
    BRAID_RETURN_IF_ERROR(parseInt("MASTER_PORT", port, 1, 65535, &e->storePort));
    e->rankZeroServes = true;
    e->serveStore = e->rank == 0;
    return Status::ok();
  }
  if (host || port)
    return invalidArgument(launcher + " launch: " + (host ? "MASTER_PORT" : "MASTER_ADDR") + " is not set (" +
                           (host ? "MASTER_ADDR" : "MASTER_PORT") + " is)");
  std::string why;
  if (derive) {
    DerivedStore d = derive();
    if (!d.pmixKey.empty()) {
      e->storeHost.clear();
      e->storePort = 0;  // rank 0 binds an ephemeral port and publishes it
      e->pmixKey = d.pmixKey;
      e->rankZeroServes = true;
      e->serveStore = e->rank == 0;
      return Status::ok();
    }
    if (!d.host.empty()) {
      e->storeHost = d.host;
      e->storePort = d.port;
      e->rankZeroServes = true;
      e->serveStore = e->rank == 0;
      return Status::ok();
    }
    why = " (" + d.why + ")";
  }
  return invalidArgument(launcher + " launch needs the rendezvous store's address" + why +
                         ": set BRAID_STORE_ADDR=host:port, or MASTER_ADDR and MASTER_PORT");
}

// The first host of a Slurm host list: "gpu[07-10,12],login1" -> "gpu07",
// "r[1-2]n[3-4]" -> "r1n3". "" if the list is malformed.
std::string firstSlurmHost(const std::string& list) {
  std::string out;
  size_t i = 0;
  while (i < list.size() && list[i] != ',') {
    if (list[i] == '[') {
      size_t close = list.find(']', i);
      if (close == std::string::npos) return "";
      std::string inner = list.substr(i + 1, close - i - 1);
      std::string first = inner.substr(0, inner.find_first_of(",-"));
      if (first.empty()) return "";
      out += first;
      i = close + 1;
    } else {
      out += list[i++];
    }
  }
  return out;
}

StatusOr<LaunchEnv> fromBraid(const Getenv& getenv) {
  LaunchEnv e;
  e.source = "braid";
  BRAID_RETURN_IF_ERROR(requireInt(getenv, "BRAID_WORLD_SIZE", "braid", 1, kMaxRanks, &e.worldSize));
  BRAID_RETURN_IF_ERROR(requireInt(getenv, "BRAID_RANK", "braid", 0, kMaxRanks, &e.rank));
  BRAID_RETURN_IF_ERROR(checkRank(e, "BRAID_RANK", "BRAID_WORLD_SIZE"));
  e.placeError = localPlace(getenv, e, "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK", "BRAID_LOCAL_SIZE");
  e.jobTag = tagFrom(getenv, {"BRAID_JOB_ID"});
  Status external;
  if (externalStore(getenv, &e, &external)) {
    BRAID_RETURN_IF_ERROR(external);
    return e;
  }
  const char* addr = lookup(getenv, "BRAID_STORE_ADDR");
  if (!addr) return invalidArgument("braid launch: BRAID_STORE_ADDR is not set (want host:port of the rendezvous store)");
  BRAID_RETURN_IF_ERROR(storeFromBraidOrMaster(getenv, "braid", &e));
  return e;
}

// horovodrun --gloo gives every rank its place (gloo_run.py's slot variables) and the
// address of its own HTTP key-value server, but no port for anyone else: rank 0 picks one
// and publishes it there. The key carries the world size, so a job whose size disagrees
// between ranks waits on different keys and times out rather than meeting wrongly.
// horovodrun's elastic driver clears its key-value server at every reset, and the job meets
// there afresh; a store of its own would hold the previous epoch's keys.
Status elasticWithStore(const char* var) {
  return invalidArgument(std::string("horovod launch: HOROVOD_ELASTIC=1 (horovodrun --min-np/--max-np) finds the "
                                     "store through horovodrun's key-value server, which starts afresh at every "
                                     "reset; unset ") + var);
}

StatusOr<LaunchEnv> fromHorovod(const Getenv& getenv) {
  LaunchEnv e;
  e.source = "horovod";
  BRAID_RETURN_IF_ERROR(requireInt(getenv, "HOROVOD_SIZE", "horovod", 1, kMaxRanks, &e.worldSize));
  BRAID_RETURN_IF_ERROR(requireInt(getenv, "HOROVOD_RANK", "horovod", 0, kMaxRanks, &e.rank));
  BRAID_RETURN_IF_ERROR(checkRank(e, "HOROVOD_RANK", "HOROVOD_SIZE"));
  e.placeError = localPlace(getenv, e, "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE");
  // braid places ranks on hosts from its own host ids, but a cross rank that contradicts
  // the size is a broken launch worth naming.
  if (e.placeError.isOk()) {
    LaunchEnv cross;
    cross.worldSize = e.worldSize;
    e.placeError = localPlace(getenv, cross, "HOROVOD_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE");
  }
  bool elastic = false;
  if (const char* x = lookup(getenv, "HOROVOD_ELASTIC")) BRAID_RETURN_IF_ERROR(parseBool("HOROVOD_ELASTIC", x, &elastic));
  Status external;
  if (externalStore(getenv, &e, &external)) {
    BRAID_RETURN_IF_ERROR(external);
    if (elastic)
      return elasticWithStore("BRAID_STORE");
    return e;
  }
  e.rankZeroServes = true;
  e.serveStore = e.rank == 0;
  if (const char* addr = lookup(getenv, "BRAID_STORE_ADDR")) {
    if (elastic)
      return elasticWithStore("BRAID_STORE_ADDR");
    BRAID_RETURN_IF_ERROR(parseStoreAddr("BRAID_STORE_ADDR", addr, &e.storeHost, &e.storePort));
    return e;
  }
  const char* host = lookup(getenv, "HOROVOD_GLOO_RENDEZVOUS_ADDR");
  const char* port = lookup(getenv, "HOROVOD_GLOO_RENDEZVOUS_PORT");
  if (!host || !port)
    return invalidArgument(std::string("horovod launch: ") +
                           (host ? "HOROVOD_GLOO_RENDEZVOUS_PORT" : "HOROVOD_GLOO_RENDEZVOUS_ADDR") +
                           " is not set (horovodrun --gloo sets it; else set BRAID_STORE_ADDR=host:port)");
  if (std::strchr(host, ':') || std::strchr(host, '/'))
    return badValue("HOROVOD_GLOO_RENDEZVOUS_ADDR", host, "is not a host name or IPv4 address");
  e.kvHost = host;
  BRAID_RETURN_IF_ERROR(parseInt("HOROVOD_GLOO_RENDEZVOUS_PORT", port, 1, 65535, &e.kvPort));
  e.kvScope = "braid";
  e.kvKey = "store.n" + std::to_string(e.worldSize);
  e.horovodElastic = elastic;
  const char* hn = lookup(getenv, "HOROVOD_HOSTNAME");
  e.hvdHostname = hn && *hn ? hn : "localhost";  // Horovod's default (gloo_context.cc)
  return e;
}


// torchrun's store: BRAID_STORE, or MASTER_ADDR/MASTER_PORT that rank 0 serves.
Status torchrunStore(const Getenv& getenv, LaunchEnv& e);

StatusOr<LaunchEnv> fromTorchrun(const Getenv& getenv) {
  LaunchEnv e;
  e.source = "torchrun";
  BRAID_RETURN_IF_ERROR(requireInt(getenv, "WORLD_SIZE", "torchrun", 1, kMaxRanks, &e.worldSize));
  // A rank refused is kept (rankError) while the rest parses: the store is what lets this
  // process tell the job why no process joins as the rank it should have been.
  e.rankError = requireInt(getenv, "RANK", "torchrun", 0, kMaxRanks, &e.rank);
  if (e.rankError.isOk()) e.rankError = checkRank(e, "RANK", "WORLD_SIZE");
  if (e.rankError.isOk()) e.placeError = localPlace(getenv, e, "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  else e.rank = -1;
  // torchrun's default run id is "none": the same for every run.
  if (const char* id = lookup(getenv, "TORCHELASTIC_RUN_ID"); id && std::string(id) != "none")
    e.jobTag = tagFrom(getenv, {"TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"});
  Status store = torchrunStore(getenv, e);
  if (!store.isOk()) return e.rankError.isOk() ? store : e.rankError;  // the rank first: it is the cause
  return e;
}

Status torchrunStore(const Getenv& getenv, LaunchEnv& e) {
  Status external;
  if (externalStore(getenv, &e, &external)) return external;
  const char* host = lookup(getenv, "MASTER_ADDR");
  if (!host) return invalidArgument("torchrun launch: MASTER_ADDR is not set");
  const char* port = lookup(getenv, "MASTER_PORT");
  if (!port) return invalidArgument("torchrun launch: MASTER_PORT is not set");
  e.storeHost = host;
  int masterPort = 0;
  BRAID_RETURN_IF_ERROR(parseInt("MASTER_PORT", port, 1, 65535, &masterPort));
  bool agentStore = false;
  if (const char* a = lookup(getenv, "TORCHELASTIC_USE_AGENT_STORE"))
    BRAID_RETURN_IF_ERROR(parseBool("TORCHELASTIC_USE_AGENT_STORE", a, &agentStore));
  if (agentStore && masterPort == 65535)
    return badValue("MASTER_PORT", port, "leaves no port for braid's store (it uses MASTER_PORT+1 beside torch's agent store)");
  e.storePort = agentStore ? masterPort + 1 : masterPort;
  e.rankZeroServes = true;
  e.serveStore = e.rank == 0;
  return Status::ok();
}

StatusOr<LaunchEnv> fromOpenMpi(const Getenv& getenv) {
  LaunchEnv e;
  e.source = "openmpi";
  BRAID_RETURN_IF_ERROR(requireInt(getenv, "OMPI_COMM_WORLD_SIZE", "OpenMPI", 1, kMaxRanks, &e.worldSize));
  BRAID_RETURN_IF_ERROR(requireInt(getenv, "OMPI_COMM_WORLD_RANK", "OpenMPI", 0, kMaxRanks, &e.rank));
  BRAID_RETURN_IF_ERROR(checkRank(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"));
  e.placeError =
      localPlace(getenv, e, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  e.jobTag = tagFrom(getenv, {"OMPI_MCA_ess_base_jobid"});
  // Every rank on one host (mpirun -np N): the store on the loopback interface, on a port
  // from mpirun's job id. Across hosts OpenMPI's variables do not say where rank 0 runs, but
  // every rank is a client of its host's PMIx server: rank 0 publishes the address there.
  Deriver oneHost = [&]() {
    DerivedStore d;
    const char* job = lookup(getenv, "OMPI_MCA_ess_base_jobid");
    uint64_t id = job ? std::strtoull(job, nullptr, 10) : 0;
    if (e.localSize == e.worldSize && id != 0) {
      d.host = "127.0.0.1";
      d.port = derivedPort(id, 0);
    } else if (e.localSize != e.worldSize && lookup(getenv, "PMIX_NAMESPACE") && lookup(getenv, "PMIX_RANK")) {
      d.pmixKey = "braid.store.n" + std::to_string(e.worldSize);
    } else if (e.localSize != e.worldSize) {
      d.why = "the ranks span several hosts, OpenMPI's variables do not say which runs rank 0, and there is no "
              "PMIx server (PMIX_NAMESPACE) to ask; mpirun -x MASTER_ADDR=<first host> -x MASTER_PORT=29500 does";
    } else {
      d.why = "OMPI_MCA_ess_base_jobid is not set";
    }
    return d;
  };
  BRAID_RETURN_IF_ERROR(storeFromBraidOrMaster(getenv, "OpenMPI", &e, oneHost));
  return e;
}

StatusOr<LaunchEnv> fromSlurm(const Getenv& getenv) {
  LaunchEnv e;
  e.source = "slurm";
  BRAID_RETURN_IF_ERROR(requireInt(getenv, "SLURM_NTASKS", "Slurm", 1, kMaxRanks, &e.worldSize));
  BRAID_RETURN_IF_ERROR(requireInt(getenv, "SLURM_PROCID", "Slurm", 0, kMaxRanks, &e.rank));
  BRAID_RETURN_IF_ERROR(checkRank(e, "SLURM_PROCID", "SLURM_NTASKS"));
  e.placeError = localPlace(getenv, e, "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", false);
  e.jobTag = tagFrom(getenv, {"SLURM_JOB_ID", "SLURM_STEP_ID"});
  // srun places task 0 on the first node of the step: the store is there, on a port from
  // the job and step ids.
  Deriver firstNode = [&]() {
    DerivedStore d;
    const char* list = lookup(getenv, "SLURM_STEP_NODELIST");
    const char* listName = "SLURM_STEP_NODELIST";
    if (!list) {
      list = lookup(getenv, "SLURM_JOB_NODELIST");
      listName = "SLURM_JOB_NODELIST";
    }
    const char* job = lookup(getenv, "SLURM_JOB_ID");
    const char* step = lookup(getenv, "SLURM_STEP_ID");
    if (!list || !job) {
      d.why = std::string(list ? "SLURM_JOB_ID" : "SLURM_JOB_NODELIST") + " is not set";
      return d;
    }
    d.host = firstSlurmHost(list);
    if (d.host.empty()) {
      d.why = std::string(listName) + "='" + list + "' is not a Slurm host list";
      return d;
    }
    d.port = derivedPort(std::strtoull(job, nullptr, 10), step ? std::strtoull(step, nullptr, 10) : 0);
    return d;
  };
  BRAID_RETURN_IF_ERROR(storeFromBraidOrMaster(getenv, "Slurm", &e, firstNode));
  return e;
}

}  // namespace

StatusOr<LaunchEnv> detectLaunchEnvLenient(const Getenv& getenv) {
  auto any = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (lookup(getenv, n)) return true;
    return false;
  };
  if (any({"BRAID_RANK", "BRAID_WORLD_SIZE"})) return fromBraid(getenv);
  if (any({"HOROVOD_RANK", "HOROVOD_SIZE"})) return fromHorovod(getenv);
  if (any({"RANK", "WORLD_SIZE"})) return fromTorchrun(getenv);
  if (any({"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"})) return fromOpenMpi(getenv);
  if (any({"SLURM_PROCID", "SLURM_NTASKS"})) return fromSlurm(getenv);
  // No launcher: a world of one, as MPI's singleton init and Gloo do.
  LaunchEnv e;
  e.worldSize = 1;
  e.localRank = 0;
  e.localSize = 1;
  e.source = "none";
  return e;
}

StatusOr<LaunchEnv> detectLaunchEnv(const Getenv& getenv) {
  BRAID_ASSIGN_OR_RETURN(LaunchEnv e, detectLaunchEnvLenient(getenv));
  if (!e.rankError.isOk()) return e.rankError;
  if (!e.placeError.isOk()) return e.placeError;
  return e;
}

const char* kLauncherVariables =
    "BRAID_RANK/BRAID_WORLD_SIZE/BRAID_STORE_ADDR (braidrun), "
    "HOROVOD_RANK/HOROVOD_SIZE/HOROVOD_GLOO_RENDEZVOUS_ADDR (horovodrun --gloo), "
    "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun), OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (mpirun) and "
    "SLURM_PROCID/SLURM_NTASKS (srun)";

Status parseStoreAddress(const std::string& what, const std::string& value, std::string* host, int* port) {
  std::string h;
  int p = 0;
  BRAID_RETURN_IF_ERROR(parseStoreAddr(what.c_str(), value.c_str(), &h, &p));
  *host = std::move(h);
  *port = p;
  return Status::ok();
}

Status parseHorovodSlot(const std::string& what, const std::string& value, LaunchEnv* env, int cross[2]) {
  int v[6];
  size_t pos = 0;
  for (int i = 0; i < 6; ++i) {
    size_t end = value.find(',', pos);
    if ((end == std::string::npos) != (i == 5)) break;
    const std::string field = value.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    char* stop = nullptr;
    errno = 0;
    long x = std::strtol(field.c_str(), &stop, 10);
    if (field.empty() || *stop != '\0' || errno != 0 || x < -1 || x > kMaxRanks) break;
    v[i] = static_cast<int>(x);
    if (i == 5) {
      if (v[0] == -1)
        return invalidArgument(what + ": horovodrun removed this slot from the elastic job (rank -1)");
      if (v[0] < 0 || v[1] < 1 || v[0] >= v[1] || v[2] < 0 || v[3] < 1 || v[2] >= v[3] || v[3] > v[1] ||
          v[4] < 0 || v[5] < 1 || v[4] >= v[5] || v[5] > v[1])
        return invalidArgument(what + ": '" + value + "' is not a place in a job (rank " + std::to_string(v[0]) +
                               " of " + std::to_string(v[1]) + ", local " + std::to_string(v[2]) + " of " +
                               std::to_string(v[3]) + ", cross " + std::to_string(v[4]) + " of " +
                               std::to_string(v[5]) + ")");
      env->rank = v[0];
      env->worldSize = v[1];
      env->localRank = v[2];
      env->localSize = v[3];
      cross[0] = v[4];
      cross[1] = v[5];
      env->kvKey = "store.n" + std::to_string(env->worldSize);
      return Status::ok();
    }
    pos = end + 1;
  }
  return invalidArgument(what + ": '" + value.substr(0, 80) +
                         "' is not horovodrun's rank_and_size answer (six integers: rank,size,local_rank,local_size,"
                         "cross_rank,cross_size)");
}

}  // namespace braid::bootstrap
