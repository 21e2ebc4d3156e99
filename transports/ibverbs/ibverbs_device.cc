#include "transports/ibverbs/ibverbs_device.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/clock.h"
#include "common/log.h"
#include "transports/ibverbs/device_select.h"
#include "transports/ibverbs/user_sends.h"

namespace braid::transport::ibverbs {
namespace {

constexpr const char* kSysfsRoot = "/sys/class/infiniband";

// Work request ids say what a completion belongs to; on an error completion only wr_id
// and the status are valid, so the kind must be recoverable from the id alone.
constexpr uint64_t kWrData = 1;
constexpr uint64_t kWrCredit = 2;
constexpr uint64_t kWrRecv = 3;

// Hello queue pair: receive and send buffers (a UD receive starts with 40 bytes of GRH).
constexpr int kHelloRecvs = 64;
constexpr int kHelloSends = 16;
constexpr size_t kGrhBytes = 40;
constexpr size_t kHelloRecvStride = kGrhBytes + kHelloBytes;

// Credit sources on the receiver's control page: a ring twice as deep as the protocol's
// bound on credit writes in flight, so a source is never rewritten while the NIC reads it.
constexpr size_t kCreditSourceOffset = 64;
constexpr uint64_t kCreditSources = 2 * RecvProtocol::kMaxCreditsInFlight;

// RC timing: 4.096 us * 2^18 = 1.07 s per attempt, 7 attempts: a pending write to a dead
// peer fails with IBV_WC_RETRY_EXC_ERR after about 7.5 s, while a congested fabric that
// stalls for a second is not mistaken for one (NCCL settled on similar values). braid's
// own liveness checks see a dead process sooner. RNR retries are unlimited (7): a receive
// queue that is momentarily empty is back-pressure, not failure.
constexpr uint8_t kAckTimeout = 18;
constexpr uint8_t kRetryCount = 7;
constexpr uint8_t kRnrRetry = 7;
constexpr uint8_t kMinRnrTimer = 12;

Status verbsError(const std::string& what, int err) {
  return Status(Code::kSystemError, "ibverbs: " + what + ": " + std::strerror(err));
}

Status setNonBlocking(int fd, const char* what) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return verbsError(what, errno);
  return Status::ok();
}

const char* linkLayerName(uint8_t ll) {
  switch (ll) {
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET: return "RoCE";
    default: return "unknown link layer";
  }
}

int mtuBytes(int mtu) { return mtu >= 1 && mtu <= 5 ? 128 << mtu : 0; }

uint32_t randomPsn(uint32_t salt) {
  uint64_t x = static_cast<uint64_t>(nowNanos()) ^ (static_cast<uint64_t>(salt) * 0x9E3779B97F4A7C15ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<uint32_t>(x) & 0xFFFFFF;
}

}  // namespace

void enableForkSafety() {
  // braid forks: the multi-process tests, braidrun's helpers, Python's multiprocessing and
  // a user's own subprocesses all do. Without fork protection a child shares the
  // parent's registered pages copy-on-write, and the first write by either side moves
  // the parent's page away from the frame the NIC was told about: transfers land in
  // memory nobody reads. ibv_fork_init() marks registered ranges MADV_DONTFORK; it must
  // run before the first registration, so it runs before anything else here. Setting
  // RDMAV_FORK_SAFE (or IBV_FORK_SAFE) has libibverbs do the same by itself, and on
  // kernels with copy-on-fork for pinned pages (5.13+) the call is a no-op.
  static std::once_flag once;
  std::call_once(once, [] {
    const int rc = ibv_fork_init();
    if (rc != 0) {
      BRAID_WARN("ibverbs: ibv_fork_init failed (%s); a process that forks while registered memory is in use may "
                 "lose transfers",
                 std::strerror(rc));
    }
  });
}

// ---------------------------------------------------------------------------------------
// PinnedBuffer

PinnedBuffer::~PinnedBuffer() {
  if (data_) munmap(data_, bytes_);
}

Status PinnedBuffer::allocate(size_t bytes, int numaNode) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  bytes_ = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    bytes_ = 0;
    return verbsError("mapping " + std::to_string(bytes) + " bytes", errno);
  }
  data_ = static_cast<uint8_t*>(p);
  if (numaNode >= 0 && numaNode < 1024) {
    // Preferred, not bound: a full node falls back instead of failing the transport. A
    // raw system call, so the plugin needs no libnuma.
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
    mask[numaNode / (8 * sizeof(unsigned long))] |= 1ul << (numaNode % (8 * sizeof(unsigned long)));
    constexpr int kMpolPreferred = 1;
    if (syscall(SYS_mbind, p, bytes_, kMpolPreferred, mask, 1024ul, 0u) != 0) {
      BRAID_INFO("ibverbs: cannot prefer NUMA node %d for %zu bytes: %s", numaNode, bytes_, std::strerror(errno));
    }
  }
  std::memset(data_, 0, bytes_);  // places the pages now, under that policy
  return Status::ok();
}

// ---------------------------------------------------------------------------------------
// Device

StatusOr<std::unique_ptr<Device>> Device::open(const TransportConfig& cfg) {
  enableForkSafety();
  BRAID_ASSIGN_OR_RETURN(NicFilter filter, parseHcaList(cfg.ibHca));
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    const int err = errno;
    if (list) ibv_free_device_list(list);
    std::string why = "ibverbs: no RDMA device (ibv_get_device_list found none";
    if (!list && err == ENOSYS) {
      why += ": this kernel has no RDMA subsystem, " + std::string(kSysfsRoot) + " is missing";
    } else if (!list && err != 0) {
      why += std::string(": ") + std::strerror(err);
    }
    return Status(Code::kSystemError, why + ")");
  }
  std::string seen;
  std::unique_ptr<Device> chosen;
  Status failure;
  for (int i = 0; i < n && !chosen; ++i) {
    const std::string name = ibv_get_device_name(list[i]);
    if (!filter.allows(name)) {
      seen += (seen.empty() ? "" : ", ") + name + " (excluded)";
      continue;
    }
    ibv_context* ctx = ibv_open_device(list[i]);
    if (!ctx) {
      seen += (seen.empty() ? "" : ", ") + name + " (cannot open: " + std::strerror(errno) + ")";
      continue;
    }
    ibv_device_attr dattr{};
    if (ibv_query_device(ctx, &dattr) != 0) dattr.phys_port_cnt = 0;
    int port = -1;
    ibv_port_attr pattr{};
    for (int p = 1; p <= dattr.phys_port_cnt && port < 0; ++p) {
      ibv_port_attr a{};
      if (!filter.allows(name, p) || ibv_query_port(ctx, static_cast<uint8_t>(p), &a) != 0) continue;
      const bool usable = a.link_layer == IBV_LINK_LAYER_INFINIBAND || a.link_layer == IBV_LINK_LAYER_ETHERNET;
      seen += (seen.empty() ? "" : ", ") + name + " port " + std::to_string(p) + " " + ibv_port_state_str(a.state);
      if (a.state == IBV_PORT_ACTIVE && usable) {
        port = p;
        pattr = a;
      }
    }
    if (port < 0) {
      ibv_close_device(ctx);
      continue;
    }
    auto dev = std::unique_ptr<Device>(new Device());
    dev->ctx_ = ctx;  // owned from here on, closed by ~Device
    Status st = dev->init(cfg, list[i], port, pattr);
    if (st.isOk()) {
      chosen = std::move(dev);
    } else {
      failure = st;
      seen += " (" + st.message() + ")";
    }
  }
  ibv_free_device_list(list);
  if (chosen) return chosen;
  if (!failure.isOk() && seen.empty()) return failure;
  std::string why = "ibverbs: no usable RDMA port";
  if (!filter.empty()) why += " allowed by BRAID_IB_HCA='" + filter.spec() + "'";
  return Status(Code::kSystemError, why + " (found: " + (seen.empty() ? "nothing" : seen) + ")");
}

Status Device::init(const TransportConfig& cfg, ibv_device* dev, int port, const ibv_port_attr& attr) {
  name_ = ibv_get_device_name(dev);
  port_ = port;
  portAttr_ = attr;
  ethernet_ = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  BRAID_RETURN_IF_ERROR(setNonBlocking(ctx_->async_fd, "making the async event fd non-blocking"));
  pd_ = ibv_alloc_pd(ctx_);
  if (!pd_) return verbsError("ibv_alloc_pd on " + name_, errno);

  // RoCE has no LIDs: every packet carries a GRH addressed by GID, and which GID (RoCE v1
  // or v2, IPv4 or IPv6) decides whether the fabric can route it. InfiniBand routes by LID
  // inside a subnet and needs a GID only when told to (BRAID_IB_GID_INDEX).
  if (ethernet_ || cfg.ibGidIndex >= 0) {
    BRAID_ASSIGN_OR_RETURN(GidChoice g, selectGid(kSysfsRoot, name_, port_, cfg.ibGidIndex));
    if (ibv_query_gid(ctx_, static_cast<uint8_t>(port_), g.index, &gid_) != 0) {
      return verbsError(name_ + " port " + std::to_string(port_) + ": GID index " + std::to_string(g.index), errno);
    }
    static const uint8_t kNoGid[16] = {};
    if (std::memcmp(gid_.raw, kNoGid, sizeof(kNoGid)) == 0) {
      return Status(Code::kInvalidArgument, "ibverbs: " + name_ + " port " + std::to_string(port_) + " GID index " +
                                                std::to_string(g.index) + " is empty");
    }
    gidIndex_ = g.index;
    gidWhy_ = g.why;
  }
  // Datagrams carrying another qkey are dropped by the NIC, so another job's hellos never
  // reach this one. The top bit is reserved for privileged qkeys.
  qkey_ = static_cast<uint32_t>(cfg.nonce ^ (cfg.nonce >> 32)) & 0x7FFFFFFF;
  if (qkey_ == 0) qkey_ = 0x42524149;
  BRAID_RETURN_IF_ERROR(initHelloQp());
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  cache_ = std::make_unique<RegistrationCache>(this, 1024, size_t{16} << 30, page);
  initZeroCopy();
  return Status::ok();
}

// Sends from user memory (user_sends.h) need two things besides the cache: to hear when
// memory under a cached registration is unmapped (memory_hooks.h), and a kernel that keeps
// registered pages in place across fork (copy-on-fork for pinned pages, 5.13+). Where
// ibv_fork_init had to mark registered memory MADV_DONTFORK instead, registering a user's
// buffer would take it away from the user's own children.
void Device::initZeroCopy() {
  const ZeroCopySettings z = zeroCopySettings(std::getenv("BRAID_IB_ZCOPY"), std::getenv("BRAID_IB_ZCOPY_MIN"));
  if (!z.warning.empty()) BRAID_WARN("ibverbs: %s", z.warning.c_str());
  zeroCopyMin_ = z.minBytes;
  if (!z.on) {
    zeroCopyWhy_ = "BRAID_IB_ZCOPY=0";
    return;
  }
  if (ibv_is_fork_initialized() != IBV_FORK_UNNEEDED) {
    zeroCopyWhy_ = "the kernel does not keep registered pages across fork";
    return;
  }
  StatusOr<std::unique_ptr<UnmapWatch>> w = UnmapWatch::start(cache_.get());
  if (!w.isOk()) {
    zeroCopyWhy_ = w.status().message();
    return;
  }
  watch_ = std::move(w.value());
}

Device::~Device() {
  watch_.reset();
  cache_.reset();
  for (auto& [key, ah] : ahs_) ibv_destroy_ah(ah);
  if (udQp_) ibv_destroy_qp(udQp_);
  if (udSendCq_) ibv_destroy_cq(udSendCq_);
  if (udRecvCq_) ibv_destroy_cq(udRecvCq_);
  if (udKey_.handle) ibv_dereg_mr(static_cast<ibv_mr*>(udKey_.handle));
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
}

std::string Device::describe() const {
  std::string s = name_ + " port " + std::to_string(port_) + " (" + linkLayerName(portAttr_.link_layer) + ", MTU " +
                  std::to_string(mtuBytes(portAttr_.active_mtu));
  if (ethernet_ || gidIndex_ >= 0) s += ", GID " + std::to_string(gidIndex_) + ": " + gidWhy_;
  if (!ethernet_) s += ", LID " + std::to_string(portAttr_.lid);
  s += ")";
  const ibv_fork_status fork = ibv_is_fork_initialized();
  s += fork == IBV_FORK_ENABLED ? "; fork-safe" : fork == IBV_FORK_UNNEEDED ? "; fork-safe (kernel)" : "; NOT fork-safe";
  if (watch_) {
    s += "; sends from user memory from " + std::to_string(zeroCopyMin_ / 1024) + " KiB";
  } else {
    s += "; sends through slots only (" + zeroCopyWhy_ + ")";
  }
  return s;
}

QpAddress Device::addressOf(uint32_t qpn, uint32_t psn) const {
  QpAddress a;
  a.qpn = qpn;
  a.psn = psn;
  a.lid = portAttr_.lid;
  a.port = static_cast<uint8_t>(port_);
  a.mtu = static_cast<uint8_t>(portAttr_.active_mtu);
  a.global = ethernet_ || gidIndex_ >= 0;
  if (a.global) std::memcpy(a.gid, gid_.raw, sizeof(a.gid));
  return a;
}

ibv_ah_attr Device::routeTo(const QpAddress& remote) const {
  ibv_ah_attr a{};
  a.dlid = remote.lid;
  a.sl = 0;
  a.src_path_bits = 0;
  a.port_num = static_cast<uint8_t>(port_);
  if (remote.global || ethernet_) {
    a.is_global = 1;
    std::memcpy(a.grh.dgid.raw, remote.gid, sizeof(remote.gid));
    a.grh.sgid_index = static_cast<uint8_t>(gidIndex_ >= 0 ? gidIndex_ : 0);
    a.grh.hop_limit = 255;
    a.grh.traffic_class = 0;
    a.grh.flow_label = 0;
  }
  return a;
}

ibv_mtu Device::pathMtu(const QpAddress& remote) const {
  return static_cast<ibv_mtu>(std::min<int>(portAttr_.active_mtu, remote.mtu));
}

StatusOr<MemoryKey> Device::registerRegion(void* addr, size_t bytes) {
  // User buffers: the peer may write into them (receive) or they are read locally (send).
  return registerRegion(addr, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
}

StatusOr<MemoryKey> Device::registerRegion(void* addr, size_t bytes, int access) {
  ibv_mr* mr = ibv_reg_mr(pd_, addr, bytes, access);
  if (!mr) {
    return verbsError("registering " + std::to_string(bytes) + " bytes with " + name_ +
                          " (ibv_reg_mr; is the locked-memory limit, ulimit -l, high enough?)",
                      errno);
  }
  MemoryKey k;
  k.lkey = mr->lkey;
  k.rkey = mr->rkey;
  k.handle = mr;
  return k;
}

StatusOr<MemoryKey> Device::registerDeviceMemory(void* addr, size_t bytes, int fd, uint64_t offset, int access) {
  if (fd < 0) {
    ibv_mr* mr = ibv_reg_mr(pd_, addr, bytes, access);
    if (!mr) {
      return verbsError("registering the device area of " + std::to_string(bytes) + " bytes with " + name_ +
                            " (ibv_reg_mr on GPU memory needs the nvidia-peermem module)",
                        errno);
    }
    return MemoryKey{mr->lkey, mr->rkey, mr};
  }
  ibv_mr* mr = ibv_reg_dmabuf_mr(pd_, offset, bytes, reinterpret_cast<uintptr_t>(addr), fd, access);
  if (!mr) {
    return verbsError("registering the device area of " + std::to_string(bytes) + " bytes with " + name_ +
                          " through its dmabuf (ibv_reg_dmabuf_mr)",
                      errno);
  }
  return MemoryKey{mr->lkey, mr->rkey, mr};
}

void Device::deregisterRegion(const MemoryKey& key) {
  if (key.handle) ibv_dereg_mr(static_cast<ibv_mr*>(key.handle));
}

Status Device::initHelloQp() {
  udSendCq_ = ibv_create_cq(ctx_, kHelloSends, nullptr, nullptr, 0);
  udRecvCq_ = ibv_create_cq(ctx_, kHelloRecvs, nullptr, nullptr, 0);
  if (!udSendCq_ || !udRecvCq_) return verbsError("creating the hello completion queues on " + name_, errno);
  ibv_qp_init_attr init{};
  init.qp_context = nullptr;  // async events for it name no connection
  init.send_cq = udSendCq_;
  init.recv_cq = udRecvCq_;
  init.cap.max_send_wr = kHelloSends;
  init.cap.max_recv_wr = kHelloRecvs;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_UD;
  udQp_ = ibv_create_qp(pd_, &init);
  if (!udQp_) return verbsError("creating the hello queue pair on " + name_, errno);

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(port_);
  a.qkey = qkey_;
  int rc = ibv_modify_qp(udQp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  if (rc) return verbsError("hello queue pair to INIT", rc);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  rc = ibv_modify_qp(udQp_, &a, IBV_QP_STATE);
  if (rc) return verbsError("hello queue pair to RTR", rc);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = randomPsn(udQp_->qp_num);
  rc = ibv_modify_qp(udQp_, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  if (rc) return verbsError("hello queue pair to RTS", rc);

  BRAID_RETURN_IF_ERROR(udMemory_.allocate(kHelloRecvs * kHelloRecvStride + kHelloSends * kHelloBytes, -1));
  BRAID_ASSIGN_OR_RETURN(udKey_, registerRegion(udMemory_.data(), udMemory_.bytes(), IBV_ACCESS_LOCAL_WRITE));
  for (int i = 0; i < kHelloRecvs; ++i) BRAID_RETURN_IF_ERROR(postHelloRecv(i));
  return Status::ok();
}

Status Device::postHelloRecv(int slot) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(udMemory_.data() + static_cast<size_t>(slot) * kHelloRecvStride);
  sge.length = static_cast<uint32_t>(kHelloRecvStride);
  sge.lkey = udKey_.lkey;
  ibv_recv_wr wr{};
  wr.wr_id = static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(udQp_, &wr, &bad);
  if (rc) return verbsError("posting a hello receive", rc);
  return Status::ok();
}

Status Device::reapHelloSends(bool wait) {
  Deadline d = Deadline::after(1.0);
  for (;;) {
    ibv_wc wc[kHelloSends];
    const int n = ibv_poll_cq(udSendCq_, kHelloSends, wc);
    if (n < 0) return Status(Code::kSystemError, "ibverbs: polling the hello send queue failed");
    for (int i = 0; i < n; ++i) {
      --udSendsOutstanding_;
      // A hello that failed to leave is resent by establish(); only say so.
      if (wc[i].status != IBV_WC_SUCCESS) BRAID_INFO("ibverbs: a hello failed: %s", ibv_wc_status_str(wc[i].status));
    }
    if (!wait || udSendsOutstanding_ < kHelloSends) return Status::ok();
    if (d.expired()) return Status(Code::kSystemError, "ibverbs: hello sends do not complete on " + name_);
  }
}

Status Device::sendHello(const QpAddress& to, uint32_t qkey, const std::string& msg) {
  BRAID_RETURN_IF_ERROR(reapHelloSends(udSendsOutstanding_ >= kHelloSends));
  std::string key(reinterpret_cast<const char*>(&to.lid), sizeof(to.lid));
  key.append(reinterpret_cast<const char*>(to.gid), sizeof(to.gid));
  ibv_ah*& ah = ahs_[key];
  if (!ah) {
    ibv_ah_attr attr = routeTo(to);
    ah = ibv_create_ah(pd_, &attr);
    if (!ah) {
      ahs_.erase(key);
      return verbsError("no route to the peer's port (ibv_create_ah on " + name_ + ")", errno);
    }
  }
  uint8_t* buf = udMemory_.data() + kHelloRecvs * kHelloRecvStride + static_cast<size_t>(udNextSend_) * kHelloBytes;
  udNextSend_ = (udNextSend_ + 1) % kHelloSends;
  std::memcpy(buf, msg.data(), std::min(msg.size(), kHelloBytes));
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(buf);
  sge.length = static_cast<uint32_t>(kHelloBytes);
  sge.lkey = udKey_.lkey;
  ibv_send_wr wr{};
  wr.wr_id = 0;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = to.qpn;
  wr.wr.ud.remote_qkey = qkey;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(udQp_, &wr, &bad);
  if (rc) return verbsError("sending a hello", rc);
  ++udSendsOutstanding_;
  return Status::ok();
}

Status Device::receiveHellos(std::vector<std::string>* out) {
  BRAID_RETURN_IF_ERROR(reapHelloSends(false));
  for (;;) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(udRecvCq_, 16, wc);
    if (n < 0) return Status(Code::kSystemError, "ibverbs: polling the hello receive queue failed");
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        if (wc[i].status == IBV_WC_WR_FLUSH_ERR) {
          return Status(Code::kSystemError, "ibverbs: the hello queue pair on " + name_ + " failed");
        }
        BRAID_INFO("ibverbs: a hello receive failed: %s", ibv_wc_status_str(wc[i].status));
      } else if (wc[i].byte_len >= kHelloBytes) {
        // The payload follows the GRH area whether or not a GRH was present.
        const uint8_t* p = udMemory_.data() + wc[i].wr_id * kHelloRecvStride + kGrhBytes;
        out->emplace_back(reinterpret_cast<const char*>(p), kHelloBytes);
      }
      BRAID_RETURN_IF_ERROR(postHelloRecv(static_cast<int>(wc[i].wr_id)));
    }
    if (n < 16) return Status::ok();
  }
}

void Device::watch(VerbsQueue* q) {
  std::lock_guard<std::mutex> lock(asyncMu_);
  watched_.insert(q);
  if (!deviceFailure_.empty()) q->fail(deviceFailure_);
}

void Device::unwatch(VerbsQueue* q) {
  std::lock_guard<std::mutex> lock(asyncMu_);
  watched_.erase(q);
}

void Device::pollAsyncEvents() {
  const int64_t now = nowNanos();
  if (now < nextAsyncCheck_.load(std::memory_order_relaxed)) return;
  nextAsyncCheck_.store(now + 1000000, std::memory_order_relaxed);
  std::unique_lock<std::mutex> lock(asyncMu_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is reading them right now
  ibv_async_event ev;
  while (ibv_get_async_event(ctx_, &ev) == 0) {
    dispatch(ev);
    ibv_ack_async_event(&ev);
  }
}

void Device::dispatch(const ibv_async_event& ev) {
  const std::string what = std::string(ibv_event_type_str(ev.event_type));
  switch (ev.event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR: {
      auto* q = static_cast<VerbsQueue*>(ev.element.qp->qp_context);
      if (q && watched_.count(q)) {
        q->fail("its queue pair on " + name_ + " reported " + what);
      } else {
        BRAID_WARN("ibverbs: %s on a queue pair of %s that no connection owns", what.c_str(), name_.c_str());
      }
      return;
    }
    case IBV_EVENT_CQ_ERR: {
      auto* q = static_cast<VerbsQueue*>(ev.element.cq->cq_context);
      if (q && watched_.count(q)) q->fail("its completion queue on " + name_ + " overran (" + what + ")");
      return;
    }
    case IBV_EVENT_PORT_ERR:
      if (ev.element.port_num != port_) return;
      for (VerbsQueue* q : watched_) {
        q->fail(name_ + " port " + std::to_string(port_) + " went down (" + what + ")");
      }
      return;
    case IBV_EVENT_DEVICE_FATAL:
      deviceFailure_ = name_ + " failed (" + what + ")";
      for (VerbsQueue* q : watched_) q->fail(deviceFailure_);
      return;
    default:
      // Informational: COMM_EST, PORT_ACTIVE, LID/PKEY/GID changes, SM changes.
      BRAID_INFO("ibverbs: %s: %s", name_.c_str(), what.c_str());
      return;
  }
}

// ---------------------------------------------------------------------------------------
// VerbsQueue

StatusOr<std::unique_ptr<VerbsQueue>> VerbsQueue::create(Device* dev, Role role, int peer, int nslots,
                                                         size_t slotBytes, int numaNode) {
  auto q = std::unique_ptr<VerbsQueue>(new VerbsQueue(dev, role, peer, nslots));
  Status st = q->init(slotBytes, numaNode);
  if (!st.isOk()) {
    // "ibverbs: <what failed>" becomes "ibverbs: connection with rank N: <what failed>".
    std::string what = st.message();
    if (what.rfind("ibverbs: ", 0) == 0) what.erase(0, 9);
    return Status(st.code(), "ibverbs: connection with rank " + std::to_string(peer) + ": " + what, st.rank());
  }
  return q;
}

Status VerbsQueue::init(size_t slotBytes, int numaNode) {
  const bool receiver = role_ == Role::kReceiver;
  BRAID_RETURN_IF_ERROR(slab_.allocate(static_cast<size_t>(nslots_) * slotStride(slotBytes), numaNode));
  BRAID_RETURN_IF_ERROR(control_.allocate(kCreditSourceOffset + kCreditSources * sizeof(uint64_t), numaNode));
  // Remote write is granted only where the peer writes: the receiver's slots and the
  // sender's credit word.
  const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  BRAID_ASSIGN_OR_RETURN(slabKey_, dev_->registerRegion(slab_.data(), slab_.bytes(),
                                                        receiver ? remote : IBV_ACCESS_LOCAL_WRITE));
  BRAID_ASSIGN_OR_RETURN(controlKey_, dev_->registerRegion(control_.data(), control_.bytes(),
                                                           receiver ? IBV_ACCESS_LOCAL_WRITE : remote));

  channel_ = ibv_create_comp_channel(dev_->context());
  if (!channel_) return verbsError("ibv_create_comp_channel", errno);
  BRAID_RETURN_IF_ERROR(setNonBlocking(channel_->fd, "making the completion channel non-blocking"));
  // Send queue: at most nslots messages, or kMaxCreditsInFlight credit writes plus the
  // ready message. Receive queue: the receiver gets at most nslots data writes ahead of
  // its polling; the sender can see up to two credit messages per slot between two polls
  // (one for a slot released before the poll, one after it is reused), plus the ready one.
  // A device message takes two: its payload's write (unsignaled, its entry freed by the
  // header's completion) and its header's.
  const int sendWr = 2 * nslots_ + RecvProtocol::kMaxCreditsInFlight + 2;
  const int recvWr = 2 * nslots_ + 4;
  cq_ = ibv_create_cq(dev_->context(), sendWr + recvWr, this, channel_, 0);
  if (!cq_) return verbsError("ibv_create_cq of " + std::to_string(sendWr + recvWr) + " entries", errno);

  ibv_qp_init_attr init{};
  init.qp_context = this;
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.cap.max_send_wr = static_cast<uint32_t>(sendWr);
  init.cap.max_recv_wr = static_cast<uint32_t>(recvWr);
  init.cap.max_send_sge = 2;  // a zero-copy message: the slot's header and the caller's payload
  init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  qp_ = ibv_create_qp(dev_->pd(), &init);
  if (!qp_) return verbsError("ibv_create_qp (RC, " + std::to_string(sendWr) + "/" + std::to_string(recvWr) + " WRs)", errno);
  psn_ = randomPsn(qp_->qp_num);

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(dev_->port());
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  const int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc) return verbsError("queue pair to INIT", rc);
  // Receives may be posted from INIT on, so the queue is ready before the peer connects.
  BRAID_RETURN_IF_ERROR(postRecv(recvWr));
  dev_->watch(this);
  watched_ = true;
  return Status::ok();
}

VerbsQueue::~VerbsQueue() {
  if (watched_) dev_->unwatch(this);
  if (qp_) ibv_destroy_qp(qp_);
  if (cq_) {
    disarm();  // every event taken from the channel must be acknowledged first
    ibv_destroy_cq(cq_);
  }
  if (channel_) ibv_destroy_comp_channel(channel_);
  dev_->deregisterRegion(slabKey_);
  dev_->deregisterRegion(controlKey_);
  releaseArea();
}

Status VerbsQueue::registerArea(void* base, size_t bytes, int dmabufFd, uint64_t dmabufOffset) {
  releaseArea();
  const int access = role_ == Role::kReceiver ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_LOCAL_WRITE;
  BRAID_ASSIGN_OR_RETURN(areaKey_, dev_->registerDeviceMemory(base, bytes, dmabufFd, dmabufOffset, access));
  area_ = static_cast<uint8_t*>(base);
  areaBytes_ = bytes;
  return Status::ok();
}

void VerbsQueue::releaseArea() {
  if (area_) dev_->deregisterRegion(areaKey_);
  area_ = nullptr;
  areaBytes_ = 0;
  areaKey_ = MemoryKey{};
  peerAreaAddr_ = 0;
  peerAreaRkey_ = 0;
}

// Unsignaled, so it frees its send queue entry when the header write after it completes.
Status VerbsQueue::postAreaWrite(size_t offset, size_t bytes) {
  if (!area_ || !peerAreaAddr_ || offset + bytes > areaBytes_) {
    return internalError("ibverbs: a device payload to rank " + std::to_string(peer_) + " without device areas");
  }
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(area_ + offset);
  sge.length = static_cast<uint32_t>(bytes);
  sge.lkey = areaKey_.lkey;
  ibv_send_wr wr{};
  wr.wr_id = kWrData;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = 0;
  wr.wr.rdma.remote_addr = peerAreaAddr_ + offset;
  wr.wr.rdma.rkey = peerAreaRkey_;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp_, &wr, &bad);
  if (rc) {
    return Status(Code::kRemoteError,
                  "ibverbs: posting a device payload's RDMA write to rank " + std::to_string(peer_) + " failed: " +
                      std::strerror(rc),
                  peer_);
  }
  return Status::ok();
}

Status VerbsQueue::connect(const QpAddress& remote, uint64_t remoteAddr, uint32_t rkey) {
  remoteAddr_ = remoteAddr;
  remoteRkey_ = rkey;
  const std::string to = "queue pair to rank " + std::to_string(peer_);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = dev_->pathMtu(remote);
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = kMinRnrTimer;
  a.ah_attr = dev_->routeTo(remote);
  int rc = ibv_modify_qp(qp_, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc) return verbsError(to + " to RTR (remote QPN " + std::to_string(remote.qpn) + ")", rc);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = kAckTimeout;
  a.retry_cnt = kRetryCount;
  a.rnr_retry = kRnrRetry;
  a.sq_psn = psn_;
  a.max_rd_atomic = 1;
  rc = ibv_modify_qp(qp_, &a,
                     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                         IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc) return verbsError(to + " to RTS", rc);
  return Status::ok();
}

Status VerbsQueue::postRecv(int count) {
  // Writes with immediate consume a receive but place no data through it: no SGE needed.
  for (int i = 0; i < count; ++i) {
    ibv_recv_wr wr{};
    wr.wr_id = kWrRecv;
    wr.sg_list = nullptr;
    wr.num_sge = 0;
    ibv_recv_wr* bad = nullptr;
    const int rc = ibv_post_recv(qp_, &wr, &bad);
    if (rc) return verbsError("posting a receive for rank " + std::to_string(peer_), rc);
  }
  return Status::ok();
}

// One signaled RDMA WRITE WITH IMM of local registered bytes to the peer's memory; what
// the kinds of write below have in common. `what` names it in the error.
Status VerbsQueue::postWriteImm(uint64_t wrId, const void* local, size_t bytes, uint32_t lkey, uint64_t remote,
                                uint32_t imm, const char* what) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(local);
  sge.length = static_cast<uint32_t>(bytes);
  sge.lkey = lkey;
  return postWriteSges(wrId, &sge, 1, remote, imm, what);
}

Status VerbsQueue::postWriteSges(uint64_t wrId, ibv_sge* sges, int nsge, uint64_t remote, uint32_t imm,
                                 const char* what) {
  ibv_send_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = sges;
  wr.num_sge = nsge;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = remoteRkey_;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp_, &wr, &bad);
  if (rc) {
    return Status(Code::kRemoteError,
                  std::string("ibverbs: posting ") + what + " to rank " + std::to_string(peer_) + " failed: " +
                      std::strerror(rc),
                  peer_);
  }
  return Status::ok();
}

Status VerbsQueue::postWrite(size_t offset, size_t bytes, uint32_t imm) {
  return postWriteImm(kWrData, slab_.data() + offset, bytes, slabKey_.lkey, remoteAddr_ + offset, imm,
                      "an RDMA write");
}

// The slot's header from the staging slab and the payload from the caller's registered
// memory, gathered into one write that lands as header and payload side by side.
Status VerbsQueue::postWriteFrom(size_t offset, size_t headerBytes, const void* user, size_t bytes, uint32_t lkey,
                                 uint32_t imm) {
  ibv_sge sges[2]{};
  sges[0].addr = reinterpret_cast<uintptr_t>(slab_.data() + offset);
  sges[0].length = static_cast<uint32_t>(headerBytes);
  sges[0].lkey = slabKey_.lkey;
  sges[1].addr = reinterpret_cast<uintptr_t>(user);
  sges[1].length = static_cast<uint32_t>(bytes);
  sges[1].lkey = lkey;
  return postWriteSges(kWrData, sges, 2, remoteAddr_ + offset, imm, "an RDMA write from user memory");
}

Status VerbsQueue::postCredit(uint64_t released, uint32_t imm) {
  auto* source = reinterpret_cast<uint64_t*>(control_.data() + kCreditSourceOffset) + creditPosts_ % kCreditSources;
  *source = released;
  ++creditPosts_;
  return postWriteImm(kWrCredit, source, sizeof(uint64_t), controlKey_.lkey, remoteAddr_, imm, "a credit update");
}

Completion VerbsQueue::translate(const ibv_wc& wc) {
  Completion c;
  c.op = wc.wr_id == kWrData ? Completion::Op::kWrite
         : wc.wr_id == kWrCredit ? Completion::Op::kCredit
                                 : Completion::Op::kArrival;
  if (wc.status != IBV_WC_SUCCESS) {
    c.ok = false;
    c.status = static_cast<int>(wc.status);
    c.error = ibv_wc_status_str(wc.status);
    return c;
  }
  if (c.op == Completion::Op::kArrival) {
    if (!(wc.wc_flags & IBV_WC_WITH_IMM) || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
      c.ok = false;
      c.status = -1;
      c.error = "a message that is not an RDMA write with immediate";
      return c;
    }
    c.imm = ntohl(wc.imm_data);
    c.byteLen = wc.byte_len;
  }
  return c;
}

StatusOr<int> VerbsQueue::poll(Completion* out, int max) {
  int n = 0;
  if (!stash_.empty()) {
    const int k = std::min<int>(max, static_cast<int>(stash_.size()));
    std::copy(stash_.begin(), stash_.begin() + k, out);
    stash_.erase(stash_.begin(), stash_.begin() + k);
    n = k;
  }
  int reposts = 0;
  while (n < max) {
    ibv_wc wc[16];
    const int want = std::min(max - n, 16);
    const int got = ibv_poll_cq(cq_, want, wc);
    if (got < 0) return Status(Code::kSystemError, "ibverbs: ibv_poll_cq failed for rank " + std::to_string(peer_));
    for (int i = 0; i < got; ++i) {
      out[n++] = translate(wc[i]);
      if (out[n - 1].ok && out[n - 1].op == Completion::Op::kArrival) ++reposts;
    }
    if (got < want) break;
  }
  // Each landed write used up a receive; put it back before anyone can send the next.
  if (reposts) BRAID_RETURN_IF_ERROR(postRecv(reposts));
  return n;
}

uint64_t VerbsQueue::creditWord() const {
  // The NIC writes the word; an aligned 8-byte write lands whole.
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(control_.data()), __ATOMIC_ACQUIRE);
}

const char* VerbsQueue::asyncFailure() {
  dev_->pollAsyncEvents();
  return failed_.load(std::memory_order_acquire) ? failure_.c_str() : nullptr;
}

void VerbsQueue::fail(const std::string& why) {
  if (failed_.load(std::memory_order_relaxed)) return;
  failure_ = why;
  failed_.store(true, std::memory_order_release);
}

int VerbsQueue::arm() {
  if (!stash_.empty()) return -1;
  if (ibv_req_notify_cq(cq_, 0) != 0) return -1;
  // A completion that arrived between the last poll and the arm raised no event: look
  // once more, and keep what is found for the next poll.
  Completion c[16];
  StatusOr<int> n = poll(c, 16);
  if (!n.isOk()) return -1;
  stash_.insert(stash_.end(), c, c + n.value());
  return stash_.empty() ? channel_->fd : -1;
}

void VerbsQueue::disarm() {
  unsigned events = 0;
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  while (ibv_get_cq_event(channel_, &cq, &ctx) == 0) ++events;
  if (events) ibv_ack_cq_events(cq_, events);
}

}  // namespace braid::transport::ibverbs
