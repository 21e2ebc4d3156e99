#include "transports/loopback/loopback_transport.h"

#include <unistd.h>

#include <vector>

#include "transports/loopback/loopback_connection.h"
#include "transports/slot_fifo.h"

namespace braid::transport {
namespace {

// Each connection end holds a reference to the region through a heap-allocated
// shared_ptr, released when the connection is destroyed.
void releaseRegion(void* owner) { delete static_cast<std::shared_ptr<loopback::Region>*>(owner); }

std::unique_ptr<Connection> makeConnection(std::shared_ptr<loopback::Region> r, int peer, bool sender) {
  auto* owner = new std::shared_ptr<loopback::Region>(std::move(r));
  return std::make_unique<FifoConnection>((*owner)->mem, peer, sender, &releaseRegion, owner);
}

class LoopbackTransport : public Transport {
 public:
  explicit LoopbackTransport(const TransportConfig& cfg) : cfg_(cfg) {}
  ~LoopbackTransport() override {
    for (const auto& h : published_) loopback::unregisterRegion(h);
  }

  const char* name() const override { return "loopback"; }

  int canConnect(const PeerInfo& local, const PeerInfo& remote) const override {
    // Same process and session is all a loopback FIFO needs; the host id may differ when a
    // test world pretends to span several hosts.
    return sameProcess(local, remote) && local.nonce == remote.nonce ? 1000 : 0;
  }

  StatusOr<std::unique_ptr<Connection>> createRecv(int peer, int channel, std::string* blob) override {
    auto r = loopback::createRegion(cfg_.nslots, cfg_.slotBytes, cfg_.nonce, blob);
    if (!r) return Status(Code::kSystemError, "loopback: out of memory for a FIFO");
    published_.push_back(*blob);
    return makeConnection(std::move(r), peer, /*sender=*/false);
  }

  StatusOr<std::unique_ptr<Connection>> connectSend(int peer, int channel, const std::string& blob) override {
    BRAID_ASSIGN_OR_RETURN(auto r, loopback::lookupRegion(blob, cfg_.nonce));
    return makeConnection(std::move(r), peer, /*sender=*/true);
  }

  Status establish(Deadline) override {
    // Every sender holds its reference by now (the communicator runs a barrier first).
    for (const auto& h : published_) loopback::unregisterRegion(h);
    published_.clear();
    return Status::ok();
  }

 private:
  TransportConfig cfg_;
  std::vector<std::string> published_;
};

}  // namespace

std::unique_ptr<Transport> createLoopbackTransport(const TransportConfig& cfg) {
  return std::make_unique<LoopbackTransport>(cfg);
}

}  // namespace braid::transport
