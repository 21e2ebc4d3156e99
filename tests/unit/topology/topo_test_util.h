#pragma once
// Helpers shared by the topology tests: fixture paths and loading with a clear failure.

#include <string>

#include "support/catch.h"
#include "topology/discover.h"
#include "topology/graph.h"

namespace braid::topology::testing {

inline std::string fixture(const std::string& name) { return std::string(BRAID_TOPO_FIXTURES) + "/" + name; }

// Loads a fixture of any format; fails the test with the loader's message otherwise.
inline Graph load(const std::string& name) {
  auto g = loadTopologyFile(fixture(name));
  INFO(g.status().toString());
  REQUIRE(g.isOk());
  return std::move(g).value();
}

inline int gpu(const Graph& g, int i) { return g.gpus().at(i); }
inline int nic(const Graph& g, int i) { return g.nics().at(i); }

}  // namespace braid::topology::testing
