#pragma once
// BraidBackend: braid as a c10d::Backend, so that torch.distributed (and DDP/FSDP on top of
// it) runs its CPU collectives over braid.
//
// Threading: every collective is validated on the caller's thread (bad arguments raise
// there, synchronously, as ValueError), then queued as a closure to ONE worker thread that
// runs the closures in issue order. One queue keeps the order of braid calls identical on
// every rank, which braid requires, even when a collective is composed of several braid
// calls (the fallbacks in fallbacks.cc) or needs pre/post-processing (staging of
// non-contiguous tensors, PREMUL_SUM scaling). The caller overlaps its own work (DDP's
// backward) with the queue, like ProcessGroupGloo's worker threads.
//
// Point-to-point (send/recv) runs over one lazily created two-rank braid communicator per
// direction (me->peer and peer->me), each with its own worker thread: a pair's messages
// stay in order, and a blocking rendezvous of one direction never stalls the other or the
// collectives.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/braid.hpp"

namespace braid_torch {

// A queued collective. Completes its c10d::Work state (wait(), isCompleted(), exception())
// and its future, whose value is the output tensor list as torch's own backends give it, so
// that DDP communication hooks (`fut.value()[0]`) work unchanged.
class BraidWork : public c10d::Work {
 public:
  BraidWork(c10d::OpType type, std::vector<at::Tensor> outputs);

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // Marks the work done (`error` null) or failed, wakes waiters, completes the future.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A FIFO of closures run by one thread. Closures run with no lock held.
class TaskQueue {
 public:
  explicit TaskQueue(std::string name);
  ~TaskQueue();  // drains: runs what is queued, then joins
  void push(c10::intrusive_ptr<BraidWork> work, std::function<void()> fn);
  // Fails everything still queued with `error` instead of running it.
  void failPending(const std::exception_ptr& error);
  void stop();  // runs what is queued, then joins; idempotent

 private:
  void loop();
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<c10::intrusive_ptr<BraidWork>, std::function<void()>>> q_;
  bool stop_ = false;
  std::thread thread_;
};

class BraidBackend : public c10d::Backend {
 public:
  // Rendezvous through `store` (torch's per-group PrefixStore); `timeout` becomes braid's
  // per-operation timeout (BRAID_TIMEOUT) for this communicator.
  BraidBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  ~BraidBackend() override;

  const std::string getBackendName() const override { return "braid"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return all_gather_single(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) override;
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
                                                       const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    return reduce_scatter_single(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    return reduce_scatter_single_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& outputSplits,
                                                   std::vector<int64_t>& inputSplits,
                                                   const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override {
    return all_to_all_single(output, input, outputSplits, inputSplits, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;

  void abort() override;
  void shutdown() override;

 private:
  // One direction of point-to-point traffic between this rank and a peer.
  struct P2PChannel {
    std::unique_ptr<braid::Communicator> comm;  // created on the channel's own thread
    std::unique_ptr<TaskQueue> queue;
  };

  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         std::function<void()> fn);
  P2PChannel& p2pChannel(int src, int dst);
  std::exception_ptr closedError(const char* why) const;

  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<braid::Store> braidStore_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<braid::Communicator> comm_;
  std::unique_ptr<TaskQueue> queue_;
  std::mutex p2pMu_;
  std::map<std::pair<int, int>, P2PChannel> p2p_;
  std::mutex stateMu_;
  bool shutDown_ = false;
};

// Creates the communicator for a backend: sets braid's timeout from torch's for the
// duration of the rendezvous (braid reads its configuration when a communicator is made).
std::unique_ptr<braid::Communicator> makeCommunicator(const std::shared_ptr<braid::Store>& store, int rank, int size,
                                                      const std::string& keyPrefix, std::chrono::milliseconds timeout);

}  // namespace braid_torch
