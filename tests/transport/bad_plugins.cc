// Plugins that are wrong on purpose, one per build flag, for the loader's and the
// communicator's error paths:
//   BRAID_BAD_PLUGIN_VERSION    exports the v1 symbol with an ABI version braid does not speak
//   BRAID_BAD_PLUGIN_NO_SYMBOL  exports no braidTransportPlugin_v1 at all
//   BRAID_BAD_PLUGIN_FAILING    a working tcp underneath, except on the rank named by
//                               BRAID_TEST_FAIL_RANK, where BRAID_TEST_FAIL_MODE picks the fault:
//                               "init" (init fails), "recv" (create_recv fails) or "blob"
//                               (create_recv hands out a malformed blob); or "slow": the
//                               named rank takes BRAID_TEST_SLOW_MS to start its transport,
//                               and every rank's establish needs that long before its
//                               deadline, as a handshake that waits for its peers does

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "transports/plugin/plugin_export.h"
#include "transports/tcp/tcp_transport.h"

namespace {

using braid::Code;
using braid::Status;
using braid::StatusOr;
using braid::transport::Connection;
using braid::transport::PeerInfo;
using braid::transport::Transport;
using braid::transport::TransportConfig;

// A test knob, read by the test plugin alone.
std::string knob(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

class FailingTransport final : public Transport {
 public:
  FailingTransport(std::unique_ptr<Transport> tcp, bool failing, std::string mode)
      : tcp_(std::move(tcp)), failing_(failing), mode_(std::move(mode)) {}
  const char* name() const override { return "failing"; }
  int canConnect(const PeerInfo& l, const PeerInfo& r) const override { return tcp_->canConnect(l, r); }
  StatusOr<std::unique_ptr<Connection>> createRecv(int peer, int channel, std::string* blob) override {
    if (failing_ && mode_ == "recv") return Status(Code::kSystemError, "create_recv refused on purpose");
    auto c = tcp_->createRecv(peer, channel, blob);
    if (failing_ && mode_ == "blob") *blob = "\x01garbage";
    return c;
  }
  StatusOr<std::unique_ptr<Connection>> connectSend(int peer, int channel, const std::string& blob) override {
    return tcp_->connectSend(peer, channel, blob);
  }
  braid::Status establish(braid::Deadline d) override {
    if (mode_ == "slow") {
      const int ms = slowMillis();
      const int left = d.remainingMillis(ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(left));
      if (left < ms)
        return Status(Code::kTimeout, "establish needed " + std::to_string(ms) + " ms; its deadline came first");
    }
    return tcp_->establish(d);
  }
  static int slowMillis() { return std::atoi(knob("BRAID_TEST_SLOW_MS").c_str()); }

 private:
  std::unique_ptr<Transport> tcp_;
  bool failing_;
  std::string mode_;
};

[[maybe_unused]] StatusOr<std::unique_ptr<Transport>> createFailing(const TransportConfig& cfg) {
  const std::string rank = knob("BRAID_TEST_FAIL_RANK");
  const bool failing = !rank.empty() && std::atoi(rank.c_str()) == cfg.rank;
  const std::string mode = knob("BRAID_TEST_FAIL_MODE");
  if (failing && mode == "init") return Status(Code::kSystemError, "init refused on purpose");
  if (failing && mode == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(FailingTransport::slowMillis()));
  return std::unique_ptr<Transport>(
      new FailingTransport(braid::transport::createTcpTransport(cfg), failing, mode));
}

[[maybe_unused]] StatusOr<std::unique_ptr<Transport>> createTcp(const TransportConfig& cfg) {
  return braid::transport::createTcpTransport(cfg);
}

}  // namespace

#if defined(BRAID_BAD_PLUGIN_VERSION)
namespace {
braidTransportPlugin_v1_t futureTable() {
  braidTransportPlugin_v1_t t = braid::transport::plugin::exportTableV1("bad-version", "wrong ABI", &createTcp);
  t.abi_version = 99;
  return t;
}
}  // namespace
extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v1_t braidTransportPlugin_v1 =
    futureTable();
#elif defined(BRAID_BAD_PLUGIN_NO_SYMBOL)
extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v1_t braidTransportPlugin_v0 =
    braid::transport::plugin::exportTableV1("no-symbol", "wrong symbol", &createTcp);
#elif defined(BRAID_BAD_PLUGIN_FAILING)
// The first ABI version, so loading and running a v1 plugin stays tested.
BRAID_EXPORT_TRANSPORT_PLUGIN_V1("failing", "faults on demand (tests)", &createFailing);
#endif
