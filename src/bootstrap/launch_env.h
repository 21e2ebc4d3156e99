#pragma once
// Works out who this process is in the job (rank, world size, local rank) and where the
// rendezvous store is, from the environment that the launcher left: braidrun, torchrun,
// OpenMPI's mpirun or Slurm's srun.

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
  std::string source;       // "braid", "torchrun", "openmpi" or "slurm"
};

// Reads the launcher's variables through `getenv` (injected so tests need not touch the
// process environment; pass a wrapper of std::getenv otherwise). The first launcher whose
// rank variables are present wins, in this order:
//   braid    BRAID_RANK, BRAID_WORLD_SIZE, BRAID_STORE_ADDR=host:port, BRAID_LOCAL_RANK,
//            BRAID_LOCAL_SIZE; rank 0 serves unless BRAID_STORE_EXTERNAL=1 (braidrun).
//   torchrun RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE; the
//            store listens on MASTER_PORT+1 when TORCHELASTIC_USE_AGENT_STORE=True (torch's
//            own store holds MASTER_PORT then), else on MASTER_PORT; rank 0 serves.
//   openmpi  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//            OMPI_COMM_WORLD_LOCAL_SIZE; the store from BRAID_STORE_ADDR or MASTER_ADDR and
//            MASTER_PORT.
//   slurm    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the store as for openmpi.
// A malformed or inconsistent value gives kInvalidArgument naming the variable and its
// value; no launcher at all gives kInvalidArgument listing the variables looked for. Pure
// apart from the calls to `getenv`; thread-safe if `getenv` is.
StatusOr<LaunchEnv> detectLaunchEnv(const std::function<const char*(const char*)>& getenv);

}  // namespace braid::bootstrap
