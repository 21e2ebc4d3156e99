#pragma once
// Human-readable views of a graph: the path-type matrix (in the manner of
// `nvidia-smi topo -m`), the NICs nearest to each GPU, and Graphviz dot.

#include <string>

#include "topology/graph.h"

namespace braid::topology {

// The matrix of path types between every GPU, NIC and NUMA node of finalized `g`, with CPU
// and NUMA affinity columns for devices, a legend, and a NIC legend naming each NIC.
std::string formatPathMatrix(const Graph& g);

// For each GPU (or, on a GPU-less host, each NUMA node): its NUMA node and its nearest
// NICs with path type and bandwidth.
std::string formatNicAffinity(const Graph& g);

// Graphviz dot text for `g`: one vertex per node, one edge per link labelled with its
// type and bandwidth.
std::string formatDot(const Graph& g);

// Runs `dot -Tpng -o pngPath` on `dotText`. kSystemError when dot cannot be started or
// fails (Graphviz not installed). Blocks until dot exits.
[[nodiscard]] Status renderPng(const std::string& dotText, const std::string& pngPath);

}  // namespace braid::topology
