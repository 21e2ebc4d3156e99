#include "core/config.h"

#include "common/env_value.h"
#include "transports/transport.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <set>

namespace braid::core {

const std::vector<ConfigEntry>& configTable() {
  static const std::vector<ConfigEntry> kTable = {
      {"BRAID_TIMEOUT", "seconds", "300", "fail a pending operation after this long without progress (0 = never)"},
      {"BRAID_COMM_BLOCKING", "bool", "1", "C API: 0 makes communicators non-blocking (as NCCL_COMM_BLOCKING=0): init and host collectives return braidInProgress and complete in the background; poll braidCommGetAsyncError. braidConfig_t.blocking overrides it"},
      {"BRAID_NCHANNELS", "int", "0", "channels (rings run in parallel, one progress thread each); 0 = from cores per local rank"},
      {"BRAID_TRANSPORT", "string", "", "force one transport for every peer: loopback, shm, tcp, or a plugin's (ucx, ibverbs); braid-info lists them"},
      {"BRAID_TRANSPORT_PLUGIN", "string", "", "transport plugin libraries to load, ':'-separated paths (in addition to the plugin folder)"},
      {"BRAID_PLUGIN_DIR", "string", "", "folder of libbraid-net-*.so plugins (default: <libdir>/braid beside libbraid.so); 'none' loads no folder"},
      {"BRAID_SLOT_BYTES", "size", "auto", "bytes per transport slot, the executor's slice size (auto: 512K on shared memory, 64K when tcp or UCX crosses hosts, 128K for tcp inside one host, 256K for UCX inside one host through shared memory, 1M for UCX inside one host over tcp alone)"},
      {"BRAID_NSLOTS", "int", "auto", "slots per connection FIFO, the pipeline depth (auto: 8; for UCX inside one host 16 through shared memory, 4 over tcp alone)"},
      {"BRAID_SPIN_US", "int", "-1", "microseconds to spin before yielding while waiting; -1 = auto (less when ranks outnumber cores)"},
      {"BRAID_YIELD_US", "int", "-1", "microseconds to yield before sleeping on a futex or socket; -1 = auto"},
      {"BRAID_SOCKETS_PER_PEER", "int", "1", "tcp: sockets striped per connection"},
      {"BRAID_NET_IF", "string", "", "tcp: IPv4 address, interface name, or NCCL_SOCKET_IFNAME-style list (prefixes, '=' exact, '^' exclude) of interfaces to listen on"},
      {"BRAID_IB_HCA", "string", "", "RDMA NICs a job may use, NCCL_IB_HCA syntax (prefixes, '=' exact, '^' exclude, ':port'); also steers the NIC per channel"},
      {"BRAID_IB_GID_INDEX", "int", "-1", "ibverbs: RoCE GID index; -1 picks a RoCE v2 IPv4 GID from sysfs"},
      {"BRAID_IB_ZCOPY", "bool", "1", "ibverbs: send payloads from the caller's memory, registered through a cache that UCX's memory hooks keep in step with unmapped memory; 0 copies every payload into the slots (off by itself without the hooks or on kernels older than 5.13)"},
      {"BRAID_IB_ZCOPY_MIN", "int", "65536", "ibverbs: the smallest payload (bytes) sent from the caller's memory; smaller ones are copied into a slot"},
      {"BRAID_TCP_ZCOPY", "string", "1", "tcp: 1 sends from and lands in the caller's buffers where a step allows, 'send' only sends from them (receives go through the slots), 0 stages every payload in a slot on both ends"},
      {"BRAID_SHM_CMA", "bool", "1", "shm: large sends go as references to the sender's memory that the receiver reads once (process_vm_readv, where the kernel allows it between the ranks); 0 copies them through the FIFO"},
      {"BRAID_UCX_ZCOPY", "bool", "1", "ucx: sends from the caller's buffers and receives posted on demand into them where a step allows; 0 stages every payload in a slot and keeps receives posted ahead"},
      {"BRAID_UCX_REDUCE_ON_ARRIVAL", "string", "auto", "ucx: reduce an incoming payload into the result as it arrives: auto does so for every message from a peer on another host or where UCX_TLS has no shared memory, for eager ones from a peer on this host, and never over RDMA; 1 always, 0 never"},
      {"BRAID_CUDA_PATH", "string", "staged", "device buffers: staged (copied to host memory and reduced on the CPU), direct (kernels reduce straight from and into the transports' slots, registered with the GPU) or ipc (direct, with slots in device memory that peers on this host write, and areas registered with the NIC across hosts where it allows)"},
      {"BRAID_CUDA_MAX_BLOCKS", "int", "auto", "device calls: the most blocks one reduce-copy kernel launches (auto: as many as the SMs hold of that kernel at once)"},
      {"BRAID_CUDA_STREAM_WAIT", "string", "memop", "device calls: how the caller's stream waits for the host: memop (the driver's stream memory operation), kernel (a one-thread polling kernel) or host (a host function)"},
      {"BRAID_CUDA_MEM_HANDLE", "string", "ipc", "device slots shared between processes as: ipc (cudaMalloc and CUDA IPC handles), fd (cuMem allocations, their file descriptors passed over a Unix socket) or fabric (cuMem fabric handles)"},
      {"BRAID_BIND", "bool", "1", "bind progress threads and receive buffers to the caller's NUMA node"},
      {"BRAID_PROBE", "bool", "1", "on a job spanning hosts, time round trips and a transfer between two hosts at init and give the planner the measured latency (and bandwidth where the topology does not know it)"},
      {"BRAID_HOST_ID", "string", "", "host identity used to group ranks (default hostname + boot id)"},
      {"BRAID_TOPO_FILE", "string", "", "topology to use instead of discovery: hwloc XML, NCCL topology XML or braid JSON"},
      {"BRAID_TOPO", "string", "auto", "plan rings and NICs from the topology: auto (when ranks span several hosts, drive GPUs or BRAID_TOPO_FILE is set), 1 (always discover), 0 (never)"},
      {"BRAID_GPU", "string", "", "GPU (index on its host) this rank drives, for topology planning: N, 'local' (the rank's local rank) or empty/-1 for a CPU rank"},
      {"BRAID_TOPO_DUMP_FILE", "string", "", "write the topology this host's ranks see to this JSON file (local rank 0 writes it)"},
      {"BRAID_ALGO", "string", "", "algorithm overrides, e.g. allreduce:0-64K:tree,64K-inf:ring;broadcast:chain"},
      {"BRAID_DEBUG", "string", "", "log level: WARN, INFO or TRACE"},
      {"BRAID_DEBUG_DUMP", "string", "", "a folder: on a failure each rank writes its flight recorder there (its last operations with state and times, and the error), as <communicator>-rank<R>.txt and .json"},
      {"BRAID_DEBUG_FILE", "string", "", "log to this file instead of stderr (%h host, %p pid)"},
      {"BRAID_SIMD", "string", "", "cap the reduction kernels' instruction set: scalar, avx2 or avx512"},
      {"BRAID_RANK", "int", "", "launcher: this process's rank (set by braidrun)"},
      {"BRAID_WORLD_SIZE", "int", "", "launcher: number of ranks (set by braidrun)"},
      {"BRAID_LOCAL_RANK", "int", "", "launcher: this process's rank among the job's processes on its host (set by braidrun)"},
      {"BRAID_LOCAL_SIZE", "int", "", "launcher: the number of the job's processes on this host (set by braidrun)"},
      {"BRAID_JOB_ID", "string", "", "launcher: the run's id (set by braidrun); an etcd store (BRAID_STORE) keeps each run's keys under it"},
      {"BRAID_STORE_ADDR", "string", "", "launcher: host:port of the rendezvous store"},
      {"BRAID_TIMELINE", "string", "", "a folder: each process writes a Chrome trace of its calls, channels, steps and waits there at exit (braid-info --timeline merges them)"},
      {"BRAID_PORT_RANGE", "string", "", "tcp: listen for peers' data connections on a port in LO-HI (firewalled clusters); empty = any free port"},
      {"BRAID_HOROVOD_FUSE_BELOW", "int", "1048576", "Horovod: tensors of this many bytes and more are reduced where they are; smaller ones of one cycle are fused into one buffer"},
      {"BRAID_HOROVOD_ADASUM_HALVING", "int", "65536", "Horovod: Adasum swaps whole vectors below this many bytes of a fused buffer, and halves each level's stretch (vector halving, distance doubling) from it up"},
      {"BRAID_RUNTIME_DIR", "string", "", "launcher: the folder of the job files through which braidrun and braid-info --status find a running job (default /tmp/braid-<uid>)"},
      {"BRAID_ELASTIC", "bool", "0", "launcher: the job may lose and regain ranks (set by braidrun --min-np); Horovod's shutdown then keeps braid's world for the next init"},
      {"BRAID_ELASTIC_JOIN", "bool", "0", "launcher: this process replaces a lost rank and joins the running job (set by braidrun)"},
      {"BRAID_REPLACEMENT", "int", "", "launcher: braidrun's number for this replacement process (set by braidrun)"},
      {"BRAID_STORE_EXTERNAL", "bool", "0", "launcher: the store is served outside the ranks (braidrun)"},
      {"BRAID_AUTH_KEY", "string", "", "the job's secret key: 64 hex digits or a passphrase of 16+ characters; store and tcp connections must prove it (braidrun sets a fresh one per job)"},
      {"BRAID_LIVE_STATUS", "bool", "1", "answer braid-info --status: a thread per process waits in braid's store (its own connection) and, when asked, says where each communicator is; 0 turns it off"},
      {"BRAID_WHOLE_BLOCKS", "bool", "1", "where every connection of every rank carries messages larger than a slot (UCX with zero copy), send each step of allgather, alltoall and point-to-point groups as one message of up to 64 MiB instead of slot-sized slices; 0 on any rank turns it off for the communicator, as BRAID_CUDA_PATH=direct or ipc does"},
      {"BRAID_RING_AHEAD", "int", "-1", "ring allreduce, allgather and reduce-scatter run the next round's first send before the round's last receive, so the ring does not drain between rounds: 1 always, 0 never, -1 where each local rank has a core of its own (with ranks sharing cores it gained nothing)"},
      {"BRAID_SEND_ACKS", "bool", "1", "in broadcast, reduce, gather, scatter and the v-collectives, a rank that only sends to a peer waits for that peer's acknowledgement, so that a peer that issued another call fails this call too; 0: it returns once its data is sent, as with NCCL and MPI, and learns of such a mismatch at its next call (faster small rooted collectives); 0 on any rank turns it off for the communicator"},
      {"BRAID_TLS", "bool", "0", "encrypt and integrity-protect store and tcp data connections with TLS 1.3 keyed by the job key (needs BRAID_AUTH_KEY, braidrun or a unique id; OpenSSL); set it the same for every rank and braidrun"},
      {"BRAID_TLS_KERNEL", "bool", "1", "with BRAID_TLS=1, hand each connection's TLS records to the kernel after the handshake (Linux kernel TLS, where the tls module is loaded): the kernel encrypts from braid's buffers with no copy; 0 keeps them in OpenSSL"},
      {"BRAID_AUTH_KEY_FILE", "string", "", "a file (mode 0600, owned by the user) holding the job's key, instead of BRAID_AUTH_KEY"},
      {"BRAID_STORE_STANDBY", "string", "1", "where rank 0 serves the job's store (torchrun, mpirun, Slurm, by hand): rank 1 keeps a standby that takes every write before it is acknowledged and serves when rank 0 is gone, or silent for half of BRAID_TIMEOUT (stopped), so survivors can agree, shrink and grow; host: the first rank on another host than rank 0 keeps it, so that losing rank 0's host does not lose the store, but a network partition between the two hosts can split the job in two; 0 turns it off"},
      {"BRAID_STORE_HELLO_SEC", "seconds", "10", "store: close a connection that has not authenticated (or said HELLO) within this long"},
      {"BRAID_STORE_MAX_PENDING", "int", "1024", "store: connections allowed at once before they authenticate; the oldest is dropped past it"},
      {"BRAID_STORE_MAX_PENDING_PER_SOURCE", "int", "512", "store: of those, connections allowed from one IPv4 address; its oldest is dropped past it"},
      {"BRAID_STORE", "string", "", "keep the job's store in etcd: etcd://host:port[,host:port...]/prefix, or etcds:// for https endpoints; no rank serves one"},
      {"BRAID_ETCD_CACERT", "string", "", "etcds://: PEM file of the CAs an endpoint's certificate must chain to (default: the system's trust store)"},
      {"BRAID_ETCD_CERT", "string", "", "etcds://: PEM client certificate to show where etcd asks for one (--client-cert-auth); with BRAID_ETCD_KEY"},
      {"BRAID_ETCD_KEY", "string", "", "etcds://: PEM private key of BRAID_ETCD_CERT"},
      {"BRAID_ETCD_USER", "string", "", "etcd with authentication on: log in as name:password, or as name with BRAID_ETCD_PASSWORD_FILE"},
      {"BRAID_ETCD_LEASE_TTL", "int", "10", "etcd store: seconds after a rank's process dies, stops or loses etcd until the job counts it as gone (2-3600)"},
      {"BRAID_ETCD_PASSWORD_FILE", "string", "", "a file holding BRAID_ETCD_USER's password (its first line)"},
  };
  return kTable;
}

bool parseSize(const std::string& s, size_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno || end == s.c_str() || s[0] == '-') return false;
  unsigned long long mult = 1;
  if (*end) {
    switch (*end) {
      case 'k': case 'K': mult = 1ull << 10; break;
      case 'm': case 'M': mult = 1ull << 20; break;
      case 'g': case 'G': mult = 1ull << 30; break;
      default: return false;
    }
    ++end;
    if (*end == 'B' || *end == 'b') ++end;
    if (*end) return false;
  }
  if (v > (~0ull) / mult) return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

namespace {

Status badValue(const char* name, const char* value, const char* want) {
  return invalidArgument(std::string(name) + "='" + value + "' is not " + want);
}

Status readInt(const std::function<const char*(const char*)>& get, const char* name, int lo, int hi, int* out) {
  const char* v = get(name);
  if (!v || !*v) return Status::ok();
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (errno || *end || end == v || x < lo || x > hi)
    return badValue(name, v, ("an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]").c_str());
  *out = static_cast<int>(x);
  return Status::ok();
}

// A boolean knob: 1/true or 0/false; unset or empty leaves *out as it is.
Status readBool(const std::function<const char*(const char*)>& get, const char* name, bool* out) {
  const char* v = get(name);
  if (!v || !*v) return Status::ok();
  return parseSwitch(v, out) ? Status::ok() : badValue(name, v, "0 or 1");
}

// A switch a transport reads for itself, taking exactly the values in `choices` (unset or
// empty: its default); checked here so that a typo fails init naming it.
Status readChoice(const std::function<const char*(const char*)>& get, const char* name,
                  std::initializer_list<const char*> choices, const char* want) {
  const char* v = get(name);
  if (!v || !*v) return Status::ok();
  for (const char* c : choices)
    if (!std::strcmp(v, c)) return Status::ok();
  return badValue(name, v, want);
}

}  // namespace

Config Config::fromEnvLenient(const std::function<const char*(const char*)>& getter) {
  std::function<const char*(const char*)> get = getter ? getter : [](const char* n) { return std::getenv(n); };
  std::set<std::string> refused;
  for (;;) {
    auto c = fromEnv([&](const char* n) -> const char* { return refused.count(n) ? nullptr : get(n); });
    if (c.isOk()) return std::move(c).value();
    // Every refusal starts with the variable's name (badValue).
    const std::string& m = c.status().message();
    const size_t eq = m.find('=');
    if (eq == std::string::npos || !refused.insert(m.substr(0, eq)).second) return Config();
  }
}

StatusOr<Config> Config::fromEnv(const std::function<const char*(const char*)>& getter) {
  std::function<const char*(const char*)> get = getter ? getter : [](const char* n) { return std::getenv(n); };
  Config c;
  if (const char* v = get("BRAID_TIMEOUT"); v && *v) {
    char* end = nullptr;
    errno = 0;
    double t = std::strtod(v, &end);
    if (errno || *end || end == v || t < 0) return badValue("BRAID_TIMEOUT", v, "a non-negative number of seconds");
    c.timeoutSec = t;
  }
  BRAID_RETURN_IF_ERROR(readInt(get, "BRAID_NCHANNELS", 0, 64, &c.nchannels));
  if (const char* v = get("BRAID_TRANSPORT"); v && *v) {
    std::string t = v;
    bool known = false;
    for (const auto& f : transport::registry()) known |= t == f.name;
    for (const auto& f : transport::pluginFailures()) {
      // Named, but its plugin did not load: the communicator reports why.
      known |= t == f.name;
    }
    if (!known) return badValue("BRAID_TRANSPORT", v, ("one of " + transport::availableTransports()).c_str());
    c.transport = t;
  }
  if (const char* v = get("BRAID_SLOT_BYTES"); v && *v) {
    size_t b = 0;
    if (!parseSize(v, &b) || b < 4096 || b > (256u << 20))
      return badValue("BRAID_SLOT_BYTES", v, "a size between 4K and 256M");
    c.slotBytes = b / 64 * 64;
  }
  BRAID_RETURN_IF_ERROR(readInt(get, "BRAID_NSLOTS", 2, 1024, &c.nslots));
  BRAID_RETURN_IF_ERROR(readInt(get, "BRAID_SPIN_US", -1, 10000000, &c.spinMicros));
  BRAID_RETURN_IF_ERROR(readInt(get, "BRAID_YIELD_US", -1, 10000000, &c.yieldMicros));
  BRAID_RETURN_IF_ERROR(readInt(get, "BRAID_SOCKETS_PER_PEER", 1, 64, &c.socketsPerPeer));
  if (const char* v = get("BRAID_NET_IF")) c.netIf = v;
  if (const char* v = get("BRAID_PORT_RANGE"); v && *v) {
    int lo = 0, hi = 0, used = 0;
    if (std::sscanf(v, "%d-%d%n", &lo, &hi, &used) != 2 || v[used] != '\0' || lo < 1 || hi > 65535 || lo > hi)
      return badValue("BRAID_PORT_RANGE", v, "LO-HI, two ports with 1 <= LO <= HI <= 65535");
    c.portLo = lo;
    c.portHi = hi;
  }
  if (const char* v = get("BRAID_IB_HCA")) c.ibHca = v;
  BRAID_RETURN_IF_ERROR(readInt(get, "BRAID_IB_GID_INDEX", -1, 1023, &c.ibGidIndex));
  BRAID_RETURN_IF_ERROR(readChoice(get, "BRAID_TCP_ZCOPY", {"0", "1", "send"}, "0, 1 or send"));
  BRAID_RETURN_IF_ERROR(readChoice(get, "BRAID_SHM_CMA", {"0", "1"}, "0 or 1"));
  BRAID_RETURN_IF_ERROR(readChoice(get, "BRAID_UCX_ZCOPY", {"0", "1"}, "0 or 1"));
  BRAID_RETURN_IF_ERROR(readChoice(get, "BRAID_UCX_REDUCE_ON_ARRIVAL", {"0", "1", "auto"}, "0, 1 or auto"));
  // Read by the verbs plugin (transports/ibverbs/user_sends.h), checked here so that a bad
  // value fails every rank's init naming it rather than leaving the plugin at its default.
  bool ibZeroCopy = true;
  BRAID_RETURN_IF_ERROR(readBool(get, "BRAID_IB_ZCOPY", &ibZeroCopy));
  uint64_t ibZeroCopyMin = 0;
  if (const char* v = get("BRAID_IB_ZCOPY_MIN"); v && *v && !parseCount(v, &ibZeroCopyMin))
    return badValue("BRAID_IB_ZCOPY_MIN", v, "a number of bytes");
  BRAID_RETURN_IF_ERROR(readBool(get, "BRAID_PROBE", &c.probe));
  BRAID_RETURN_IF_ERROR(readBool(get, "BRAID_TLS", &c.tls));
  BRAID_RETURN_IF_ERROR(readBool(get, "BRAID_TLS_KERNEL", &c.tlsKernel));
  BRAID_RETURN_IF_ERROR(readBool(get, "BRAID_WHOLE_BLOCKS", &c.wholeBlocks));
  BRAID_RETURN_IF_ERROR(readInt(get, "BRAID_RING_AHEAD", -1, 1, &c.ringAhead));
  // The direct GPU path cuts every step into slot-sized slices (its kernels fill slots), and
  // a rank that stages instead must cut its steps alike: no whole blocks where it is asked
  // for (one rank asking turns them off for the communicator).
  if (const char* v = get("BRAID_CUDA_PATH"); v && (std::string(v) == "direct" || std::string(v) == "ipc"))
    c.wholeBlocks = false;
  BRAID_RETURN_IF_ERROR(readBool(get, "BRAID_SEND_ACKS", &c.sendAcks));
  BRAID_RETURN_IF_ERROR(readBool(get, "BRAID_LIVE_STATUS", &c.liveStatus));
  if (const char* v = get("BRAID_STORE_STANDBY"); v && std::string(v) == "host") {
    c.storeStandby = true;
    c.storeStandbyOtherHost = true;
  } else if (!readBool(get, "BRAID_STORE_STANDBY", &c.storeStandby).isOk()) {
    return badValue("BRAID_STORE_STANDBY", v, "0, 1 or host");
  }
  BRAID_RETURN_IF_ERROR(readBool(get, "BRAID_BIND", &c.bind));
  BRAID_RETURN_IF_ERROR(readBool(get, "BRAID_COMM_BLOCKING", &c.blocking));
  if (const char* v = get("BRAID_HOST_ID")) c.hostId = v;
  if (const char* v = get("BRAID_TOPO_FILE")) c.topoFile = v;
  if (const char* v = get("BRAID_TOPO_DUMP_FILE")) c.topoDumpFile = v;
  if (const char* v = get("BRAID_DEBUG_DUMP")) c.debugDump = v;
  if (const char* v = get("BRAID_TOPO"); v && *v) {
    std::string t = v;
    if (t == "auto") c.topo = -1;
    else if (t == "1" || t == "true") c.topo = 1;
    else if (t == "0" || t == "false") c.topo = 0;
    else return badValue("BRAID_TOPO", v, "auto, 0 or 1");
  }
  if (const char* v = get("BRAID_GPU"); v && *v) {
    std::string g = v;
    if (g == "local") c.gpu = -2;
    else BRAID_RETURN_IF_ERROR(readInt(get, "BRAID_GPU", -1, 1 << 16, &c.gpu));
  }
  if (const char* v = get("BRAID_ALGO")) c.algo = v;
  return c;
}

}  // namespace braid::core
