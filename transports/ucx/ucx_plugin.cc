// libbraid-net-ucx.so: the UCX transport behind the plugin ABI. libbraid itself never links
// UCX; this library does, and braid loads it from its plugin folder.

#include <string>

#include "transports/plugin/plugin_export.h"
#include "transports/ucx/ucx_transport.h"

namespace {

const std::string& versionString() {
  static const std::string v = std::string("braid-net-ucx 1, UCX ") + braid::transport::ucx::ucxVersion();
  return v;
}

}  // namespace

BRAID_EXPORT_TRANSPORT_PLUGIN("ucx", versionString().c_str(), &braid::transport::ucx::createUcxTransport);
