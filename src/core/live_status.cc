#include "core/live_status.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "core/communicator.h"

namespace braid::core {

// The answering half of the live view: the responders (the asking half is live_view.cc).

namespace {

const std::string kRoot = kLiveStatusRoot;

struct Responder {
  std::string storeKey;
  std::function<StatusOr<std::unique_ptr<bootstrap::Store>>()> connect;
  std::mutex mu;
  std::condition_variable cv;                 // stop, done
  std::unique_ptr<bootstrap::Store> client;  // under mu: set once by the thread
  bool stop = false;                          // under mu
  bool done = false;                          // under mu: the thread is about to end
  bool closed = false;                        // under mu: ended because a process closed the view
  int peers = 0;                              // under mu: the most other ranks of a communicator here
  int64_t closings = -1;                      // a caller's store: the view's closings when it began
  int hosts = -1;                             // a caller's store: whether this process hosts it (-1: unknown)
  // A caller's store (addLiveStatus's `closings` >= 0): the thread polls it (see
  // respondPolling), and a call it is in cannot be cut short, so stopping it waits a
  // bounded time.
  bool callerStore() const { return closings >= 0; }
  std::thread thread;
};

// How long stopping a caller's store's responder waits for its thread, which may be in
// one of the store's calls (a round trip, or the store's own timeout where it is cut off).
constexpr double kCallerStopWaitSec = 2.0;
// How long a process that closes the view on a caller's store waits for the others to see it.
constexpr auto kCallerCloseWait = std::chrono::milliseconds(300);

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Responder>> byStore;
  std::map<const Communicator*, std::string> storeOf;
};

// Never destroyed: a process that exits without destroying its communicators leaves its
// responders blocked in the store, where exit ends them (a destructor would have to join).
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

std::vector<std::string> snapshot(const std::string& storeKey) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::vector<std::string> out;
  for (const auto& [comm, key] : reg.storeOf)
    if (key == storeKey) out.push_back(comm->liveState().encode());
  return out;
}

// Answers request `n`: one record per communicator of this process on `storeKey`. Then the
// request to wait for next (several arrived meanwhile: the newest). False: the store failed.
bool answer(bootstrap::Store& store, const std::string& storeKey, int64_t* n) {
  const std::string reply = kRoot + "reply/" + std::to_string(*n) + "/";
  // All of this process's records are counted at once, so that an asker that sees one of
  // them counted waits for the rest (collectLiveStatus), never reads a process half-answered.
  const std::vector<std::string> records = snapshot(storeKey);
  if (!records.empty()) {
    const auto k = static_cast<int64_t>(records.size());
    auto last = store.add(reply + "count", k);
    if (!last.isOk()) return false;
    for (int64_t i = 0; i < k; ++i)
      if (!store.set(reply + std::to_string(last.value() - k + 1 + i), records[i]).isOk()) return false;
  }
  auto now = store.add(kRoot + "seq", 0);
  if (!now.isOk()) return false;
  *n = std::max(*n + 1, now.value());
  return true;
}

bool stopping(Responder& me) {
  std::lock_guard<std::mutex> lock(me.mu);
  return me.stop;
}

// braid's own stores and etcd: the wait for the next question parks in the store.
void respondBlocking(Responder& me, bootstrap::Store& store, int64_t next) {
  for (;;) {
    auto got = store.get(kRoot + "req/" + std::to_string(next), Deadline::after(60));
    if (stopping(me)) return;
    if (!got.isOk()) {
      if (got.status().code() == Code::kTimeout) continue;
      return;  // the store is gone: nobody can ask any more
    }
    if (!answer(store, me.storeKey, &next)) return;
  }
}

// A caller's store (PyTorch's TCPStore) has no wait that can be cut short, and a connection
// used after its server has gone makes the caller's library log the failure with a stack
// trace. So the responder checks for the question every callerPollInterval, and stops for good
// when a process closes the view: kRoot "closed" counts the closings, and a responder that
// sees it move adds to "closed-ack/<count>" and ends. The store's host (or, where no
// process knows whether it hosts the store, any process) closes the view as it leaves and
// waits (briefly) for the others' acknowledgements before it goes (closeView), so that
// nobody calls a store whose host has left. A process that does not host it just stops
// checking: the others' view goes on.
void respondPolling(Responder& me, bootstrap::Store& store, int64_t next) {
  for (;;) {
    if (stopping(me)) return;
    auto asked = store.check({kRoot + "req/" + std::to_string(next)});
    if (!asked.isOk()) return;
    if (asked.value()) {
      if (!answer(store, me.storeKey, &next)) return;
      continue;
    }
    auto closed = store.add(kRoot + "closed", 0);
    if (!closed.isOk()) return;
    if (closed.value() > me.closings) {
      (void)store.add(kRoot + "closed-ack/" + std::to_string(closed.value()), 1);
      std::lock_guard<std::mutex> lock(me.mu);
      me.closed = true;
      return;
    }
    std::unique_lock<std::mutex> lock(me.mu);
    me.cv.wait_for(lock, callerPollInterval(me.peers + 1), [&] { return me.stop; });
  }
}

void respondLoop(Responder& me) {
  auto c = me.connect();
  bootstrap::Store* store = nullptr;
  {
    std::lock_guard<std::mutex> lock(me.mu);
    if (me.stop) return;
    if (!c.isOk()) {
      BRAID_INFO("live status: no connection to the store %s: %s", me.storeKey.c_str(), c.status().message().c_str());
      return;
    }
    me.client = std::move(c).value();
    store = me.client.get();
  }
  auto seq = store->add(kRoot + "seq", 0);
  if (!seq.isOk()) return;
  if (me.callerStore()) {
    respondPolling(me, *store, seq.value() + 1);
  } else {
    respondBlocking(me, *store, seq.value() + 1);
  }
}

void respond(std::shared_ptr<Responder> me) {
  respondLoop(*me);
  std::lock_guard<std::mutex> lock(me->mu);
  me->done = true;
  me->cv.notify_all();
}

// Stops `r`'s thread: interrupts its wait and joins it, or, for a caller's store, wakes it
// and waits until `until` for it to end, and otherwise leaves it to end by itself (it holds
// `r`: a call it is in may take the store's own timeout where the store is cut off).
// Whether it ended.
bool stopResponder(const std::shared_ptr<Responder>& r, std::chrono::steady_clock::time_point until) {
  {
    std::unique_lock<std::mutex> lock(r->mu);
    r->stop = true;
    r->cv.notify_all();
    // A caller's store's responder waits on cv, never in the store (whose connection
    // closeView may still use): only braid's and etcd's park there.
    if (r->client && !r->callerStore()) r->client->interrupt();
    if (r->callerStore() && !r->cv.wait_until(lock, until, [&] { return r->done; })) {
      BRAID_INFO("live status: the responder for %s is still in a store call; left to end by itself",
                 r->storeKey.c_str());
      lock.unlock();
      if (r->thread.joinable()) r->thread.detach();
      return false;
    }
  }
  if (r->thread.joinable()) r->thread.join();
  return true;
}

// The last communicator of this process on a caller's store goes: if the view is still
// open (no other process closed it) and this process may host the store, close it and give
// the other processes' responders until kCallerCloseWait to see that, through the stopped
// responder's connection, which its thread no longer uses, or, where it stopped before it
// had one (a process that leaves within milliseconds of its start), a new one.
void closeView(Responder& r) {
  bootstrap::Store* store = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.closed || r.peers <= 0 || r.hosts == 0) return;
    store = r.client.get();
  }
  std::unique_ptr<bootstrap::Store> own;
  if (!store) {
    auto c = r.connect();
    if (!c.isOk()) return;
    own = std::move(c).value();
    store = own.get();
  }
  const Deadline d = Deadline::after(std::chrono::duration<double>(kCallerCloseWait).count());
  auto closing = store->add(kRoot + "closed", 1, d);
  if (!closing.isOk()) return;
  const std::string ack = kRoot + "closed-ack/" + std::to_string(closing.value());
  int64_t seen = 0;
  while (!d.expired()) {
    auto acks = store->add(ack, 0, d);
    if (!acks.isOk()) break;
    seen = acks.value();
    if (seen >= r.peers) break;
    usleep(10000);
  }
  BRAID_INFO("live status: closed the view at %s; %lld of %d other processes stopped checking", r.storeKey.c_str(),
             static_cast<long long>(seen), r.peers);
}

// At exit, the responders of callers' stores still running (communicators never destroyed)
// stop, and close the view, before the libraries whose code their calls run go away.
void stopAtExit() {
  std::vector<std::shared_ptr<Responder>> all;
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    for (const auto& [key, r] : reg.byStore)
      if (r->callerStore()) all.push_back(r);
    reg.byStore.clear();
  }
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(kCallerStopWaitSec * 1000));
  for (const auto& r : all)
    if (stopResponder(r, until)) closeView(*r);
}

}  // namespace

std::chrono::milliseconds callerPollInterval(int processes) {
  return std::chrono::milliseconds(std::clamp(processes, 100, 1000));
}

double liveAnswerSeconds(const Communicator* comm) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto key = reg.storeOf.find(comm);
  if (key == reg.storeOf.end()) return 0;
  auto r = reg.byStore.find(key->second);
  if (r == reg.byStore.end() || !r->second->callerStore()) return 0;
  std::lock_guard<std::mutex> rlock(r->second->mu);
  return std::chrono::duration<double>(callerPollInterval(r->second->peers + 1)).count() + 0.2;
}

StatusOr<int64_t> liveViewClosings(bootstrap::Store& root) { return root.add(kRoot + "closed", 0, Deadline::after(10)); }

void addLiveStatus(const std::string& storeKey,
                   std::function<StatusOr<std::unique_ptr<bootstrap::Store>>()> connect, const Communicator* comm,
                   int64_t closings, int hosts) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  if (reg.storeOf.count(comm)) return;
  reg.storeOf[comm] = storeKey;
  auto found = reg.byStore.find(storeKey);
  if (found != reg.byStore.end()) {
    std::lock_guard<std::mutex> rlock(found->second->mu);
    // One that ended because another process closed the view is replaced: a communicator
    // made since belongs to a job (or a part of one) that goes on.
    if (!found->second->closed) {
      found->second->peers = std::max(found->second->peers, comm->size() - 1);
      return;
    }
  }
  auto r = std::make_shared<Responder>();
  r->storeKey = storeKey;
  r->connect = std::move(connect);
  r->closings = closings;
  r->hosts = hosts;
  for (const auto& [c, key] : reg.storeOf)
    if (key == storeKey) r->peers = std::max(r->peers, c->size() - 1);
  if (r->callerStore()) {
    static const bool registered = std::atexit(stopAtExit) == 0;
    (void)registered;
  }
  if (found != reg.byStore.end()) {
    // The closed one's thread has ended (or is ending): it is joined or left to end.
    std::shared_ptr<Responder> old = found->second;
    if (old->thread.joinable()) old->thread.detach();
  }
  r->thread = std::thread(respond, r);
  reg.byStore[storeKey] = r;
}

bool answersLiveStatus(const Communicator* comm) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  return reg.storeOf.count(comm) > 0;
}

void removeLiveStatus(const Communicator* comm) {
  Registry& reg = registry();
  std::shared_ptr<Responder> last;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.storeOf.find(comm);
    if (it == reg.storeOf.end()) return;
    const std::string key = it->second;
    reg.storeOf.erase(it);
    for (const auto& [c, k] : reg.storeOf)
      if (k == key) return;  // others still answer through it
    auto r = reg.byStore.find(key);
    if (r == reg.byStore.end()) return;
    last = r->second;
    reg.byStore.erase(r);
  }
  const bool ended = stopResponder(
      last, std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(kCallerStopWaitSec * 1000)));
  if (ended && last->callerStore()) closeView(*last);
}

}  // namespace braid::core
