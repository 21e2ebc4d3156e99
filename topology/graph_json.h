#pragma once
// braid's own topology file: a JSON dump of a Graph that loads back to an equal graph.
//
//   {"format": "braid-topology", "version": 1, "host": "node17", "source": "hwloc",
//    "nodes": [{"type": "cpu", "name": "NUMA0", "numa": 0, "cpus": "0-31", ...}, ...],
//    "links": [{"a": 0, "b": 4, "type": "PCI", "bw": 24, "count": 1}, ...],
//    "paths": {"GPU0": {"GPU1": "NVL", "NIC0": "PIX", ...}, ...}}
//
// Node fields left at their defaults are omitted. "links" refer to nodes by their position
// in "nodes". "paths" is written for people and tools reading the dump; it is recomputed,
// not read, on load. Unknown keys are ignored so that newer dumps load in older builds.

#include <string>

#include "common/status.h"
#include "topology/graph.h"
#include "topology/json.h"

namespace braid::topology {

// The JSON document for finalized `g`; `withPaths` adds the "paths" table (for people,
// quadratic in the GPUs, NICs and NUMA nodes, so left out of what ranks exchange).
JsonValue graphToJsonValue(const Graph& g, bool withPaths = true);
// The JSON text for finalized `g`, indented for reading.
std::string graphToJson(const Graph& g);
// Writes graphToJson(g) to `path` (replacing it). kSystemError names the path.
[[nodiscard]] Status saveGraphJsonFile(const Graph& g, const std::string& path);

// Builds a finalized graph from a parsed dump; errors name `source` and the offending
// entry ("dump.json:12:7: nodes[3].numa: expected an integer").
[[nodiscard]] StatusOr<Graph> graphFromJsonValue(const JsonValue& doc, const std::string& source);
[[nodiscard]] StatusOr<Graph> parseGraphJson(const std::string& text, const std::string& source);
[[nodiscard]] StatusOr<Graph> loadGraphJsonFile(const std::string& path);

}  // namespace braid::topology
