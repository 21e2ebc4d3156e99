#pragma once
// NIC lists as NCCL spells them (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), shared by the topology
// (which NIC a channel uses) and the verbs plugin (which HCA it opens). It lives here, not
// in topology/, so a plugin can use it without pulling hwloc in.

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace braid {

// An include/exclude list in the syntax of NCCL_SOCKET_IFNAME / NCCL_IB_HCA: entries
// separated by ','; a leading '^' makes the whole list an exclude list; a leading '='
// (after '^' if both) asks for exact names instead of prefixes; an entry may end in
// ":port" to select one HCA port. The empty list allows everything.
class NicFilter {
 public:
  NicFilter() = default;
  // kInvalidArgument for an empty entry ("eth0,,eth1") or a port that is not a number.
  [[nodiscard]] static StatusOr<NicFilter> parse(const std::string& spec);
  // Whether a device called `name`, using port `port` (-1: any), passes the filter.
  bool allows(const std::string& name, int port = -1) const;
  bool empty() const { return entries_.empty(); }
  const std::string& spec() const { return spec_; }

 private:
  std::string spec_;
  bool exclude_ = false;
  bool exact_ = false;
  std::vector<std::pair<std::string, int>> entries_;  // name, port (-1: any)
};

}  // namespace braid
