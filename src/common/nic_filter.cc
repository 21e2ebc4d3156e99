#include "common/nic_filter.h"

namespace braid {

StatusOr<NicFilter> NicFilter::parse(const std::string& spec) {
  NicFilter f;
  f.spec_ = spec;
  std::string s = spec;
  if (!s.empty() && s[0] == '^') {
    f.exclude_ = true;
    s.erase(0, 1);
  }
  if (!s.empty() && s[0] == '=') {
    f.exact_ = true;
    s.erase(0, 1);
  }
  if (s.empty()) return f;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    std::string e = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (e.empty()) return invalidArgument("NIC list '" + spec + "' has an empty entry");
    int port = -1;
    size_t colon = e.find(':');
    if (colon != std::string::npos) {
      std::string ps = e.substr(colon + 1);
      if (ps.empty() || ps.size() > 3 || ps.find_first_not_of("0123456789") != std::string::npos)
        return invalidArgument("NIC list '" + spec + "': port '" + ps + "' of '" + e + "' is not a number");
      port = std::stoi(ps);
      e = e.substr(0, colon);
      if (e.empty()) return invalidArgument("NIC list '" + spec + "' has an entry with a port but no name");
    }
    f.entries_.emplace_back(e, port);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return f;
}

bool NicFilter::allows(const std::string& name, int port) const {
  if (entries_.empty()) return true;
  bool match = false;
  for (const auto& e : entries_) {
    bool nameOk = exact_ ? name == e.first : name.compare(0, e.first.size(), e.first) == 0;
    bool portOk = e.second < 0 || port < 0 || e.second == port;
    if (nameOk && portOk) {
      match = true;
      break;
    }
  }
  return exclude_ ? !match : match;
}

}  // namespace braid
