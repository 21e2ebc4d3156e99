#include "transports/ibverbs/device_select.h"

#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace braid::transport::ibverbs {
namespace {

// First line of a sysfs file, trailing whitespace dropped; false if it cannot be read
// (sysfs answers EINVAL for the type of an unpopulated GID).
bool readLine(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::string s;
  if (!std::getline(f, s)) return false;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  *out = s;
  return true;
}

// The GID indices a port's gids folder lists, ascending.
std::vector<int> gidIndices(const std::string& dir) {
  std::vector<int> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const char* n = e->d_name;
    if (!*n || std::strspn(n, "0123456789") != std::strlen(n)) continue;
    out.push_back(std::atoi(n));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool allZero(const uint8_t* g, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (g[i]) return false;
  return true;
}

}  // namespace

StatusOr<NicFilter> parseHcaList(const std::string& spec) {
  auto f = NicFilter::parse(spec);
  if (!f.isOk()) return f.status().withContext("ibverbs: BRAID_IB_HCA");
  return f;
}

bool parseGid(const std::string& text, uint8_t out[16]) {
  // "xxxx:xxxx:xxxx:xxxx:xxxx:xxxx:xxxx:xxxx": 39 characters, no '::' shorthand in sysfs.
  if (text.size() != 39) return false;
  uint8_t g[16];
  for (int i = 0; i < 8; ++i) {
    const size_t at = static_cast<size_t>(i) * 5;
    if (i < 7 && text[at + 4] != ':') return false;
    unsigned v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      const char c = text[k];
      unsigned d;
      if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
      else return false;
      v = v << 4 | d;
    }
    g[2 * i] = static_cast<uint8_t>(v >> 8);
    g[2 * i + 1] = static_cast<uint8_t>(v & 0xFF);
  }
  std::memcpy(out, g, 16);
  return true;
}

StatusOr<GidChoice> selectGid(const std::string& sysfsRoot, const std::string& device, int port, int configured) {
  const std::string portDir = sysfsRoot + "/" + device + "/ports/" + std::to_string(port);
  const std::vector<int> indices = gidIndices(portDir + "/gids");
  const std::string where = device + " port " + std::to_string(port);

  struct Entry {
    int index;
    std::string text, type;
    uint8_t gid[16];
  };
  auto load = [&](int i, Entry* e) {
    e->index = i;
    if (!readLine(portDir + "/gids/" + std::to_string(i), &e->text) || !parseGid(e->text, e->gid)) return false;
    if (allZero(e->gid, 16)) return false;  // an unpopulated table entry
    if (!readLine(portDir + "/gid_attrs/types/" + std::to_string(i), &e->type)) e->type.clear();
    return true;
  };

  if (configured >= 0) {
    GidChoice c;
    c.index = configured;
    c.why = "BRAID_IB_GID_INDEX";
    // Without sysfs (a container without /sys/class/infiniband) the index is taken on
    // trust; ibv_query_gid checks it later.
    if (indices.empty()) return c;
    Entry e;
    if (!load(configured, &e)) {
      return invalidArgument("ibverbs: BRAID_IB_GID_INDEX=" + std::to_string(configured) + " but " + where +
                             " has no GID at that index");
    }
    c.gid = e.text;
    c.type = e.type;
    return c;
  }

  if (indices.empty()) {
    return Status(Code::kSystemError, "ibverbs: cannot list the GIDs of " + where + " (no " + portDir + "/gids)");
  }
  int bestRank = 4;
  GidChoice best;
  for (int i : indices) {
    Entry e;
    if (!load(i, &e)) continue;
    const bool v2 = e.type == "RoCE v2";
    static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    const bool ipv4 = std::memcmp(e.gid, kMapped, 12) == 0;
    const bool linkLocal = e.gid[0] == 0xFE && (e.gid[1] & 0xC0) == 0x80;
    int rank;
    const char* why;
    if (v2 && ipv4) {
      rank = 1;
      why = "RoCE v2, IPv4-mapped";
    } else if (v2 && !linkLocal) {
      rank = 2;
      why = "RoCE v2, global IPv6";
    } else {
      rank = 3;
      why = e.type.empty() ? "first populated GID" : "first populated GID (not RoCE v2 over IP)";
    }
    if (rank < bestRank) {
      bestRank = rank;
      best.index = i;
      best.gid = e.text;
      best.type = e.type;
      best.why = why;
    }
  }
  if (best.index < 0) return Status(Code::kSystemError, "ibverbs: " + where + " has no populated GID");
  return best;
}

}  // namespace braid::transport::ibverbs
