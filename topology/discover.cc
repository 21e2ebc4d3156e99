#include "topology/discover.h"

#include <unistd.h>

#include <cctype>

#include "common/log.h"
#include "topology/graph_json.h"
#include "topology/hwloc_graph.h"
#include "topology/nccl_xml.h"
#include "topology/xml.h"

namespace braid::topology {

StatusOr<Graph> discoverLocal(const DiscoverOptions& options, DiscoverReport* report) {
  DiscoverReport local;
  DiscoverReport* rep = report != nullptr ? report : &local;
  *rep = DiscoverReport{};
  BRAID_ASSIGN_OR_RETURN(Graph g, discoverHwloc());
  if (options.useNvml) BRAID_RETURN_IF_ERROR(addNvmlInfo(&g, &rep->nvml, options.sysRoot));
  if (options.useSysfs) BRAID_RETURN_IF_ERROR(addSysfsNetInfo(&g, &rep->sysfs, options.sysRoot));
  if (g.host().empty()) {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) == 0) g.setHost(host);
  }
  BRAID_INFO("topology: %zu GPUs, %zu NICs, %zu NUMA nodes (NVML %s)", g.gpus().size(), g.nics().size(),
             g.cpus().size(), rep->nvml.loaded ? "used" : "absent");
  return g;
}

const char* topoFormatName(TopoFormat f) {
  switch (f) {
    case TopoFormat::kHwlocXml: return "hwloc XML";
    case TopoFormat::kNcclXml: return "NCCL topology XML";
    case TopoFormat::kBraidJson: return "braid JSON";
    default: return "unknown";
  }
}

TopoFormat detectTopoFormat(const std::string& text) {
  size_t i = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for (;;) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i >= text.size()) return TopoFormat::kUnknown;
    if (text[i] == '{') return TopoFormat::kBraidJson;
    if (text[i] != '<') return TopoFormat::kUnknown;
    // Skip the prolog: <?xml ...?>, comments and DOCTYPE, to reach the root element.
    if (text.compare(i, 2, "<?") == 0) {
      size_t e = text.find("?>", i);
      if (e == std::string::npos) return TopoFormat::kUnknown;
      i = e + 2;
    } else if (text.compare(i, 4, "<!--") == 0) {
      size_t e = text.find("-->", i);
      if (e == std::string::npos) return TopoFormat::kUnknown;
      i = e + 3;
    } else if (text.compare(i, 2, "<!") == 0) {
      size_t e = text.find('>', i);
      if (e == std::string::npos) return TopoFormat::kUnknown;
      i = e + 1;
    } else {
      size_t s = i + 1, e = s;
      while (e < text.size() && (std::isalnum(static_cast<unsigned char>(text[e])) || text[e] == '_' || text[e] == '-')) ++e;
      std::string root = text.substr(s, e - s);
      if (root == "topology") return TopoFormat::kHwlocXml;
      if (root == "system") return TopoFormat::kNcclXml;
      return TopoFormat::kUnknown;
    }
  }
}

StatusOr<Graph> parseTopology(const std::string& text, const std::string& source) {
  switch (detectTopoFormat(text)) {
    case TopoFormat::kHwlocXml: return parseHwlocXml(text, source);
    case TopoFormat::kNcclXml: return parseNcclTopo(text, source);
    case TopoFormat::kBraidJson: return parseGraphJson(text, source);
    case TopoFormat::kUnknown: break;
  }
  // Let the XML reader say what is wrong when it looks like XML at all.
  auto xml = parseXml(text, source);
  if (!xml.isOk()) return xml.status();
  return invalidArgument(source + ":" + std::to_string(xml.value().line) + ": root element <" + xml.value().name +
                         "> is neither hwloc's <topology> nor NCCL's <system>, and the file is not braid JSON");
}

StatusOr<Graph> loadTopologyFile(const std::string& path) {
  std::string text;
  BRAID_RETURN_IF_ERROR(readFile(path, &text));
  return parseTopology(text, path);
}

}  // namespace braid::topology
