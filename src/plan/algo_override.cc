#include "plan/algo_override.h"

#include <sstream>

#include <cerrno>
#include <cstdlib>

namespace braid::plan {

namespace {

std::vector<std::string> splitOn(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) parts.push_back(cur);
  if (!s.empty() && s.back() == sep) parts.emplace_back();
  return parts;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t");
  return s.substr(a, b - a + 1);
}

Status bad(const std::string& spec, const std::string& part, const std::string& why) {
  return invalidArgument("BRAID_ALGO='" + spec + "': '" + part + "' " + why);
}

std::string collectiveList() {
  std::string s;
  for (int c = 0; c < algorithms::kNumCollectives; ++c) {
    auto coll = static_cast<algorithms::Collective>(c);
    if (coll == algorithms::Collective::kSendRecv) continue;
    s += (s.empty() ? "" : ", ") + std::string(algorithms::collectiveName(coll));
  }
  return s;
}

std::string algorithmList(algorithms::Collective coll) {
  std::string s;
  for (const auto& a : algorithms::algorithmTable())
    if (a.coll == coll) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

bool parseBound(const std::string& s, size_t* out) {
  if (s == "inf") {
    *out = static_cast<size_t>(-1);
    return true;
  }
  // A count with an optional binary suffix: 512, 64K, 4M, 1G.
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno || end == s.c_str()) return false;
  std::string suffix = end;
  unsigned shift = suffix.empty() ? 0 : suffix == "K" || suffix == "k" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : 99;
  if (shift == 99 || (shift && v > (~0ull >> shift))) return false;
  *out = static_cast<size_t>(v << shift);
  return true;
}

}  // namespace

StatusOr<std::vector<AlgoRule>> parseAlgoOverride(const std::string& spec) {
  std::vector<AlgoRule> rules;
  if (trim(spec).empty()) return rules;
  for (const std::string& rawGroup : splitOn(spec, ';')) {
    std::string group = trim(rawGroup);
    if (group.empty()) continue;  // tolerate "a;b;"
    size_t colon = group.find(':');
    if (colon == std::string::npos) return bad(spec, group, "needs the form collective:[lo-hi:]algorithm");
    std::string collName = trim(group.substr(0, colon));
    int coll = -1;
    for (int c = 0; c < algorithms::kNumCollectives; ++c)
      if (collName == algorithms::collectiveName(static_cast<algorithms::Collective>(c))) coll = c;
    if (coll < 0 || static_cast<algorithms::Collective>(coll) == algorithms::Collective::kSendRecv)
      return bad(spec, collName, "is not a collective (one of " + collectiveList() + ")");
    const auto C = static_cast<algorithms::Collective>(coll);
    for (const std::string& rawRule : splitOn(group.substr(colon + 1), ',')) {
      std::string rule = trim(rawRule);
      if (rule.empty()) return bad(spec, group, "has an empty rule");
      AlgoRule r;
      r.coll = C;
      std::string name = rule;
      size_t c2 = rule.find(':');
      if (c2 != std::string::npos) {
        std::string range = trim(rule.substr(0, c2));
        name = trim(rule.substr(c2 + 1));
        size_t dash = range.find('-');
        if (dash == std::string::npos || !parseBound(trim(range.substr(0, dash)), &r.lo) ||
            !parseBound(trim(range.substr(dash + 1)), &r.hi))
          return bad(spec, range, "is not a size range like 0-64K or 1M-inf");
        if (r.lo >= r.hi) return bad(spec, range, "is empty (lower bound not below upper bound)");
      }
      r.algo = algorithms::findAlgorithm(C, name);
      if (!r.algo)
        return bad(spec, name, std::string("is not an algorithm for ") + algorithms::collectiveName(C) + " (one of " +
                                   algorithmList(C) + ")");
      rules.push_back(r);
    }
  }
  return rules;
}

const AlgoRule* findRule(const std::vector<AlgoRule>& rules, algorithms::Collective coll, size_t bytes) {
  for (const AlgoRule& r : rules)
    if (r.coll == coll && bytes >= r.lo && bytes < r.hi) return &r;
  return nullptr;
}

}  // namespace braid::plan
