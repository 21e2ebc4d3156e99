// Topology files (BRAID_TOPO_FILE): hwloc XML, NCCL topology XML, braid JSON, and the XML
// and JSON readers under them (topology/). First byte: which reader (0: whichever
// detectTopoFormat picks, as a rank does; 1: JSON; 2: XML; 3: NCCL XML; 4: braid JSON;
// 5: hwloc XML). Properties: no crash, memory bounded by the graph limits, and a graph that
// loads from braid JSON saves to JSON that loads again to the same JSON.
//
// hwloc XML goes through libhwloc's own loader after braid's well-formedness check. Under
// libFuzzer that loader is fuzzed only with BRAID_FUZZ_HWLOC=1: Debian's hwloc 2.9 crashes
// (a SEGV in hwloc_bitmap_compare_first) and leaks on some mutated files, which is hwloc's
// code, not braid's, and would stop every run at once. The seed replay always loads them.

#include <cstdlib>
#include <string>

#include "fuzz_check.h"
#include "topology/discover.h"
#include "topology/graph_json.h"
#include "topology/hwloc_graph.h"
#include "topology/json.h"
#include "topology/nccl_xml.h"
#include "topology/xml.h"

using namespace braid;
using namespace braid::topology;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
#ifdef BRAID_FUZZ_REPLAY
  static const bool hwloc = true;
#else
  static const bool hwloc = std::getenv("BRAID_FUZZ_HWLOC") != nullptr;
#endif
  switch (data[0] % 6) {
    case 0:
      if (!hwloc && detectTopoFormat(text) == TopoFormat::kHwlocXml) (void)parseXml(text, "fuzz");
      else (void)parseTopology(text, "fuzz");
      break;
    case 1: (void)parseJson(text, "fuzz"); break;
    case 2: (void)parseXml(text, "fuzz"); break;
    case 3: (void)parseNcclTopo(text, "fuzz"); break;
    case 4: {
      auto g = parseGraphJson(text, "fuzz");
      if (g.isOk()) {
        const std::string once = graphToJson(g.value());
        auto again = parseGraphJson(once, "fuzz");
        FUZZ_CHECK(again.isOk());
        FUZZ_CHECK(graphToJson(again.value()) == once);
      }
      break;
    }
    case 5:
      if (hwloc) (void)parseHwlocXml(text, "fuzz");
      else (void)parseXml(text, "fuzz");
      break;
  }
  return 0;
}
