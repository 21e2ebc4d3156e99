// braid: collective communication for distributed training — C++ API.
//
//   auto comm = braid::Communicator::fromEnv();
//   comm.allreduce(grads.data(), grads.size(), braid::DataType::kFloat32, braid::ReduceOp::kSum);
//   braid::Work w = comm.allreduceAsync(buf, buf, n, braid::DataType::kBFloat16, braid::ReduceOp::kAvg);
//   w.wait();  // throws braid::RemoteError if a peer died
//
//   comm.allreduce(grads);    // std::vector<float>: type and count from the container
//
// Communicator is a movable value type (pimpl). Errors are exceptions derived from
// braid::Error; RemoteError carries the rank that failed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#if __cplusplus >= 202002L && __has_include(<span>)
#include <span>
#define BRAID_HAVE_SPAN 1
#endif

#include "braid/braid.h"
#include "braid/types.hpp"

namespace braid {

// Base of every braid exception; code() is the matching C result.
class Error : public std::runtime_error {
 public:
  Error(braidResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  braidResult_t code() const { return code_; }

 private:
  braidResult_t code_;
};

class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& what) : Error(braidInvalidArgument, what) {}
};

// A peer died, closed its connection, or reported a failure. rank() is that peer, or -1.
class RemoteError : public Error {
 public:
  RemoteError(const std::string& what, int rank) : Error(braidRemoteError, what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// No progress within BRAID_TIMEOUT. rank() is the rank that stalled, or -1.
class TimeoutError : public Error {
 public:
  TimeoutError(const std::string& what, int rank) : Error(braidTimeout, what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// A key-value store ranks can rendezvous through, so that a framework's own store (for
// example PyTorch's c10d::Store) can drive braid's setup. Values are opaque bytes.
// Implementations must be thread-safe; get() and wait() throw TimeoutError on timeout.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual bool deleteKey(const std::string& key) = 0;
  // Sets `key` to `desired` if it holds `expected` (absent counts as ""), atomically, and
  // returns the value it holds afterwards: c10d::Store::compareSet. Communicator::agree
  // needs it; the default throws, so a store without it can do everything else.
  virtual std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) {
    (void)expected;
    (void)desired;
    throw Error(braidInvalidArgument, "this store has no compare-and-set operation (needed by agree), for key '" + key + "'");
  }
  // The live view (braid::liveStatus, and the timeout that follows a stalled rank into the
  // communicator where it waits) asks every process of the job, through the store, where
  // each of its communicators is. A store that can carry it returns a new connection to the
  // root of the same store (outside any prefix its own keys have) and sets *name to a name
  // for that root, the same for every communicator on it: each process answers for all of
  // them from one thread, which checks that connection for a question every 100 ms (less
  // often in jobs of over 100 processes, at least once a second), so its
  // calls must not hold up this store's. nullptr, the default: no live view through this store.
  virtual std::shared_ptr<Store> openRoot(std::string* name) {
    (void)name;
    return nullptr;
  }
  // Whether this process hosts the store openRoot reaches (its server runs here): 1 yes, 0
  // no (another process, a rank or a launcher, hosts it), -1 unknown (the default). Nobody
  // may call a store whose host has left, so the view ends when its host's last
  // communicator goes, telling the other processes to stop checking; where the host is
  // unknown, it ends when the first process leaves.
  virtual int hostsRoot() { return -1; }
};

// An operation in flight. wait() blocks and throws the operation's error; test() polls. On
// device buffers the operation is enqueued on the stream (below) and is done once the
// stream has gone past it: wait() then blocks the host until the results are in the
// device buffers, as cudaStreamSynchronize would up to that call.
class Work {
 public:
  Work() = default;
  void wait();
  bool test();
  bool valid() const { return impl_ != nullptr; }

 public:
  struct Impl;  // opaque

 private:
  friend class Communicator;
  std::shared_ptr<Impl> impl_;
};

// A reduction: a ReduceOp, or a pre-multiplied sum (each rank's input times `scalar`, then
// summed: PyTorch's PREMUL_SUM). Converts implicitly from ReduceOp.
struct Reduction {
  Reduction(ReduceOp o) : op(o) {}  // NOLINT: implicit on purpose
  static Reduction preMulSum(double scalar) {
    Reduction r(ReduceOp::kSum);
    r.preMul = true;
    r.scalar = scalar;
    return r;
  }
  ReduceOp op;
  bool preMul = false;
  double scalar = 1.0;
};

// Device buffers and streams. While a StreamGuard lives, the calls this thread makes on any
// Communicator are enqueued on `stream` (a cudaStream_t) and return at once, as the C API's
// calls given that stream do: the call starts after the work queued on the stream before it,
// and work queued after it sees its result. A failure shows in the next call on the
// communicator and in Communicator::checkAsyncError(). The asynchronous (Work) forms are
// enqueued alike and give a Work that tells the host when the stream is past the call.
// Guards nest; the innermost wins. Calls on device buffers outside any guard use CUDA's
// legacy default stream.
class StreamGuard {
 public:
  explicit StreamGuard(braidStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  // The stream this thread's calls go to now (nullptr: none).
  static braidStream_t current();
  // Whether `stream` is being captured into a CUDA graph, where calls on it are recorded and
  // run at each replay (false where device buffers cannot be used).
  static bool capturing(braidStream_t stream);

 private:
  braidStream_t previous_;
};

// One message of a batch of point-to-point operations (Communicator::sendRecv).
struct P2POp {
  bool isSend = true;
  void* buf = nullptr;  // read for a send, written for a receive
  size_t count = 0;     // elements of `dtype`
  DataType dtype = DataType::kUint8;
  int peer = 0;
};

class Communicator {
 public:
  // From the launcher's environment (braidrun, horovodrun --gloo, torchrun, OpenMPI,
  // Slurm), like braidCommInitFromEnv.
  static Communicator fromEnv();
  // Rendezvous through a caller-provided store (every rank passes an equivalent store).
  // `keyPrefix` separates several communicators sharing one store. A positive `timeout`
  // replaces BRAID_TIMEOUT for this communicator (a framework's own timeout, for example).
  static Communicator fromStore(std::shared_ptr<Store> store, int rank, int size,
                                const std::string& keyPrefix = "braid",
                                std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Rendezvous through a braidUniqueId from braidGetUniqueId, like braidCommInitRank.
  static Communicator fromUniqueId(const braidUniqueId& id, int rank, int size);

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  int rank() const;
  int size() const;

  void allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, Reduction op);
  // In place.
  void allreduce(void* buf, size_t count, DataType dtype, Reduction op) { allreduce(buf, buf, count, dtype, op); }
  Work allreduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, Reduction op);

  void broadcast(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);
  void broadcast(void* buf, size_t count, DataType dtype, int root) { broadcast(buf, buf, count, dtype, root); }
  Work broadcastAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);

  // The rest of the collective set; buffer sizes and in-place rules as in braid.h.
  void reduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, Reduction op, int root);
  Work reduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, Reduction op, int root);
  void allgather(const void* sendbuf, void* recvbuf, size_t sendcount, DataType dtype);
  Work allgatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount, DataType dtype);
  void reduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, DataType dtype, Reduction op);
  Work reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount, DataType dtype, Reduction op);
  void alltoall(const void* sendbuf, void* recvbuf, size_t count, DataType dtype);
  Work alltoallAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype);
  void gather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);
  Work gatherAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);
  void scatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);
  Work scatterAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);
  void allgatherv(const void* sendbuf, size_t sendcount, void* recvbuf, const std::vector<size_t>& recvcounts,
                  const std::vector<size_t>& displs, DataType dtype);
  Work allgathervAsync(const void* sendbuf, size_t sendcount, void* recvbuf, const std::vector<size_t>& recvcounts,
                       const std::vector<size_t>& displs, DataType dtype);
  void reduceScatterv(const void* sendbuf, void* recvbuf, const std::vector<size_t>& recvcounts, DataType dtype,
                      Reduction op);
  Work reduceScattervAsync(const void* sendbuf, void* recvbuf, const std::vector<size_t>& recvcounts,
                           DataType dtype, Reduction op);
  void alltoallv(const void* sendbuf, const std::vector<size_t>& sendcounts, const std::vector<size_t>& sdispls,
                 void* recvbuf, const std::vector<size_t>& recvcounts, const std::vector<size_t>& rdispls,
                 DataType dtype);
  Work alltoallvAsync(const void* sendbuf, const std::vector<size_t>& sendcounts, const std::vector<size_t>& sdispls,
                      void* recvbuf, const std::vector<size_t>& recvcounts, const std::vector<size_t>& rdispls,
                      DataType dtype);
  void barrier();
  Work barrierAsync();

  // Point to point: sends and receives of a pair of ranks match in issue order. A batch runs
  // all its messages together and cannot deadlock, whatever peers the ranks' batches name.
  void send(const void* buf, size_t count, DataType dtype, int peer);
  void recv(void* buf, size_t count, DataType dtype, int peer);
  void sendRecv(const std::vector<P2POp>& ops);
  Work sendRecvAsync(const std::vector<P2POp>& ops);

  // Typed forms: the DataType comes from the element type (dataTypeOf<T>(), types.hpp) and
  // the count from the container. A receiving std::vector is resized to what the call
  // delivers; a std::span (C++20) must already have that size. Sizes that cannot match throw
  // InvalidArgument naming the argument and the rank.
  template <class T>
  void allreduce(std::vector<T>& buf, Reduction op = ReduceOp::kSum) {
    allreduce(buf.data(), buf.size(), dataTypeOf<T>(), op);
  }
  template <class T>
  void allreduce(const std::vector<T>& send, std::vector<T>& recv, Reduction op = ReduceOp::kSum) {
    recv.resize(send.size());
    allreduce(send.data(), recv.data(), send.size(), dataTypeOf<T>(), op);
  }
  template <class T>
  void broadcast(std::vector<T>& buf, int root) {
    broadcast(buf.data(), buf.size(), dataTypeOf<T>(), root);
  }
  // In place: the root's buf becomes the reduction; the others' buf is left as it was.
  template <class T>
  void reduce(std::vector<T>& buf, Reduction op, int root) {
    reduce(buf.data(), buf.data(), buf.size(), dataTypeOf<T>(), op, root);
  }
  // recv = every rank's send, in rank order (size() * send.size() elements).
  template <class T>
  void allgather(const std::vector<T>& send, std::vector<T>& recv) {
    recv.resize(send.size() * static_cast<size_t>(size()));
    allgather(send.data(), recv.data(), send.size(), dataTypeOf<T>());
  }
  // recv = the rank-th of size() equal blocks of the reduction of send.
  template <class T>
  void reduceScatter(const std::vector<T>& send, std::vector<T>& recv, Reduction op = ReduceOp::kSum) {
    const size_t block = evenBlock(send.size(), "reduceScatter");
    recv.resize(block);
    reduceScatter(send.data(), recv.data(), block, dataTypeOf<T>(), op);
  }
  // Block d of send goes to rank d; block s of recv comes from rank s.
  template <class T>
  void alltoall(const std::vector<T>& send, std::vector<T>& recv) {
    const size_t block = evenBlock(send.size(), "alltoall");
    recv.resize(send.size());
    alltoall(send.data(), recv.data(), block, dataTypeOf<T>());
  }
  template <class T>
  void send(const std::vector<T>& buf, int peer) {
    send(buf.data(), buf.size(), dataTypeOf<T>(), peer);
  }
  // Receives buf.size() elements: size buf to the message first.
  template <class T>
  void recv(std::vector<T>& buf, int peer) {
    recv(buf.data(), buf.size(), dataTypeOf<T>(), peer);
  }
#ifdef BRAID_HAVE_SPAN
  template <class T, size_t E>
  void allreduce(std::span<T, E> buf, Reduction op = ReduceOp::kSum) {
    allreduce(buf.data(), buf.size(), dataTypeOf<T>(), op);
  }
  template <class T, size_t E>
  void broadcast(std::span<T, E> buf, int root) {
    broadcast(buf.data(), buf.size(), dataTypeOf<T>(), root);
  }
  template <class T, size_t E1, size_t E2>
  void allgather(std::span<const T, E1> send, std::span<T, E2> recv) {
    sizeIs(recv.size(), send.size() * static_cast<size_t>(size()), "allgather", "recv");
    allgather(send.data(), recv.data(), send.size(), dataTypeOf<T>());
  }
  template <class T, size_t E>
  void send(std::span<const T, E> buf, int peer) {
    send(buf.data(), buf.size(), dataTypeOf<T>(), peer);
  }
  template <class T, size_t E>
  void recv(std::span<T, E> buf, int peer) {
    recv(buf.data(), buf.size(), dataTypeOf<T>(), peer);
  }
#endif

  // MPI_Comm_split: ranks with equal `color` form a new communicator ordered by (key, rank).
  // A negative color returns an invalid Communicator (valid() == false). Collective.
  Communicator split(int color, int key);
  bool valid() const { return impl_ != nullptr; }

  // Throws the first failure of work enqueued on a stream (or the communicator's broken
  // state), like braidCommGetAsyncError; returns when there is none.
  void checkAsyncError();

  // Fails pending operations here and on every other rank; the communicator is unusable after.
  void abort();

  // Recovery (braid.h has the details): revoke() fails every rank's operations with
  // braidRevoked (an Error of that code); shrink() returns the survivors' communicator
  // without `exclude` (every survivor passes the same list); agree() returns the AND of
  // the surviving ranks' flags and fills `failed` (when given) with the ranks counted as
  // failed, the same on every rank.
  void revoke();
  Communicator shrink(const std::vector<int>& exclude, bool abortPending = false);
  int agree(int flag, std::vector<int>* failed = nullptr);
  // Growing: growId() on one rank (share it with the other ranks and the new processes),
  // grow() on every rank (keeps its rank), joinGrow() in each new process with its rank in
  // [size(), newSize). Elastic jobs (braidrun --max-np): joinersWaiting() counts the
  // replacements waiting, growJoiners() (collective) admits them; it returns an invalid
  // Communicator when none waited. epoch(): shrinks and grows since init.
  braidUniqueId growId(int newSize);
  Communicator grow(int newSize, const braidUniqueId& growId);
  static Communicator joinGrow(int newSize, const braidUniqueId& growId, int rank);
  int joinersWaiting();
  Communicator growJoiners();
  int epoch() const;

 public:
  struct Impl;  // opaque

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  // The typed forms' size checks.
  size_t evenBlock(size_t n, const char* call) const {
    if (n % static_cast<size_t>(size()) != 0) {
      throw InvalidArgument(std::string("braid ") + call + ": send has " + std::to_string(n) +
                            " elements, not a multiple of the " + std::to_string(size()) + " ranks (rank " +
                            std::to_string(rank()) + ")");
    }
    return n / static_cast<size_t>(size());
  }
  void sizeIs(size_t got, size_t want, const char* call, const char* arg) const {
    if (got != want) {
      throw InvalidArgument(std::string("braid ") + call + ": " + arg + " has " + std::to_string(got) +
                            " elements, needs " + std::to_string(want) + " (rank " + std::to_string(rank()) + ")");
    }
  }
  std::unique_ptr<Impl> impl_;
};

// Asks every process of the job behind `store` where its communicators are, waits
// `waitSeconds` for the answers, and returns the report braid-info --status prints: per
// communicator one line per rank (its operation and whom it waits for, or "no answer"),
// then which rank holds the others up. The question goes to the store's root
// (Store::openRoot) when it has one, else to the store itself. Any process that reaches the
// store may ask, inside the job or not. Throws the store's failure.
std::string liveStatus(const std::shared_ptr<Store>& store, double waitSeconds = 1.0);

}  // namespace braid
