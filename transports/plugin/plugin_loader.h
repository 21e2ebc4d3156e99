#pragma once
// The host side of the transport ABI: finds plugin libraries, checks what they export, and
// wraps their table (v6 down to v1) as a Transport so the communicator, the conformance suite and
// braid-info use a plugin exactly like a built-in transport.
//
// Where plugins come from, in order (a file name seen once is not loaded again):
//   1. BRAID_TRANSPORT_PLUGIN: ':'-separated paths to plugin libraries;
//   2. the plugin folder: BRAID_PLUGIN_DIR when set ("none" turns the folder off), else
//      <folder of libbraid.so>/braid, the installed <libdir>/braid, and, for programs run
//      from a build tree, that tree's lib/braid. Every libbraid-net-<name>.so there.

#include <string>
#include <vector>

#include "braid/transport_plugin.h"
#include "common/status.h"
#include "transports/transport.h"

namespace braid::transport::plugin {

// Opens `file` and resolves its braidTransportPlugin_v10 table, else its v9, v8, v7, v6, v5, v4,
// v3, v2 or v1 table. Fails, naming the file, when it cannot be opened, lacks all ten symbols, or speaks
// an ABI version braid does not.
StatusOr<TransportFactory> loadPlugin(const std::string& file);

// A factory over a table already in memory (what loadPlugin ends with; tests use it to
// feed the adapter deliberately broken tables). `v2` is the whole table when `table` is
// its base, nullptr for a v1 plugin; `v3` likewise, when `v2` is its base, and `v4` when `v3`
// is, `v5` when `v4` is, `v6` when `v5` is, `v7` when `v6` is, `v8` when `v7` is, `v9` when `v8` is, and `v10` when `v9` is. A v3 plugin is given the job's key (TransportConfig::authKey) at
// init; a v4 plugin's connections may carry messages larger than a slot
// (Connection::maxMessageBytes); a v5 plugin's tell where their slots live
// (Connection::slotMemory); a v6 plugin hears which peers failed (Transport::peerFailed); a
// v7 plugin hears of receives ahead (Connection::expectRecv); a v8 plugin is asked which
// peers it saw fail (Transport::sawPeerFail); a v9 plugin's connections may reduce payloads as
// they arrive (Connection::peekRecvReduce); a v10 plugin's connections may carry device calls
// through device areas registered with the NIC (Connection::deviceAreaKind).
TransportFactory factoryFromTable(const braidTransportPlugin_v1_t* table, const std::string& origin,
                                  const braidTransportPlugin_v2_t* v2 = nullptr,
                                  const braidTransportPlugin_v3_t* v3 = nullptr,
                                  const braidTransportPlugin_v4_t* v4 = nullptr,
                                  const braidTransportPlugin_v5_t* v5 = nullptr,
                                  const braidTransportPlugin_v6_t* v6 = nullptr,
                                  const braidTransportPlugin_v7_t* v7 = nullptr,
                                  const braidTransportPlugin_v8_t* v8 = nullptr,
                                  const braidTransportPlugin_v9_t* v9 = nullptr,
                                  const braidTransportPlugin_v10_t* v10 = nullptr);

// The host id a plugin is given for `remote`, seen from `local`: its own, or, where the two
// are on one host but in different network namespaces (ip netns, containers with networks
// of their own under one host name), that id with the namespace added, so that a plugin
// that reaches its host's peers over loopback (UCX's choice of devices) treats it as another
// host.
std::string pluginHostId(const PeerInfo& local, const PeerInfo& remote);

// The plugin files to load, from the two settings above (nullptr = unset).
std::vector<std::string> pluginFiles(const char* pluginList, const char* pluginDir);

// The paths of a BRAID_TRANSPORT_PLUGIN list, as written ("a:b" -> {"a", "b"}; empty
// entries dropped); nullptr = none.
std::vector<std::string> splitPluginList(const char* pluginList);

// The transport name a plugin file stands for: libbraid-net-<name>.so -> <name>.
std::string nameFromFile(const std::string& file);

}  // namespace braid::transport::plugin
