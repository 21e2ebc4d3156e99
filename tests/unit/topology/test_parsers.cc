// The XML and JSON readers, and what each loader says about malformed input: every error
// names the file and the line.

#include "support/catch.h"
#include "topo_test_util.h"
#include "topology/graph_json.h"
#include "topology/json.h"
#include "topology/nccl_xml.h"
#include "topology/xml.h"

using namespace braid::topology;
using namespace braid::topology::testing;

namespace {

std::string xmlError(const std::string& text) {
  auto r = parseXml(text, "t.xml");
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == braid::Code::kInvalidArgument);
  return r.status().message();
}

std::string jsonError(const std::string& text) {
  auto r = parseJson(text, "t.json");
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == braid::Code::kInvalidArgument);
  return r.status().message();
}

std::string loadError(const std::string& name) {
  auto r = loadTopologyFile(fixture(name));
  REQUIRE_FALSE(r.isOk());
  return r.status().message();
}

}  // namespace

TEST_CASE("XML reader: elements, attributes, entities, prolog", "[topology][xml]") {
  auto r = parseXml(
      "\xEF\xBB\xBF<?xml version=\"1.0\"?>\n<!DOCTYPE t [ <!ENTITY x \"y\"> ]>\n<!-- c -->\n"
      "<root a='1' b=\"&lt;&amp;&#65;&#x42;\">\n  <kid/>text<![CDATA[<raw>]]>\n  <kid k = \"v\" ></kid>\n</root>\n",
      "t.xml");
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  const XmlElement& root = r.value();
  CHECK(root.name == "root");
  CHECK(root.line == 4);
  REQUIRE(root.attr("b") != nullptr);
  CHECK(*root.attr("b") == "<&AB");
  CHECK(root.attr("zz") == nullptr);
  REQUIRE(root.children.size() == 2);
  CHECK(root.children[1].line == 6);
  CHECK(*root.children[1].attr("k") == "v");
}

TEST_CASE("XML reader: character references of two, three and four bytes in UTF-8", "[topology][xml]") {
  auto r = parseXml("<a v='&#xE9;&#8364;&#x1F600;&#x7F;'/>", "t.xml");
  REQUIRE(r.isOk());
  CHECK(*r.value().attr("v") == "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x7F");
}

TEST_CASE("XML reader: malformed documents name line and column", "[topology][xml]") {
  CHECK_THAT(xmlError(""), Catch::Contains("t.xml:1:1: no root element"));
  CHECK_THAT(xmlError("<a>\n<b>\n</a>"), Catch::Contains("t.xml:3:1: </a> does not match <b> opened at line 2"));
  CHECK_THAT(xmlError("<a>\n  <b/>\n"), Catch::Contains("t.xml:1:1: element <a> is never closed"));
  CHECK_THAT(xmlError("<a x=1/>"), Catch::Contains("t.xml:1:6: value of attribute 'x' in <a> is not quoted"));
  CHECK_THAT(xmlError("<a x='1' x='2'/>"), Catch::Contains("duplicate attribute 'x'"));
  CHECK_THAT(xmlError("<a x='1'y='2'/>"), Catch::Contains("expected whitespace"));
  CHECK_THAT(xmlError("<a x='&bogus;'/>"), Catch::Contains("unknown entity '&bogus;'"));
  CHECK_THAT(xmlError("<a x='a & b'/>"), Catch::Contains("'&' not followed"));
  CHECK_THAT(xmlError("<a x='<'/>"), Catch::Contains("'<' inside an attribute value"));
  CHECK_THAT(xmlError("<a/><b/>"), Catch::Contains("a second root element"));
  CHECK_THAT(xmlError("junk<a/>"), Catch::Contains("text before the root element"));
  CHECK_THAT(xmlError("<a><!-- x -- y --></a>"), Catch::Contains("'--' inside a comment"));
  CHECK_THAT(xmlError("<a x='1"), Catch::Contains("unterminated value"));
  CHECK_THAT(xmlError("<a x='&#0;'/>"), Catch::Contains("bad character reference"));
  CHECK_THAT(xmlError("<1a/>"), Catch::Contains("expected an element name"));
  std::string deep;
  for (int i = 0; i < kMaxXmlDepth + 5; ++i) deep += "<a>";
  CHECK_THAT(xmlError(deep), Catch::Contains("nested deeper than"));
}

TEST_CASE("malformed fixture files give file:line errors", "[topology][xml][fixtures]") {
  CHECK_THAT(loadError("bad/nccl-unclosed.xml"),
             Catch::Contains("bad/nccl-unclosed.xml:7:3: </cpu> does not match <pci> opened at line 3"));
  CHECK_THAT(loadError("bad/nccl-bad-busid.xml"),
             Catch::Contains("bad/nccl-bad-busid.xml:4: <pci> busid='00:zz:00.0' is not a PCI bus id"));
  CHECK_THAT(loadError("bad/nccl-bad-nvlink.xml"),
             Catch::Contains("bad/nccl-bad-nvlink.xml:5: <nvlink> target 0000:99:00.0 is not a GPU in this file"));
  CHECK_THAT(loadError("bad/hwloc-truncated.xml"), Catch::Contains("bad/hwloc-truncated.xml:"));
  CHECK_THAT(loadError("bad/hwloc-truncated.xml"), Catch::Contains("is never closed"));
  CHECK_THAT(loadError("bad/graph-bad-link.json"), Catch::Contains("bad/graph-bad-link.json:9:"));
  CHECK_THAT(loadError("bad/graph-bad-link.json"), Catch::Contains("links[0].b: out of range [0, 1]"));
  CHECK_THAT(loadError("bad/graph-trailing-comma.json"), Catch::Contains("bad/graph-trailing-comma.json:6:3:"));
  auto missing = loadTopologyFile(fixture("does-not-exist.xml"));
  CHECK(missing.status().code() == braid::Code::kSystemError);
  CHECK_THAT(missing.status().message(), Catch::Contains("does-not-exist.xml"));
}

TEST_CASE("NCCL loader: attribute values are checked", "[topology][nccl]") {
  auto err = [](const std::string& body) {
    auto r = parseNcclTopo("<system version=\"1\">\n" + body + "\n</system>", "n.xml");
    REQUIRE_FALSE(r.isOk());
    return r.status().message();
  };
  CHECK_THAT(err("<cpu numaid=\"x\"/>"), Catch::Contains("n.xml:2: <cpu> numaid='x' is not an integer"));
  CHECK_THAT(err("<cpu numaid=\"0\"/><cpu numaid=\"0\"/>"), Catch::Contains("second <cpu> with numaid=0"));
  CHECK_THAT(err("<cpu affinity=\"fg\"/>"), Catch::Contains("affinity='fg' is not a hexadecimal CPU mask"));
  CHECK_THAT(err("<cpu><pci class=\"0x060400\"/></cpu>"), Catch::Contains("<pci> without busid"));
  CHECK_THAT(err("<cpu><pci busid=\"0000:01:00.0\" class=\"zz\"/></cpu>"), Catch::Contains("class='zz' is not a hexadecimal number"));
  CHECK_THAT(err("<cpu><pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"fast\"/></cpu>"),
             Catch::Contains("link_speed='fast'"));
  CHECK_THAT(err("<cpu><pci busid=\"0000:01:00.0\" class=\"0x030200\"><gpu sm=\"x\"/></pci></cpu>"),
             Catch::Contains("n.xml:2: <gpu> sm='x' is not an integer"));
  CHECK_THAT(err("<cpu><pci busid=\"0000:01:00.0\" class=\"0x030200\"><gpu gdr=\"7\"/></pci></cpu>"),
             Catch::Contains("out of range"));
  CHECK_THAT(err("<cpu><pci busid=\"0000:01:00.0\" class=\"0x020000\"><nic><net name=\"e\" speed=\"-1\"/></nic></pci></cpu>"),
             Catch::Contains("<net> speed='-1' is out of range"));
  CHECK_THAT(err("<cpu><pci busid=\"0000:01:00.0\" class=\"0x030200\"/><pci busid=\"0000:01:00.0\" class=\"0x030200\"/></cpu>"),
             Catch::Contains("second <pci> with busid 0000:01:00.0"));
  auto notNccl = parseNcclTopo("<topology/>", "h.xml");
  CHECK_THAT(notNccl.status().message(), Catch::Contains("expected <system>"));
}

TEST_CASE("NCCL loader: NVLink between GPUs listed from both sides counts once", "[topology][nccl]") {
  const char* text = R"(<system version="1">
  <cpu numaid="0" affinity="ff" vendor="GenuineIntel" modelid="85">
    <pci busid="0000:01:00.0" class="0x030200" link_speed="16 GT/s" link_width="16">
      <gpu dev="0" sm="80"><nvlink target="0000:02:00.0" count="4" tclass="0x030200"/></gpu>
    </pci>
    <pci busid="0000:02:00.0" class="0x030200" link_speed="16 GT/s" link_width="16">
      <gpu dev="1" sm="80"><nvlink target="0000:01:00.0" count="4" tclass="0x030200"/></gpu>
    </pci>
    <nic><net name="eth9" dev="0" speed="25000" port="1"/></nic>
  </cpu>
</system>)";
  auto r = parseNcclTopo(text, "p.xml");
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  const Graph& g = r.value();
  REQUIRE(g.gpus().size() == 2);
  CHECK(g.pathType(g.gpus()[0], g.gpus()[1]) == PathType::kNvl);
  CHECK(g.path(g.gpus()[0], g.gpus()[1]).bw == Approx(80));
  int nvl = 0;
  for (const Link& l : g.links())
    if (l.type == LinkType::kNvl) {
      ++nvl;
      CHECK(l.count == 4);
    }
  CHECK(nvl == 1);
  // A <nic> directly under <cpu>: linked to it at its port speed.
  REQUIRE(g.nics().size() == 1);
  CHECK(g.node(g.nics()[0]).ifName == "eth9");
  CHECK(g.path(g.cpus()[0], g.nics()[0]).bw == Approx(25000.0 / 8000.0));
}

TEST_CASE("JSON reader: values, escapes, numbers", "[topology][json]") {
  auto r = parseJson(R"( {"a": [1, -2.5e3, true, false, null], "s": "x\"\\\/\n\u00e9\ud83d\ude00", "o": {}} )", "t.json");
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  const JsonValue& v = r.value();
  REQUIRE(v.find("a") != nullptr);
  REQUIRE(v.find("a")->items().size() == 5);
  CHECK(v.find("a")->items()[1].numberValue() == -2500);
  CHECK(v.find("a")->items()[4].isNull());
  CHECK(v.find("s")->stringValue() == "x\"\\/\n\xC3\xA9\xF0\x9F\x98\x80");
  CHECK(v.find("o")->isObject());
  // Writer and reader agree, including awkward doubles and control characters.
  JsonValue o = JsonValue::object();
  o.set("d", JsonValue::number(0.1 + 0.2));
  o.set("c", JsonValue::string(std::string("a\x01" "b\tc", 5)));
  auto back = parseJson(o.dump(2), "w.json");
  REQUIRE(back.isOk());
  CHECK(back.value().find("d")->numberValue() == 0.1 + 0.2);
  CHECK(back.value().find("c")->stringValue() == std::string("a\x01" "b\tc", 5));
  CHECK(jsonNumber(24) == "24");
  CHECK(jsonNumber(20.6) == "20.6");
}

TEST_CASE("JSON reader: malformed input is rejected with a position", "[topology][json]") {
  CHECK_THAT(jsonError(""), Catch::Contains("t.json:1:1: unexpected end of input"));
  CHECK_THAT(jsonError("{\"a\": 1,}"), Catch::Contains("t.json:1:9: expected a member name"));
  CHECK_THAT(jsonError("[1 2]"), Catch::Contains("expected ',' or ']'"));
  CHECK_THAT(jsonError("{\"a\": 1, \"a\": 2}"), Catch::Contains("duplicate key \"a\""));
  CHECK_THAT(jsonError("[01]"), Catch::Contains("leading zero"));
  CHECK_THAT(jsonError("[1.]"), Catch::Contains("no digit after '.'"));
  CHECK_THAT(jsonError("[1e999]"), Catch::Contains("out of range"));
  CHECK_THAT(jsonError("[.5]"), Catch::Contains("expected a value"));
  CHECK_THAT(jsonError("\"abc"), Catch::Contains("unterminated string"));
  CHECK_THAT(jsonError("\"a\tb\""), Catch::Contains("control character"));
  CHECK_THAT(jsonError("\"\\x\""), Catch::Contains("unknown escape"));
  CHECK_THAT(jsonError("\"\\ud800\""), Catch::Contains("unpaired surrogate"));
  CHECK_THAT(jsonError("\"\\u12zz\""), Catch::Contains("bad hex digit"));
  CHECK_THAT(jsonError("\"\\u12\""), Catch::Contains("truncated"));
  CHECK_THAT(jsonError("{} {}"), Catch::Contains("after the JSON value"));
  CHECK_THAT(jsonError("[tru]"), Catch::Contains("expected a value"));
  CHECK_THAT(jsonError("{\n  \"a\":\n  @}"), Catch::Contains("t.json:3:3:"));
  std::string deep(kMaxJsonDepth + 1, '[');
  CHECK_THAT(jsonError(deep), Catch::Contains("nesting deeper than"));
}

TEST_CASE("graph JSON: schema errors name the entry", "[topology][json]") {
  auto err = [](const std::string& text) {
    auto r = parseGraphJson(text, "g.json");
    REQUIRE_FALSE(r.isOk());
    return r.status().message();
  };
  CHECK_THAT(err("[]"), Catch::Contains("not a JSON object"));
  CHECK_THAT(err(R"({"format": "other", "version": 1})"), Catch::Contains("not a braid topology dump"));
  CHECK_THAT(err(R"({"format": "braid-topology", "version": 99, "nodes": [], "links": []})"),
             Catch::Contains("newer than this build reads"));
  CHECK_THAT(err(R"({"format": "braid-topology", "version": 1, "links": []})"), Catch::Contains("nodes: expected an array"));
  CHECK_THAT(err(R"({"format": "braid-topology", "version": 1, "nodes": [{"type": "tpu"}], "links": []})"),
             Catch::Contains("nodes[0].type: expected one of"));
  CHECK_THAT(err(R"({"format": "braid-topology", "version": 1, "nodes": [{"type": "cpu", "numa": 0.5}], "links": []})"),
             Catch::Contains("g.json:1:78: nodes[0].numa: expected an integer"));
  CHECK_THAT(err(R"({"format": "braid-topology", "version": 1, "nodes": [{"type": "gpu", "busId": "x"}], "links": []})"),
             Catch::Contains("nodes[0].busId: 'x' is not a PCI bus id"));
  CHECK_THAT(err(R"({"format": "braid-topology", "version": 1, "nodes": [{"type": "cpu", "numa": 0}, {"type": "cpu", "numa": 1}],
                     "links": [{"a": 0, "b": 1, "type": "WIRE", "bw": 1}]})"),
             Catch::Contains("links[0].type: expected one of"));
  CHECK_THAT(err(R"({"format": "braid-topology", "version": 1, "nodes": [{"type": "cpu", "numa": 0}, {"type": "cpu", "numa": 1}],
                     "links": [{"a": 0, "b": 1, "type": "SYS", "bw": -1}]})"),
             Catch::Contains("links[0].bw: expected a bandwidth"));
  CHECK_THAT(err(R"({"format": "braid-topology", "version": 1, "nodes": [{"type": "cpu", "numa": 0}], "links": [{"a": 0, "b": 0, "type": "SYS", "bw": 1}]})"),
             Catch::Contains("links[0]: link from node 0 to itself"));
}

namespace {

// A braid JSON topology: one NUMA node and `nics` NICs under it, `links` of them linked.
std::string manyNics(int nics, int links) {
  std::string s = R"({"format": "braid-topology", "version": 1, "nodes": [{"type": "cpu", "name": "NUMA0", "numa": 0})";
  for (int i = 0; i < nics; ++i) s += R"(, {"type": "nic", "name": "NIC)" + std::to_string(i) + R"("})";
  s += R"(], "links": [)";
  for (int i = 0; i < links; ++i)
    s += std::string(i ? ", " : "") + R"({"a": 0, "b": )" + std::to_string(i + 1) + R"(, "type": "PCI", "bw": 24})";
  return s + "]}";
}

}  // namespace

TEST_CASE("graph JSON: sizes past the bounds of a host's graph are refused early, with the bound",
          "[topology][json]") {
  // 20k NICs, all linked (about 1 MB): the links bound, before any per-pair work.
  auto links = parseGraphJson(manyNics(20000, 20000), "big.json");
  REQUIRE_FALSE(links.isOk());
  CHECK(links.status().message().find("links[16384]: more than 16384 links") != std::string::npos);
  // 5000 NICs without links: the nodes bound.
  auto nodes = parseGraphJson(manyNics(5000, 0), "wide.json");
  REQUIRE_FALSE(nodes.isOk());
  CHECK(nodes.status().message().find("5001 nodes exceed the bound of 4096") != std::string::npos);
  // Within the bounds: loads, and paths are computed for the sources asked about only.
  auto ok = parseGraphJson(manyNics(2000, 2000), "ok.json");
  REQUIRE(ok.isOk());
  const Graph& g = ok.value();
  CHECK(g.nics().size() == 2000);
  CHECK(g.pathType(g.nics()[0], g.nics()[1999]) == PathType::kPhb);
  CHECK(g.path(g.cpus()[0], g.nics()[7]).hops == 1);
}

TEST_CASE("graph: copies share computed paths, a re-finalized graph computes them anew", "[topology]") {
  auto parsed = parseGraphJson(manyNics(3, 3), "three.json");
  REQUIRE(parsed.isOk());
  Graph a = parsed.value();
  const int cpu = a.cpus()[0], n0 = a.nics()[0], n2 = a.nics()[2];
  Graph b = a;  // before any path was asked for
  CHECK(a.pathType(n0, n2) == PathType::kPhb);
  CHECK(b.pathType(n0, n2) == PathType::kPhb);
  CHECK(b.path(n0, n2).hops == 2);
  // b gains a PCI switch between NIC0 and NIC2: its paths change, a's stay.
  b.reopen();
  Node sw;
  sw.type = NodeType::kPciSwitch;
  int s = b.addNode(sw);
  REQUIRE(b.addLink(s, b.nics()[0], LinkType::kPci, 24).isOk());
  REQUIRE(b.addLink(s, b.nics()[2], LinkType::kPci, 24).isOk());
  REQUIRE(b.finalize().isOk());
  CHECK(b.pathType(b.findByName("NIC0"), b.findByName("NIC2")) == PathType::kPix);
  CHECK(a.pathType(n0, n2) == PathType::kPhb);
  CHECK(a.path(cpu, n0).hops == 1);
}
