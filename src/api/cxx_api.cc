// The C++ API: the same Session as the C API; a failed Status becomes an exception here.

#include <chrono>

#include "api/session.h"
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

  Status set(const std::string& key, const std::string& value) override {
    return guard([&] { s_->set(key, value); });
  }
  StatusOr<std::string> get(const std::string& key, Deadline deadline) override {
    std::string v;
    Status st = guard([&] { v = s_->get(key, std::chrono::milliseconds(deadline.remainingMillis(INT32_MAX))); });
    if (!st.isOk()) return st;
    return v;
  }
  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    int64_t v = 0;
    Status st = guard([&] { v = s_->add(key, delta); });
    if (!st.isOk()) return st;
    return v;
  }
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override {
    return guard([&] { s_->wait(keys, std::chrono::milliseconds(deadline.remainingMillis(INT32_MAX))); });
  }
  StatusOr<bool> check(const std::vector<std::string>& keys) override {
    bool v = false;
    Status st = guard([&] { v = s_->check(keys); });
    if (!st.isOk()) return st;
    return v;
  }
  StatusOr<bool> deleteKey(const std::string& key) override {
    bool v = false;
    Status st = guard([&] { v = s_->deleteKey(key); });
    if (!st.isOk()) return st;
    return v;
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

algorithms::Request makeRequest(algorithms::Collective coll, const void* send, const void* recv, size_t count,
                                DataType dt, int op, int root) {
  algorithms::Request r;
  r.coll = coll;
  r.count = count;
  r.dtype = static_cast<braid::DataType>(static_cast<int>(dt));
  r.op = static_cast<braid::ReduceOp>(op);
  r.root = root;
  r.inPlace = send == recv;
  return r;
}

}  // namespace

struct Work::Impl {
  std::shared_ptr<core::Op> op;
  const char* name;
};

void Work::wait() {
  if (!impl_) throw InvalidArgument("Work::wait on an empty Work");
  check(impl_->op->wait().withContext(impl_->name));
}

bool Work::test() {
  if (!impl_) throw InvalidArgument("Work::test on an empty Work");
  Status s;
  if (!impl_->op->test(&s)) return false;
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

Communicator Communicator::fromStore(std::shared_ptr<Store> store, int rank, int size, const std::string& keyPrefix) {
  if (!store) throw InvalidArgument("Communicator::fromStore: store is null");
  auto adapter = std::make_shared<StoreAdapter>(std::move(store));
  return Communicator(std::unique_ptr<Impl>(fromSession(api::Session::fromStore(adapter, rank, size, keyPrefix))));
}

Communicator Communicator::fromUniqueId(const braidUniqueId& id, int rank, int size) {
  return Communicator(std::unique_ptr<Impl>(fromSession(api::Session::fromUniqueId(id, size, rank))));
}

int Communicator::rank() const { return impl_->session->comm().rank(); }
int Communicator::size() const { return impl_->session->comm().size(); }

void Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, Reduction op) {
  api::Session& s = *impl_->session;
  check(s.validate("allreduce", sendbuf, recvbuf, count, static_cast<int>(dtype), static_cast<int>(op.op), 0, true,
                   false, nullptr));
  auto req = makeRequest(algorithms::Collective::kAllReduce, sendbuf, recvbuf, count, dtype, static_cast<int>(op.op), 0);
  req.preMul = op.preMul;
  req.preMulScalar = op.scalar;
  check(s.comm().run(req, sendbuf, recvbuf));
}

Work Communicator::allreduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, Reduction op) {
  api::Session& s = *impl_->session;
  check(s.validate("allreduceAsync", sendbuf, recvbuf, count, static_cast<int>(dtype), static_cast<int>(op.op), 0,
                   true, false, nullptr));
  auto req = makeRequest(algorithms::Collective::kAllReduce, sendbuf, recvbuf, count, dtype, static_cast<int>(op.op), 0);
  req.preMul = op.preMul;
  req.preMulScalar = op.scalar;
  auto op_ = s.comm().submit(req, sendbuf, recvbuf);
  if (!op_.isOk()) throwStatus(op_.status());
  Work w;
  w.impl_ = std::make_shared<Work::Impl>(Work::Impl{op_.value(), "allreduce"});
  return w;
}

void Communicator::broadcast(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root) {
  api::Session& s = *impl_->session;
  check(s.validate("broadcast", sendbuf, recvbuf, count, static_cast<int>(dtype), 0, root, false, true, nullptr));
  const void* in = s.comm().rank() == root ? sendbuf : recvbuf;
  check(s.comm().run(makeRequest(algorithms::Collective::kBroadcast, in, recvbuf, count, dtype, 0, root), in, recvbuf));
}

Work Communicator::broadcastAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root) {
  api::Session& s = *impl_->session;
  check(s.validate("broadcastAsync", sendbuf, recvbuf, count, static_cast<int>(dtype), 0, root, false, true, nullptr));
  const void* in = s.comm().rank() == root ? sendbuf : recvbuf;
  auto op_ = s.comm().submit(makeRequest(algorithms::Collective::kBroadcast, in, recvbuf, count, dtype, 0, root), in,
                             recvbuf);
  if (!op_.isOk()) throwStatus(op_.status());
  Work w;
  w.impl_ = std::make_shared<Work::Impl>(Work::Impl{op_.value(), "broadcast"});
  return w;
}

void Communicator::abort() { impl_->session->abort(); }

}  // namespace braid
