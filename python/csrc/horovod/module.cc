// horovod.torch.mpi_lib_v2 built from braid: the one native module Horovod's PyTorch front
// end loads, both as a Python extension (the horovod_torch_* functions taking tensors) and
// through ctypes (the extern "C" horovod_* functions of horovod/common/basics.py). The
// function names, argument orders and return codes are Horovod's interface, read from its
// public Python sources; everything behind them is braid's (core.h).
//
// Installed into Horovod's package by `python -m braid.horovod install` (a link to this file
// and the metadata.json that Horovod's front end checks).

#include <torch/python.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "core.h"

namespace py = pybind11;
using braid_hvd::Core;
using braid_hvd::Entry;
using braid_hvd::Handle;
using braid_hvd::Kind;

namespace {

std::mutex handlesMu;
std::unordered_map<int, std::shared_ptr<Handle>> handles;
int nextHandle = 1;

int track(std::shared_ptr<Handle> h) {
  std::lock_guard<std::mutex> lk(handlesMu);
  int id = nextHandle++;
  handles[id] = std::move(h);
  return id;
}

std::shared_ptr<Handle> lookup(int id) {
  std::lock_guard<std::mutex> lk(handlesMu);
  auto it = handles.find(id);
  if (it == handles.end()) throw std::invalid_argument("unknown Horovod handle " + std::to_string(id));
  return it->second;
}

void checkTensor(const at::Tensor& t, const char* what) {
  if (!t.device().is_cpu())
    throw std::runtime_error(std::string(what) + ": tensors on " + t.device().str() +
                             " are not supported by braid's Horovod core yet (CPU tensors only)");
  if (!t.is_contiguous()) throw std::invalid_argument(std::string(what) + ": the tensor must be contiguous");
}

void checkReduceOp(int op, const char* what) {
  if (op < braid_hvd::kOpAverage || op > braid_hvd::kOpProduct)
    throw std::invalid_argument(std::string(what) + ": unknown reduce op " + std::to_string(op));
}

// The set's rank list, for the checks that need its size.
int setSize(int setId) {
  int n = Core::instance().processSetSize(setId);
  if (n == -1) throw std::runtime_error("Horovod has not been initialized; use hvd.init().");
  if (n < 0) throw std::runtime_error("process set " + std::to_string(setId) + " is not registered");
  return n;
}

// Horovod's tensor names: "<op>.<name>", or "<op>.noname.<n>" for an unnamed call.
std::string nameOr(const std::string& name, int setId, Kind kind) {
  return name.empty() ? Core::instance().autoName(setId, kind) : braid_hvd::kindName(kind) + ("." + name);
}

Entry reduceEntry(Kind kind, const at::Tensor& t, const at::Tensor& out, const std::string& name, int op,
                  double prescale, double postscale, const char* what) {
  checkTensor(t, what);
  checkReduceOp(op, what);
  if (op == braid_hvd::kOpAdasum) {
    if (kind != Kind::kAllreduce)
      throw std::runtime_error(std::string(what) + ": op=Adasum is for allreduce only; use Average or Sum");
    const auto st = t.scalar_type();
    if (st != at::kHalf && st != at::kBFloat16 && st != at::kFloat && st != at::kDouble)
      throw std::runtime_error(std::string(what) + ": op=Adasum needs floating-point tensors (float16, " +
                               "bfloat16, float32 or float64), not " + c10::toString(st));
  }
  Entry e;
  e.req.kind = kind;
  e.req.dtype = static_cast<int32_t>(t.scalar_type());
  e.req.op = op;
  e.req.prescale = prescale;
  e.req.postscale = postscale;
  e.req.shape = t.sizes().vec();
  e.req.name = name;
  e.input = t;
  e.output = out;
  return e;
}

int submit(int setId, std::vector<Entry> entries) {
  auto h = Core::instance().submit(setId, std::move(entries));
  return track(std::move(h));
}

// ---- the tensor functions -------------------------------------------------------------------

// Adasum combines ranks pairwise, level by level, so it needs a power-of-two set (as in
// Horovod, whose front end also checks this for the global set).
void checkAdasumSet(int op, int setId, const char* what) {
  if (op != braid_hvd::kOpAdasum) return;
  const int n = setSize(setId);
  if ((n & (n - 1)) != 0)
    throw std::runtime_error(std::string(what) + ": op=Adasum needs a power-of-two number of ranks; process set " +
                             std::to_string(setId) + " has " + std::to_string(n));
}

int allreduce(at::Tensor t, at::Tensor out, int divisor, const std::string& name, int op, double prescale,
              double postscale, int setId) {
  checkAdasumSet(op, setId, "allreduce");
  double post = divisor > 1 ? postscale / divisor : postscale;
  std::vector<Entry> v;
  v.push_back(reduceEntry(Kind::kAllreduce, t, out, nameOr(name, setId, Kind::kAllreduce), op, prescale, post,
                          "allreduce"));
  return submit(setId, std::move(v));
}

int groupedAllreduce(const std::vector<at::Tensor>& ts, const std::vector<at::Tensor>& outs, int divisor,
                     const std::string& name, int op, double prescale, double postscale, int setId) {
  if (ts.size() != outs.size()) throw std::invalid_argument("grouped_allreduce: as many outputs as inputs needed");
  checkAdasumSet(op, setId, "grouped_allreduce");
  double post = divisor > 1 ? postscale / divisor : postscale;
  std::string base = nameOr(name, setId, Kind::kAllreduce);
  std::vector<Entry> v;
  for (size_t i = 0; i < ts.size(); ++i)
    v.push_back(reduceEntry(Kind::kAllreduce, ts[i], outs[i], base + "_" + std::to_string(i), op, prescale, post,
                            "grouped_allreduce"));
  return submit(setId, std::move(v));
}

Entry gatherEntry(const at::Tensor& t, const at::Tensor& out, const std::string& name) {
  checkTensor(t, "allgather");
  Entry e;
  e.req.kind = Kind::kAllgather;
  e.req.dtype = static_cast<int32_t>(t.scalar_type());
  e.req.shape = t.sizes().vec();
  e.req.name = name;
  e.input = t;
  e.output = out;
  return e;
}

int allgather(at::Tensor t, at::Tensor out, const std::string& name, int setId) {
  std::vector<Entry> v;
  v.push_back(gatherEntry(t, out, nameOr(name, setId, Kind::kAllgather)));
  return submit(setId, std::move(v));
}

int groupedAllgather(const std::vector<at::Tensor>& ts, const std::vector<at::Tensor>& outs,
                     const std::string& name, int setId) {
  if (ts.size() != outs.size()) throw std::invalid_argument("grouped_allgather: as many outputs as inputs needed");
  std::string base = nameOr(name, setId, Kind::kAllgather);
  std::vector<Entry> v;
  for (size_t i = 0; i < ts.size(); ++i) v.push_back(gatherEntry(ts[i], outs[i], base + "_" + std::to_string(i)));
  return submit(setId, std::move(v));
}

int broadcast(at::Tensor t, at::Tensor out, int root, const std::string& name, int setId) {
  checkTensor(t, "broadcast");
  int n = setSize(setId);
  std::vector<int32_t> members(n);
  Core::instance().processSetRanks(setId, members.data());
  if (std::find(members.begin(), members.end(), root) == members.end())
    throw std::runtime_error("broadcast: root rank " + std::to_string(root) + " is not a rank of process set " +
                             std::to_string(setId) + " (rank " + std::to_string(Core::instance().rank()) + ")");
  Entry e;
  e.req.kind = Kind::kBroadcast;
  e.req.dtype = static_cast<int32_t>(t.scalar_type());
  e.req.shape = t.sizes().vec();
  e.req.root = root;
  e.req.name = nameOr(name, setId, Kind::kBroadcast);
  e.input = t;
  e.output = out;
  std::vector<Entry> v;
  v.push_back(std::move(e));
  return submit(setId, std::move(v));
}

int alltoall(at::Tensor t, at::Tensor splits, at::Tensor out, at::Tensor outSplits, const std::string& name,
             int setId) {
  checkTensor(t, "alltoall");
  int n = setSize(setId);
  if (t.dim() < 1) throw std::invalid_argument("alltoall: the tensor needs at least one dimension");
  int64_t rows = t.size(0);
  if (splits.numel() == 0) {
    if (rows % n != 0)
      throw std::invalid_argument("alltoall: with no splits, the first dimension (" + std::to_string(rows) +
                                  ") must be divisible by the process set's size (" + std::to_string(n) + ")");
  } else {
    if (splits.scalar_type() != at::kInt)
      throw std::invalid_argument("alltoall: splits must hold 32-bit integers, not " +
                                  std::string(c10::toString(splits.scalar_type())));
    if (splits.numel() != n)
      throw std::invalid_argument("alltoall: splits has " + std::to_string(splits.numel()) +
                                  " entries; the process set has " + std::to_string(n) + " ranks");
    auto s = splits.to(at::kLong).contiguous();
    int64_t sum = 0;
    for (int i = 0; i < n; ++i) {
      int64_t v = s.data_ptr<int64_t>()[i];
      if (v < 0) throw std::invalid_argument("alltoall: splits entries must not be negative");
      sum += v;
    }
    if (sum > rows)
      throw std::invalid_argument("alltoall: the splits add up to " + std::to_string(sum) +
                                  ", more than the tensor's first dimension (" + std::to_string(rows) + ")");
  }
  Entry e;
  e.req.kind = Kind::kAlltoall;
  e.req.dtype = static_cast<int32_t>(t.scalar_type());
  e.req.shape = t.sizes().vec();
  e.req.name = nameOr(name, setId, Kind::kAlltoall);
  e.input = t;
  e.splits = splits;
  e.output = out;
  e.receivedSplits = outSplits;
  std::vector<Entry> v;
  v.push_back(std::move(e));
  return submit(setId, std::move(v));
}

Entry scatterEntry(const at::Tensor& t, const at::Tensor& out, const std::string& name, int op, double prescale,
                   double postscale) {
  if (t.dim() < 1) throw std::runtime_error("reducescatter: the tensor needs at least one dimension");
  return reduceEntry(Kind::kReducescatter, t, out, name, op, prescale, postscale, "reducescatter");
}

int reducescatter(at::Tensor t, at::Tensor out, const std::string& name, int op, int setId, double prescale,
                  double postscale) {
  std::vector<Entry> v;
  v.push_back(scatterEntry(t, out, nameOr(name, setId, Kind::kReducescatter), op, prescale, postscale));
  return submit(setId, std::move(v));
}

int groupedReducescatter(const std::vector<at::Tensor>& ts, const std::vector<at::Tensor>& outs,
                         const std::string& name, int op, int setId, double prescale, double postscale) {
  if (ts.size() != outs.size())
    throw std::invalid_argument("grouped_reducescatter: as many outputs as inputs needed");
  std::string base = nameOr(name, setId, Kind::kReducescatter);
  std::vector<Entry> v;
  for (size_t i = 0; i < ts.size(); ++i)
    v.push_back(scatterEntry(ts[i], outs[i], base + "_" + std::to_string(i), op, prescale, postscale));
  return submit(setId, std::move(v));
}

int join(at::Tensor out, int /*device: CPU only*/) {
  Entry e;
  e.req.kind = Kind::kJoin;
  e.req.name = "join";
  e.output = out;
  std::vector<Entry> v;
  v.push_back(std::move(e));
  return submit(0, std::move(v));
}

int barrier(int setId) {
  Entry e;
  e.req.kind = Kind::kBarrier;
  e.req.name = nameOr("", setId, Kind::kBarrier);
  std::vector<Entry> v;
  v.push_back(std::move(e));
  return submit(setId, std::move(v));
}

int poll(int id) {
  auto h = lookup(id);
  std::lock_guard<std::mutex> lk(h->mu);
  return h->done ? 1 : 0;
}

void waitAndClear(int id) {
  auto h = lookup(id);
  std::string err;
  {
    py::gil_scoped_release nogil;
    std::unique_lock<std::mutex> lk(h->mu);
    h->cv.wait(lk, [&] { return h->done; });
    err = h->error;
  }
  {
    std::lock_guard<std::mutex> lk(handlesMu);
    handles.erase(id);
  }
  if (!err.empty()) throw std::runtime_error(err);
}

void reset() {
  std::lock_guard<std::mutex> lk(handlesMu);
  handles.clear();
}

}  // namespace

// ---- the ctypes interface (horovod/common/basics.py) ------------------------------------------

extern "C" {

__attribute__((visibility("default"))) bool horovod_init(const int* ranks, int nranks, const int* setRanks,
                                                         const int* setSizes, int nsets) {
  std::vector<int32_t> r(ranks, ranks + std::max(nranks, 0));
  std::vector<std::vector<int32_t>> sets;
  int off = 0;
  for (int i = 0; i < nsets; ++i) {
    sets.emplace_back(setRanks + off, setRanks + off + setSizes[i]);
    off += setSizes[i];
  }
  return Core::instance().init(r, sets);
}

__attribute__((visibility("default"))) bool horovod_init_multi_comm(void*, int, const int*, const int*, int) {
  std::fprintf(stderr, "braid horovod: hvd.init(comm=<MPI communicator>) needs MPI; braid's core takes a list of "
                       "ranks instead (hvd.init(comm=[0, 1, ...]))\n");
  return false;
}

#define BRAID_HVD_EXPORT __attribute__((visibility("default")))
BRAID_HVD_EXPORT void horovod_shutdown() { Core::instance().shutdown(); }
BRAID_HVD_EXPORT bool horovod_is_initialized() { return Core::instance().initialized(); }
BRAID_HVD_EXPORT int horovod_start_timeline(const char* file, bool markCycles) {
  return Core::instance().startTimeline(file ? file : "", markCycles);
}
BRAID_HVD_EXPORT int horovod_stop_timeline() { return Core::instance().stopTimeline(); }
BRAID_HVD_EXPORT int horovod_rank() { return Core::instance().rank(); }
BRAID_HVD_EXPORT int horovod_local_rank() { return Core::instance().localRank(); }
BRAID_HVD_EXPORT int horovod_cross_rank() { return Core::instance().crossRank(); }
BRAID_HVD_EXPORT int horovod_size() { return Core::instance().size(); }
BRAID_HVD_EXPORT int horovod_local_size() { return Core::instance().localSize(); }
BRAID_HVD_EXPORT int horovod_cross_size() { return Core::instance().crossSize(); }
BRAID_HVD_EXPORT bool horovod_is_homogeneous() { return Core::instance().homogeneous(); }
BRAID_HVD_EXPORT int horovod_mpi_threads_supported() { return Core::instance().initialized() ? 0 : -1; }
BRAID_HVD_EXPORT bool horovod_mpi_enabled() { return false; }
BRAID_HVD_EXPORT bool horovod_mpi_built() { return false; }
// Horovod's launcher (horovodrun --gloo) starts jobs only for a core that says it speaks Gloo's
// rendezvous; braid's does (it finds its store through horovodrun's key-value server).
BRAID_HVD_EXPORT bool horovod_gloo_enabled() { return Core::instance().initialized(); }
BRAID_HVD_EXPORT bool horovod_gloo_built() { return true; }
BRAID_HVD_EXPORT int horovod_nccl_built() { return 0; }
BRAID_HVD_EXPORT bool horovod_ddl_built() { return false; }
BRAID_HVD_EXPORT bool horovod_ccl_built() { return false; }
BRAID_HVD_EXPORT bool horovod_cuda_built() { return false; }
BRAID_HVD_EXPORT bool horovod_rocm_built() { return false; }
BRAID_HVD_EXPORT int horovod_reduce_op_average() { return braid_hvd::kOpAverage; }
BRAID_HVD_EXPORT int horovod_reduce_op_sum() { return braid_hvd::kOpSum; }
BRAID_HVD_EXPORT int horovod_reduce_op_adasum() { return braid_hvd::kOpAdasum; }
BRAID_HVD_EXPORT int horovod_reduce_op_min() { return braid_hvd::kOpMin; }
BRAID_HVD_EXPORT int horovod_reduce_op_max() { return braid_hvd::kOpMax; }
BRAID_HVD_EXPORT int horovod_reduce_op_product() { return braid_hvd::kOpProduct; }
BRAID_HVD_EXPORT int horovod_add_process_set(const int* ranks, int n) {
  return Core::instance().addProcessSet(std::vector<int32_t>(ranks, ranks + std::max(n, 0)));
}
BRAID_HVD_EXPORT int horovod_remove_process_set(int id) { return Core::instance().removeProcessSet(id); }
BRAID_HVD_EXPORT int horovod_process_set_rank(int id) { return Core::instance().processSetRank(id); }
BRAID_HVD_EXPORT int horovod_process_set_size(int id) { return Core::instance().processSetSize(id); }
BRAID_HVD_EXPORT int horovod_process_set_ranks(int id, int* out) { return Core::instance().processSetRanks(id, out); }
BRAID_HVD_EXPORT int horovod_number_of_process_sets() {
  return static_cast<int>(Core::instance().processSetIds().size());
}
BRAID_HVD_EXPORT void horovod_process_set_ids(int* out) {
  auto ids = Core::instance().processSetIds();
  std::copy(ids.begin(), ids.end(), out);
}
BRAID_HVD_EXPORT int horovod_comm_process_set(void*) { return Core::instance().initialized() ? -3 : -1; }

}  // extern "C"

// Elastic jobs under braidrun --max-np: replacements wait to be admitted. Horovod's front end
// learns of new hosts from its driver's notification service (horovodrun), which braidrun
// does not run; the core tells the same listener (the elastic State objects registered by
// hvd.elastic.run) directly, so that their next commit() raises HostsUpdatedInterrupt on
// every rank and the reset admits the replacements. Called from the core's own thread.
static void notifyHostsAdded() {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  try {
    py::object added = py::module_::import("horovod.runner.elastic.worker").attr("HostUpdateResult").attr("added");
    py::object manager = py::module_::import("horovod.common.elastic").attr("notification_manager");
    double now = py::module_::import("time").attr("time")().cast<double>();
    manager.attr("handle_hosts_updated")(now, added);
  } catch (py::error_already_set& e) {
    std::fprintf(stderr, "braid horovod: could not tell Horovod's elastic loop that replacements wait: %s\n",
                 e.what());
  }
}

PYBIND11_MODULE(mpi_lib_v2, m) {
  m.doc() = "Horovod's native core for PyTorch, implemented by braid";
  Core::instance().setJoinersNotifier(notifyHostsAdded);
  m.attr("built_with_torch") = BRAID_HVD_TORCH_VERSION;
  // Reductions: the dtypes braid reduces; data movement: every dtype, moved as bytes.
  const char* reduceTypes[] = {"IntTensor", "LongTensor", "HalfTensor", "FloatTensor", "DoubleTensor",
                               "BFloat16Tensor", "ByteTensor", "CharTensor"};
  const char* moveTypes[] = {"ByteTensor", "CharTensor", "ShortTensor", "IntTensor", "LongTensor",
                             "HalfTensor", "FloatTensor", "DoubleTensor", "BFloat16Tensor", "BoolTensor"};
  for (const char* t : reduceTypes) {
    std::string s = std::string("_torch_") + t;
    m.def(("horovod_torch_allreduce_async" + s).c_str(), &allreduce);
    m.def(("horovod_torch_grouped_allreduce_async" + s).c_str(), &groupedAllreduce);
    m.def(("horovod_torch_reducescatter_async" + s).c_str(), &reducescatter);
    m.def(("horovod_torch_grouped_reducescatter_async" + s).c_str(), &groupedReducescatter);
  }
  for (const char* t : moveTypes) {
    std::string s = std::string("_torch_") + t;
    m.def(("horovod_torch_allgather_async" + s).c_str(), &allgather);
    m.def(("horovod_torch_grouped_allgather_async" + s).c_str(), &groupedAllgather);
    m.def(("horovod_torch_broadcast_async" + s).c_str(), &broadcast);
    m.def(("horovod_torch_alltoall_async" + s).c_str(), &alltoall);
  }
  m.def("horovod_torch_join", &join);
  m.def("horovod_torch_barrier", &barrier, py::arg("process_set_id") = 0);
  m.def("horovod_torch_poll", &poll);
  m.def("horovod_torch_wait_and_clear", &waitAndClear);
  m.def("horovod_torch_reset", &reset);
}
