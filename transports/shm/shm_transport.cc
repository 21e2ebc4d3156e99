#include "transports/shm/shm_transport.h"

#include <sys/mman.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/shm_names.h"
#include "transports/shm/shm_connection.h"
#include "transports/slot_fifo.h"

namespace braid::transport {
namespace {

void releaseSegment(void* owner) { delete static_cast<shm::Segment*>(owner); }

class ShmTransport : public Transport {
 public:
  explicit ShmTransport(const TransportConfig& cfg) : cfg_(cfg) {}
  ~ShmTransport() override { unlinkCreated(); }

  const char* name() const override { return "shm"; }

  int canConnect(const PeerInfo& local, const PeerInfo& remote) const override {
    // One host is not enough: a container with IPC of its own has a /dev/shm of its own.
    return local.hostId == remote.hostId && shareDevShm(local, remote) && local.nonce == remote.nonce ? 100 : 0;
  }

  StatusOr<std::unique_ptr<Connection>> createRecv(int peer, int channel, std::string* blob) override {
    // A random name, created exclusively: nobody can hold it in advance (the job's nonce,
    // which anyone who reads the store knows, is not part of it).
    BRAID_ASSIGN_OR_RETURN(shm::Segment * seg, shm::createSegment(&newSegmentName, cfg_.nslots, cfg_.slotBytes,
                                                                  cfg_.nonce, cfg_.numaNode));
    created_.push_back(seg->name);
    *blob = seg->name;
    auto conn = std::make_unique<FifoConnection>(seg->mem, peer, /*sender=*/false, &releaseSegment, seg);
    if (refs_) conn->enableRefs();
    return std::unique_ptr<Connection>(std::move(conn));
  }

  StatusOr<std::unique_ptr<Connection>> connectSend(int peer, int channel, const std::string& blob) override {
    if (blob.size() > 200 || blob[0] != '/' || !isSegmentName(blob))
      return Status(Code::kRemoteError, "shm: malformed segment name from rank " + std::to_string(peer), peer);
    BRAID_ASSIGN_OR_RETURN(shm::Segment * seg, shm::openSegment(blob, cfg_.nonce));
    // This rank is the segment's only other user and has it mapped: the name can go now
    // (the receiver's unlink in establish() then finds it gone), which leaves nothing in
    // /dev/shm if the receiver dies before then.
    shm_unlink(blob.c_str());
    auto conn = std::make_unique<FifoConnection>(seg->mem, peer, /*sender=*/true, &releaseSegment, seg);
    if (refs_) conn->enableRefs();
    return std::unique_ptr<Connection>(std::move(conn));
  }

  Status establish(Deadline) override {
    // The communicator runs a barrier after every connectSend, so every sender has mapped
    // its segment: the names can go.
    unlinkCreated();
    return Status::ok();
  }

 private:
  void unlinkCreated() {
    for (const auto& n : created_) shm_unlink(n.c_str());
    created_.clear();
  }

  TransportConfig cfg_;
  std::vector<std::string> created_;
  // Large sends as references to the sender's memory (FifoConnection::enableRefs), unless
  // BRAID_SHM_CMA=0: one copy per message instead of two, where the kernel lets ranks read
  // each other's memory (process_vm_readv: same user, and ptrace allowed between them).
  const bool refs_ = [] {
    const char* v = std::getenv("BRAID_SHM_CMA");
    return !(v && std::strcmp(v, "0") == 0);
  }();
};

}  // namespace

std::unique_ptr<Transport> createShmTransport(const TransportConfig& cfg) {
  return std::make_unique<ShmTransport>(cfg);
}

}  // namespace braid::transport
