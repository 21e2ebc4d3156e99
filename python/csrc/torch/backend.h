#pragma once
// BraidBackend: braid as a c10d::Backend, so that torch.distributed (and DDP/FSDP on top of
// it) runs its CPU collectives over braid.
//
// Threading: every operation is validated on the caller's thread (bad arguments raise there,
// synchronously, as ValueError), then queued as a closure to ONE worker thread that runs the
// closures in issue order, each a blocking call of the group's one braid communicator. One
// queue keeps the order of braid calls identical on every rank, which braid requires, and
// leaves room for the pre/post-processing torch's conventions need (staging of
// non-contiguous tensors, lists of tensors <-> one buffer). The caller overlaps its own work
// (DDP's backward) with the queue, like ProcessGroupGloo's worker threads.
//
// Point-to-point (send/recv/isend/irecv, and batch_isend_irecv, which torch issues as
// consecutive isend/irecv calls on CPU) runs on the same communicator, as braid sendRecv
// batches. braid runs a communicator's operations one after the other, and a send larger
// than the transport's buffering only completes once the receiver runs the matching
// receive; so two ranks that isend to each other, then irecv from each other, would deadlock
// if each call were its own operation. The backend therefore does not issue a p2p call at
// once: consecutive p2p calls collect in a pending batch, which goes to the queue as ONE
// sendRecv (which cannot deadlock, whatever peers the ranks' batches name) as soon as
// anything needs it: a wait(), is_completed() or get_future() on one of its Works, the next
// collective (so that p2p and collectives keep their issue order), or shutdown. isend and
// irecv never block the caller.
//
// CUDA tensors take braid's device path on the stream that was current for the tensors'
// device when the call was made. Their task goes through the same queue (so braid sees one
// issue order on every rank, CPU and CUDA calls mixed), and the worker issues it onto that
// stream under a braid::StreamGuard, with the stream current for the torch-side copies too:
// the call starts after everything queued on the stream before the call, and the worker
// never waits for the GPU. The Work then holds an event recorded behind it; wait() blocks
// the host only until the task is issued (microseconds), then makes the caller's current
// stream wait for the event, as ProcessGroupNCCL's wait() does. A p2p batch on CUDA uses the
// stream current at its first isend/irecv. A failure during the collective itself (a dead
// peer) shows in the next call, which raises; braid never leaves the stream waiting.

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.hpp"

namespace braid_torch {

// A queued collective. Completes its c10d::Work state (wait(), isCompleted(), exception())
// and its future, whose value is the output tensor list as torch's own backends give it, so
// that DDP communication hooks (`fut.value()[0]`) work unchanged.
//
// On a CUDA device the future is CUDA-aware (as ProcessGroupNCCL's): its value() makes the
// current stream wait for the work instead of blocking the host.
class BraidWork : public c10d::Work {
 public:
  BraidWork(c10d::OpType type, std::vector<at::Tensor> outputs, c10::Device device = c10::Device(c10::kCPU));

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // Completes the future (running its callbacks), then marks the work done (`error` null)
  // or failed and wakes waiters: once wait() returns, the future is complete.
  void complete(std::exception_ptr error);
  // Device work: done once `stream` passes the point this records. Then complete() it with
  // `stream` current: the CUDA-aware future records its own event on the current stream.
  void recordOn(const c10::Stream& stream);
  // Device work: whether the stream has passed it.
  bool isCompleted() override;
  // Device work: the caller's current stream waits for it (called by wait()).
  void synchronize() override;
  const c10::Device& device() const { return device_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::Device device_;
  std::optional<c10::Event> event_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A point-to-point Work: it belongs to a batch that may still be pending in the backend, so
// every way of waiting for it first hands that batch to the queue.
class P2PWork : public BraidWork {
 public:
  P2PWork(c10d::OpType type, std::vector<at::Tensor> outputs, c10::Device device, int peer,
          std::function<void()> flush);

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  bool isCompleted() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  int sourceRank() const override { return peer_; }

 private:
  int peer_;
  std::function<void()> flush_;  // holds the backend's issuer weakly
};

using WorkList = std::vector<c10::intrusive_ptr<BraidWork>>;

// One call's task: `fn` completes all of `works` (a p2p batch has several). With a stream,
// it is issued onto that stream and `touched` are the user's tensors it reads or writes.
struct Task {
  WorkList works;
  std::function<void()> fn;
  std::optional<c10::Stream> stream;
  std::vector<at::Tensor> touched;
};

// A FIFO of tasks run by one thread. Tasks run with no lock held.
class TaskQueue {
 public:
  explicit TaskQueue(std::string name);
  ~TaskQueue();  // drains: runs what is queued, then joins
  void push(Task task);
  // Runs `task` on this thread once the worker has run what is queued, holding the worker
  // meanwhile.
  void runInTurn(Task task);
  // Fails everything still queued with `error` instead of running it.
  void failPending(const std::exception_ptr& error);
  void stop();  // runs what is queued, then joins; idempotent

 private:
  void loop();
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> q_;
  bool stop_ = false;
  bool running_ = false;  // the worker runs a task
  bool held_ = false;     // runInTurn runs one on its own thread: the worker waits
  std::condition_variable idle_;  // the worker finished a task, or the queue was emptied
  std::thread thread_;
};

// The issue order of one backend: collectives go to the queue at once, p2p calls collect in
// a pending batch that is queued before the next collective or when flush() is called.
// Shared with the P2PWorks (weakly), which flush on wait.
class Issuer {
 public:
  Issuer(std::shared_ptr<braid::Communicator> comm, std::string name);
  // `touched`: for a CUDA work, the user's tensors (its stream is the device's current one).
  void collective(c10::intrusive_ptr<BraidWork> work, std::function<void()> fn, std::vector<at::Tensor> touched = {});
  void p2p(c10::intrusive_ptr<BraidWork> work, bool isSend, at::Tensor tensor, int peer);
  void flush();
  // Fails the pending batch and what is queued with `error`.
  void failPending(const std::exception_ptr& error);
  void stop();  // flushes, runs what is queued, joins the worker

 private:
  struct Msg {
    bool isSend;
    at::Tensor tensor;
    int peer;
    std::optional<c10::Stream> stream;  // CUDA: the current stream when it was issued
  };
  void flushLocked();
  // Recursive: a task running inline on the worker thread (a future callback) may issue.
  std::recursive_mutex mu_;
  std::shared_ptr<braid::Communicator> comm_;
  std::vector<Msg> pending_;
  WorkList pendingWorks_;
  TaskQueue queue_;
};

class BraidBackend : public c10d::Backend {
 public:
  // Rendezvous through `store` (torch's per-group PrefixStore); `timeout` becomes braid's
  // per-operation timeout for this communicator (Communicator::fromStore's timeout, in
  // place of BRAID_TIMEOUT).
  // `keyPrefix` names the group's communicator (its keys under the group's store prefix, its
  // name in errors, the live view and flight-recorder dumps): "braid" for the world.
  BraidBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
               const std::string& keyPrefix = "braid");
  ~BraidBackend() override;

  const std::string getBackendName() const override { return "braid"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  // torch 2.14 names the tensor forms all_gather_single, reduce_scatter_single and
  // all_to_all_single (and their _coalesced forms); earlier releases (2.11 checked) have only
  // the older names, _allgather_base and the like, which 2.14 keeps as forwarding virtuals.
  // The newer names are declared without `override`, so that the backend builds against
  // both: they override where the base class has them, and the older names forward to them.
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts);  // NOLINT(modernize-use-override): see above
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return all_gather_single(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts);  // NOLINT(modernize-use-override): see above
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    return all_gather_single_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                       const c10d::ReduceScatterOptions& opts);  // NOLINT(modernize-use-override): see above
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    return reduce_scatter_single(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts);  // NOLINT(modernize-use-override): see above
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    return reduce_scatter_single_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& outputSplits,
                                                   std::vector<int64_t>& inputSplits,
                                                   const c10d::AllToAllOptions& opts);  // NOLINT(modernize-use-override): see above
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override {
    return all_to_all_single(output, input, outputSplits, inputSplits, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // gloo's monitored barrier, through the group's store rather than the data path, so that a
  // rank stuck in an earlier collective is still reported: ranks 1.. check in, rank 0 waits
  // for each within opts.timeout and raises naming the first that did not (every one of
  // them with waitAllRanks), then releases the others with the outcome.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;

  void abort() override;
  void shutdown() override;

  // dist.shrink_group: the survivors' backend without `ranksToExclude`, which every
  // survivor passes alike (braidCommShrink; no fresh rendezvous, the excluded ranks take no
  // part). SHRINK_ABORT (1) fails this group's queued and running work first.
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags = 0,
                                           const c10::intrusive_ptr<Options>& optsOverride = nullptr) override;

  // braid's recovery calls that c10d has no name for (braid.torch.revoke / agree):
  // revoke() fails every rank's pending and later calls on this group with braid's
  // "revoked" error; agree(flag) returns the AND of `flag` over the live ranks and the
  // ranks found failed, the same on every survivor (braidCommAgree).
  void revoke();
  std::pair<int, std::vector<int>> agree(int flag);

  // A backend on a communicator made already (shrink's child).
  BraidBackend(const c10::intrusive_ptr<c10d::Store>& store, braid::Communicator comm);

 private:
  // Queues `fn` for the worker (CPU tensors) or issues it on the stream (CUDA tensors: every
  // tensor of `outputs` and `inputs` on one device).
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         std::vector<at::Tensor> inputs, std::function<void()> fn);
  c10::intrusive_ptr<c10d::Work> enqueueP2P(c10d::OpType type, std::vector<at::Tensor>& tensors, int peer);
  std::exception_ptr closedError(const char* why) const;

  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<braid::Communicator> comm_;
  std::shared_ptr<Issuer> issuer_;
  std::mutex stateMu_;
  bool shutDown_ = false;
  int64_t monitoredSeq_ = 0;  // monitored barriers so far; every rank counts the same
};

}  // namespace braid_torch
