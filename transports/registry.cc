// The one list of transports. Selection per peer pair takes the highest canConnect score
// (loopback inside a process, shm inside a host, then RDMA > UCX > tcp across hosts, as each
// scores itself); BRAID_TRANSPORT overrides. Built-ins come first, then the plugins.

#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "common/log.h"
#include "transports/loopback/loopback_transport.h"
#include "transports/plugin/plugin_loader.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/transport.h"

namespace braid::transport {
namespace {

template <std::unique_ptr<Transport> (*F)(const TransportConfig&)>
TransportFactory builtIn(const char* name) {
  TransportFactory f;
  f.name = name;
  f.create = [](const TransportConfig& cfg) -> StatusOr<std::unique_ptr<Transport>> { return F(cfg); };
  return f;
}

struct Registry {
  std::vector<TransportFactory> factories;
  std::vector<PluginFailure> failures;
};

const Registry& loaded() {
  static const Registry* r = [] {
    auto* reg = new Registry();
    reg->factories = {
        builtIn<&createLoopbackTransport>("loopback"),
        builtIn<&createShmTransport>("shm"),
        builtIn<&createTcpTransport>("tcp"),
    };
    // Read here rather than through the communicator's config: the registry is process-wide
    // and also serves braid-info and the test suites. Both knobs are in the config table.
    const char* list = std::getenv("BRAID_TRANSPORT_PLUGIN");
    // The files the user named. One of them that does not load is always worth a line; one
    // found in the plugin folder only at BRAID_DEBUG=WARN (braid-info lists them all).
    const std::vector<std::string> listed = plugin::splitPluginList(list);
    const std::set<std::string> named(listed.begin(), listed.end());
    for (const std::string& file : plugin::pluginFiles(list, std::getenv("BRAID_PLUGIN_DIR"))) {
      auto f = plugin::loadPlugin(file);
      std::string why;
      if (f.isOk()) {
        for (const TransportFactory& existing : reg->factories) {
          if (existing.name == std::string(f->name)) why = "transport '" + existing.origin + "' already has that name";
        }
        if (why.empty()) {
          reg->factories.push_back(std::move(f).value());
          continue;
        }
      } else {
        why = f.status().message();
      }
      reg->failures.push_back(PluginFailure{plugin::nameFromFile(file), file, why});
      // When BRAID_TRANSPORT asks for this transport, its init fails with `why` instead.
      const char* wanted = std::getenv("BRAID_TRANSPORT");
      if (wanted && plugin::nameFromFile(file) == wanted) continue;
      if (named.count(file))
        logf(LogLevel::kWarn, "transport plugin %s (named in BRAID_TRANSPORT_PLUGIN) not loaded, going on without it: %s",
             file.c_str(), why.c_str());
      else
        BRAID_WARN("transport plugin %s not loaded: %s", file.c_str(), why.c_str());
    }
    return reg;
  }();
  return *r;
}

}  // namespace

const std::vector<TransportFactory>& registry() { return loaded().factories; }

const std::vector<PluginFailure>& pluginFailures() { return loaded().failures; }

std::string availableTransports() {
  std::string s;
  for (const TransportFactory& f : registry()) {
    if (!s.empty()) s += ", ";
    s += f.name;
    if (f.origin != "built in") s += " (plugin)";
  }
  return s;
}

}  // namespace braid::transport
