#pragma once
// The plugin side of the transport ABI: turns a C++ Transport into the versioned C table
// (include/braid/transport_plugin.h) that a plugin library exports. braid's own plugins
// (ucx, ibverbs) and the test build of tcp behind the ABI are written against the same
// Transport/Connection classes as the built-in transports and exported with one line:
//
//   BRAID_EXPORT_TRANSPORT_PLUGIN("ucx", "braid-net-ucx 0.1 (UCX 1.13.1)", &createUcxTransport);
//
// The table's functions convert Status to braidPluginResult_t and never let an exception or
// a null pointer cross the boundary.

#include <memory>

#include "braid/transport_plugin.h"
#include "common/status.h"
#include "transports/transport.h"

namespace braid::transport::plugin {

using CreateFn = StatusOr<std::unique_ptr<Transport>> (*)(const TransportConfig& cfg);

// Builds the table for one transport; a library exports one (v10; v9 to v1 for a library
// that must also load into an older braid). Only a v3 or later transport is given the job's
// key, only a v4 or later one may carry messages larger than a slot, only a v5 one's slots
// reach the direct GPU path (Connection::slotMemory), only a v6 one hears of failed peers
// (Transport::peerFailed), only a v7 one of receives ahead (Connection::expectRecv), and
// only a v8 one is asked which peers it saw fail (Transport::sawPeerFail), and only a v9 one
// reduces payloads as they arrive (Connection::peekRecvReduce), and only a v10 one's
// registered device areas carry device calls (GPUDirect RDMA, Connection::deviceAreaKind).
braidTransportPlugin_v10_t exportTableV10(const char* name, const char* version, CreateFn create);
braidTransportPlugin_v9_t exportTableV9(const char* name, const char* version, CreateFn create);
braidTransportPlugin_v8_t exportTableV8(const char* name, const char* version, CreateFn create);
braidTransportPlugin_v7_t exportTableV7(const char* name, const char* version, CreateFn create);
braidTransportPlugin_v6_t exportTableV6(const char* name, const char* version, CreateFn create);
braidTransportPlugin_v5_t exportTableV5(const char* name, const char* version, CreateFn create);
braidTransportPlugin_v4_t exportTableV4(const char* name, const char* version, CreateFn create);
braidTransportPlugin_v3_t exportTableV3(const char* name, const char* version, CreateFn create);
braidTransportPlugin_v2_t exportTableV2(const char* name, const char* version, CreateFn create);
braidTransportPlugin_v1_t exportTableV1(const char* name, const char* version, CreateFn create);

// The TransportConfig a v1 config describes.
TransportConfig configFromV1(const braidTransportConfig_v1& c);

}  // namespace braid::transport::plugin

#define BRAID_EXPORT_TRANSPORT_PLUGIN(NAME, VERSION, CREATE)                                 \
  extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v10_t        \
      braidTransportPlugin_v10 = ::braid::transport::plugin::exportTableV10(NAME, VERSION, CREATE)

// The ninth ABI: no device areas.
#define BRAID_EXPORT_TRANSPORT_PLUGIN_V9(NAME, VERSION, CREATE)                              \
  extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v9_t         \
      braidTransportPlugin_v9 = ::braid::transport::plugin::exportTableV9(NAME, VERSION, CREATE)

// The eighth ABI: no reduction on arrival.
#define BRAID_EXPORT_TRANSPORT_PLUGIN_V8(NAME, VERSION, CREATE)                              \
  extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v8_t         \
      braidTransportPlugin_v8 = ::braid::transport::plugin::exportTableV8(NAME, VERSION, CREATE)

// The seventh ABI: receives ahead, no word of the failures a transport saw.
#define BRAID_EXPORT_TRANSPORT_PLUGIN_V7(NAME, VERSION, CREATE)                              \
  extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v7_t         \
      braidTransportPlugin_v7 = ::braid::transport::plugin::exportTableV7(NAME, VERSION, CREATE)

// The sixth ABI: failed peers, no receives ahead.
#define BRAID_EXPORT_TRANSPORT_PLUGIN_V6(NAME, VERSION, CREATE)                              \
  extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v6_t         \
      braidTransportPlugin_v6 = ::braid::transport::plugin::exportTableV6(NAME, VERSION, CREATE)

// The fifth ABI: slot memory, no word of failed peers.
#define BRAID_EXPORT_TRANSPORT_PLUGIN_V5(NAME, VERSION, CREATE)                              \
  extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v5_t         \
      braidTransportPlugin_v5 = ::braid::transport::plugin::exportTableV5(NAME, VERSION, CREATE)

// The fourth ABI: large messages, no slot memory.
#define BRAID_EXPORT_TRANSPORT_PLUGIN_V4(NAME, VERSION, CREATE)                              \
  extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v4_t         \
      braidTransportPlugin_v4 = ::braid::transport::plugin::exportTableV4(NAME, VERSION, CREATE)

// The third ABI: the job key, every message within a slot.
#define BRAID_EXPORT_TRANSPORT_PLUGIN_V3(NAME, VERSION, CREATE)                              \
  extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v3_t         \
      braidTransportPlugin_v3 = ::braid::transport::plugin::exportTableV3(NAME, VERSION, CREATE)

// The second ABI: zero copy, no job key.
#define BRAID_EXPORT_TRANSPORT_PLUGIN_V2(NAME, VERSION, CREATE)                              \
  extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v2_t         \
      braidTransportPlugin_v2 = ::braid::transport::plugin::exportTableV2(NAME, VERSION, CREATE)

// The first ABI only: no zero copy, and the transport must carry whole 64-bit tags.
#define BRAID_EXPORT_TRANSPORT_PLUGIN_V1(NAME, VERSION, CREATE)                              \
  extern "C" __attribute__((visibility("default"))) const braidTransportPlugin_v1_t         \
      braidTransportPlugin_v1 = ::braid::transport::plugin::exportTableV1(NAME, VERSION, CREATE)
