#include "topology/cluster.h"

#include <cerrno>
#include <cstdlib>
#include <map>
#include <sstream>

#include "topology/graph_json.h"
#include "topology/json.h"

namespace braid::topology {

namespace {

bool parseInt(const std::string& s, long lo, long hi, int* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

Status decodeError(const std::string& record) {
  // "E<code>\n<message>"
  size_t nl = record.find('\n');
  int code = static_cast<int>(Code::kRemoteError);
  std::string msg = nl == std::string::npos ? record.substr(1) : record.substr(nl + 1);
  if (nl != std::string::npos && !parseInt(record.substr(1, nl - 1), 1, static_cast<int>(Code::kInternal), &code))
    code = static_cast<int>(Code::kRemoteError);
  return Status(static_cast<Code>(code), msg);
}

}  // namespace

std::string compactGraphJson(const Graph& g) {
  JsonValue full = graphToJsonValue(g);
  JsonValue doc = JsonValue::object();
  for (const auto& [k, v] : full.members())
    if (k != "paths") doc.set(k, v);
  return doc.dump(0);
}

std::string hostRecordGraph(const Graph& g) { return "G" + compactGraphJson(g); }
std::string hostRecordNone() { return "N"; }
std::string hostRecordError(const Status& error) {
  return "E" + std::to_string(static_cast<int>(error.code())) + "\n" + error.message();
}

Status decodeHostRecord(const std::string& record, const std::string& source, Graph* graph, bool* known) {
  *known = false;
  if (record == "N") return Status::ok();
  if (!record.empty() && record[0] == 'E') return decodeError(record);
  if (record.empty() || record[0] != 'G')
    return Status(Code::kRemoteError, source + ": malformed host topology record");
  auto g = parseGraphJson(record.substr(1), source);
  if (!g.isOk()) return Status(Code::kRemoteError, g.status().message());
  *graph = std::move(g).value();
  *known = true;
  return Status::ok();
}

std::string encodeRankRecord(const RankRecord& r) { return std::to_string(r.gpu) + " " + std::to_string(r.numa); }

StatusOr<RankRecord> decodeRankRecord(const std::string& text, int rank) {
  size_t sp = text.find(' ');
  RankRecord r;
  if (sp == std::string::npos || !parseInt(text.substr(0, sp), kGpuLocal, 1 << 20, &r.gpu) ||
      !parseInt(text.substr(sp + 1), -1, 1 << 20, &r.numa))
    return Status(Code::kRemoteError, "malformed placement record '" + text + "' from rank " + std::to_string(rank), rank);
  return r;
}

StatusOr<int> resolveGpu(const RankRecord& r, int localRank, const Graph& g, int rank) {
  const int ngpus = static_cast<int>(g.gpus().size());
  if (r.gpu == kGpuLocal) return localRank < ngpus ? localRank : kGpuNone;
  if (r.gpu >= ngpus) {
    return Status(Code::kInvalidArgument,
                  "rank " + std::to_string(rank) + " asks for GPU " + std::to_string(r.gpu) + " (BRAID_GPU), but its host's topology (" +
                      g.source() + ") has " + std::to_string(ngpus) + " GPU" + (ngpus == 1 ? "" : "s"),
                  rank);
  }
  return r.gpu < 0 ? kGpuNone : r.gpu;
}

std::vector<int> hostIndices(const std::vector<std::string>& hostIds, std::vector<int>* localRanks) {
  std::map<std::string, int> index, count;
  std::vector<int> out;
  if (localRanks) localRanks->clear();
  for (const std::string& h : hostIds) {
    auto it = index.find(h);
    if (it == index.end()) it = index.emplace(h, static_cast<int>(index.size())).first;
    out.push_back(it->second);
    if (localRanks) localRanks->push_back(count[h]++);
  }
  return out;
}

std::vector<const Graph*> Cluster::hostPointers() const {
  std::vector<const Graph*> p;
  for (const Graph& g : hosts) p.push_back(&g);
  return p;
}

StatusOr<bool> fuseCluster(const std::vector<int>& hostOf, const std::vector<std::string>& hostRecords,
                           const std::vector<RankRecord>& rankRecords, Cluster* out) {
  if (hostOf.size() != rankRecords.size())
    return internalError("fuseCluster: " + std::to_string(hostOf.size()) + " host indices for " +
                         std::to_string(rankRecords.size()) + " ranks");
  Cluster c;
  c.hosts.resize(hostRecords.size());
  // Errors first, in host order, so that every host's error is reported the same way
  // whichever host also lacks a topology.
  bool all = true;
  for (size_t h = 0; h < hostRecords.size(); ++h) {
    bool known = false;
    BRAID_RETURN_IF_ERROR(decodeHostRecord(hostRecords[h], "topology of host " + std::to_string(h), &c.hosts[h], &known));
    all = all && known;
  }
  if (!all) return false;
  std::vector<int> seen(hostRecords.size(), 0);
  c.ranks.resize(rankRecords.size());
  for (size_t r = 0; r < rankRecords.size(); ++r) {
    int h = hostOf[r];
    if (h < 0 || h >= static_cast<int>(hostRecords.size()))
      return internalError("fuseCluster: rank " + std::to_string(r) + " on unknown host " + std::to_string(h));
    RankPlace& p = c.ranks[r];
    p.host = h;
    p.numa = rankRecords[r].numa;
    BRAID_ASSIGN_OR_RETURN(p.gpu, resolveGpu(rankRecords[r], seen[h]++, c.hosts[h], static_cast<int>(r)));
  }
  *out = std::move(c);
  return true;
}

std::string encodeRing(const std::vector<int>& ring) {
  if (ring.empty()) return "N";
  std::string s = "R";
  for (int r : ring) s += " " + std::to_string(r);
  return s;
}

Status decodeRing(const std::string& text, int nranks, std::vector<int>* ring) {
  ring->clear();
  if (text == "N") return Status::ok();
  if (!text.empty() && text[0] == 'E') return decodeError(text);
  std::vector<int> out;
  std::vector<bool> seen(static_cast<size_t>(nranks), false);
  bool ok = !text.empty() && text[0] == 'R';
  if (ok) {
    std::istringstream in(text.substr(1));
    std::string tok;
    while (ok && in >> tok) {
      int r = -1;
      ok = parseInt(tok, 0, nranks - 1, &r) && !seen[r];
      if (ok) {
        seen[r] = true;
        out.push_back(r);
      }
    }
    ok = ok && static_cast<int>(out.size()) == nranks;
  }
  if (!ok) return Status(Code::kRemoteError, "malformed ring record '" + text.substr(0, 64) + "'");
  *ring = std::move(out);
  return Status::ok();
}

std::string formatRing(const std::vector<int>& ring, const std::vector<int>& hostOf) {
  std::string s;
  for (size_t k = 0; k < ring.size(); ++k) {
    if (k > 0) {
      bool cross = static_cast<size_t>(ring[k]) < hostOf.size() && static_cast<size_t>(ring[k - 1]) < hostOf.size() &&
                   hostOf[ring[k]] != hostOf[ring[k - 1]];
      s += cross ? " | " : " ";
    }
    s += std::to_string(ring[k]);
  }
  return s;
}

}  // namespace braid::topology
