#pragma once
// A live view of a running job (`braid-info --status`): where each rank is, asked through
// the job's store while the job runs, answered by a thread of each process so that a rank
// whose user thread is busy elsewhere (compute, I/O) still answers.
//
// The protocol, at the root of the job's store (braid's, or its prefix in etcd):
//   braid-status/seq             the asker adds 1 and gets the request number n
//   braid-status/req/<n>         the asker sets it; every responder waits for it
//   braid-status/reply/<n>/count each responder adds the number of communicators it answers
//                                for (all at once) ...
//   braid-status/reply/<n>/<j>   ... and sets the j's it got to those communicators' LiveStates
// A rank that does not answer within the asker's wait is stopped, gone, or unreachable; the
// asker knows it is missing from the ranks that did answer (each gives its communicator's
// size). The asker removes the request's keys when done.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/store.h"
#include "common/status.h"

namespace braid::core {

class Communicator;

// The keys of the protocol above are under this, at the root of the job's store.
inline constexpr const char* kLiveStatusRoot = "braid-status/";

// A process as the live view names it. Containers that share a host's name (and so its
// braid host id) may number their processes apart, each rank as pid 1: the token
// (common/process_state.h processToken) tells processes apart, and a pid is looked up in
// this host's /proc only within this pid namespace. Records of an older braid carry neither:
// 0, where the host id and pid stand in for them.
struct LiveProcess {
  std::string hostId;  // braid's host id (BRAID_HOST_ID or hostname + boot id)
  int64_t pid = 0;
  uint64_t pidNs = 0;  // common/process_state.h pidNamespace(); 0: unknown
  uint64_t token = 0;  // common/process_state.h processToken(); 0: unknown
  bool known() const { return pid > 0 || token != 0; }
};
// Whether a and b are one process: by token where both have one, else by host id and pid.
bool sameLiveProcess(const LiveProcess& a, const LiveProcess& b);
// Whether p's pid names that process in /proc for `me`: the same host and pid namespace (an
// unknown namespace on either side counts as the same, as older records had none).
bool pidReadableBy(const LiveProcess& p, const LiveProcess& me);

// One rank of one communicator, as it answers.
struct LiveState {
  std::string comm;  // the communicator's key prefix ("braid", "braid.s1", ...)
  int rank = 0;
  int nranks = 1;
  int epoch = 0;
  int pid = 0;
  std::string host;
  bool busy = false;     // an operation is queued or running
  bool running = false;  // ... and it has started
  std::string op;        // that operation, or the last completed ("" when none was)
  double opSeconds = -1;  // since it was queued (busy) or since it ended (not busy); -1 unknown
  int waitingOn = -1;    // the rank its longest wait (over 100 ms) is for, or -1
  std::string waitWhat;  // "receive from", "send to", "flush data to"
  double waitSeconds = 0;
  int channel = -1;      // the channel that waits
  std::string failed;    // the error that broke the communicator, "" when none
  // The process this rank is held by: the one its longest wait is for, or the one the error
  // that broke the communicator names (braid's host id and pid; 0 when none). A rank waiting
  // in one communicator for a rank held in another is followed through it (findStalledRank).
  std::string hostId;    // this process's braid host id (BRAID_HOST_ID or hostname + boot id)
  int heldByPid = 0;
  std::string heldByHostId;
  // This process's and the holder's pid namespace and token (LiveProcess); 0 when unknown.
  uint64_t pidNs = 0;
  uint64_t process = 0;
  uint64_t heldByPidNs = 0;
  uint64_t heldByProcess = 0;

  LiveProcess self() const { return {hostId, pid, pidNs, process}; }
  LiveProcess heldBy() const { return {heldByHostId, heldByPid, heldByPidNs, heldByProcess}; }

  // One line, tab-separated key=value fields (tabs and newlines in values become spaces).
  std::string encode() const;
  // The inverse; kInvalidArgument naming what is wrong for a record that is not one.
  static StatusOr<LiveState> decode(const std::string& record);
  // "in #57 allreduce count=1000 float sum for 12.3 s; waiting 12.2 s to receive from
  // rank 2 (channel 0)", "not in a collective; last completed #56 ... 3.0 s ago".
  std::string describe() const;
};

// The report braid-info prints: per communicator, one line per rank (missing ranks as "no
// answer"), then who holds up whom — each waiting rank's chain of waits followed to a rank
// that is not waiting for anyone: the one to look at.
std::string renderLiveStatus(const std::vector<LiveState>& states, double waitedSeconds);

// Asks every process answering at `store` for its ranks' states and collects the answers
// that arrive within `waitSeconds`. The store must be braid's or etcd (a compareSet-free
// protocol, but the responders' waits must not poll: braid's park in the server, etcd's
// watch).
StatusOr<std::vector<LiveState>> askLiveStatus(bootstrap::Store& store, double waitSeconds);
// The same in two halves, so that the wait for answers can overlap other work: begin sends
// the request (its store calls bounded by `deadline`), collect waits out the rest of
// `waitSeconds` from then and reads the answers.
// A request begun and never collected is left in the store (a few keys).
struct LiveAsk {
  int64_t n = 0;        // the request number
  int64_t readyNs = 0;  // when to read the answers (CLOCK_MONOTONIC)
};
StatusOr<LiveAsk> beginLiveStatus(bootstrap::Store& store, double waitSeconds, Deadline deadline = Deadline::after(10));
// `more`, where given, is asked after each read whether an answer the caller needs is still
// missing from those read so far: while it says so, collect reads again until `until`.
StatusOr<std::vector<LiveState>> collectLiveStatus(bootstrap::Store& store, const LiveAsk& ask,
                                                    Deadline until = Deadline(),
                                                    const std::function<bool(const std::vector<LiveState>&)>& more = {});

// The responders: one thread per process and store, with a connection of its own (its waits
// block in the store, never the communicators' calls), answering for every communicator
// registered at that store. `storeKey` names the store ("host:port#nonce"); `connect` opens
// the thread's own client (called on that thread, once; its Store::interrupt must end a
// blocked wait). Any thread.
// `closings` >= 0: the root of a caller's store (bootstrap::Store::liveRoot), which has no
// wait to park in: the thread polls it, and the view there ends when a process leaves (see
// live_status.cc); the value is liveViewClosings(root) read before the communicator was
// handed to its caller, so that a process leaving right after is seen. -1: braid's store or
// etcd, where the thread parks. `hosts`, for a caller's store: whether this process hosts
// it (1), does not (0: its leaving does not end the view), or may (-1).
void addLiveStatus(const std::string& storeKey, std::function<StatusOr<std::unique_ptr<bootstrap::Store>>()> connect,
                   const Communicator* comm, int64_t closings = -1, int hosts = -1);
// How often the thread on a caller's store, which polls it, checks for a question, with
// `processes` processes answering there: every 100 ms up to 100 processes, then every 1 ms
// per process, at most every second, so that a whole job's checks (two requests each) ask
// at most about 2,000 requests a second of the store up to 1,000 processes (two a second
// per process beyond).
std::chrono::milliseconds callerPollInterval(int processes);
// How long an asker waits at least for the answers of every process of `comm`'s store: its
// thread's polling interval and a margin on a caller's store, 0 where the threads wait in
// the store (braid's, etcd) and answer at once, or where `comm` is not registered.
double liveAnswerSeconds(const Communicator* comm);
// How many times the live view at `root` (a caller's store) was closed so far.
StatusOr<int64_t> liveViewClosings(bootstrap::Store& root);
// Whether `comm` is registered, so that every process of its store answers askLiveStatus.
bool answersLiveStatus(const Communicator* comm);
// Unregisters `comm` (before it is destroyed); the last communicator of a store stops its
// thread (interrupting its wait) and joins it. Any thread; a no-op for one never added.
void removeLiveStatus(const Communicator* comm);

}  // namespace braid::core
