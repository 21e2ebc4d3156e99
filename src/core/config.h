#pragma once
// Every environment knob braid reads, in one table (config.cc): name, type, default, help.
// `braid-info --config` prints it. Nothing else in braid calls getenv for a knob.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace braid::core {

struct ConfigEntry {
  const char* name;
  const char* type;  // "int", "size", "seconds", "string", "bool"
  const char* defaultValue;
  const char* help;
};

// The table, in the order braid-info prints it.
const std::vector<ConfigEntry>& configTable();

struct Config {
  double timeoutSec = 300;
  int nchannels = 0;          // 0 = choose from cores per local rank
  std::string transport;      // "" = best per peer pair
  size_t slotBytes = 0;       // 0 = auto: 512K when every peer shares memory, 64K with tcp (UCX on one host: below)
  int nslots = 0;             // 0 = auto: 8 (UCX inside one host: 16 x 256K through shared memory, 4 x 1M over tcp)
  int spinMicros = -1;        // -1 = choose from cores per local rank
  int yieldMicros = -1;
  int socketsPerPeer = 1;
  std::string netIf;           // BRAID_NET_IF: address, interface, or NCCL-style list
  int portLo = 0, portHi = 0;  // BRAID_PORT_RANGE: tcp's listening ports, 0 = any
  std::string ibHca;           // BRAID_IB_HCA: NCCL_IB_HCA-style list of RDMA NICs
  int ibGidIndex = -1;         // BRAID_IB_GID_INDEX: RoCE GID index, -1 = from sysfs
  bool bind = true;
  bool blocking = true;        // BRAID_COMM_BLOCKING: the C API's default mode (braidConfig_t)
  bool probe = true;           // BRAID_PROBE: measure the inter-host link at init
  bool tls = false;            // BRAID_TLS: TLS on tcp data connections (needs the job key)
  bool tlsKernel = true;       // BRAID_TLS_KERNEL: validated here; common/tls.cc reads it itself (stores too)
  bool liveStatus = true;      // BRAID_LIVE_STATUS: answer braid-info --status
  bool storeStandby = true;    // BRAID_STORE_STANDBY: rank 1 stands by for the store rank 0 serves
  bool storeStandbyOtherHost = false;  // BRAID_STORE_STANDBY=host: the first rank on another host does
  bool wholeBlocks = true;     // BRAID_WHOLE_BLOCKS: large messages where every connection carries them
  int ringAhead = -1;         // BRAID_RING_AHEAD: a ring's next round before the last receive; -1 = where each rank has a core
  bool sendAcks = true;        // BRAID_SEND_ACKS: acknowledgements in rooted collectives (exec::computeAcks)
  std::string hostId;         // "" = hostname + boot id
  std::string topoFile;       // load the topology from this file instead of discovering it
  std::string topoDumpFile;   // write the topology braid sees to this JSON file
  int topo = -1;              // BRAID_TOPO: -1 auto, 0 never discover, 1 always
  int gpu = -1;               // BRAID_GPU: GPU index on the host, -1 none, -2 the local rank's
  std::string algo;           // BRAID_ALGO overrides (plan/algo_override.h)
  std::string debugDump;      // BRAID_DEBUG_DUMP: folder for the flight recorder on failure

  // Reads every knob through `get` (getenv by default). A malformed value is
  // kInvalidArgument naming the variable and the value.
  static StatusOr<Config> fromEnv(const std::function<const char*(const char*)>& get = nullptr);
  // fromEnv with every variable it refuses left at its default (each refused one read again
  // as unset): what a rank whose own settings are invalid joins with, far enough to tell the
  // others why it fails instead of leaving them to wait for it until the timeout.
  static Config fromEnvLenient(const std::function<const char*(const char*)>& get = nullptr);
};

// Parses "512K", "4M", "1G", "123" (binary suffixes). False on garbage or overflow.
bool parseSize(const std::string& s, size_t* out);

}  // namespace braid::core
