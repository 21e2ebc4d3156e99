// braid's tcp transport built as a plugin library (libbraid-net-tcp-abi.so, test builds
// only), so the conformance suite exercises the plugin ABI itself, both the export side and
// the loader's adapter, against a transport whose behaviour it already knows.

#include "transports/plugin/plugin_export.h"
#include "transports/tcp/tcp_transport.h"

namespace {

braid::StatusOr<std::unique_ptr<braid::transport::Transport>> create(const braid::transport::TransportConfig& cfg) {
  return braid::transport::createTcpTransport(cfg);
}

}  // namespace

BRAID_EXPORT_TRANSPORT_PLUGIN("tcp-abi", "braid tcp behind the plugin ABI (tests)", &create);
