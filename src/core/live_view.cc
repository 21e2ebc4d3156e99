// The asking half of the live view (live_status.h): the records, the report, and the
// request and its answers, which need nothing but the job's store. braidrun and braid-info
// link this alone; the responders, which answer for communicators, are live_status.cc.

#include "core/live_status.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "common/clock.h"
#include "common/log.h"

namespace braid::core {

namespace {

const std::string kRoot = kLiveStatusRoot;

std::string clean(const std::string& v) {
  std::string s = v;
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s < 0 ? 0.0 : s);
  return buf;
}

std::string fixed3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

bool parseInt(const std::string& v, int* out) {
  if (v.empty()) return false;
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (*end || x < -1 || x > (1L << 30)) return false;
  *out = static_cast<int>(x);
  return true;
}

bool parseU64(const std::string& v, uint64_t* out) {
  if (v.empty() || v[0] < '0' || v[0] > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (*end || errno == ERANGE) return false;
  *out = x;
  return true;
}

bool parseDouble(const std::string& v, double* out) {
  if (v.empty()) return false;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (*end || !(x >= -1) || x > 1e9) return false;
  *out = x;
  return true;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

bool sameLiveProcess(const LiveProcess& a, const LiveProcess& b) {
  if (a.token != 0 && b.token != 0) return a.token == b.token;
  return a.hostId == b.hostId && a.pid == b.pid;
}

bool pidReadableBy(const LiveProcess& p, const LiveProcess& me) {
  return p.pid > 0 && p.hostId == me.hostId && (p.pidNs == 0 || me.pidNs == 0 || p.pidNs == me.pidNs);
}

std::string LiveState::encode() const {
  std::string s = "v=1\tcomm=" + clean(comm) + "\trank=" + std::to_string(rank) + "\tnranks=" + std::to_string(nranks) +
                  "\tepoch=" + std::to_string(epoch) + "\tpid=" + std::to_string(pid) + "\thost=" + clean(host) +
                  "\tbusy=" + (busy ? "1" : "0") + "\trunning=" + (running ? "1" : "0") + "\top=" + clean(op) +
                  "\top_s=" + fixed3(opSeconds) + "\twaiting_on=" + std::to_string(waitingOn) +
                  "\twait_what=" + clean(waitWhat) + "\twait_s=" + fixed3(waitSeconds) +
                  "\tchannel=" + std::to_string(channel) + "\tfailed=" + clean(failed) +
                  "\thost_id=" + clean(hostId) + "\theld_by_pid=" + std::to_string(heldByPid) +
                  "\theld_by_host_id=" + clean(heldByHostId) + "\tpid_ns=" + std::to_string(pidNs) +
                  "\tprocess=" + std::to_string(process) + "\theld_by_pid_ns=" + std::to_string(heldByPidNs) +
                  "\theld_by_process=" + std::to_string(heldByProcess);
  return s;
}

StatusOr<LiveState> LiveState::decode(const std::string& record) {
  LiveState s;
  std::set<std::string> seen;
  size_t pos = 0;
  auto bad = [&](const std::string& why) {
    return Status(Code::kInvalidArgument, "live status record: " + why);
  };
  while (pos <= record.size()) {
    size_t tab = record.find('\t', pos);
    if (tab == std::string::npos) tab = record.size();
    const std::string field = record.substr(pos, tab - pos);
    pos = tab + 1;
    const size_t eq = field.find('=');
    if (eq == std::string::npos) return bad("field '" + field + "' has no '='");
    const std::string k = field.substr(0, eq), v = field.substr(eq + 1);
    seen.insert(k);
    bool ok = true;
    if (k == "v") ok = v == "1";
    else if (k == "comm") s.comm = v;
    else if (k == "rank") ok = parseInt(v, &s.rank) && s.rank >= 0;
    else if (k == "nranks") ok = parseInt(v, &s.nranks) && s.nranks >= 1;
    else if (k == "epoch") ok = parseInt(v, &s.epoch);
    else if (k == "pid") ok = parseInt(v, &s.pid);
    else if (k == "host") s.host = v;
    else if (k == "busy") s.busy = v == "1";
    else if (k == "running") s.running = v == "1";
    else if (k == "op") s.op = v;
    else if (k == "op_s") ok = parseDouble(v, &s.opSeconds);
    else if (k == "waiting_on") ok = parseInt(v, &s.waitingOn);
    else if (k == "wait_what") s.waitWhat = v;
    else if (k == "wait_s") ok = parseDouble(v, &s.waitSeconds);
    else if (k == "channel") ok = parseInt(v, &s.channel);
    else if (k == "failed") s.failed = v;
    else if (k == "host_id") s.hostId = v;
    else if (k == "held_by_pid") ok = parseInt(v, &s.heldByPid) && s.heldByPid >= 0;
    else if (k == "held_by_host_id") s.heldByHostId = v;
    else if (k == "pid_ns") ok = parseU64(v, &s.pidNs);
    else if (k == "process") ok = parseU64(v, &s.process);
    else if (k == "held_by_pid_ns") ok = parseU64(v, &s.heldByPidNs);
    else if (k == "held_by_process") ok = parseU64(v, &s.heldByProcess);
    // Unknown fields are a newer braid's: skipped.
    if (!ok) return bad("field '" + field + "' is not valid");
    if (tab == record.size()) break;
  }
  for (const char* k : {"v", "comm", "rank", "nranks"})
    if (!seen.count(k)) return bad(std::string("no '") + k + "' field");
  if (s.rank >= s.nranks) return bad("rank " + std::to_string(s.rank) + " is not below nranks " + std::to_string(s.nranks));
  if (s.waitingOn >= s.nranks) return bad("waiting_on " + std::to_string(s.waitingOn) + " is not a rank");
  return s;
}

std::string LiveState::describe() const {
  if (!failed.empty()) return "failed: " + failed + (op.empty() ? "" : " (at " + op + ")");
  if (!busy) {
    if (op.empty()) return "not in a collective; none completed yet";
    return "not in a collective; last completed " + op + (opSeconds >= 0 ? ", " + seconds(opSeconds) + " ago" : "");
  }
  std::string s = "in " + op + (running ? "" : " (queued)") + (opSeconds >= 0 ? " for " + seconds(opSeconds) : "");
  if (waitingOn >= 0)
    s += "; waiting " + seconds(waitSeconds) + " to " + waitWhat + " rank " + std::to_string(waitingOn) +
         (channel >= 0 ? " (channel " + std::to_string(channel) + ")" : "");
  return s;
}

std::string renderLiveStatus(const std::vector<LiveState>& states, double waitedSeconds) {
  // Grouped by communicator and epoch, ranks in order; the last answer of a rank wins.
  std::map<std::pair<std::string, int>, std::map<int, LiveState>> groups;
  std::map<std::pair<std::string, int>, int> sizes;
  for (const LiveState& s : states) {
    auto id = std::make_pair(s.comm, s.epoch);
    groups[id][s.rank] = s;
    sizes[id] = std::max(sizes[id], s.nranks);
  }
  if (groups.empty()) return "no rank answered within " + seconds(waitedSeconds) + "\n";
  std::string out;
  for (const auto& [id, ranks] : groups) {
    const int n = sizes[id];
    out += "communicator '" + id.first + "' (" + std::to_string(n) + " ranks, epoch " + std::to_string(id.second) +
           "): " + std::to_string(ranks.size()) + " of " + std::to_string(n) + " answered within " +
           seconds(waitedSeconds) + "\n";
    size_t width = 1;
    for (const auto& [r, s] : ranks) width = std::max(width, std::to_string(s.pid).size() + s.host.size());
    for (int r = 0; r < n; ++r) {
      auto it = ranks.find(r);
      std::string line = "  rank " + std::to_string(r) + "  ";
      if (it == ranks.end()) {
        line += "no answer (stopped, hung in the kernel, or its process or host is gone)";
      } else {
        std::string where = "pid " + std::to_string(it->second.pid) + " on " + it->second.host;
        where.resize(std::max(where.size(), width + 8), ' ');
        line += where + "  " + it->second.describe();
      }
      out += line + "\n";
    }
    // Follow every waiting rank's chain of waits to a rank that waits for no one.
    std::map<int, std::vector<int>> heldBy;  // the rank at a chain's end -> the ranks behind it
    std::set<int> cycles;
    for (const auto& [r, s] : ranks) {
      if (s.waitingOn < 0) continue;
      std::set<int> path{r};
      int at = s.waitingOn;
      bool cycle = false;
      for (;;) {
        auto next = ranks.find(at);
        if (next == ranks.end() || next->second.waitingOn < 0) break;
        if (!path.insert(at).second) {
          cycle = true;
          break;
        }
        at = next->second.waitingOn;
      }
      if (cycle) {
        cycles.insert(r);
      } else {
        heldBy[at].push_back(r);
      }
    }
    for (const auto& [end, behind] : heldBy) {
      auto it = ranks.find(end);
      std::string why;
      if (it == ranks.end()) {
        why = "it does not answer";
      } else if (!it->second.failed.empty()) {
        why = "it failed";
      } else if (!it->second.busy) {
        why = "it is not in a collective (its caller is elsewhere: compute, I/O, another communicator)";
      } else {
        why = "it is " + it->second.describe();
      }
      out += "  => rank " + std::to_string(end) + " holds up rank" + (behind.size() > 1 ? "s " : " ") +
             rankList(behind) + ": " + why + "\n";
    }
    if (!cycles.empty())
      out += "  => ranks " + rankList(std::vector<int>(cycles.begin(), cycles.end())) +
             " wait for each other in a cycle (mismatched calls?)\n";
  }
  return out;
}

StatusOr<LiveAsk> beginLiveStatus(bootstrap::Store& store, double waitSeconds, Deadline opDeadline) {
  LiveAsk ask;
  ask.readyNs = nowNanos() + static_cast<int64_t>(std::max(0.0, waitSeconds) * 1e9);
  BRAID_ASSIGN_OR_RETURN(ask.n, store.add(kRoot + "seq", 1, opDeadline));
  BRAID_RETURN_IF_ERROR(store.set(kRoot + "req/" + std::to_string(ask.n), "1", opDeadline));
  return ask;
}

StatusOr<std::vector<LiveState>> askLiveStatus(bootstrap::Store& store, double waitSeconds) {
  BRAID_ASSIGN_OR_RETURN(LiveAsk ask, beginLiveStatus(store, waitSeconds));
  return collectLiveStatus(store, ask);
}

StatusOr<std::vector<LiveState>> collectLiveStatus(bootstrap::Store& store, const LiveAsk& ask, Deadline until,
                                                    const std::function<bool(const std::vector<LiveState>&)>& more) {
  const Deadline opDeadline = Deadline::after(10);
  const std::string req = kRoot + "req/" + std::to_string(ask.n);
  const std::string reply = kRoot + "reply/" + std::to_string(ask.n) + "/";
  const int64_t left = ask.readyNs - nowNanos();
  if (left > 0) usleep(static_cast<useconds_t>(left / 1000));
  std::vector<LiveState> states;
  std::vector<std::string> keys{req, reply + "count"};
  int64_t read = 0;  // answers read so far
  for (;;) {
    auto count = store.add(reply + "count", 0, opDeadline);
    if (!count.isOk()) {
      if (read == 0) return count.status();
      break;  // keep what was read
    }
    for (int64_t j = read + 1; j <= count.value(); ++j) {
      const std::string k = reply + std::to_string(j);
      keys.push_back(k);
      // Counted, so its record is on its way: a short wait for it.
      auto v = store.get(k, Deadline::after(0.5));
      if (!v.isOk()) continue;
      auto s = LiveState::decode(v.value());
      if (s.isOk()) {
        states.push_back(std::move(s).value());
      } else {
        BRAID_WARN("braid-info --status: ignoring an answer: %s", s.status().message().c_str());
      }
    }
    read = std::max(read, count.value());
    if (!more || until.never() || until.expired() || !more(states)) break;
    usleep(20 * 1000);
  }
  for (const std::string& k : keys) (void)store.deleteKey(k, Deadline::after(2));
  return states;
}

}  // namespace braid::core
