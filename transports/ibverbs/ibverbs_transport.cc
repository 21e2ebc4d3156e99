#include "transports/ibverbs/ibverbs_transport.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "common/random.h"
#include "transports/ibverbs/ibverbs_device.h"
#include "transports/ibverbs/rdma_protocol.h"
#include "transports/ibverbs/user_sends.h"

namespace braid::transport::ibverbs {
namespace {

// How often a sender repeats its hello while the receiver has not answered: hellos are
// datagrams, and a receiver that polls late finds at most its receive queue's worth.
constexpr int64_t kHelloResendNanos = 100 * 1000 * 1000;

class IbverbsTransport;

class IbSendConnection final : public Connection {
 public:
  // `userCache`: where sends from user memory are registered (null: copied into the slots).
  IbSendConnection(IbverbsTransport* owner, std::unique_ptr<VerbsQueue> q, int peer, int nslots, size_t slotBytes,
                   RegistrationCache* userCache, size_t zeroCopyMin)
      : owner_(owner),
        q_(std::move(q)),
        proto_(q_.get(), peer, nslots, slotBytes),
        user_(&proto_, userCache, zeroCopyMin),
        peer_(peer),
        areaBytes_(static_cast<size_t>(nslots) * slotBytes) {}
  ~IbSendConnection() override;

  size_t slotBytes() const override { return proto_.slotBytes(); }
  Status reserveSend(Slot* s) override {
    Status st = proto_.reserve(s);
    user_.reap();
    return st;
  }
  Status postSend(const Slot& s, size_t bytes) override { return proto_.post(s, bytes); }
  // Zero copy (user_sends.h): the payload goes from `src` itself, registered, from
  // Device::zeroCopyMinBytes() up; smaller ones are copied into the reserved slot.
  bool sendsFromUser() const override { return user_.zeroCopy(); }
  Status postSendFrom(const Slot& s, const void* src, size_t bytes) override { return user_.post(s, src, bytes); }
  Status peekRecv(Slot*) override { return internalError("ibverbs: peekRecv on a send connection"); }
  Status releaseRecv(const Slot&) override { return internalError("ibverbs: releaseRecv on a send connection"); }
  Status progress() override {
    Status st = proto_.progress();
    user_.reap();
    return st;
  }
  bool flushed() const override { return proto_.flushed(); }
  // Sleeps on the completion channel while a credit or a write completion is awaited.
  WaitHandle waitHandle(bool) override {
    WaitHandle h;
    if (proto_.canReserve() && proto_.flushed()) return h;
    h.fd = q_->arm();
    h.fdEvents = h.fd >= 0 ? POLLIN : 0;
    return h;
  }
  void disarm(bool) override { q_->disarm(); }
  int peer() const override { return peer_; }
  // The staging slots every write goes out of (the direct GPU path registers them).
  MemoryRange slotMemory() const override { return {q_->slab(), q_->slabBytes()}; }

  // GPUDirect RDMA: the kernels write a device message's payload into this end's area; the
  // payload goes from there to the receiver's area, its header into the slot FIFO.
  size_t deviceAreaBytes() const override { return areaBytes_; }
  DeviceAreaKind deviceAreaKind() const override { return DeviceAreaKind::kRegistered; }
  StatusOr<std::string> registerDeviceArea(const DeviceMemory& m) override {
    BRAID_RETURN_IF_ERROR(q_->registerArea(m.base, areaBytes_, m.dmabufFd, m.dmabufOffset));
    return std::string();
  }
  Status attachPeerDeviceArea(const std::string& name) override {
    BRAID_ASSIGN_OR_RETURN(AreaName a, decodeAreaName(name, peer_, areaBytes_));
    q_->setPeerArea(a.addr, a.rkey);
    return Status::ok();
  }
  void setDeviceArea(void* base) override {
    area_ = static_cast<char*>(base);
    proto_.enableDeviceArea(base != nullptr);
  }
  void releaseDeviceArea() override {
    setDeviceArea(nullptr);
    q_->releaseArea();
  }
  void* deviceData(const Slot& s) const override { return area_ ? area_ + proto_.areaOffset(s) : nullptr; }
  Status postSendDevice(const Slot& s, size_t bytes) override { return proto_.postDevice(s, bytes); }

  bool ready() const { return proto_.ready(); }
  VerbsQueue* queue() { return q_.get(); }

 private:
  IbverbsTransport* owner_;
  std::unique_ptr<VerbsQueue> q_;
  SendProtocol proto_;
  UserSends user_;  // before q_ and proto_ go: lets go of what the queue's writes held
  int peer_;
  size_t areaBytes_;
  char* area_ = nullptr;
};

class IbRecvConnection final : public Connection {
 public:
  IbRecvConnection(IbverbsTransport* owner, std::unique_ptr<VerbsQueue> q, int peer, int nslots, size_t slotBytes)
      : owner_(owner),
        q_(std::move(q)),
        proto_(q_.get(), peer, nslots, slotBytes),
        peer_(peer),
        areaBytes_(static_cast<size_t>(nslots) * slotBytes) {}
  ~IbRecvConnection() override;

  size_t slotBytes() const override { return proto_.slotBytes(); }
  Status reserveSend(Slot*) override { return internalError("ibverbs: reserveSend on a receive connection"); }
  Status postSend(const Slot&, size_t) override { return internalError("ibverbs: postSend on a receive connection"); }
  Status peekRecv(Slot* s) override { return proto_.peek(s); }
  Status releaseRecv(const Slot& s) override { return proto_.release(s); }
  Status progress() override { return proto_.progress(); }
  WaitHandle waitHandle(bool) override {
    WaitHandle h;
    if (proto_.canPeek()) return h;
    h.fd = q_->arm();
    h.fdEvents = h.fd >= 0 ? POLLIN : 0;
    return h;
  }
  void disarm(bool) override { q_->disarm(); }
  int peer() const override { return peer_; }
  // The slot FIFO the peer writes into (the direct GPU path registers it).
  MemoryRange slotMemory() const override { return {q_->slab(), q_->slabBytes()}; }

  // GPUDirect RDMA: device messages' payloads land in this end's area, whose name (address
  // and remote key) the sender gets through the store.
  size_t deviceAreaBytes() const override { return areaBytes_; }
  DeviceAreaKind deviceAreaKind() const override { return DeviceAreaKind::kRegistered; }
  StatusOr<std::string> registerDeviceArea(const DeviceMemory& m) override {
    BRAID_RETURN_IF_ERROR(q_->registerArea(m.base, areaBytes_, m.dmabufFd, m.dmabufOffset));
    proto_.enableDeviceArea(true);
    return encodeAreaName(AreaName{q_->areaAddr(), q_->areaRkey(), areaBytes_});
  }
  void setDeviceArea(void* base) override { area_ = static_cast<char*>(base); }
  void releaseDeviceArea() override {
    area_ = nullptr;
    proto_.enableDeviceArea(false);
    q_->releaseArea();
  }
  void* deviceData(const Slot& s) const override { return area_ ? area_ + proto_.areaOffset(s) : nullptr; }

  // Connects to the sender a hello describes and tells it this side is ready.
  Status accept(const SenderHello& h) {
    BRAID_RETURN_IF_ERROR(q_->connect(h.data, h.creditAddr, h.creditRkey));
    return proto_.start();
  }
  VerbsQueue* queue() { return q_.get(); }

 private:
  IbverbsTransport* owner_;
  std::unique_ptr<VerbsQueue> q_;
  RecvProtocol proto_;
  int peer_;
  size_t areaBytes_;
  char* area_ = nullptr;
};

class IbverbsTransport final : public Transport {
 public:
  IbverbsTransport(const TransportConfig& cfg, std::unique_ptr<Device> dev) : cfg_(cfg), dev_(std::move(dev)) {}

  const char* name() const override { return "ibverbs"; }
  std::string describe() const override { return dev_->describe(); }
  int canConnect(const PeerInfo& local, const PeerInfo& remote) const override { return score(local, remote); }

  StatusOr<std::unique_ptr<Connection>> createRecv(int peer, int channel, std::string* blob) override;
  StatusOr<std::unique_ptr<Connection>> connectSend(int peer, int channel, const std::string& blob) override;
  Status establish(Deadline deadline) override;

  // A connection going away before establish() finished with it. Connections are not
  // destroyed while establish() runs (setup is single-threaded).
  void forget(const Connection* c) {
    pendingSend_.erase(std::remove_if(pendingSend_.begin(), pendingSend_.end(),
                                      [&](const PendingSend& p) { return p.conn == c; }),
                       pendingSend_.end());
    pendingRecv_.erase(std::remove_if(pendingRecv_.begin(), pendingRecv_.end(),
                                      [&](const PendingRecv& p) { return p.conn == c; }),
                       pendingRecv_.end());
  }

 private:
  struct PendingSend {
    IbSendConnection* conn;
    int peer;
    int channel;
    QpAddress helloTo;
    uint32_t qkey;
    std::string hello;
    int64_t lastSent;
  };
  struct PendingRecv {
    IbRecvConnection* conn;
    int peer;
    int channel;
    std::array<uint8_t, 16> challenge;
    std::string refused;  // why the last hello claiming to be this peer's was refused
  };
  Status takeHellos(bool* busy);

  TransportConfig cfg_;
  std::unique_ptr<Device> dev_;
  std::vector<PendingSend> pendingSend_;
  std::vector<PendingRecv> pendingRecv_;
};

IbSendConnection::~IbSendConnection() { owner_->forget(this); }
IbRecvConnection::~IbRecvConnection() { owner_->forget(this); }

StatusOr<std::unique_ptr<Connection>> IbverbsTransport::createRecv(int peer, int channel, std::string* blob) {
  BRAID_ASSIGN_OR_RETURN(auto q, VerbsQueue::create(dev_.get(), VerbsQueue::Role::kReceiver, peer, cfg_.nslots,
                                                    cfg_.slotBytes, cfg_.numaNode));
  RecvBlob b;
  b.nonce = cfg_.nonce;
  b.rank = cfg_.rank;
  b.channel = channel;
  b.nslots = static_cast<uint32_t>(cfg_.nslots);
  b.slotBytes = cfg_.slotBytes;
  b.slabAddr = q->slabAddr();
  b.slabRkey = q->slabRkey();
  b.data = q->address();
  b.hello = dev_->helloAddress();
  b.helloQkey = dev_->helloQkey();
  const std::string challenge = randomString(b.challenge.size());
  std::memcpy(b.challenge.data(), challenge.data(), b.challenge.size());
  auto conn = std::make_unique<IbRecvConnection>(this, std::move(q), peer, cfg_.nslots, cfg_.slotBytes);
  pendingRecv_.push_back(PendingRecv{conn.get(), peer, channel, b.challenge, ""});
  *blob = encodeRecvBlob(b);
  return std::unique_ptr<Connection>(std::move(conn));
}

StatusOr<std::unique_ptr<Connection>> IbverbsTransport::connectSend(int peer, int channel, const std::string& blob) {
  BRAID_ASSIGN_OR_RETURN(RecvBlob b, decodeRecvBlob(blob, peer, channel, cfg_.nonce, cfg_.nslots, cfg_.slotBytes));
  BRAID_ASSIGN_OR_RETURN(auto q, VerbsQueue::create(dev_.get(), VerbsQueue::Role::kSender, peer, cfg_.nslots,
                                                    cfg_.slotBytes, cfg_.numaNode));
  // Connected right away: the receiver's queue pair is described in full by the blob,
  // and nothing is written before the receiver's ready message says its side is up.
  BRAID_RETURN_IF_ERROR(q->connect(b.data, b.slabAddr, b.slabRkey));
  SenderHello h;
  h.nonce = cfg_.nonce;
  h.rank = cfg_.rank;
  h.channel = channel;
  h.recvQpn = b.data.qpn;
  h.data = q->address();
  h.creditAddr = q->creditAddr();
  h.creditRkey = q->creditRkey();
  if (cfg_.authKey.present) h.proof = helloProof(cfg_.authKey, h, peer, b.challenge);
  std::string hello = encodeHello(h);
  BRAID_RETURN_IF_ERROR(dev_->sendHello(b.hello, b.helloQkey, hello));
  auto conn = std::make_unique<IbSendConnection>(this, std::move(q), peer, cfg_.nslots, cfg_.slotBytes,
                                                 dev_->userCache(), dev_->zeroCopyMinBytes());
  pendingSend_.push_back(PendingSend{conn.get(), peer, channel, b.hello, b.helloQkey, std::move(hello), nowNanos()});
  return std::unique_ptr<Connection>(std::move(conn));
}

Status IbverbsTransport::takeHellos(bool* busy) {
  std::vector<std::string> hellos;
  BRAID_RETURN_IF_ERROR(dev_->receiveHellos(&hellos));
  for (const std::string& m : hellos) {
    StatusOr<SenderHello> h = decodeHello(m.data(), m.size(), cfg_.nonce);
    if (!h.isOk()) {
      // Not this job's business (a stranger's datagram), so not this job's failure.
      BRAID_INFO("%s; ignored", h.status().message().c_str());
      continue;
    }
    auto it = std::find_if(pendingRecv_.begin(), pendingRecv_.end(), [&](const PendingRecv& p) {
      return p.peer == h->rank && p.channel == h->channel && p.conn->queue()->qpn() == h->recvQpn;
    });
    if (it == pendingRecv_.end()) continue;  // a repeat of a hello already answered
    const std::string refused = checkHelloProof(cfg_.authKey, h.value(), cfg_.rank, it->challenge);
    if (!refused.empty()) {
      // The queue pair stays unconnected, for the real sender's hello.
      BRAID_SECURITY("ibverbs: refused a hello claiming to be rank %d on channel %d: %s", h->rank, h->channel,
                     refused.c_str());
      it->refused = refused;
      continue;
    }
    BRAID_RETURN_IF_ERROR(it->conn->accept(h.value()));
    pendingRecv_.erase(it);
    *busy = true;
  }
  return Status::ok();
}

Status IbverbsTransport::establish(Deadline deadline) {
  // A peer that died before its hello (or its ready) is named by the communicator's check.
  AbortCheckPacer aborted(cfg_.abortCheck);
  while (!pendingRecv_.empty() || !pendingSend_.empty()) {
    bool busy = false;
    if (!pendingRecv_.empty()) BRAID_RETURN_IF_ERROR(takeHellos(&busy));
    for (size_t i = 0; i < pendingSend_.size();) {
      PendingSend& p = pendingSend_[i];
      BRAID_RETURN_IF_ERROR(p.conn->progress());
      if (p.conn->ready()) {
        pendingSend_.erase(pendingSend_.begin() + static_cast<long>(i));
        busy = true;
        continue;
      }
      const int64_t now = nowNanos();
      if (now - p.lastSent > kHelloResendNanos) {
        BRAID_RETURN_IF_ERROR(dev_->sendHello(p.helloTo, p.qkey, p.hello));
        p.lastSent = now;
      }
      ++i;
    }
    if (pendingRecv_.empty() && pendingSend_.empty()) break;
    if (deadline.expired()) {
      if (!pendingRecv_.empty()) {
        const PendingRecv& p = pendingRecv_.front();
        return Status(Code::kTimeout,
                      "ibverbs: no hello from rank " + std::to_string(p.peer) + " for channel " +
                          std::to_string(p.channel) + " before the deadline" +
                          (p.refused.empty() ? "" : " (a hello claiming to be it was refused: " + p.refused + ")"),
                      p.peer);
      }
      const PendingSend& p = pendingSend_.front();
      return Status(Code::kTimeout,
                    "ibverbs: rank " + std::to_string(p.peer) + " did not accept the connection on channel " +
                        std::to_string(p.channel) + " before the deadline",
                    p.peer);
    }
    BRAID_RETURN_IF_ERROR(aborted.poll());
    if (!busy) usleep(50);
  }
  return Status::ok();
}

}  // namespace

StatusOr<std::unique_ptr<Transport>> createIbverbsTransport(const TransportConfig& cfg) {
  if (cfg.nslots < 1 || cfg.slotBytes == 0 || cfg.slotBytes >= (size_t{1} << 31)) {
    return invalidArgument("ibverbs: " + std::to_string(cfg.nslots) + " slots of " + std::to_string(cfg.slotBytes) +
                           " bytes cannot be carried");
  }
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Device> dev, Device::open(cfg));
  BRAID_INFO("ibverbs: using %s", dev->describe().c_str());
  return std::unique_ptr<Transport>(std::make_unique<IbverbsTransport>(cfg, std::move(dev)));
}

}  // namespace braid::transport::ibverbs
