#pragma once
// The key-value store that ranks rendezvous through: braid's own TCP store, an in-memory
// store for the in-process world, or an adapter to a foreign store (PyTorch's c10d::Store).
// Values are opaque bytes. All methods are thread-safe. Those with a `deadline` return by
// then at the latest (kTimeout when the store has not answered); a never-expiring Deadline()
// leaves the bound to the store (a networked store's own per-request timeout).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace braid::bootstrap {

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, waking every waiter on it.
  virtual Status set(const std::string& key, const std::string& value, Deadline deadline = Deadline()) = 0;
  // Waits until `key` exists, then returns its value; kTimeout naming the key otherwise.
  virtual StatusOr<std::string> get(const std::string& key, Deadline deadline) = 0;
  // Adds `delta` to the integer stored at `key` (absent = 0) and returns the new value.
  virtual StatusOr<int64_t> add(const std::string& key, int64_t delta, Deadline deadline = Deadline()) = 0;
  // Sets `key` to `desired` if it holds `expected` (an absent key counts as holding ""), as
  // one atomic step, and returns the value it holds afterwards (what it held when it did not
  // match; "" when absent). The one primitive with which ranks agree on a single winner
  // while some of them may die (braid's agreement): add() cannot decide among more than two.
  // The default fails with kInvalidArgument (a foreign store that has no such operation).
  virtual StatusOr<std::string> compareSet(const std::string& key, const std::string& expected,
                                           const std::string& desired, Deadline deadline = Deadline());
  // Liveness. Asks the store to set `key` to `value` (waking its waiters) once this client
  // is gone: its process died, its host or network failed, or it hung up without first
  // calling cancelOnClose(key). A store that serves its clients over connections sees that
  // at once (braid's TCP store: the connection's end), etcd when the client's lease runs
  // out; others cannot tell, and fail with kInvalidArgument (the default: PyTorch's stores,
  // the in-process store).
  virtual Status setOnClose(const std::string& key, const std::string& value, Deadline deadline = Deadline());
  // Withdraws setOnClose(key); returns whether there was one.
  virtual StatusOr<bool> cancelOnClose(const std::string& key, Deadline deadline = Deadline());
  // The same for a counter: adds `delta` to what the store adds to `key` once this client is
  // gone (the sum of every call; nothing once it is back to 0). braid's TCP store and etcd; the
  // default fails with kInvalidArgument.
  virtual Status addOnClose(const std::string& key, int64_t delta, Deadline deadline = Deadline());
  // The id by which the store tells this client from others (braid's TCP store: the id sent
  // in HELLO), for fence(); 0 for a store that does not tell its clients apart.
  virtual uint64_t clientId() const { return 0; }
  // Shuts `clients` (their clientId()s) out of the store for good: each connection of theirs
  // ends as a dead client's does (their setOnClose/addOnClose entries take effect), and they
  // are refused from then on, told `why`. For processes the others gave up on (a shrink's
  // excluded ranks) that are still alive, stopped or cut off: without it a stopped process
  // keeps its entries pending for as long as it stays stopped. Returns how many connections
  // it closed. The default fails with kInvalidArgument.
  virtual StatusOr<int64_t> fence(const std::vector<uint64_t>& clients, const std::string& why,
                                  Deadline deadline = Deadline());
  // Whether every client of this store lives in this process (the in-process store): none
  // can die or stop without the others, so none needs watching.
  virtual bool inProcess() const { return false; }
  // Waits until every key exists.
  virtual Status wait(const std::vector<std::string>& keys, Deadline deadline) = 0;
  // Whether every key exists, without waiting.
  virtual StatusOr<bool> check(const std::vector<std::string>& keys, Deadline deadline = Deadline()) = 0;
  // Removes `key`; returns whether it existed.
  virtual StatusOr<bool> deleteKey(const std::string& key, Deadline deadline = Deadline()) = 0;

  // Waits until every key exists, then returns their values in `keys` order; kTimeout
  // naming a missing key otherwise. The default calls get() per key; a networked store
  // overrides it to fetch all values in one round trip (allGather at scale needs that).
  virtual StatusOr<std::vector<std::string>> multiGet(const std::vector<std::string>& keys, Deadline deadline);

  // Makes a call blocked on this client return at once with an error, and every later call
  // fail: for a thread that must stop while it waits in the store. Any thread. The default
  // does nothing (a store whose calls never wait long).
  virtual void interrupt() {}

  // Where the live view (core/live_status.h) of a job on a caller's store is asked and
  // answered, when the store offers one (braid::Store::openRoot): `name` names the root
  // store (communicators of one process on one root share its responder), `connect` opens a
  // new connection to that root, whose calls do not hold up this store's. An empty name:
  // none. braid's own stores and etcd are reached by address instead (api::Session::announce).
  struct LiveRoot {
    std::string name;
    std::function<StatusOr<std::unique_ptr<Store>>()> connect;
    int hosts = -1;  // whether this process hosts the root (braid::Store::hostsRoot)
  };
  virtual LiveRoot liveRoot() { return {}; }
};

// The key allGather publishes rank `r`'s value under: "<prefix>/<r>".
std::string allGatherKey(const std::string& prefix, int r);

// Every rank's `value` for `prefix`, in rank order, once all `nranks` have published.
// Blocks until then or `deadline`; on timeout the Status is kTimeout naming the first rank
// that has not published (Status::rank()). Each rank sets "<prefix>/<rank>".
// `poll`, when given, runs about every 200 ms while waiting, as in barrier() below.
StatusOr<std::vector<std::string>> allGather(Store& store, const std::string& prefix, int rank,
                                             int nranks, const std::string& value,
                                             Deadline deadline, const std::function<Status()>& poll = nullptr);
// Returns once all `nranks` ranks have entered the barrier named `name`. A name is used
// once: the keys under it stay behind, so a second barrier needs a distinct name (callers
// append a sequence number or epoch). On timeout, the message says how many ranks arrived.
// `poll`, when given, runs about every 200 ms while waiting; a failure it returns ends the
// wait with that Status (the communicator checks for a peer's abort record this way).
Status barrier(Store& store, const std::string& name, int nranks, Deadline deadline,
               const std::function<Status()>& poll = nullptr);
// store.wait(keys) that also runs `poll` about every 200 ms while waiting, as above.
Status waitPolling(Store& store, const std::vector<std::string>& keys, Deadline deadline,
                   const std::function<Status()>& poll);
// store.get(key) that also runs `poll` about every 200 ms while waiting, as above.
StatusOr<std::string> getPolling(Store& store, const std::string& key, Deadline deadline,
                                 const std::function<Status()>& poll);

// braidrun's word, in the store its ranks use, that the process it started as rank r ended:
// kLauncherExitPrefix + r holds how ("exited with status 1", "was killed by signal
// SIGSEGV"), kLauncherExitListKey the ranks so marked ("3 7", written before the count
// moves), and kLauncherExitsKey counts them, so a joining rank reads one counter while
// nobody has ended, and only the ranks listed once one has.
// What a fenced client is told (Store::fence), before the reason: a caller that meets it
// was left out of the job, and is not looking at a lost store.
inline constexpr char kShutOut[] = "shut out of the job's store: ";

inline constexpr char kLauncherExitsKey[] = "braidrun/exits";
inline constexpr char kLauncherExitListKey[] = "braidrun/exited";
inline constexpr char kLauncherExitPrefix[] = "braidrun/exit/";

}  // namespace braid::bootstrap
