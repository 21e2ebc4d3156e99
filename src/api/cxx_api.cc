// The C++ API: the same Session as the C API; a failed Status becomes an exception here.

#include <chrono>
#include <memory>
#include <mutex>

#include "api/session.h"
#include "common/log.h"
#include "core/live_status.h"
#include "braid/braid.hpp"

namespace braid {

namespace {

[[noreturn]] void throwStatus(const Status& s) {
  switch (s.code()) {
    case Code::kInvalidArgument: throw InvalidArgument(s.message());
    case Code::kRemoteError: throw RemoteError(s.message(), s.rank());
    case Code::kTimeout: throw TimeoutError(s.message(), s.rank());
    default: throw Error(api::toResult(s.code()), s.toString());
  }
}

void check(const Status& s) {
  if (!s.isOk()) throwStatus(s);
}

// Lets a user-provided braid::Store drive the bootstrap: exceptions become Statuses.
class StoreAdapter : public bootstrap::Store {
 public:
  explicit StoreAdapter(std::shared_ptr<braid::Store> s) : s_(std::move(s)) {}

  Status set(const std::string& key, const std::string& value, Deadline /*deadline*/ = Deadline()) override {
    return guard([&] { s_->set(key, value); });
  }
  StatusOr<std::string> get(const std::string& key, Deadline deadline) override {
    std::string v;
    Status st = guard([&] { v = s_->get(key, std::chrono::milliseconds(deadline.remainingMillis(INT32_MAX))); });
    if (!st.isOk()) return st;
    return v;
  }
  StatusOr<int64_t> add(const std::string& key, int64_t delta, Deadline /*deadline*/ = Deadline()) override {
    int64_t v = 0;
    Status st = guard([&] { v = s_->add(key, delta); });
    if (!st.isOk()) return st;
    return v;
  }
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override {
    return guard([&] { s_->wait(keys, std::chrono::milliseconds(deadline.remainingMillis(INT32_MAX))); });
  }
  StatusOr<bool> check(const std::vector<std::string>& keys, Deadline /*deadline*/ = Deadline()) override {
    bool v = false;
    Status st = guard([&] { v = s_->check(keys); });
    if (!st.isOk()) return st;
    return v;
  }
  StatusOr<bool> deleteKey(const std::string& key, Deadline /*deadline*/ = Deadline()) override {
    bool v = false;
    Status st = guard([&] { v = s_->deleteKey(key); });
    if (!st.isOk()) return st;
    return v;
  }
  StatusOr<std::string> compareSet(const std::string& key, const std::string& expected, const std::string& desired,
                                   Deadline /*deadline*/ = Deadline()) override {
    std::string v;
    Status st = guard([&] { v = s_->compareSet(key, expected, desired); });
    if (!st.isOk()) return st;
    return v;
  }
  // The caller's root connection, when its store offers one: the first one opened (to learn
  // the root's name) is handed out by the first connect(), later ones open more.
  LiveRoot liveRoot() override {
    LiveRoot root;
    std::shared_ptr<braid::Store> first;
    Status st = guard([&] { first = s_->openRoot(&root.name); });
    if (!st.isOk()) {
      BRAID_INFO("live status: the store gives no root connection: %s", st.message().c_str());
      return {};
    }
    if (!first || root.name.empty()) return {};
    if (!guard([&] { root.hosts = s_->hostsRoot(); }).isOk()) root.hosts = -1;
    auto opened = std::make_shared<std::shared_ptr<braid::Store>>(std::move(first));
    auto mu = std::make_shared<std::mutex>();
    std::weak_ptr<braid::Store> self = s_;
    root.connect = [opened, mu, self]() -> StatusOr<std::unique_ptr<bootstrap::Store>> {
      std::shared_ptr<braid::Store> c;
      {
        std::lock_guard<std::mutex> lock(*mu);
        c = std::move(*opened);
        opened->reset();
      }
      if (!c) {
        auto s = self.lock();
        if (!s) return Status(Code::kAborted, "the store is gone");
        std::string name;
        Status st = guard([&] { c = s->openRoot(&name); });
        if (!st.isOk()) return st;
        if (!c) return Status(Code::kInternal, "the store gives no root connection");
      }
      return std::unique_ptr<bootstrap::Store>(new StoreAdapter(std::move(c)));
    };
    return root;
  }

 private:
  template <typename F>
  static Status guard(F&& f) {
    try {
      f();
      return Status::ok();
    } catch (const TimeoutError& e) {
      return Status(Code::kTimeout, std::string("store: ") + e.what());
    } catch (const std::exception& e) {
      return Status(Code::kRemoteError, std::string("store: ") + e.what());
    }
  }
  std::shared_ptr<braid::Store> s_;
};

// The stream of this thread's innermost StreamGuard.
thread_local braidStream_t tStream = nullptr;

api::CallArgs callArgs(algorithms::Collective coll, const char* fn, const void* send, void* recv, size_t count,
                       DataType dt) {
  api::CallArgs a;
  a.stream = tStream;
  a.coll = coll;
  a.fn = fn;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = static_cast<int>(dt);
  return a;
}

api::CallArgs withOp(api::CallArgs a, const Reduction& op) {
  a.op = static_cast<int>(op.op);
  a.cxxPreMul = op.preMul;
  a.cxxScalar = op.scalar;
  return a;
}

api::CallArgs withRoot(api::CallArgs a, int root) {
  a.root = root;
  return a;
}

api::Call prepared(api::Session& s, const api::CallArgs& a) {
  api::Call call;
  Status st = s.prepare(a, &call);
  if (!st.isOk()) throwStatus(st);
  return call;
}

std::vector<api::P2PMessage> preparedP2P(api::Session& s, const std::vector<P2POp>& ops) {
  std::vector<api::P2PMessage> msgs;
  msgs.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& o = ops[i];
    const std::string fn = "sendRecv (ops[" + std::to_string(i) + "])";
    auto m = s.prepareP2P(fn.c_str(), o.isSend, o.buf, o.count, static_cast<int>(o.dtype), o.peer, tStream);
    if (!m.isOk()) throwStatus(m.status());
    msgs.push_back(m.value());
  }
  return msgs;
}

}  // namespace

StreamGuard::StreamGuard(braidStream_t stream) : previous_(tStream) { tStream = stream; }
StreamGuard::~StreamGuard() { tStream = previous_; }
braidStream_t StreamGuard::current() { return tStream; }
bool StreamGuard::capturing(braidStream_t stream) {
  auto c = device::runtime().capturing(stream);
  return c.isOk() && c.value();
}

// A host call's Op, or a device call's view of its stream (one of the two).
struct Work::Impl {
  std::shared_ptr<core::Op> op;
  const char* name;
  std::shared_ptr<device::DeviceDone> device;
};

void Work::wait() {
  if (!impl_) throw InvalidArgument("Work::wait on an empty Work");
  check((impl_->device ? impl_->device->wait() : impl_->op->wait()).withContext(impl_->name));
}

bool Work::test() {
  if (!impl_) throw InvalidArgument("Work::test on an empty Work");
  Status s;
  if (!(impl_->device ? impl_->device->test(&s) : impl_->op->test(&s))) return false;
  check(s.withContext(impl_->name));
  return true;
}

struct Communicator::Impl {
  std::unique_ptr<api::Session> session;
};

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

static Communicator::Impl* fromSession(StatusOr<std::unique_ptr<api::Session>> s) {
  if (!s.isOk()) throwStatus(s.status());
  auto* impl = new Communicator::Impl();
  impl->session = std::move(s).value();
  return impl;
}

Communicator Communicator::fromEnv() {
  return Communicator(std::unique_ptr<Impl>(fromSession(api::Session::fromEnv())));
}

Communicator Communicator::fromStore(std::shared_ptr<Store> store, int rank, int size, const std::string& keyPrefix,
                                     std::chrono::milliseconds timeout) {
  if (!store) throw InvalidArgument("Communicator::fromStore: store is null");
  auto adapter = std::make_shared<StoreAdapter>(std::move(store));
  return Communicator(std::unique_ptr<Impl>(fromSession(api::Session::fromStore(adapter, rank, size, keyPrefix,
                                                                              timeout.count() / 1000.0))));
}

std::string liveStatus(const std::shared_ptr<Store>& store, double waitSeconds) {
  if (!store) throw InvalidArgument("liveStatus: store is null");
  if (!(waitSeconds >= 0) || waitSeconds > 3600)
    throw InvalidArgument("liveStatus: waitSeconds=" + std::to_string(waitSeconds) + " is not within [0, 3600]");
  std::string name;
  std::shared_ptr<Store> root = store->openRoot(&name);
  StoreAdapter at(root ? root : store);
  auto states = core::askLiveStatus(at, waitSeconds);
  check(states.status());
  return core::renderLiveStatus(states.value(), waitSeconds);
}

Communicator Communicator::fromUniqueId(const braidUniqueId& id, int rank, int size) {
  return Communicator(std::unique_ptr<Impl>(fromSession(api::Session::fromUniqueId(id, size, rank))));
}

namespace {

// The session behind a communicator; an invalid one (from split with a negative color)
// has none, and every call on it is a usage error.
api::Session& sessionOf(const std::unique_ptr<Communicator::Impl>& impl, const char* fn) {
  if (!impl) throw InvalidArgument(std::string(fn) + ": the Communicator is not valid (a split with a negative color)");
  return *impl->session;
}

void runCall(api::Session& s, const api::CallArgs& a) {
  // A loop repeating one call (DDP's bucket allreduce) skips its checks after the first.
  Status repeated;
  if (s.runRepeated(a, &repeated)) return check(repeated);
  check(s.run(prepared(s, a)));
}

std::shared_ptr<Work::Impl> submitCall(api::Session& s, api::Call call, const char* name) {
  if (call.onDevice) {
    auto done = s.submitOnDevice(std::move(call));
    if (!done.isOk()) throwStatus(done.status());
    return std::make_shared<Work::Impl>(Work::Impl{nullptr, name, done.value()});
  }
  auto op = s.submit(std::move(call));
  if (!op.isOk()) throwStatus(op.status());
  return std::make_shared<Work::Impl>(Work::Impl{op.value(), name, nullptr});
}

}  // namespace

int Communicator::rank() const { return sessionOf(impl_, "rank").comm().rank(); }
int Communicator::size() const { return sessionOf(impl_, "size").comm().size(); }

// Each blocking call and its Async twin share the argument checks; the Async one returns a
// Work whose Op keeps whatever the core allocated for the call (scaled copies, scratch).
#define BRAID_ASYNC(fn, args)                              \
  api::Session& s = sessionOf(impl_, fn);                  \
  Work w;                                                  \
  w.impl_ = submitCall(s, prepared(s, args), fn);          \
  return w

void Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, Reduction op) {
  runCall(sessionOf(impl_, "allreduce"),
          withOp(callArgs(algorithms::Collective::kAllReduce, "allreduce", sendbuf, recvbuf, count, dtype), op));
}
Work Communicator::allreduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, Reduction op) {
  BRAID_ASYNC("allreduce",
              withOp(callArgs(algorithms::Collective::kAllReduce, "allreduce", sendbuf, recvbuf, count, dtype), op));
}

void Communicator::broadcast(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root) {
  runCall(sessionOf(impl_, "broadcast"),
          withRoot(callArgs(algorithms::Collective::kBroadcast, "broadcast", sendbuf, recvbuf, count, dtype), root));
}
Work Communicator::broadcastAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root) {
  BRAID_ASYNC("broadcast",
              withRoot(callArgs(algorithms::Collective::kBroadcast, "broadcast", sendbuf, recvbuf, count, dtype), root));
}

void Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, Reduction op, int root) {
  runCall(sessionOf(impl_, "reduce"),
          withRoot(withOp(callArgs(algorithms::Collective::kReduce, "reduce", sendbuf, recvbuf, count, dtype), op),
                   root));
}
Work Communicator::reduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, Reduction op,
                               int root) {
  BRAID_ASYNC("reduce",
              withRoot(withOp(callArgs(algorithms::Collective::kReduce, "reduce", sendbuf, recvbuf, count, dtype), op),
                       root));
}

namespace {
api::CallArgs allgatherArgs(const void* sendbuf, void* recvbuf, size_t sendcount, DataType dtype) {
  api::CallArgs a = callArgs(algorithms::Collective::kAllGather, "allgather", sendbuf, recvbuf, sendcount, dtype);
  a.countName = "sendcount";
  return a;
}
api::CallArgs reduceScatterArgs(const void* sendbuf, void* recvbuf, size_t recvcount, DataType dtype,
                                const Reduction& op) {
  api::CallArgs a = withOp(
      callArgs(algorithms::Collective::kReduceScatter, "reduceScatter", sendbuf, recvbuf, recvcount, dtype), op);
  a.countName = "recvcount";
  return a;
}
// The vectors must hold one entry per rank; they are read during the call only (the core
// copies them into its request).
void checkRankVector(const std::vector<size_t>& v, const char* fn, const char* name, int nranks) {
  if (v.size() != static_cast<size_t>(nranks))
    throw InvalidArgument(std::string(fn) + ": " + name + " has " + std::to_string(v.size()) +
                          " entries, not one per rank (" + std::to_string(nranks) + ")");
}
api::CallArgs allgathervArgs(api::Session& s, const void* sendbuf, size_t sendcount, void* recvbuf,
                             const std::vector<size_t>& recvcounts, const std::vector<size_t>& displs,
                             DataType dtype) {
  checkRankVector(recvcounts, "allgatherv", "recvcounts", s.comm().size());
  checkRankVector(displs, "allgatherv", "displs", s.comm().size());
  api::CallArgs a = callArgs(algorithms::Collective::kAllGatherV, "allgatherv", sendbuf, recvbuf, sendcount, dtype);
  a.countName = "sendcount";
  a.recvCounts = recvcounts.data();
  a.recvDispls = displs.data();
  return a;
}
api::CallArgs reduceScattervArgs(api::Session& s, const void* sendbuf, void* recvbuf,
                                 const std::vector<size_t>& recvcounts, DataType dtype, const Reduction& op) {
  checkRankVector(recvcounts, "reduceScatterv", "recvcounts", s.comm().size());
  api::CallArgs a =
      withOp(callArgs(algorithms::Collective::kReduceScatterV, "reduceScatterv", sendbuf, recvbuf, 0, dtype), op);
  a.countName = "recvcounts";
  a.recvCounts = recvcounts.data();
  return a;
}
api::CallArgs alltoallvArgs(api::Session& s, const void* sendbuf, const std::vector<size_t>& sendcounts,
                            const std::vector<size_t>& sdispls, void* recvbuf, const std::vector<size_t>& recvcounts,
                            const std::vector<size_t>& rdispls, DataType dtype) {
  const int n = s.comm().size();
  checkRankVector(sendcounts, "alltoallv", "sendcounts", n);
  checkRankVector(sdispls, "alltoallv", "sdispls", n);
  checkRankVector(recvcounts, "alltoallv", "recvcounts", n);
  checkRankVector(rdispls, "alltoallv", "rdispls", n);
  api::CallArgs a = callArgs(algorithms::Collective::kAllToAllV, "alltoallv", sendbuf, recvbuf, 0, dtype);
  a.sendCounts = sendcounts.data();
  a.sendDispls = sdispls.data();
  a.recvCounts = recvcounts.data();
  a.recvDispls = rdispls.data();
  return a;
}
}  // namespace

void Communicator::allgather(const void* sendbuf, void* recvbuf, size_t sendcount, DataType dtype) {
  runCall(sessionOf(impl_, "allgather"), allgatherArgs(sendbuf, recvbuf, sendcount, dtype));
}
Work Communicator::allgatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount, DataType dtype) {
  BRAID_ASYNC("allgather", allgatherArgs(sendbuf, recvbuf, sendcount, dtype));
}

void Communicator::reduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, DataType dtype, Reduction op) {
  runCall(sessionOf(impl_, "reduceScatter"), reduceScatterArgs(sendbuf, recvbuf, recvcount, dtype, op));
}
Work Communicator::reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount, DataType dtype,
                                      Reduction op) {
  BRAID_ASYNC("reduceScatter", reduceScatterArgs(sendbuf, recvbuf, recvcount, dtype, op));
}

void Communicator::alltoall(const void* sendbuf, void* recvbuf, size_t count, DataType dtype) {
  runCall(sessionOf(impl_, "alltoall"),
          callArgs(algorithms::Collective::kAllToAll, "alltoall", sendbuf, recvbuf, count, dtype));
}
Work Communicator::alltoallAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype) {
  BRAID_ASYNC("alltoall", callArgs(algorithms::Collective::kAllToAll, "alltoall", sendbuf, recvbuf, count, dtype));
}

void Communicator::gather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root) {
  runCall(sessionOf(impl_, "gather"),
          withRoot(callArgs(algorithms::Collective::kGather, "gather", sendbuf, recvbuf, count, dtype), root));
}
Work Communicator::gatherAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root) {
  BRAID_ASYNC("gather", withRoot(callArgs(algorithms::Collective::kGather, "gather", sendbuf, recvbuf, count, dtype),
                                 root));
}

void Communicator::scatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root) {
  runCall(sessionOf(impl_, "scatter"),
          withRoot(callArgs(algorithms::Collective::kScatter, "scatter", sendbuf, recvbuf, count, dtype), root));
}
Work Communicator::scatterAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root) {
  BRAID_ASYNC("scatter",
              withRoot(callArgs(algorithms::Collective::kScatter, "scatter", sendbuf, recvbuf, count, dtype), root));
}

void Communicator::allgatherv(const void* sendbuf, size_t sendcount, void* recvbuf,
                              const std::vector<size_t>& recvcounts, const std::vector<size_t>& displs,
                              DataType dtype) {
  api::Session& s = sessionOf(impl_, "allgatherv");
  runCall(s, allgathervArgs(s, sendbuf, sendcount, recvbuf, recvcounts, displs, dtype));
}
Work Communicator::allgathervAsync(const void* sendbuf, size_t sendcount, void* recvbuf,
                                   const std::vector<size_t>& recvcounts, const std::vector<size_t>& displs,
                                   DataType dtype) {
  BRAID_ASYNC("allgatherv", allgathervArgs(s, sendbuf, sendcount, recvbuf, recvcounts, displs, dtype));
}

void Communicator::reduceScatterv(const void* sendbuf, void* recvbuf, const std::vector<size_t>& recvcounts,
                                  DataType dtype, Reduction op) {
  api::Session& s = sessionOf(impl_, "reduceScatterv");
  runCall(s, reduceScattervArgs(s, sendbuf, recvbuf, recvcounts, dtype, op));
}
Work Communicator::reduceScattervAsync(const void* sendbuf, void* recvbuf, const std::vector<size_t>& recvcounts,
                                       DataType dtype, Reduction op) {
  BRAID_ASYNC("reduceScatterv", reduceScattervArgs(s, sendbuf, recvbuf, recvcounts, dtype, op));
}

void Communicator::alltoallv(const void* sendbuf, const std::vector<size_t>& sendcounts,
                             const std::vector<size_t>& sdispls, void* recvbuf, const std::vector<size_t>& recvcounts,
                             const std::vector<size_t>& rdispls, DataType dtype) {
  api::Session& s = sessionOf(impl_, "alltoallv");
  runCall(s, alltoallvArgs(s, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype));
}
Work Communicator::alltoallvAsync(const void* sendbuf, const std::vector<size_t>& sendcounts,
                                  const std::vector<size_t>& sdispls, void* recvbuf,
                                  const std::vector<size_t>& recvcounts, const std::vector<size_t>& rdispls,
                                  DataType dtype) {
  BRAID_ASYNC("alltoallv", alltoallvArgs(s, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype));
}

void Communicator::barrier() {
  runCall(sessionOf(impl_, "barrier"),
          callArgs(algorithms::Collective::kBarrier, "barrier", nullptr, nullptr, 0, DataType::kUint8));
}
Work Communicator::barrierAsync() {
  BRAID_ASYNC("barrier", callArgs(algorithms::Collective::kBarrier, "barrier", nullptr, nullptr, 0, DataType::kUint8));
}

void Communicator::send(const void* buf, size_t count, DataType dtype, int peer) {
  api::Session& s = sessionOf(impl_, "send");
  auto m = s.prepareP2P("send", true, buf, count, static_cast<int>(dtype), peer, tStream);
  if (!m.isOk()) throwStatus(m.status());
  check(s.run(api::Session::p2pCall({m.value()}, "send")));
}

void Communicator::recv(void* buf, size_t count, DataType dtype, int peer) {
  api::Session& s = sessionOf(impl_, "recv");
  auto m = s.prepareP2P("recv", false, buf, count, static_cast<int>(dtype), peer, tStream);
  if (!m.isOk()) throwStatus(m.status());
  check(s.run(api::Session::p2pCall({m.value()}, "recv")));
}

void Communicator::sendRecv(const std::vector<P2POp>& ops) {
  api::Session& s = sessionOf(impl_, "sendRecv");
  check(s.run(api::Session::p2pCall(preparedP2P(s, ops), "sendRecv")));
}

Work Communicator::sendRecvAsync(const std::vector<P2POp>& ops) {
  api::Session& s = sessionOf(impl_, "sendRecvAsync");
  Work w;
  w.impl_ = submitCall(s, api::Session::p2pCall(preparedP2P(s, ops), "sendRecv"), "sendRecv");
  return w;
}

#undef BRAID_ASYNC

void Communicator::checkAsyncError() { check(sessionOf(impl_, "checkAsyncError").asyncError()); }

Communicator Communicator::split(int color, int key) {
  auto child = sessionOf(impl_, "split").split("split", color, key);
  if (!child.isOk()) throwStatus(child.status());
  if (!child.value()) return Communicator(std::unique_ptr<Impl>());
  auto impl = std::make_unique<Impl>();
  impl->session = std::move(child).value();
  return Communicator(std::move(impl));
}

void Communicator::abort() { sessionOf(impl_, "abort").abort(); }

void Communicator::revoke() { sessionOf(impl_, "revoke").revoke(); }

braidUniqueId Communicator::growId(int newSize) {
  braidUniqueId id{};
  check(sessionOf(impl_, "growId").growId(newSize, &id));
  return id;
}

Communicator Communicator::grow(int newSize, const braidUniqueId& growId) {
  auto child = sessionOf(impl_, "grow").grow("grow", newSize, growId);
  if (!child.isOk()) throwStatus(child.status());
  auto impl = std::make_unique<Impl>();
  impl->session = std::move(child).value();
  return Communicator(std::move(impl));
}

Communicator Communicator::joinGrow(int newSize, const braidUniqueId& growId, int rank) {
  return Communicator(std::unique_ptr<Impl>(fromSession(api::Session::joinGrow("joinGrow", newSize, growId, rank))));
}

int Communicator::joinersWaiting() {
  auto n = sessionOf(impl_, "joinersWaiting").joinersWaiting();
  if (!n.isOk()) throwStatus(n.status());
  return n.value();
}

Communicator Communicator::growJoiners() {
  auto child = sessionOf(impl_, "growJoiners").growJoiners("growJoiners");
  if (!child.isOk()) throwStatus(child.status());
  if (!child.value()) return Communicator(std::unique_ptr<Impl>());
  auto impl = std::make_unique<Impl>();
  impl->session = std::move(child).value();
  return Communicator(std::move(impl));
}

int Communicator::epoch() const { return sessionOf(impl_, "epoch").comm().epoch(); }

Communicator Communicator::shrink(const std::vector<int>& exclude, bool abortPending) {
  auto child = sessionOf(impl_, "shrink").shrink("shrink", exclude, abortPending);
  if (!child.isOk()) throwStatus(child.status());
  auto impl = std::make_unique<Impl>();
  impl->session = std::move(child).value();
  return Communicator(std::move(impl));
}

int Communicator::agree(int flag, std::vector<int>* failed) {
  api::Session& s = sessionOf(impl_, "agree");
  check(s.agree("agree", &flag));
  if (failed) *failed = s.failedRanks();
  return flag;
}

}  // namespace braid
