#include "topology/graph_json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "topology/xml.h"

namespace braid::topology {

namespace {

constexpr int kFormatVersion = 1;

JsonValue str(const std::string& s) { return JsonValue::string(s); }
JsonValue num(double d) { return JsonValue::number(d); }

}  // namespace

JsonValue graphToJsonValue(const Graph& g, bool withPaths) {
  JsonValue doc = JsonValue::object();
  doc.set("format", str("braid-topology"));
  doc.set("version", num(kFormatVersion));
  if (!g.host().empty()) doc.set("host", str(g.host()));
  if (!g.source().empty()) doc.set("source", str(g.source()));
  JsonValue nodes = JsonValue::array();
  const Node def;
  for (const Node& n : g.nodes()) {
    JsonValue o = JsonValue::object();
    o.set("type", str(nodeTypeName(n.type)));
    o.set("name", str(n.name));
    if (!n.busId.empty()) o.set("busId", str(n.busId));
    if (n.numa != def.numa) o.set("numa", num(n.numa));
    if (!n.cpus.empty()) o.set("cpus", str(n.cpus));
    if (!n.arch.empty()) o.set("arch", str(n.arch));
    if (!n.vendor.empty()) o.set("vendor", str(n.vendor));
    if (n.cpuFamily != def.cpuFamily) o.set("cpuFamily", num(n.cpuFamily));
    if (n.cpuModel != def.cpuModel) o.set("cpuModel", num(n.cpuModel));
    if (n.dev != def.dev) o.set("dev", num(n.dev));
    if (n.sm != def.sm) o.set("sm", num(n.sm));
    if (n.rank != def.rank) o.set("rank", num(n.rank));
    if (n.gdr != def.gdr) o.set("gdr", JsonValue::boolean(n.gdr));
    if (!n.model.empty()) o.set("model", str(n.model));
    if (!n.hca.empty()) o.set("hca", str(n.hca));
    if (!n.ifName.empty()) o.set("ifName", str(n.ifName));
    if (n.type == NodeType::kNic || n.port != def.port) o.set("port", num(n.port));
    if (n.speedMbps != def.speedMbps) o.set("speedMbps", num(static_cast<double>(n.speedMbps)));
    if (!n.linkLayer.empty()) o.set("linkLayer", str(n.linkLayer));
    if (!n.state.empty()) o.set("state", str(n.state));
    if (n.chips != def.chips) o.set("chips", num(n.chips));
    nodes.push(std::move(o));
  }
  doc.set("nodes", std::move(nodes));
  JsonValue links = JsonValue::array();
  for (const Link& l : g.links()) {
    JsonValue o = JsonValue::object();
    o.set("a", num(l.a));
    o.set("b", num(l.b));
    o.set("type", str(linkTypeName(l.type)));
    o.set("bw", num(l.bw));
    o.set("count", num(l.count));
    links.push(std::move(o));
  }
  doc.set("links", std::move(links));
  if (g.finalized() && withPaths) {
    JsonValue paths = JsonValue::object();
    std::vector<int> ends;
    for (int i : g.gpus()) ends.push_back(i);
    for (int i : g.nics()) ends.push_back(i);
    for (int i : g.cpus()) ends.push_back(i);
    for (int a : ends) {
      JsonValue row = JsonValue::object();
      for (int b : ends)
        if (a != b) row.set(g.node(b).name, str(pathTypeName(g.pathType(a, b))));
      paths.set(g.node(a).name, std::move(row));
    }
    doc.set("paths", std::move(paths));
  }
  return doc;
}

std::string graphToJson(const Graph& g) { return graphToJsonValue(g).dump(2) + "\n"; }

Status saveGraphJsonFile(const Graph& g, const std::string& path) {
  std::string text = graphToJson(g);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Status(Code::kSystemError, path + ": " + std::strerror(errno));
  size_t w = std::fwrite(text.data(), 1, text.size(), f);
  int err = errno;
  if (std::fclose(f) != 0 || w != text.size())
    return Status(Code::kSystemError, path + ": write failed: " + std::strerror(err));
  return Status::ok();
}

namespace {

class JsonGraphReader {
 public:
  explicit JsonGraphReader(const std::string& source) : src_(source) {}

  StatusOr<Graph> read(const JsonValue& doc) {
    if (!doc.isObject()) return err(doc, "", "the document is not a JSON object");
    const JsonValue* fmt = doc.find("format");
    if (fmt == nullptr || !fmt->isString() || fmt->stringValue() != "braid-topology")
      return err(fmt ? *fmt : doc, "format", "expected \"braid-topology\" (not a braid topology dump)");
    const JsonValue* ver = doc.find("version");
    long v = 0;
    if (ver == nullptr) return err(doc, "version", "missing");
    BRAID_RETURN_IF_ERROR(intOf(*ver, "version", 1, 1000, &v));
    if (v > kFormatVersion)
      return err(*ver, "version", "dump format " + std::to_string(v) + " is newer than this build reads (" +
                                      std::to_string(kFormatVersion) + ")");
    Graph g;
    if (const JsonValue* h = doc.find("host")) {
      if (!h->isString()) return err(*h, "host", "expected a string");
      g.setHost(h->stringValue());
    }
    const JsonValue* nodes = doc.find("nodes");
    if (nodes == nullptr || !nodes->isArray()) return err(nodes ? *nodes : doc, "nodes", "expected an array");
    for (size_t i = 0; i < nodes->items().size(); ++i) {
      Node n;
      BRAID_RETURN_IF_ERROR(node(nodes->items()[i], "nodes[" + std::to_string(i) + "]", &n));
      g.addNode(std::move(n));
    }
    const JsonValue* links = doc.find("links");
    if (links == nullptr || !links->isArray()) return err(links ? *links : doc, "links", "expected an array");
    for (size_t i = 0; i < links->items().size(); ++i) {
      const JsonValue& l = links->items()[i];
      std::string at = "links[" + std::to_string(i) + "]";
      if (!l.isObject()) return err(l, at, "expected an object");
      long a = -1, b = -1, count = 1;
      double bw = 0;
      const long maxNode = static_cast<long>(nodes->items().size()) - 1;
      BRAID_RETURN_IF_ERROR(reqInt(l, at, "a", 0, maxNode, &a));
      BRAID_RETURN_IF_ERROR(reqInt(l, at, "b", 0, maxNode, &b));
      if (const JsonValue* c = l.find("count")) BRAID_RETURN_IF_ERROR(intOf(*c, at + ".count", 1, 1 << 16, &count));
      const JsonValue* bwv = l.find("bw");
      if (bwv == nullptr || !bwv->isNumber() || !(bwv->numberValue() >= 0) || bwv->numberValue() > 1e9)
        return err(bwv ? *bwv : l, at + ".bw", "expected a bandwidth in GB/s (a number >= 0)");
      bw = bwv->numberValue();
      const JsonValue* t = l.find("type");
      LinkType lt;
      if (t == nullptr || !t->isString() || !parseLinkType(t->stringValue(), &lt))
        return err(t ? *t : l, at + ".type", "expected one of LOC, NVL, PCI, SYS, NET");
      Status s = g.addLink(static_cast<int>(a), static_cast<int>(b), lt, bw, static_cast<int>(count));
      if (!s.isOk()) return err(l, at, s.message());
    }
    if (const JsonValue* s = doc.find("source")) {
      if (s->isString()) g.setSource(s->stringValue());
    }
    Status fs = g.finalize();
    if (!fs.isOk()) return invalidArgument(src_ + ": " + fs.message());
    return g;
  }

 private:
  Status err(const JsonValue& at, const std::string& path, const std::string& what) const {
    std::string loc = src_;
    if (at.line() > 0) loc += ":" + std::to_string(at.line()) + ":" + std::to_string(at.column());
    return invalidArgument(loc + ": " + (path.empty() ? "" : path + ": ") + what);
  }

  Status intOf(const JsonValue& v, const std::string& path, long lo, long hi, long* out) const {
    if (!v.isNumber() || v.numberValue() != std::floor(v.numberValue()))
      return err(v, path, "expected an integer");
    double d = v.numberValue();
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
      return err(v, path, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    *out = static_cast<long>(d);
    return Status::ok();
  }
  Status reqInt(const JsonValue& o, const std::string& at, const char* key, long lo, long hi, long* out) const {
    const JsonValue* v = o.find(key);
    if (v == nullptr) return err(o, at + "." + key, "missing");
    return intOf(*v, at + "." + key, lo, hi, out);
  }
  Status optInt(const JsonValue& o, const std::string& at, const char* key, long lo, long hi, int* out) const {
    const JsonValue* v = o.find(key);
    if (v == nullptr) return Status::ok();
    long x;
    BRAID_RETURN_IF_ERROR(intOf(*v, at + "." + key, lo, hi, &x));
    *out = static_cast<int>(x);
    return Status::ok();
  }
  Status optStr(const JsonValue& o, const std::string& at, const char* key, std::string* out) const {
    const JsonValue* v = o.find(key);
    if (v == nullptr) return Status::ok();
    if (!v->isString()) return err(*v, at + "." + key, "expected a string");
    if (v->stringValue().size() > 4096) return err(*v, at + "." + key, "longer than 4096 bytes");
    *out = v->stringValue();
    return Status::ok();
  }

  Status node(const JsonValue& o, const std::string& at, Node* n) const {
    if (!o.isObject()) return err(o, at, "expected an object");
    const JsonValue* t = o.find("type");
    if (t == nullptr || !t->isString() || !parseNodeType(t->stringValue(), &n->type))
      return err(t ? *t : o, at + ".type", "expected one of cpu, switch, gpu, nic, nvswitch");
    BRAID_RETURN_IF_ERROR(optStr(o, at, "name", &n->name));
    std::string bus;
    BRAID_RETURN_IF_ERROR(optStr(o, at, "busId", &bus));
    if (!bus.empty() && !normalizeBusId(bus, &n->busId))
      return err(*o.find("busId"), at + ".busId", "'" + bus + "' is not a PCI bus id");
    const int kBig = 1 << 30;
    BRAID_RETURN_IF_ERROR(optInt(o, at, "numa", -1, kBig, &n->numa));
    BRAID_RETURN_IF_ERROR(optStr(o, at, "cpus", &n->cpus));
    BRAID_RETURN_IF_ERROR(optStr(o, at, "arch", &n->arch));
    BRAID_RETURN_IF_ERROR(optStr(o, at, "vendor", &n->vendor));
    BRAID_RETURN_IF_ERROR(optInt(o, at, "cpuFamily", -1, kBig, &n->cpuFamily));
    BRAID_RETURN_IF_ERROR(optInt(o, at, "cpuModel", -1, kBig, &n->cpuModel));
    BRAID_RETURN_IF_ERROR(optInt(o, at, "dev", -1, kBig, &n->dev));
    BRAID_RETURN_IF_ERROR(optInt(o, at, "sm", 0, 100000, &n->sm));
    BRAID_RETURN_IF_ERROR(optInt(o, at, "rank", -1, kBig, &n->rank));
    if (const JsonValue* g = o.find("gdr")) {
      if (!g->isBool()) return err(*g, at + ".gdr", "expected true or false");
      n->gdr = g->boolValue();
    }
    BRAID_RETURN_IF_ERROR(optStr(o, at, "model", &n->model));
    BRAID_RETURN_IF_ERROR(optStr(o, at, "hca", &n->hca));
    BRAID_RETURN_IF_ERROR(optStr(o, at, "ifName", &n->ifName));
    BRAID_RETURN_IF_ERROR(optInt(o, at, "port", 0, 255, &n->port));
    if (const JsonValue* s = o.find("speedMbps")) {
      long sp;
      BRAID_RETURN_IF_ERROR(intOf(*s, at + ".speedMbps", 0, 1L << 40, &sp));
      n->speedMbps = sp;
    }
    BRAID_RETURN_IF_ERROR(optStr(o, at, "linkLayer", &n->linkLayer));
    BRAID_RETURN_IF_ERROR(optStr(o, at, "state", &n->state));
    BRAID_RETURN_IF_ERROR(optInt(o, at, "chips", 0, 1 << 16, &n->chips));
    return Status::ok();
  }

  const std::string& src_;
};

}  // namespace

StatusOr<Graph> graphFromJsonValue(const JsonValue& doc, const std::string& source) {
  JsonGraphReader r(source);
  return r.read(doc);
}

StatusOr<Graph> parseGraphJson(const std::string& text, const std::string& source) {
  BRAID_ASSIGN_OR_RETURN(JsonValue doc, parseJson(text, source));
  return graphFromJsonValue(doc, source);
}

StatusOr<Graph> loadGraphJsonFile(const std::string& path) {
  std::string text;
  BRAID_RETURN_IF_ERROR(readFile(path, &text));
  return parseGraphJson(text, path);
}

}  // namespace braid::topology
