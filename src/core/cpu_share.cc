#include "core/cpu_share.h"

#include "bootstrap/host_id.h"

#include <sched.h>

#include <cstdlib>
#include <set>

namespace braid::core {

CpuRecord localCpuRecord() {
  CpuRecord r;
  r.kernel = bootstrap::bootId();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) r.cpus.push_back(c);
  }
  return r;
}

std::string encodeCpuRecord(const CpuRecord& r) {
  if (r.kernel.empty() || r.cpus.empty()) return "";
  std::string out = r.kernel + " ";
  for (size_t i = 0; i < r.cpus.size();) {
    size_t j = i;
    while (j + 1 < r.cpus.size() && r.cpus[j + 1] == r.cpus[j] + 1) ++j;
    if (i) out += ",";
    out += std::to_string(r.cpus[i]);
    if (j > i) out += "-" + std::to_string(r.cpus[j]);
    i = j + 1;
  }
  return out;
}

CpuRecord decodeCpuRecord(const std::string& text) {
  const size_t space = text.find(' ');
  if (space == 0 || space == std::string::npos || space + 1 == text.size()) return {};
  CpuRecord r;
  r.kernel = text.substr(0, space);
  const char* p = text.c_str() + space + 1;
  int last = -1;
  while (*p) {
    char* end = nullptr;
    const long lo = std::strtol(p, &end, 10);
    long hi = lo;
    if (end == p || lo <= last) return {};
    if (*end == '-') {
      p = end + 1;
      hi = std::strtol(p, &end, 10);
      if (end == p || hi < lo) return {};
    }
    if (hi >= CPU_SETSIZE) return {};
    for (long c = lo; c <= hi; ++c) r.cpus.push_back(static_cast<int>(c));
    last = static_cast<int>(hi);
    if (*end == ',') ++end;
    else if (*end) return {};
    p = end;
  }
  return r;
}

CpuShare cpuShare(const std::vector<CpuRecord>& records, int self) {
  CpuShare share;
  if (self < 0 || self >= static_cast<int>(records.size())) return share;
  const CpuRecord& me = records[static_cast<size_t>(self)];
  if (me.kernel.empty() || me.cpus.empty()) return share;
  const std::set<int> mine(me.cpus.begin(), me.cpus.end());
  std::set<int> all = mine;
  for (size_t r = 0; r < records.size(); ++r) {
    if (static_cast<int>(r) == self || records[r].kernel != me.kernel) continue;
    bool overlaps = false;
    for (int c : records[r].cpus) overlaps = overlaps || mine.count(c) > 0;
    if (!overlaps) continue;
    ++share.ranks;
    share.others.push_back(static_cast<int>(r));
    all.insert(records[r].cpus.begin(), records[r].cpus.end());
  }
  share.cpus = static_cast<int>(all.size());
  return share;
}

}  // namespace braid::core
