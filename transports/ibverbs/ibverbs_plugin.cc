// libbraid-net-ibverbs.so: the RDMA verbs transport behind the plugin ABI. libbraid itself
// never links libibverbs; this library does, and braid loads it from its plugin folder.

#include <string>

#include "transports/ibverbs/ibverbs_transport.h"
#include "transports/plugin/plugin_export.h"

namespace {

const std::string& versionString() {
  static const std::string v = std::string("braid-net-ibverbs 1, rdma-core libibverbs ") + BRAID_IBVERBS_VERSION;
  return v;
}

}  // namespace

BRAID_EXPORT_TRANSPORT_PLUGIN("ibverbs", versionString().c_str(),
                              &braid::transport::ibverbs::createIbverbsTransport);
