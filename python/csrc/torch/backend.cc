#include "backend.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

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

void runTask(const c10::intrusive_ptr<BraidWork>& work, const std::function<void()>& fn) {
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = toTorchError(c10d::opTypeToString(work->retrieveOpType()).c_str(), std::current_exception());
  }
  work->complete(error);
}

void checkTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK_VALUE(t.defined(), "braid: ", what, " is undefined");
  TORCH_CHECK_VALUE(t.device().is_cpu(), "braid: ", what, " is on ", t.device(),
                    "; the braid backend handles CPU tensors (register a GPU backend for the others)");
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

// A contiguous tensor with t's values: t itself when it already is (the common case, no
// copy), else a copy. Outputs computed into a copy are written back with writeBack.
at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
void writeBack(at::Tensor& user, const at::Tensor& work) {
  if (!user.is_same(work)) user.copy_(work);
}

}  // namespace

// ---- BraidWork ---------------------------------------------------------------------------

BraidWork::BraidWork(c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(-1, type), outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void BraidWork::complete(std::exception_ptr error) {
  // The Work's own state first, so that wait() callers wake even if a future callback runs
  // long; then the future, whose callbacks run here, on the worker thread, in issue order.
  finish(error);
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

// ---- TaskQueue ---------------------------------------------------------------------------

TaskQueue::TaskQueue(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { loop(); });
}

TaskQueue::~TaskQueue() { stop(); }

void TaskQueue::push(c10::intrusive_ptr<BraidWork> work, std::function<void()> fn) {
  if (tCurrentQueue == this) {
    runTask(work, fn);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      q_.emplace_back(std::move(work), std::move(fn));
      cv_.notify_one();
      return;
    }
  }
  work->complete(makeError<c10::DistBackendError>("braid: the process group is shut down (" + name_ + ")"));
}

void TaskQueue::failPending(const std::exception_ptr& error) {
  decltype(q_) pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(q_);
  }
  for (auto& [work, fn] : pending) work->complete(error);
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
    std::pair<c10::intrusive_ptr<BraidWork>, std::function<void()>> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stopped and drained
      task = std::move(q_.front());
      q_.pop_front();
    }
    runTask(task.first, task.second);
  }
}

// ---- BraidBackend ------------------------------------------------------------------------

std::unique_ptr<braid::Communicator> makeCommunicator(const std::shared_ptr<braid::Store>& store, int rank, int size,
                                                      const std::string& keyPrefix, std::chrono::milliseconds timeout) {
  // braid reads BRAID_TIMEOUT when a communicator is created (the C++ API has no per-
  // communicator option yet), so torch's timeout reaches braid through the environment. The
  // variable is set, not restored: restoring would need the lock held across the rendezvous,
  // which would serialise (and could deadlock) the lazily created point-to-point channels.
  static std::mutex envMu;
  {
    std::lock_guard<std::mutex> lock(envMu);
    std::ostringstream v;
    v << static_cast<double>(timeout.count()) / 1000.0;
    ::setenv("BRAID_TIMEOUT", v.str().c_str(), 1);
  }
  return std::make_unique<braid::Communicator>(braid::Communicator::fromStore(store, rank, size, keyPrefix));
}

BraidBackend::BraidBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), store_(store), braidStore_(std::make_shared<C10dStoreAdapter>(store)),
      timeout_(timeout) {
  try {
    comm_ = makeCommunicator(braidStore_, rank, size, "braid", timeout);
  } catch (...) {
    std::rethrow_exception(toTorchError("init", std::current_exception()));
  }
  queue_ = std::make_unique<TaskQueue>("rank " + std::to_string(rank));
}

BraidBackend::~BraidBackend() { shutdown(); }

std::exception_ptr BraidBackend::closedError(const char* why) const {
  return makeError<c10::DistBackendError>(std::string("braid: the process group was ") + why);
}

c10::intrusive_ptr<c10d::Work> BraidBackend::enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                    std::function<void()> fn) {
  auto work = c10::make_intrusive<BraidWork>(type, std::move(outputs));
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    if (shutDown_) {
      work->complete(closedError("shut down"));
      return work;
    }
  }
  queue_->push(work, std::move(fn));
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
  return enqueue(c10d::OpType::BROADCAST, tensors, [comm, t, root]() mutable {
    at::Tensor w = dense(t);
    broadcastInPlace(*comm, w, root);
    writeBack(t, w);
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  checkSingle(tensors, "allreduce");
  TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(), "braid: sparse allreduce is not supported");
  checkReduce(tensors[0].scalar_type(), opts.reduceOp);
  at::Tensor t = tensors[0];
  c10d::ReduceOp op = opts.reduceOp;
  auto comm = comm_;
  return enqueue(c10d::OpType::ALLREDUCE, tensors, [comm, t, op]() mutable {
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
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, tensors, [comm, tensors, op]() mutable {
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
  return enqueue(c10d::OpType::REDUCE, tensors, [comm, t, op, root]() mutable {
    at::Tensor w = dense(t);
    fallback::reduce(*comm, w, op, root);
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
  return enqueue(c10d::OpType::ALLGATHER, outs, [comm, in, outs]() mutable {
    std::vector<at::Tensor> w;
    for (auto& o : outs) w.push_back(dense(o));
    fallback::allgather(*comm, dense(in), w);
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
  int n = size_;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {output}, [comm, in, out, n]() mutable {
    at::Tensor w = dense(out);
    std::vector<at::Tensor> blocks = w.view(-1).chunk(n);
    fallback::allgather(*comm, dense(in), blocks);
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
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, flatOuts, [comm, inputs, lists]() mutable {
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<at::Tensor> w, user;
      for (auto& l : lists) {
        user.push_back(l[i]);
        w.push_back(dense(l[i]));
      }
      fallback::allgather(*comm, dense(inputs[i]), w);
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
  int n = size_;
  return enqueue(c10d::OpType::COALESCED, outputs, [comm, inputs, outputs, n]() mutable {
    for (size_t i = 0; i < inputs.size(); ++i) {
      at::Tensor w = dense(outputs[i]);
      std::vector<at::Tensor> blocks = w.view(-1).chunk(n);
      fallback::allgather(*comm, dense(inputs[i]), blocks);
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
  return enqueue(c10d::OpType::GATHER, outs, [comm, in, outs, root]() mutable {
    std::vector<at::Tensor> w;
    for (auto& o : outs) w.push_back(dense(o));
    fallback::gather(*comm, dense(in), w, root);
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
  return enqueue(c10d::OpType::SCATTER, outputs, [comm, ins, out, root]() mutable {
    std::vector<at::Tensor> w;
    for (auto& i : ins) w.push_back(dense(i));
    at::Tensor o = dense(out);
    fallback::scatter(*comm, w, o, root);
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
    TORCH_CHECK_VALUE(i.numel() == outputs[0].numel(), "braid reduce_scatter: every input must have the output's ",
                      outputs[0].numel(), " elements");
  }
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins = inputs[0];
  c10d::ReduceOp op = opts.reduceOp;
  auto comm = comm_;
  return enqueue(c10d::OpType::REDUCE_SCATTER, outputs, [comm, ins, out, op]() mutable {
    std::vector<at::Tensor> flat;
    for (auto& i : ins) flat.push_back(i.reshape(-1));
    at::Tensor o = dense(out);
    fallback::reduceScatter(*comm, at::cat(flat), o, op);
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
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, [comm, in, out, op]() mutable {
    at::Tensor o = dense(out);
    fallback::reduceScatter(*comm, in, o, op);
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
  return enqueue(c10d::OpType::COALESCED, outputs, [comm, inputs, outputs, op]() mutable {
    for (size_t i = 0; i < inputs.size(); ++i) {
      at::Tensor o = dense(outputs[i]);
      fallback::reduceScatter(*comm, inputs[i], o, op);
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
  return enqueue(c10d::OpType::ALLTOALL_BASE, {output}, [comm, in, out, sendCounts, recvCounts]() mutable {
    at::Tensor o = dense(out);
    fallback::alltoallv(*comm, dense(in), sendCounts, o, recvCounts);
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
  return enqueue(c10d::OpType::ALLTOALL, outputs, [comm, inputs, outputs, sendCounts, recvCounts]() mutable {
    std::vector<at::Tensor> flat;
    for (auto& i : inputs) flat.push_back(i.reshape(-1));
    int64_t total = 0;
    for (auto c : recvCounts) total += c;
    at::Tensor recv = at::empty({total}, inputs[0].options());
    fallback::alltoallv(*comm, at::cat(flat), sendCounts, recv, recvCounts);
    int64_t off = 0;
    for (size_t i = 0; i < outputs.size(); ++i) {
      outputs[i].copy_(recv.narrow(0, off, recvCounts[i]).view(outputs[i].sizes()));
      off += recvCounts[i];
    }
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::barrier(const c10d::BarrierOptions& opts) {
  auto comm = comm_;
  return enqueue(c10d::OpType::BARRIER, {}, [comm]() { fallback::barrier(*comm); });
}

// ---- point-to-point ---------------------------------------------------------------------

BraidBackend::P2PChannel& BraidBackend::p2pChannel(int src, int dst) {
  std::lock_guard<std::mutex> lock(p2pMu_);
  P2PChannel& ch = p2p_[{src, dst}];
  if (!ch.queue) ch.queue = std::make_unique<TaskQueue>("p2p " + std::to_string(src) + "->" + std::to_string(dst));
  return ch;
}

c10::intrusive_ptr<c10d::Work> BraidBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  checkSingle(tensors, "send");
  TORCH_CHECK_VALUE(dstRank >= 0 && dstRank < size_ && dstRank != rank_, "braid send: destination ", dstRank,
                    " is not another rank of [0, ", size_, ")");
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    TORCH_CHECK(!shutDown_, "braid: the process group was shut down");
  }
  P2PChannel& ch = p2pChannel(rank_, dstRank);
  auto work = c10::make_intrusive<BraidWork>(c10d::OpType::SEND, tensors);
  at::Tensor t = tensors[0];
  auto store = braidStore_;
  auto timeout = timeout_;
  std::string key = "p2p/" + std::to_string(rank_) + "-" + std::to_string(dstRank);
  ch.queue->push(work, [&ch, t, store, timeout, key]() {
    // Two ranks per channel: the sender is rank 0 and the broadcast root; the receiver is 1.
    if (!ch.comm) ch.comm = makeCommunicator(store, 0, 2, key, timeout);
    at::Tensor w = dense(t);
    broadcastInPlace(*ch.comm, w, 0);
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> BraidBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  checkSingle(tensors, "recv");
  TORCH_CHECK_VALUE(srcRank >= 0 && srcRank < size_ && srcRank != rank_, "braid recv: source ", srcRank,
                    " is not another rank of [0, ", size_, ")");
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    TORCH_CHECK(!shutDown_, "braid: the process group was shut down");
  }
  P2PChannel& ch = p2pChannel(srcRank, rank_);
  auto work = c10::make_intrusive<BraidWork>(c10d::OpType::RECV, tensors);
  at::Tensor t = tensors[0];
  auto store = braidStore_;
  auto timeout = timeout_;
  std::string key = "p2p/" + std::to_string(srcRank) + "-" + std::to_string(rank_);
  ch.queue->push(work, [&ch, t, store, timeout, key]() mutable {
    if (!ch.comm) ch.comm = makeCommunicator(store, 1, 2, key, timeout);
    at::Tensor w = dense(t);
    broadcastInPlace(*ch.comm, w, 0);
    writeBack(t, w);
  });
  return work;
}

// ---- lifetime ----------------------------------------------------------------------------

void BraidBackend::abort() {
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    if (shutDown_) return;
    shutDown_ = true;
  }
  // Tell the peers and fail what is running; what is still queued fails without running.
  auto err = closedError("aborted");
  if (comm_) comm_->abort();
  queue_->failPending(err);
  queue_->stop();
  std::lock_guard<std::mutex> lock(p2pMu_);
  for (auto& [key, ch] : p2p_) {
    ch.queue->failPending(err);
    if (ch.comm) ch.comm->abort();
    ch.queue->stop();
  }
}

void BraidBackend::shutdown() {
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    if (!shutDown_) {
      shutDown_ = true;
    }
  }
  // Finish what was issued, then leave: the communicator's destructor waits for its pending
  // operations and says goodbye through the store.
  if (queue_) queue_->stop();
  {
    std::lock_guard<std::mutex> lock(p2pMu_);
    for (auto& [key, ch] : p2p_) ch.queue->stop();
    p2p_.clear();
  }
  comm_.reset();
}

}  // namespace braid_torch
