#include "backend.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "collectives.h"
#include "store_adapter.h"

namespace braid_torch {

namespace {

// The queue whose thread is running this code, if any: a collective issued from inside a
// running task (a future callback, e.g. PowerSGD's `then` that all-reduces again and waits)
// runs inline instead of queueing behind the task that is waiting for it.
thread_local TaskQueue* tCurrentQueue = nullptr;

template <typename E>
std::exception_ptr makeError(const std::string& msg) {
  try {
    throw E(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
  } catch (...) {
    return std::current_exception();
  }
}

// braid's exceptions become torch's: DistBackendError (RuntimeError in Python) for failures
// of the job, ValueError for bad arguments; torch's own errors pass through.
std::exception_ptr toTorchError(const char* what, const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const braid::RemoteError& err) {
    std::string msg = std::string("braid ") + what + " failed: " + err.what();
    if (err.rank() >= 0 && msg.find("rank " + std::to_string(err.rank())) == std::string::npos)
      msg += " (failed rank " + std::to_string(err.rank()) + ")";
    return makeError<c10::DistBackendError>(msg);
  } catch (const braid::TimeoutError& err) {
    std::string msg = std::string("braid ") + what + " timed out: " + err.what();
    if (err.rank() >= 0) msg += " (stalled rank " + std::to_string(err.rank()) + ")";
    return makeError<c10::DistBackendError>(msg);
  } catch (const braid::InvalidArgument& err) {
    return makeError<c10::ValueError>(std::string("braid ") + what + ": " + err.what());
  } catch (const braid::Error& err) {
    return makeError<c10::DistBackendError>(std::string("braid ") + what + " failed: " + err.what());
  } catch (const c10::Error&) {
    return e;
  } catch (const std::exception& err) {
    return makeError<c10::DistBackendError>(std::string("braid ") + what + " failed: " + err.what());
  }
}

// Runs `fn`; its exception, as torch's, or null.
std::exception_ptr runGuarded(const WorkList& works, const std::function<void()>& fn) {
  try {
    fn();
    return nullptr;
  } catch (...) {
    const char* what = works.empty() ? "operation" : nullptr;
    std::string name = what ? what : c10d::opTypeToString(works.front()->retrieveOpType());
    if (works.size() > 1) name = "point-to-point batch";
    return toTorchError(name.c_str(), std::current_exception());
  }
}

// Makes `stream` the current one of its device on this thread for a scope.
class CurrentStream {
 public:
  CurrentStream(const c10::impl::VirtualGuardImpl& impl, const c10::Stream& stream)
      : impl_(impl), previous_(impl.exchangeStream(stream)) {}
  ~CurrentStream() { impl_.exchangeStream(previous_); }

 private:
  const c10::impl::VirtualGuardImpl& impl_;
  c10::Stream previous_;
};

// A CUDA task: issued onto its stream, which is current (with its device) meanwhile, so that
// the torch-side copies around the braid call, and the events the Works and their futures
// record, are ordered with it.
void runOnStream(const Task& task) {
  const c10::Stream& stream = *task.stream;
  std::exception_ptr error;
  try {
    c10::DeviceGuard deviceGuard(stream.device());
    c10::impl::VirtualGuardImpl impl(stream.device_type());
    CurrentStream current(impl, stream);
    error = runGuarded(task.works, [&] {
      {
        braid::StreamGuard streamGuard(stream.native_handle());
        task.fn();
      }
      // The user's memory is in use on `stream` until it passes this point, whatever
      // stream the caching allocator gave it out on.
      for (const at::Tensor& t : task.touched)
        if (t.defined() && t.storage().data_ptr().get()) impl.recordDataPtrOnStream(t.storage().data_ptr(), stream);
      for (auto& w : task.works) w->recordOn(stream);
    });
    if (!error) {
      for (auto& w : task.works) w->complete(nullptr);
      return;
    }
  } catch (...) {
    error = toTorchError("CUDA stream setup", std::current_exception());
  }
  for (auto& w : task.works)
    if (!w->c10d::Work::isCompleted()) w->complete(error);
}

void runTask(const Task& task) {
  if (task.stream) {
    runOnStream(task);
    return;
  }
  std::exception_ptr error = runGuarded(task.works, task.fn);
  for (auto& w : task.works) w->complete(error);
}

void checkTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK_VALUE(t.defined(), "braid: ", what, " is undefined");
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), "braid: ", what, " is on ", t.device(),
                    "; the braid backend handles CPU and CUDA tensors");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "braid: ", what, " has layout ", t.layout(),
                    "; only dense (strided) tensors are supported");
  braidType(t.scalar_type());
}

void checkSingle(const std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK_VALUE(ts.size() == 1, "braid: ", what, " takes one tensor per process, got ", ts.size());
  checkTensor(ts[0], what);
}

void checkSameType(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK_VALUE(a.scalar_type() == b.scalar_type(), "braid: ", what, ": output dtype ", a.scalar_type(),
                    " differs from input dtype ", b.scalar_type());
}

// The device every tensor of one call is on (CPU when there are none).
c10::Device callDevice(c10d::OpType type, const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  const at::Tensor* first = nullptr;
  for (const auto* list : {&a, &b}) {
    for (const at::Tensor& t : *list) {
      if (!t.defined()) continue;
      if (!first) first = &t;
      TORCH_CHECK_VALUE(t.device() == first->device(), "braid ", c10d::opTypeToString(type), ": tensors on ",
                        first->device(), " and ", t.device(), "; one call takes tensors of one device");
    }
  }
  return first ? first->device() : c10::Device(c10::kCPU);
}

// A contiguous tensor with t's values: t itself when it already is (the common case, no
// copy), else a copy. Outputs computed into a copy are written back with writeBack.
at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
void writeBack(at::Tensor& user, const at::Tensor& work) {
  if (!user.is_same(work)) user.copy_(work);
}

}  // namespace

// ---- BraidWork ---------------------------------------------------------------------------

BraidWork::BraidWork(c10d::OpType type, std::vector<at::Tensor> outputs, c10::Device device)
    : c10d::Work(-1, type), outputs_(std::move(outputs)), device_(device),
      future_(device.is_cpu()
                  ? c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))
                  : c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                             std::vector<c10::Device>{device})) {}

void BraidWork::recordOn(const c10::Stream& stream) {
  event_.emplace(stream.device_type());
  event_->record(stream);
}

bool BraidWork::isCompleted() {
  if (!c10d::Work::isCompleted()) return false;
  return !event_ || event_->query();
}

void BraidWork::synchronize() {
  if (!event_) return;
  c10::impl::VirtualGuardImpl impl(device_.type());
  event_->block(impl.getStream(device_));
}

void BraidWork::complete(std::exception_ptr error) {
  // The future first, whose callbacks run here, on the worker thread, in issue order; then
  // the Work's own state. ProcessGroupGloo keeps the same order, and callers rely on it: once
  // wait() returns, the future is complete and a callback chained to it then runs inline,
  // at once, in the caller's thread (torchft builds its callback chains on that).
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
  finish(error);
}

// ---- TaskQueue ---------------------------------------------------------------------------

TaskQueue::TaskQueue(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { loop(); });
}

TaskQueue::~TaskQueue() { stop(); }

void TaskQueue::push(Task task) {
  if (tCurrentQueue == this) {
    runTask(task);
    return;
  }
  // A CUDA call on a stream being captured into a graph (torch.cuda.graph) must reach the
  // stream before the capture ends: it runs here, on the capturing thread, once the worker
  // has run everything queued before it (and holds there meanwhile).
  if (task.stream && braid::StreamGuard::capturing(task.stream->native_handle())) {
    runInTurn(std::move(task));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      q_.push_back(std::move(task));
      cv_.notify_one();
      return;
    }
  }
  auto err = makeError<c10::DistBackendError>("braid: the process group is shut down (" + name_ + ")");
  for (auto& w : task.works) w->complete(err);
}

void TaskQueue::runInTurn(Task task) {
  bool stopped = false;
  {
    // Once the worker has run everything queued before this call, it holds until this
    // call has run.
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return stop_ || (q_.empty() && !running_ && !held_); });
    stopped = stop_;
    held_ = !stopped;
  }
  if (stopped) {
    auto err = makeError<c10::DistBackendError>("braid: the process group is shut down (" + name_ + ")");
    for (auto& w : task.works) w->complete(err);
    return;
  }
  runTask(task);
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
  }
  cv_.notify_all();
  idle_.notify_all();
}

void TaskQueue::failPending(const std::exception_ptr& error) {
  decltype(q_) pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(q_);
  }
  idle_.notify_all();
  for (auto& task : pending)
    for (auto& w : task.works) w->complete(error);
}

void TaskQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) thread_.join();
  if (thread_.joinable()) thread_.detach();  // stop() from a callback on our own thread
}

void TaskQueue::loop() {
  tCurrentQueue = this;
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (stop_ || !q_.empty()) && !held_; });
      if (q_.empty()) return;  // stopped and drained
      task = std::move(q_.front());
      q_.pop_front();
      running_ = true;
    }
    runTask(task);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
    }
    idle_.notify_all();
  }
}

// ---- BraidBackend ------------------------------------------------------------------------

// ---- P2PWork -----------------------------------------------------------------------------

P2PWork::P2PWork(c10d::OpType type, std::vector<at::Tensor> outputs, c10::Device device, int peer,
                 std::function<void()> flush)
    : BraidWork(type, std::move(outputs), device), peer_(peer), flush_(std::move(flush)) {}

bool P2PWork::wait(std::chrono::milliseconds timeout) {
  flush_();
  return BraidWork::wait(timeout);
}

bool P2PWork::isCompleted() {
  flush_();
  return BraidWork::isCompleted();
}

c10::intrusive_ptr<c10::ivalue::Future> P2PWork::getFuture() {
  flush_();
  return BraidWork::getFuture();
}

// ---- Issuer ------------------------------------------------------------------------------

Issuer::Issuer(std::shared_ptr<braid::Communicator> comm, std::string name)
    : comm_(std::move(comm)), queue_(std::move(name)) {}

void Issuer::collective(c10::intrusive_ptr<BraidWork> work, std::function<void()> fn, std::vector<at::Tensor> touched) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  flushLocked();
  Task task{{work}, std::move(fn), std::nullopt, std::move(touched)};
  if (work->device().is_cuda()) task.stream = c10::impl::VirtualGuardImpl(c10::kCUDA).getStream(work->device());
  queue_.push(std::move(task));
}

void Issuer::p2p(c10::intrusive_ptr<BraidWork> work, bool isSend, at::Tensor tensor, int peer) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::optional<c10::Stream> stream;
  if (tensor.is_cuda()) stream = c10::impl::VirtualGuardImpl(tensor.device().type()).getStream(tensor.device());
  pending_.push_back(Msg{isSend, std::move(tensor), peer, stream});
  pendingWorks_.push_back(std::move(work));
}

void Issuer::flush() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  flushLocked();
}

void Issuer::flushLocked() {
  if (pending_.empty()) return;
  std::vector<Msg> msgs;
  msgs.swap(pending_);
  WorkList works;
  works.swap(pendingWorks_);
  auto comm = comm_;
  auto batch = [comm, msgs]() mutable {
    // One sendRecv over contiguous buffers (copies of strided tensors, written back after).
    std::vector<braid::P2POp> ops;
    std::vector<at::Tensor> bufs;
    ops.reserve(msgs.size());
    bufs.reserve(msgs.size());
    for (auto& m : msgs) {
      bufs.push_back(dense(m.tensor));
      braid::P2POp op;
      op.isSend = m.isSend;
      op.buf = bufs.back().data_ptr();
      op.count = static_cast<size_t>(bufs.back().numel());
      op.dtype = braidType(bufs.back().scalar_type());
      op.peer = m.peer;
      ops.push_back(op);
    }
    comm->sendRecv(ops);
    for (size_t i = 0; i < msgs.size(); ++i)
      if (!msgs[i].isSend) writeBack(msgs[i].tensor, bufs[i]);
  };
  const c10::Device device = msgs.front().tensor.device();
  for (const Msg& m : msgs) {
    if (m.tensor.device() == device) continue;
    auto mixed = makeError<c10::ValueError>(c10::str("braid point-to-point batch: tensors on ", device, " and ",
                                                     m.tensor.device(), "; one batch takes tensors of one device"));
    for (auto& w : works) w->complete(mixed);
    return;
  }
  Task task{std::move(works), std::move(batch), msgs.front().stream, {}};
  if (task.stream)
    for (const Msg& m : msgs) task.touched.push_back(m.tensor);
  queue_.push(std::move(task));
}

void Issuer::failPending(const std::exception_ptr& error) {
  WorkList works;
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    pending_.clear();
    works.swap(pendingWorks_);
    queue_.failPending(error);
  }
  for (auto& w : works) w->complete(error);
}

void Issuer::stop() {
  flush();
  queue_.stop();
}

// ---- BraidBackend ------------------------------------------------------------------------

BraidBackend::BraidBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           std::chrono::milliseconds timeout, const std::string& keyPrefix)
    : c10d::Backend(rank, size), store_(store) {
  try {
    comm_ = std::make_shared<braid::Communicator>(
        braid::Communicator::fromStore(std::make_shared<C10dStoreAdapter>(store), rank, size, keyPrefix, timeout));
  } catch (...) {
    std::rethrow_exception(toTorchError("init", std::current_exception()));
  }
  issuer_ = std::make_shared<Issuer>(comm_, "rank " + std::to_string(rank));
}

BraidBackend::BraidBackend(const c10::intrusive_ptr<c10d::Store>& store, braid::Communicator comm)
    : c10d::Backend(comm.rank(), comm.size()), store_(store) {
  comm_ = std::make_shared<braid::Communicator>(std::move(comm));
  issuer_ = std::make_shared<Issuer>(comm_, "rank " + std::to_string(rank_));
}

BraidBackend::~BraidBackend() { shutdown(); }

std::exception_ptr BraidBackend::closedError(const char* why) const {
  return makeError<c10::DistBackendError>(std::string("braid: the process group was ") + why);
}

c10::intrusive_ptr<c10d::Work> BraidBackend::enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                    std::vector<at::Tensor> inputs, std::function<void()> fn) {
  const c10::Device device = callDevice(type, outputs, inputs);
  auto work = c10::make_intrusive<BraidWork>(type, outputs, device);
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    if (shutDown_) {
      work->complete(closedError("shut down"));
      return work;
    }
  }
  if (device.is_cuda()) inputs.insert(inputs.end(), outputs.begin(), outputs.end());
  else inputs.clear();
  issuer_->collective(work, std::move(fn), std::move(inputs));
  return work;
}

c10::intrusive_ptr<c10d::Work> BraidBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  checkSingle(tensors, "broadcast");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_, "braid broadcast: root ", opts.rootRank,
                    " is outside [0, ", size_, ")");
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "braid broadcast: rootTensor must be 0");
  at::Tensor t = tensors[0];
  int root = static_cast<int>(opts.rootRank);
  auto comm = comm_;
  return enqueue(c10d::OpType::BROADCAST, tensors, {}, [comm, t, root]() mutable {
    at::Tensor w = dense(t);
    broadcastInPlace(*comm, w, root);
    writeBack(t, w);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].layout() == at::kSparse) {
    // Sparse COO, as gloo: every rank's indices and values gathered, then coalesced (the sum).
    at::Tensor t = tensors[0];
    TORCH_CHECK_VALUE(t.device().is_cpu(), "braid: sparse all_reduce takes CPU tensors, got one on ", t.device());
    TORCH_CHECK_VALUE(opts.reduceOp == c10d::ReduceOp::SUM, "braid: sparse all_reduce supports only SUM (as gloo)");
    braidType(t.scalar_type());
    auto comm = comm_;
    return enqueue(c10d::OpType::ALLREDUCE, tensors, {}, [comm, t]() mutable { allreduceSparse(*comm, t); });
  }
  checkSingle(tensors, "allreduce");
  TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(), "braid: sparse allreduce is not supported");
  checkReduce(tensors[0].scalar_type(), opts.reduceOp);
  at::Tensor t = tensors[0];
  c10d::ReduceOp op = opts.reduceOp;
  auto comm = comm_;
  return enqueue(c10d::OpType::ALLREDUCE, tensors, {}, [comm, t, op]() mutable {
    at::Tensor w = dense(t);
    allreduceInPlace(*comm, w, op);
    writeBack(t, w);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "braid allreduce_coalesced: no tensors");
  for (auto& t : tensors) {
    checkTensor(t, "allreduce_coalesced");
    checkReduce(t.scalar_type(), opts.reduceOp);
  }
  c10d::ReduceOp op = opts.reduceOp;
  auto comm = comm_;
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, tensors, {}, [comm, tensors, op]() mutable {
    // One braid call per dtype over the tensors flattened into one buffer: fewer, larger
    // messages, as the coalesced API intends. Groups in first-appearance order so that every
    // rank (which passes the same list) issues the same calls.
    std::vector<at::ScalarType> order;
    for (auto& t : tensors)
      if (std::find(order.begin(), order.end(), t.scalar_type()) == order.end()) order.push_back(t.scalar_type());
    for (at::ScalarType st : order) {
      std::vector<at::Tensor> group;
      for (auto& t : tensors)
        if (t.scalar_type() == st) group.push_back(t.reshape(-1));
      at::Tensor flat = at::cat(group);
      allreduceInPlace(*comm, flat, op);
      int64_t off = 0;
      for (auto& t : tensors) {
        if (t.scalar_type() != st) continue;
        t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    }
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  checkSingle(tensors, "reduce");
  checkReduce(tensors[0].scalar_type(), opts.reduceOp);
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_, "braid reduce: root ", opts.rootRank,
                    " is outside [0, ", size_, ")");
  at::Tensor t = tensors[0];
  c10d::ReduceOp op = opts.reduceOp;
  int root = static_cast<int>(opts.rootRank);
  auto comm = comm_;
  return enqueue(c10d::OpType::REDUCE, tensors, {}, [comm, t, op, root]() mutable {
    at::Tensor w = dense(t);
    reduceInPlace(*comm, w, op, root);
    writeBack(t, w);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions& opts) {
  checkSingle(inputs, "allgather input");
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                    "braid allgather: expects one output list of ", size_, " tensors");
  for (auto& o : outputs[0]) {
    checkTensor(o, "allgather output");
    checkSameType(o, inputs[0], "allgather");
  }
  TORCH_CHECK_VALUE(outputs[0][rank_].numel() == inputs[0].numel(), "braid allgather: output ", rank_, " has ",
                    outputs[0][rank_].numel(), " elements, the input ", inputs[0].numel());
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  auto comm = comm_;
  return enqueue(c10d::OpType::ALLGATHER, outs, {in}, [comm, in, outs]() mutable {
    std::vector<at::Tensor> w;
    for (auto& o : outs) w.push_back(dense(o));
    allgatherList(*comm, in, w);
    for (size_t i = 0; i < outs.size(); ++i) writeBack(outs[i], w[i]);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::all_gather_single(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  checkTensor(input, "all_gather_into_tensor input");
  checkTensor(output, "all_gather_into_tensor output");
  checkSameType(output, input, "all_gather_into_tensor");
  TORCH_CHECK_VALUE(output.numel() == input.numel() * size_, "braid all_gather_into_tensor: output has ",
                    output.numel(), " elements, expected ", size_, " x ", input.numel());
  at::Tensor in = input, out = output;
  auto comm = comm_;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {output}, {input}, [comm, in, out]() mutable {
    at::Tensor w = dense(out);
    allgatherInto(*comm, dense(in), w);
    writeBack(out, w);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                                std::vector<at::Tensor>& inputs,
                                                                const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputLists.size() == static_cast<size_t>(size_),
                    "braid allgather_coalesced: expects one output list per rank");
  for (auto& t : inputs) checkTensor(t, "allgather_coalesced input");
  for (auto& l : outputLists) {
    TORCH_CHECK_VALUE(l.size() == inputs.size(), "braid allgather_coalesced: each output list needs ",
                      inputs.size(), " tensors");
    for (size_t i = 0; i < l.size(); ++i) {
      checkTensor(l[i], "allgather_coalesced output");
      checkSameType(l[i], inputs[i], "allgather_coalesced");
    }
  }
  std::vector<at::Tensor> flatOuts;
  for (auto& l : outputLists) flatOuts.insert(flatOuts.end(), l.begin(), l.end());
  auto comm = comm_;
  auto lists = outputLists;
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, flatOuts, inputs, [comm, inputs, lists]() mutable {
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<at::Tensor> w, user;
      for (auto& l : lists) {
        user.push_back(l[i]);
        w.push_back(dense(l[i]));
      }
      allgatherList(*comm, inputs[i], w);
      for (size_t r = 0; r < w.size(); ++r) writeBack(user[r], w[r]);
    }
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                        std::vector<at::Tensor>& inputs,
                                                                        const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "braid all_gather_into_tensor_coalesced: ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(inputs[i], "all_gather_into_tensor_coalesced input");
    checkTensor(outputs[i], "all_gather_into_tensor_coalesced output");
    checkSameType(outputs[i], inputs[i], "all_gather_into_tensor_coalesced");
    TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * size_,
                      "braid all_gather_into_tensor_coalesced: output ", i, " has ", outputs[i].numel(),
                      " elements, expected ", size_, " x ", inputs[i].numel());
  }
  auto comm = comm_;
  return enqueue(c10d::OpType::COALESCED, outputs, inputs, [comm, inputs, outputs]() mutable {
    for (size_t i = 0; i < inputs.size(); ++i) {
      at::Tensor w = dense(outputs[i]);
      allgatherInto(*comm, dense(inputs[i]), w);
      writeBack(outputs[i], w);
    }
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  checkSingle(inputs, "gather input");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK_VALUE(root >= 0 && root < size_, "braid gather: root ", root, " is outside [0, ", size_, ")");
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                      "braid gather: the root needs one output list of ", size_, " tensors");
    for (auto& o : outputs[0]) {
      checkTensor(o, "gather output");
      checkSameType(o, inputs[0], "gather");
      TORCH_CHECK_VALUE(o.numel() == inputs[0].numel(), "braid gather: every output must have the input's ",
                        inputs[0].numel(), " elements");
    }
    outs = outputs[0];
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), "braid gather: only the root passes outputs");
  }
  at::Tensor in = inputs[0];
  auto comm = comm_;
  return enqueue(c10d::OpType::GATHER, outs, {in}, [comm, in, outs, root]() mutable {
    std::vector<at::Tensor> w;
    for (auto& o : outs) w.push_back(dense(o));
    gatherList(*comm, in, w, root);
    for (size_t i = 0; i < outs.size(); ++i) writeBack(outs[i], w[i]);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions& opts) {
  checkSingle(outputs, "scatter output");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK_VALUE(root >= 0 && root < size_, "braid scatter: root ", root, " is outside [0, ", size_, ")");
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                      "braid scatter: the root needs one input list of ", size_, " tensors");
    for (auto& i : inputs[0]) {
      checkTensor(i, "scatter input");
      checkSameType(outputs[0], i, "scatter");
      TORCH_CHECK_VALUE(i.numel() == outputs[0].numel(), "braid scatter: every input must have the output's ",
                        outputs[0].numel(), " elements");
    }
    ins = inputs[0];
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(), "braid scatter: only the root passes inputs");
  }
  at::Tensor out = outputs[0];
  auto comm = comm_;
  return enqueue(c10d::OpType::SCATTER, outputs, ins, [comm, ins, out, root]() mutable {
    std::vector<at::Tensor> w;
    for (auto& i : ins) w.push_back(dense(i));
    at::Tensor o = dense(out);
    scatterList(*comm, w, o, root);
    writeBack(out, o);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ReduceScatterOptions& opts) {
  checkSingle(outputs, "reduce_scatter output");
  checkReduce(outputs[0].scalar_type(), opts.reduceOp);
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                    "braid reduce_scatter: expects one input list of ", size_, " tensors");
  for (auto& i : inputs[0]) {
    checkTensor(i, "reduce_scatter input");
    checkSameType(outputs[0], i, "reduce_scatter");
  }
  // Inputs may differ in size (uneven reduce_scatter, braid's reduceScatterv); this rank's
  // block is the output's.
  TORCH_CHECK_VALUE(inputs[0][rank_].numel() == outputs[0].numel(), "braid reduce_scatter: input ", rank_, " has ",
                    inputs[0][rank_].numel(), " elements, the output ", outputs[0].numel());
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins = inputs[0];
  c10d::ReduceOp op = opts.reduceOp;
  auto comm = comm_;
  return enqueue(c10d::OpType::REDUCE_SCATTER, outputs, ins, [comm, ins, out, op]() mutable {
    at::Tensor o = dense(out);
    reduceScatterList(*comm, ins, o, op);
    writeBack(out, o);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "reduce_scatter_tensor input");
  checkTensor(output, "reduce_scatter_tensor output");
  checkSameType(output, input, "reduce_scatter_tensor");
  checkReduce(input.scalar_type(), opts.reduceOp);
  TORCH_CHECK_VALUE(input.numel() == output.numel() * size_, "braid reduce_scatter_tensor: input has ",
                    input.numel(), " elements, expected ", size_, " x ", output.numel());
  at::Tensor in = input, out = output;
  c10d::ReduceOp op = opts.reduceOp;
  auto comm = comm_;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, {input}, [comm, in, out, op]() mutable {
    at::Tensor o = dense(out);
    reduceScatterInto(*comm, in, o, op);
    writeBack(out, o);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                            std::vector<at::Tensor>& inputs,
                                                                            const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "braid reduce_scatter_tensor_coalesced: ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(inputs[i], "reduce_scatter_tensor_coalesced input");
    checkTensor(outputs[i], "reduce_scatter_tensor_coalesced output");
    checkSameType(outputs[i], inputs[i], "reduce_scatter_tensor_coalesced");
    checkReduce(inputs[i].scalar_type(), opts.reduceOp);
    TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * size_,
                      "braid reduce_scatter_tensor_coalesced: input ", i, " has ", inputs[i].numel(),
                      " elements, expected ", size_, " x ", outputs[i].numel());
  }
  c10d::ReduceOp op = opts.reduceOp;
  auto comm = comm_;
  return enqueue(c10d::OpType::COALESCED, outputs, inputs, [comm, inputs, outputs, op]() mutable {
    for (size_t i = 0; i < inputs.size(); ++i) {
      at::Tensor o = dense(outputs[i]);
      reduceScatterInto(*comm, inputs[i], o, op);
      writeBack(outputs[i], o);
    }
  });
}

namespace {

// Element counts per peer of an all_to_all_single split along dim 0.
std::vector<int64_t> splitCounts(const at::Tensor& t, const std::vector<int64_t>& splits, int n, const char* what) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t rowElems = rows == 0 ? 0 : t.numel() / rows;
  std::vector<int64_t> counts(n);
  if (splits.empty()) {
    TORCH_CHECK_VALUE(rows % n == 0, "braid all_to_all_single: ", what, " dim 0 (", rows,
                      ") is not divisible by the group size ", n, "; pass split sizes");
    for (auto& c : counts) c = rows / n * rowElems;
  } else {
    TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == n, "braid all_to_all_single: ", what, " has ",
                      splits.size(), " split sizes for ", n, " ranks");
    int64_t sum = 0;
    for (int i = 0; i < n; ++i) {
      TORCH_CHECK_VALUE(splits[i] >= 0, "braid all_to_all_single: negative split size");
      sum += splits[i];
      counts[i] = splits[i] * rowElems;
    }
    TORCH_CHECK_VALUE(sum == rows, "braid all_to_all_single: ", what, " split sizes add up to ", sum,
                      ", dim 0 is ", rows);
  }
  return counts;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> BraidBackend::all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& outputSplits,
                                                               std::vector<int64_t>& inputSplits,
                                                               const c10d::AllToAllOptions& opts) {
  checkTensor(input, "all_to_all_single input");
  checkTensor(output, "all_to_all_single output");
  checkSameType(output, input, "all_to_all_single");
  std::vector<int64_t> sendCounts = splitCounts(input, inputSplits, size_, "input");
  std::vector<int64_t> recvCounts = splitCounts(output, outputSplits, size_, "output");
  at::Tensor in = input, out = output;
  auto comm = comm_;
  // No split sizes on either side: torch's even all_to_all, braid's alltoall.
  const bool even = inputSplits.empty() && outputSplits.empty();
  return enqueue(c10d::OpType::ALLTOALL_BASE, {output}, {input}, [comm, in, out, sendCounts, recvCounts, even]() mutable {
    at::Tensor o = dense(out);
    alltoallv(*comm, dense(in), sendCounts, o, recvCounts, even);
    writeBack(out, o);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions& opts) {
  TORCH_CHECK_VALUE(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
                    "braid all_to_all: expects ", size_, " input and output tensors");
  std::vector<int64_t> sendCounts, recvCounts;
  for (int i = 0; i < size_; ++i) {
    checkTensor(inputs[i], "all_to_all input");
    checkTensor(outputs[i], "all_to_all output");
    checkSameType(outputs[i], inputs[0], "all_to_all");
    checkSameType(inputs[i], inputs[0], "all_to_all");
    sendCounts.push_back(inputs[i].numel());
    recvCounts.push_back(outputs[i].numel());
  }
  auto comm = comm_;
  return enqueue(c10d::OpType::ALLTOALL, outputs, inputs, [comm, inputs, outputs, sendCounts, recvCounts]() mutable {
    std::vector<at::Tensor> flat;
    for (auto& i : inputs) flat.push_back(i.reshape(-1));
    int64_t total = 0;
    for (auto c : recvCounts) total += c;
    at::Tensor recv = at::empty({total}, inputs[0].options());
    alltoallv(*comm, at::cat(flat), sendCounts, recv, recvCounts, /*even=*/false);
    int64_t off = 0;
    for (size_t i = 0; i < outputs.size(); ++i) {
      outputs[i].copy_(recv.narrow(0, off, recvCounts[i]).view(outputs[i].sizes()));
      off += recvCounts[i];
    }
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::barrier(const c10d::BarrierOptions& opts) {
  auto comm = comm_;
  return enqueue(c10d::OpType::BARRIER, {}, {}, [comm]() { comm->barrier(); });
}

void BraidBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  using Clock = std::chrono::steady_clock;
  const std::chrono::milliseconds timeout = opts.timeout;
  const std::string base = "braid/monitored_barrier/" + std::to_string(monitoredSeq_++) + "/";
  auto arrived = [&](int r) { return base + "arrived/" + std::to_string(r); };
  const std::string release = base + "release";
  const std::string tail = " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) + " ms";
  auto bytes = [](const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); };

  if (rank_ != 0) {
    store_->set(arrived(rank_), bytes("1"));
    std::string outcome;
    try {
      store_->wait({release}, timeout);
      std::vector<uint8_t> v = store_->get(release);
      outcome.assign(v.begin(), v.end());
    } catch (const std::exception& e) {
      outcome = std::string("rank 0 did not release it within ") + std::to_string(timeout.count()) + " ms: " + e.what();
    }
    // The last rank to read the outcome removes it.
    if (store_->add(base + "read", 1) == size_ - 1) store_->deleteKey(release);
    if (outcome != "ok") {
      C10_THROW_ERROR(DistBackendError, "Rank " + std::to_string(rank_) +
                                            " successfully reached monitoredBarrier, but received errors while "
                                            "waiting for rank 0: " + outcome);
    }
    return;
  }

  const auto start = Clock::now();
  std::vector<int> failed;
  std::string firstError;
  for (int r = 1; r < size_; ++r) {
    // Failing fast, the ranks share one deadline; collecting them all, each gets the whole
    // timeout (else one late rank would use up the time of every rank after it), as gloo.
    auto left = waitAllRanks ? timeout
                             : std::chrono::duration_cast<std::chrono::milliseconds>(timeout - (Clock::now() - start));
    bool ok = false;
    try {
      if (left.count() > 0) {
        store_->wait({arrived(r)}, left);
        ok = true;
      } else {
        ok = store_->check({arrived(r)});
      }
    } catch (const std::exception& e) {
      if (firstError.empty()) firstError = e.what();
    }
    if (ok) continue;
    failed.push_back(r);
    if (!waitAllRanks) break;
  }
  for (int r = 1; r < size_; ++r) store_->deleteKey(arrived(r));
  if (failed.empty()) {
    store_->set(release, bytes("ok"));
    return;
  }
  std::string msg;
  if (!waitAllRanks) {
    msg = "[Rank 0]: Rank " + std::to_string(failed[0]) + tail;
  } else {  // gloo's wording, also for one rank
    std::string list;
    for (int r : failed) list += (list.empty() ? "" : ", ") + std::to_string(r);
    msg = "[Rank 0]: Ranks " + list + tail;
  }
  store_->set(release, bytes(msg));
  C10_THROW_ERROR(DistBackendError, firstError.empty() ? msg : msg + "\n Original exception: \n" + firstError);
}

// ---- point-to-point ---------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> BraidBackend::enqueueP2P(c10d::OpType type, std::vector<at::Tensor>& tensors,
                                                        int peer) {
  const bool isSend = type == c10d::OpType::SEND;
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    TORCH_CHECK(!shutDown_, "braid: the process group was shut down");
  }
  // The Work flushes the pending batch through a weak reference: a Work that outlives its
  // group finds nothing to flush (shutdown flushed or failed everything).
  std::weak_ptr<Issuer> weak = issuer_;
  auto work = c10::make_intrusive<P2PWork>(type, tensors, tensors[0].device(), isSend ? -1 : peer, [weak]() {
    if (auto issuer = weak.lock()) issuer->flush();
  });
  issuer_->p2p(work, isSend, tensors[0], peer);
  return work;
}

c10::intrusive_ptr<c10d::Work> BraidBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  checkSingle(tensors, "send");
  TORCH_CHECK_VALUE(dstRank >= 0 && dstRank < size_ && dstRank != rank_, "braid send: destination ", dstRank,
                    " is not another rank of [0, ", size_, ")");
  return enqueueP2P(c10d::OpType::SEND, tensors, dstRank);
}

c10::intrusive_ptr<c10d::Work> BraidBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  checkSingle(tensors, "recv");
  TORCH_CHECK_VALUE(srcRank >= 0 && srcRank < size_ && srcRank != rank_, "braid recv: source ", srcRank,
                    " is not another rank of [0, ", size_, ")");
  return enqueueP2P(c10d::OpType::RECV, tensors, srcRank);
}

// ---- lifetime ----------------------------------------------------------------------------

void BraidBackend::abort() {
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    if (shutDown_) return;
    shutDown_ = true;
  }
  // Tell the peers and fail what is running; what is still queued or pending fails without
  // running.
  auto err = closedError("aborted");
  if (comm_) comm_->abort();
  if (issuer_) {
    issuer_->failPending(err);
    issuer_->stop();
  }
}

c10::intrusive_ptr<c10d::Backend> BraidBackend::shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                                      const c10::intrusive_ptr<Options>& /*optsOverride*/) {
  std::shared_ptr<braid::Communicator> comm;
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    comm = comm_;
  }
  TORCH_CHECK(comm, "braid shrink on rank ", rank_, ": the process group was shut down");
  TORCH_CHECK_VALUE((shrinkFlags & ~1) == 0, "braid shrink on rank ", rank_, ": shrink_flags=", shrinkFlags,
                    " is neither SHRINK_DEFAULT (0) nor SHRINK_ABORT (1)");
  std::vector<int> exclude;
  for (int64_t r : ranksToExclude) {
    TORCH_CHECK_VALUE(r >= 0 && r < size_, "braid shrink on rank ", rank_, ": rank ", r, " to exclude is outside [0, ",
                      size_, ")");
    exclude.push_back(static_cast<int>(r));
  }
  const bool abortPending = (shrinkFlags & 1) != 0;
  // What is queued here has not started: with SHRINK_ABORT it fails without running. The
  // communicator itself fails what is running (every rank's, through the revocation).
  if (abortPending && issuer_) issuer_->failPending(closedError("shrunk with SHRINK_ABORT"));
  try {
    return c10::make_intrusive<BraidBackend>(store_, comm->shrink(exclude, abortPending));
  } catch (...) {
    std::rethrow_exception(toTorchError("shrink", std::current_exception()));
  }
}

void BraidBackend::revoke() {
  std::shared_ptr<braid::Communicator> comm;
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    comm = comm_;
  }
  TORCH_CHECK(comm, "braid revoke on rank ", rank_, ": the process group was shut down");
  comm->revoke();
}

std::pair<int, std::vector<int>> BraidBackend::agree(int flag) {
  std::shared_ptr<braid::Communicator> comm;
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    comm = comm_;
  }
  TORCH_CHECK(comm, "braid agree on rank ", rank_, ": the process group was shut down");
  std::vector<int> failed;
  try {
    int out = comm->agree(flag, &failed);
    return {out, failed};
  } catch (...) {
    std::rethrow_exception(toTorchError("agree", std::current_exception()));
  }
}

void BraidBackend::shutdown() {
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    shutDown_ = true;
  }
  // Finish what was issued (a pending p2p batch included), then leave: the communicator's
  // destructor waits for its pending operations and says goodbye through the store.
  if (issuer_) issuer_->stop();
  issuer_.reset();
  comm_.reset();
}

}  // namespace braid_torch
