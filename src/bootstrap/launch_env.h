#pragma once
// Works out who this process is in the job (rank, world size, local rank) and where the
// rendezvous store is, from the environment that the launcher left: braidrun, Horovod's
// horovodrun --gloo, torchrun, OpenMPI's mpirun or Slurm's srun.

#include <functional>
#include <string>

#include "common/status.h"

namespace braid::bootstrap {

struct LaunchEnv {
  int rank = 0;
  int worldSize = 0;
  int localRank = -1;  // -1 when the launcher does not say
  int localSize = -1;
  std::string storeHost;
  int storePort = 0;
  bool serveStore = false;  // this rank must host the store (rank 0 unless it is external)
  bool rankZeroServes = false;  // rank 0 of the job hosts the store (the same on every rank)
  std::string source;       // "braid", "horovod", "torchrun", "openmpi", "slurm" or "none"

  // BRAID_STORE=etcd://...: the store is outside the job (nobody serves one; storeHost is
  // empty), with its keys under the URL's prefix and then `jobTag`.
  std::string storeUrl;
  // What tells this run from an earlier one under the same launcher, as far as its
  // variables say ("" when they do not): BRAID_JOB_ID (braidrun), torchrun's
  // TORCHELASTIC_RUN_ID and TORCHELASTIC_RESTART_COUNT, mpirun's job id, Slurm's job and
  // step. Only characters in [A-Za-z0-9._-].
  std::string jobTag;

  // Set when the launcher names a key-value server rather than the store's address
  // (horovodrun's HTTP rendezvous server): the store's owner serves on an ephemeral port
  // and publishes "host:port" under kvScope/kvKey there, and the other ranks read it back
  // (bootstrap/http_kv.h). storeHost is empty and storePort 0 until that has happened.
  std::string kvHost;
  int kvPort = 0;
  std::string kvScope;
  std::string kvKey;
  // horovodrun --min-np/--max-np (HOROVOD_ELASTIC=1, with its key-value server): a process
  // that initializes again asks the driver for its new place (horovodElasticSlot) under
  // "rank_and_size/<hvdHostname>:<localRank>".
  bool horovodElastic = false;
  std::string hvdHostname;

  // Set when the store's address goes through the launcher's PMIx server instead (mpirun
  // across hosts, bootstrap/pmix_kv.h): rank 0 serves on an ephemeral port and puts
  // "host:port" under this key; every rank fences, the others read it from rank 0.
  std::string pmixKey;

  // Why a variable that places this rank on its host (local rank and size, Horovod's cross
  // rank and size) was refused: malformed, or contradicting the rest. The rank, the world
  // size and the store are sound then, so the rank can still join far enough to tell the
  // others why it fails (detectLaunchEnvLenient); localRank and localSize keep what parsed.
  Status placeError;
  // Why this process's own rank variable was refused (unset, malformed, or not below the
  // world size) where the world size and the store stand (torchrun's variables, written by
  // hand in launch scripts): the process has no rank to join with, but can leave the job
  // its reason, so that the ranks waiting for the rank it should have been fail at once
  // (detectLaunchEnvLenient; `rank` is then -1).
  Status rankError;
};

// Reads the launcher's variables through `getenv` (injected so tests need not touch the
// process environment; pass a wrapper of std::getenv otherwise). The first launcher whose
// rank variables are present wins, in this order:
//   braid    BRAID_RANK, BRAID_WORLD_SIZE, BRAID_STORE_ADDR=host:port, BRAID_LOCAL_RANK,
//            BRAID_LOCAL_SIZE; rank 0 serves unless BRAID_STORE_EXTERNAL=1 (braidrun).
//   horovod  HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE (and
//            HOROVOD_CROSS_RANK/HOROVOD_CROSS_SIZE, checked when set), with the store's
//            address published through horovodrun's key-value server at
//            HOROVOD_GLOO_RENDEZVOUS_ADDR:HOROVOD_GLOO_RENDEZVOUS_PORT (scope "braid", key
//            "store.n<size>"); BRAID_STORE_ADDR, when set, names the store instead. Rank 0
//            serves. HOROVOD_ELASTIC=1 (horovodrun --min-np/--max-np) sets horovodElastic;
//            it needs the key-value server (a store of its own is refused).
//   torchrun RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE; the
//            store listens on MASTER_PORT+1 when TORCHELASTIC_USE_AGENT_STORE=True (torch's
//            own store holds MASTER_PORT then), else on MASTER_PORT; rank 0 serves.
//   openmpi  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//            OMPI_COMM_WORLD_LOCAL_SIZE; the store from BRAID_STORE_ADDR or MASTER_ADDR and
//            MASTER_PORT, else, when every rank is on one host, 127.0.0.1 on a port from
//            OMPI_MCA_ess_base_jobid, else, across hosts with a PMIx server (PMIX_NAMESPACE,
//            PMIX_RANK), published by rank 0 under pmixKey "braid.store.n<size>" (rank 0
//            serves).
//   slurm    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the store as for openmpi, else on
//            the first node of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST), where srun puts
//            task 0, on a port from SLURM_JOB_ID and SLURM_STEP_ID (rank 0 serves). Derived
//            ports are 20000 + (job * 8 + step) % 12768, below Linux's ephemeral range.
// BRAID_STORE=etcd://host:port[,host:port...]/prefix, under any launcher, names an etcd
// cluster as the store instead (bootstrap/etcd_store.h): nobody serves one, and the
// variables above that locate a store are not needed.
// Horovod comes second because its variables are specific: only a Horovod launcher sets
// them (braidrun sets them too, for Horovod's front end, beside its own BRAID_* which win),
// while the generic RANK or SLURM_PROCID leak into horovodrun's children from around it
// (horovodrun inside a Slurm allocation hands every rank the batch step's SLURM_PROCID=0).
// A malformed or inconsistent value gives kInvalidArgument naming the variable and its
// value. No launcher at all is a world of size 1 (rank 0, source "none", no store address:
// the caller keeps its store in the process), as MPI's singleton init and Gloo have it. Pure
// apart from the calls to `getenv`; thread-safe if `getenv` is.
StatusOr<LaunchEnv> detectLaunchEnv(const std::function<const char*(const char*)>& getenv);
// detectLaunchEnv, but a refused local placement is left in placeError rather than
// returned: for a rank that joins only to tell the others why it fails.
StatusOr<LaunchEnv> detectLaunchEnvLenient(const std::function<const char*(const char*)>& getenv);

// The variables detectLaunchEnv looks for, per launcher, for messages.
extern const char* kLauncherVariables;

// Splits "host:port" (an IPv4 address or a name, a port in [1, 65535]) as BRAID_STORE_ADDR
// is split; `what` names where the value came from in the kInvalidArgument message. Writes
// `host` and `port` only on success. Pure.
// Horovod's elastic driver's answer to rank_and_size, "rank,size,local_rank,local_size,
// cross_rank,cross_size" (horovod/runner/common/util/hosts.py, SlotInfo), into `env`'s rank,
// worldSize, localRank and localSize and `cross` (two ints). kInvalidArgument naming `what`
// for anything else, and for rank -1: the driver's word that this slot left the job.
Status parseHorovodSlot(const std::string& what, const std::string& value, LaunchEnv* env, int cross[2]);

Status parseStoreAddress(const std::string& what, const std::string& value, std::string* host, int* port);

}  // namespace braid::bootstrap
