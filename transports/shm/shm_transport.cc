#include "transports/shm/shm_transport.h"

#include <sys/mman.h>

#include <cinttypes>
#include <cstdio>
#include <vector>

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
    return local.hostId == remote.hostId && local.nonce == remote.nonce ? 100 : 0;
  }

  StatusOr<std::unique_ptr<Connection>> createRecv(int peer, int channel, std::string* blob) override {
    char name[96];
    // The nonce makes names unguessable across jobs and unique within one.
    std::snprintf(name, sizeof(name), "/braid-%016" PRIx64 "-%d-%d-%d", cfg_.nonce, cfg_.rank, peer, channel);
    BRAID_ASSIGN_OR_RETURN(shm::Segment * seg,
                           shm::createSegment(name, cfg_.nslots, cfg_.slotBytes, cfg_.nonce, cfg_.numaNode));
    created_.push_back(name);
    *blob = name;
    return std::unique_ptr<Connection>(
        new FifoConnection(seg->mem, peer, /*sender=*/false, &releaseSegment, seg));
  }

  StatusOr<std::unique_ptr<Connection>> connectSend(int peer, int channel, const std::string& blob) override {
    if (blob.size() > 200 || blob.rfind("/braid-", 0) != 0)
      return Status(Code::kRemoteError, "shm: malformed segment name from rank " + std::to_string(peer), peer);
    BRAID_ASSIGN_OR_RETURN(shm::Segment * seg, shm::openSegment(blob, cfg_.nonce));
    return std::unique_ptr<Connection>(
        new FifoConnection(seg->mem, peer, /*sender=*/true, &releaseSegment, seg));
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
};

}  // namespace

std::unique_ptr<Transport> createShmTransport(const TransportConfig& cfg) {
  return std::make_unique<ShmTransport>(cfg);
}

}  // namespace braid::transport
