#pragma once
// The verbs side of the transport: one opened RDMA device and port (Device) and the RC
// queue pairs that carry connections (VerbsQueue, the real RdmaQueue). Everything that
// calls libibverbs lives here; the protocol (rdma_protocol.h) never does.

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "transports/ibverbs/rdma_protocol.h"
#include "transports/ibverbs/memory_hooks.h"
#include "transports/ibverbs/registration_cache.h"
#include "transports/transport.h"

namespace braid::transport::ibverbs {

class VerbsQueue;

// Page-aligned memory of its own pages (mmap), so that registering it never shares a page
// with unrelated heap data: with fork protection on, registered pages are excluded from
// a child (MADV_DONTFORK), and a child that touched a heap object on such a page would
// crash.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // Maps `bytes` (rounded up to pages), preferring NUMA node `numaNode` (-1: anywhere).
  Status allocate(size_t bytes, int numaNode);
  uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

// One device context, protection domain and port for a transport instance, plus the UD
// queue pair through which senders introduce themselves to receivers (see
// ibverbs_transport.h), and the dispatch of the device's asynchronous events.
//
// Thread-safety: setup (open, hellos) runs on the thread that sets connections up;
// pollAsyncEvents, watch and unwatch may run on any thread (connections run on several).
class Device final : public Registrar {
 public:
  // Opens the first active port that BRAID_IB_HCA allows. Fails with a message starting
  // "ibverbs:" when there is no device, none allowed, or none with an active port.
  static StatusOr<std::unique_ptr<Device>> open(const TransportConfig& cfg);
  ~Device() override;

  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  int port() const { return port_; }
  const std::string& name() const { return name_; }
  std::string describe() const;

  // This port's address for a queue pair `qpn` starting at `psn`.
  QpAddress addressOf(uint32_t qpn, uint32_t psn) const;
  // The GID index outgoing packets carry, or -1 when packets need no GRH.
  int gidIndex() const { return gidIndex_; }
  // The address handle attributes for reaching `remote` from this port.
  ibv_ah_attr routeTo(const QpAddress& remote) const;
  // The largest MTU both ends support.
  ibv_mtu pathMtu(const QpAddress& remote) const;

  // Registrar: the transport's own slabs and the registration cache go through these.
  StatusOr<MemoryKey> registerRegion(void* addr, size_t bytes) override;
  StatusOr<MemoryKey> registerRegion(void* addr, size_t bytes, int access);
  void deregisterRegion(const MemoryKey& key) override;
  // GPU memory (GPUDirect RDMA): `bytes` at `addr` through the dmabuf `fd` (at `offset` in
  // it) where fd >= 0 (ibv_reg_dmabuf_mr, addresses as the process sees them), else at
  // `addr` itself (ibv_reg_mr, which nvidia-peermem serves for GPU memory).
  StatusOr<MemoryKey> registerDeviceMemory(void* addr, size_t bytes, int fd, uint64_t offset, int access);
  // User buffers are registered through this cache.
  RegistrationCache& cache() { return *cache_; }
  // The cache sends from user memory go through (zero copy, user_sends.h), or null where
  // they are copied into the slots (describe() says why); payloads of at least
  // zeroCopyMinBytes() go from user memory.
  RegistrationCache* userCache() { return watch_ ? cache_.get() : nullptr; }
  size_t zeroCopyMinBytes() const { return zeroCopyMin_; }

  // Hellos: a datagram of kHelloBytes to the UD queue pair `to` (with `qkey`), and the
  // ones that arrived here since the last call. Neither blocks.
  QpAddress helloAddress() const { return addressOf(udQp_->qp_num, 0); }
  uint32_t helloQkey() const { return qkey_; }
  Status sendHello(const QpAddress& to, uint32_t qkey, const std::string& msg);
  Status receiveHellos(std::vector<std::string>* out);

  // Async events: queues registered here learn of the failures that concern them.
  void watch(VerbsQueue* q);
  void unwatch(VerbsQueue* q);
  // Reads pending async events (at most once per millisecond; any thread).
  void pollAsyncEvents();

 private:
  Device() = default;
  Status init(const TransportConfig& cfg, ibv_device* dev, int port, const ibv_port_attr& attr);
  Status initHelloQp();
  void initZeroCopy();
  Status postHelloRecv(int slot);
  Status reapHelloSends(bool wait);
  void dispatch(const ibv_async_event& ev);

  std::string name_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  int port_ = 0;
  ibv_port_attr portAttr_{};
  bool ethernet_ = false;
  int gidIndex_ = -1;
  ibv_gid gid_{};
  std::string gidWhy_;
  uint32_t qkey_ = 0;

  // Hello traffic.
  ibv_cq* udSendCq_ = nullptr;
  ibv_cq* udRecvCq_ = nullptr;
  ibv_qp* udQp_ = nullptr;
  PinnedBuffer udMemory_;
  MemoryKey udKey_;
  int udSendsOutstanding_ = 0;
  int udNextSend_ = 0;
  std::map<std::string, ibv_ah*> ahs_;  // by destination (LID + GID)

  std::unique_ptr<RegistrationCache> cache_;
  // Set when sends may go from user memory: the cache hears of every unmap through it.
  std::unique_ptr<UnmapWatch> watch_;
  std::string zeroCopyWhy_;  // why not, when watch_ is null
  size_t zeroCopyMin_ = 0;

  std::mutex asyncMu_;
  std::set<VerbsQueue*> watched_;
  std::atomic<int64_t> nextAsyncCheck_{0};
  std::string deviceFailure_;  // under asyncMu_
};

// An RC queue pair with its completion queue, completion channel and memory: the slab
// (the receiver's slot FIFO, or the sender's staging slots) and a control page (the
// sender's credit word; the receiver's credit sources).
class VerbsQueue final : public RdmaQueue {
 public:
  enum class Role { kSender, kReceiver };
  static StatusOr<std::unique_ptr<VerbsQueue>> create(Device* dev, Role role, int peer, int nslots, size_t slotBytes,
                                                      int numaNode);
  ~VerbsQueue() override;

  QpAddress address() const { return dev_->addressOf(qp_->qp_num, psn_); }
  uint64_t slabAddr() const { return reinterpret_cast<uintptr_t>(slab_.data()); }
  uint32_t slabRkey() const { return slabKey_.rkey; }
  uint64_t creditAddr() const { return reinterpret_cast<uintptr_t>(control_.data()); }
  uint32_t creditRkey() const { return controlKey_.rkey; }
  uint32_t qpn() const { return qp_->qp_num; }

  // Moves the queue pair through RTR to RTS towards `remote`; its writes go to
  // `remoteAddr` with `rkey` (the receiver's slab, or the sender's credit word).
  Status connect(const QpAddress& remote, uint64_t remoteAddr, uint32_t rkey);

  // RdmaQueue
  Status postWrite(size_t offset, size_t bytes, uint32_t imm) override;
  Status postWriteFrom(size_t offset, size_t headerBytes, const void* user, size_t bytes, uint32_t lkey,
                       uint32_t imm) override;
  Status postCredit(uint64_t released, uint32_t imm) override;
  StatusOr<int> poll(Completion* out, int max) override;
  uint64_t creditWord() const override;
  uint8_t* slab() override { return slab_.data(); }
  size_t slabBytes() const { return slab_.bytes(); }
  const char* asyncFailure() override;

  // Device messages (GPUDirect RDMA): this end's area of `bytes`, registered (remote-writable
  // on the receiver), and on the sender the receiver's. Unregistered by releaseArea and by
  // the destructor.
  Status registerArea(void* base, size_t bytes, int dmabufFd, uint64_t dmabufOffset);
  void setPeerArea(uint64_t addr, uint32_t rkey) {
    peerAreaAddr_ = addr;
    peerAreaRkey_ = rkey;
  }
  uint64_t areaAddr() const { return reinterpret_cast<uintptr_t>(area_); }
  uint32_t areaRkey() const { return areaKey_.rkey; }
  void releaseArea();
  Status postAreaWrite(size_t offset, size_t bytes) override;

  // Arms the completion channel: the fd to sleep on, or -1 when completions are already
  // waiting (then the caller must not sleep). disarm() consumes the channel's events.
  int arm();
  void disarm();

  // Called by Device when an async event concerns this queue (any thread, once).
  void fail(const std::string& why);
  ibv_qp* qp() const { return qp_; }
  ibv_cq* cq() const { return cq_; }

 private:
  VerbsQueue(Device* dev, Role role, int peer, int nslots) : dev_(dev), role_(role), peer_(peer), nslots_(nslots) {}
  Status init(size_t slotBytes, int numaNode);
  Status postRecv(int count);
  Status postWriteImm(uint64_t wrId, const void* local, size_t bytes, uint32_t lkey, uint64_t remote, uint32_t imm,
                      const char* what);
  Status postWriteSges(uint64_t wrId, ibv_sge* sges, int nsge, uint64_t remote, uint32_t imm, const char* what);
  Completion translate(const ibv_wc& wc);

  Device* dev_;
  Role role_;
  int peer_;
  int nslots_;
  uint32_t psn_ = 0;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  PinnedBuffer slab_;
  PinnedBuffer control_;
  MemoryKey slabKey_;
  MemoryKey controlKey_;
  uint64_t remoteAddr_ = 0;
  uint32_t remoteRkey_ = 0;
  uint8_t* area_ = nullptr;
  size_t areaBytes_ = 0;
  MemoryKey areaKey_;
  uint64_t peerAreaAddr_ = 0;
  uint32_t peerAreaRkey_ = 0;
  uint64_t creditPosts_ = 0;
  bool watched_ = false;
  std::vector<Completion> stash_;  // completions arm() found, returned by the next poll
  std::atomic<bool> failed_{false};
  std::string failure_;  // written once, before failed_ is set
};

// Calls ibv_fork_init() once per process (see ibverbs_device.cc for why).
void enableForkSafety();

}  // namespace braid::transport::ibverbs
