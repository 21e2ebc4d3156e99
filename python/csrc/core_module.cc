// braid._core: Python bindings of the C++ API (include/braid/braid.hpp) with nanobind.
//
// Buffers are any object nanobind can view as an n-d array on the host: the buffer
// protocol (NumPy arrays, bytearray, memoryview) or DLPack (torch CPU tensors). They must be
// C-contiguous; a strided view is rejected with ValueError instead of being copied, because a
// silent copy of an output buffer would throw the result away.
//
// Every blocking call releases the GIL, so other Python threads run while ranks exchange
// data. Asynchronous calls return a Work that keeps the buffers alive until it completes.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "braid/braid.hpp"

namespace nb = nanobind;

namespace {

using ROArray = nb::ndarray<nb::ro, nb::device::cpu>;
using RWArray = nb::ndarray<nb::device::cpu>;

// DLPack's (code, bits) to braid's element type. bfloat16 arrives through DLPack only: the
// buffer protocol has no format character for it.
template <typename A>
braid::DataType dataTypeOf(const A& a, const char* arg) {
  const nb::dlpack::dtype t = a.dtype();
  using C = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    if (t.code == static_cast<uint8_t>(C::Int)) {
      switch (t.bits) {
        case 8: return braid::DataType::kInt8;
        case 16: return braid::DataType::kInt16;
        case 32: return braid::DataType::kInt32;
        case 64: return braid::DataType::kInt64;
      }
    } else if (t.code == static_cast<uint8_t>(C::UInt)) {
      switch (t.bits) {
        case 8: return braid::DataType::kUint8;
        case 16: return braid::DataType::kUint16;
        case 32: return braid::DataType::kUint32;
        case 64: return braid::DataType::kUint64;
      }
    } else if (t.code == static_cast<uint8_t>(C::Float)) {
      switch (t.bits) {
        case 16: return braid::DataType::kFloat16;
        case 32: return braid::DataType::kFloat32;
        case 64: return braid::DataType::kFloat64;
      }
    } else if (t.code == static_cast<uint8_t>(C::Bfloat) && t.bits == 16) {
      return braid::DataType::kBFloat16;
    } else if (t.code == static_cast<uint8_t>(C::Bool) && t.bits == 8) {
      // One byte holding 0 or 1: the same bytes as uint8, which the bitwise ops, min and max
      // reduce correctly.
      return braid::DataType::kUint8;
    }
  }
  throw nb::value_error((std::string(arg) + ": unsupported element type (code " + std::to_string(t.code) +
                         ", " + std::to_string(t.bits) + " bits); braid takes int8/16/32/64, "
                         "uint8/16/32/64, float16/32/64 and bfloat16")
                            .c_str());
}

template <typename A>
void requireContiguous(const A& a, const char* arg) {
  int64_t expected = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expected)
      throw nb::value_error((std::string(arg) + " is not C-contiguous; pass a contiguous copy "
                                                "(numpy.ascontiguousarray / tensor.contiguous())")
                                .c_str());
    expected *= static_cast<int64_t>(a.shape(d));
  }
}

// The (send, recv) pair of one call, checked for shape and type agreement. `recv` None means
// in place: then `send` must be writable.
struct Buffers {
  const void* send;
  void* recv;
  size_t count;
  braid::DataType dtype;
};

Buffers buffers(nb::handle sendObj, nb::handle recvObj) {
  if (recvObj.is_none()) {
    RWArray buf;
    if (!nb::try_cast(sendObj, buf))
      throw nb::value_error("sendbuf must be a writable host buffer (buffer protocol or DLPack) when recvbuf is None");
    requireContiguous(buf, "sendbuf");
    return Buffers{buf.data(), buf.data(), buf.size(), dataTypeOf(buf, "sendbuf")};
  }
  ROArray send;
  RWArray recv;
  if (!nb::try_cast(sendObj, send)) throw nb::value_error("sendbuf must be a host buffer (buffer protocol or DLPack)");
  if (!nb::try_cast(recvObj, recv)) throw nb::value_error("recvbuf must be a writable host buffer");
  requireContiguous(send, "sendbuf");
  requireContiguous(recv, "recvbuf");
  braid::DataType dt = dataTypeOf(send, "sendbuf");
  if (dataTypeOf(recv, "recvbuf") != dt) throw nb::value_error("recvbuf has a different element type than sendbuf");
  if (recv.size() != send.size())
    throw nb::value_error(
        ("recvbuf has " + std::to_string(recv.size()) + " elements, sendbuf " + std::to_string(send.size())).c_str());
  return Buffers{send.data(), recv.data(), send.size(), dt};
}

Buffers inPlace(nb::handle obj) { return buffers(obj, nb::none()); }

// Owns the communicator so that close() can free it before Python collects the object (the
// destructor waits for pending operations and leaves the job cleanly).
struct PyComm {
  std::unique_ptr<braid::Communicator> comm;
  braid::Communicator& get() {
    if (!comm) throw nb::value_error("the communicator is closed");
    return *comm;
  }
};

// One buffer of a call whose send and receive sizes differ (allgather, gather, ...). `ptr`
// null and `count` 0 for None, where the call allows it (a non-root's gather output).
struct Buf {
  void* ptr = nullptr;
  size_t count = 0;
  braid::DataType dtype = braid::DataType::kUint8;
  bool given = false;
};

Buf roBuf(nb::handle obj, const char* arg) {
  if (obj.is_none()) return Buf{};
  ROArray a;
  if (!nb::try_cast(obj, a))
    throw nb::value_error((std::string(arg) + " must be a host buffer (buffer protocol or DLPack)").c_str());
  requireContiguous(a, arg);
  return Buf{const_cast<void*>(a.data()), a.size(), dataTypeOf(a, arg), true};
}

Buf rwBuf(nb::handle obj, const char* arg) {
  if (obj.is_none()) return Buf{};
  RWArray a;
  if (!nb::try_cast(obj, a))
    throw nb::value_error((std::string(arg) + " must be a writable host buffer (buffer protocol or DLPack)").c_str());
  requireContiguous(a, arg);
  return Buf{a.data(), a.size(), dataTypeOf(a, arg), true};
}

[[noreturn]] void badArg(const std::string& msg) { throw nb::value_error(msg.c_str()); }

void requireGiven(const Buf& b, const char* arg, const char* when) {
  if (!b.given) badArg(std::string(arg) + " is required " + when);
}

void sameType(const Buf& a, const Buf& b) {
  if (a.given && b.given && a.dtype != b.dtype) badArg("recvbuf has a different element type than sendbuf");
}

// `b` must hold `want` elements.
void requireCount(const Buf& b, size_t want, const char* arg, const std::string& why) {
  if (b.count != want)
    badArg(std::string(arg) + " has " + std::to_string(b.count) + " elements, expected " + std::to_string(want) +
           " (" + why + ")");
}

// The arguments of one call, checked on the caller's thread; `run` issues it (blocking or
// async) on a communicator.
struct Prepared {
  Buf send, recv;
  size_t count = 0;
  braid::DataType dtype = braid::DataType::kUint8;
};

Prepared prepAllgather(PyComm& c, nb::handle send, nb::handle recv) {
  Prepared p{roBuf(send, "sendbuf"), rwBuf(recv, "recvbuf")};
  requireGiven(p.send, "sendbuf", "");
  requireGiven(p.recv, "recvbuf", "");
  sameType(p.send, p.recv);
  const size_t n = static_cast<size_t>(c.get().size());
  requireCount(p.recv, n * p.send.count, "recvbuf", "size x sendbuf");
  return Prepared{p.send, p.recv, p.send.count, p.send.dtype};
}
Prepared prepReduceScatter(PyComm& c, nb::handle send, nb::handle recv) {
  Prepared p{roBuf(send, "sendbuf"), rwBuf(recv, "recvbuf")};
  requireGiven(p.send, "sendbuf", "");
  requireGiven(p.recv, "recvbuf", "");
  sameType(p.send, p.recv);
  const size_t n = static_cast<size_t>(c.get().size());
  requireCount(p.send, n * p.recv.count, "sendbuf", "size x recvbuf");
  return Prepared{p.send, p.recv, p.recv.count, p.recv.dtype};
}
Prepared prepAlltoall(PyComm& c, nb::handle send, nb::handle recv) {
  if (recv.is_none()) {
    Buf b = rwBuf(send, "sendbuf");
    requireGiven(b, "sendbuf", "");
    const size_t n = static_cast<size_t>(c.get().size());
    if (b.count % n) badArg("sendbuf's " + std::to_string(b.count) + " elements are not size x a block");
    return Prepared{b, b, b.count / n, b.dtype};
  }
  Buffers b = buffers(send, recv);
  const size_t n = static_cast<size_t>(c.get().size());
  if (b.count % n) badArg("sendbuf's " + std::to_string(b.count) + " elements are not size x a block");
  Buf s{const_cast<void*>(b.send), b.count, b.dtype, true}, r{b.recv, b.count, b.dtype, true};
  return Prepared{s, r, b.count / n, b.dtype};
}
// gather: every rank's sendbuf (count), the root's recvbuf (size x count), None elsewhere.
// scatter: the mirror image: the root's sendbuf (size x count), every rank's recvbuf (count).
Prepared prepRooted(PyComm& c, nb::handle send, nb::handle recv, int root, bool gather) {
  Prepared p{roBuf(send, "sendbuf"), rwBuf(recv, "recvbuf")};
  const Buf& each = gather ? p.send : p.recv;  // count elements on every rank
  const Buf& all = gather ? p.recv : p.send;   // size x count on the root
  const char* eachName = gather ? "sendbuf" : "recvbuf";
  const char* allName = gather ? "recvbuf" : "sendbuf";
  requireGiven(each, eachName, "");
  if (c.get().rank() == root) {
    requireGiven(all, allName, "on the root");
    sameType(p.send, p.recv);
    requireCount(all, static_cast<size_t>(c.get().size()) * each.count, allName, std::string("size x ") + eachName);
  }
  return Prepared{p.send, p.recv, each.count, each.dtype};
}
// reduce: sendbuf everywhere; recvbuf (None: in place on sendbuf) is written on the root only.
Prepared prepReduce(PyComm& c, nb::handle send, nb::handle recv, int root) {
  if (recv.is_none()) {
    Buf b = c.get().rank() == root ? rwBuf(send, "sendbuf") : roBuf(send, "sendbuf");
    requireGiven(b, "sendbuf", "");
    return Prepared{b, b, b.count, b.dtype};
  }
  Buffers b = buffers(send, recv);
  Buf s{const_cast<void*>(b.send), b.count, b.dtype, true}, r{b.recv, b.count, b.dtype, true};
  return Prepared{s, r, b.count, b.dtype};
}

// One message of a send/recv batch, from a (buffer, peer) pair.
braid::P2POp p2pOp(bool isSend, nb::handle pair, const char* what) {
  nb::tuple t;
  if (!nb::try_cast(pair, t) || t.size() != 2)
    badArg(std::string(what) + " must be (buffer, peer) pairs");
  Buf b = isSend ? roBuf(t[0], what) : rwBuf(t[0], what);
  requireGiven(b, what, "");
  braid::P2POp op;
  op.isSend = isSend;
  op.buf = b.ptr;
  op.count = b.count;
  op.dtype = b.dtype;
  op.peer = nb::cast<int>(t[1]);
  return op;
}

std::vector<braid::P2POp> p2pOps(nb::handle sends, nb::handle recvs) {
  std::vector<braid::P2POp> ops;
  if (!sends.is_none())
    for (nb::handle h : sends) ops.push_back(p2pOp(true, h, "sends"));
  if (!recvs.is_none())
    for (nb::handle h : recvs) ops.push_back(p2pOp(false, h, "recvs"));
  return ops;
}

// The Python-visible handle of an asynchronous operation. `keep` holds the buffers so that
// Python cannot free them while braid's progress thread still writes into them.
struct PyWork {
  braid::Work work;
  nb::object keep;
  bool done = false;

  void wait() {
    if (done) return;
    {
      nb::gil_scoped_release nogil;
      work.wait();
    }
    done = true;
    keep = nb::none();
  }
  bool test() {
    if (done) return true;
    if (!work.test()) return false;
    done = true;
    keep = nb::none();
    return true;
  }
};

// braid's C++ exceptions become the Python classes defined in braid/_errors.py, so that
// they can subclass the matching builtins (TimeoutError, RuntimeError) and carry `.rank`.
void raiseBraidError(const char* cls, const braid::Error& e, int rank) {
  nb::object mod = nb::module_::import_("braid._errors");
  nb::object type = mod.attr(cls);
  nb::object exc = type(std::string(e.what()), rank, static_cast<int>(e.code()));
  PyErr_SetObject(type.ptr(), exc.ptr());
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "braid core bindings: Communicator, Work and the collectives over host buffers.";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const braid::RemoteError& e) {
      raiseBraidError("RemoteError", e, e.rank());
    } catch (const braid::TimeoutError& e) {
      raiseBraidError("TimeoutError", e, e.rank());
    } catch (const braid::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const braid::Error& e) {
      raiseBraidError(e.code() == braidRevoked ? "RevokedError" : "Error", e, -1);
    }
  });

  nb::enum_<braid::ReduceOp>(m, "ReduceOp")
      .value("SUM", braid::ReduceOp::kSum)
      .value("PROD", braid::ReduceOp::kProd)
      .value("MAX", braid::ReduceOp::kMax)
      .value("MIN", braid::ReduceOp::kMin)
      .value("AVG", braid::ReduceOp::kAvg)
      .value("BAND", braid::ReduceOp::kBand)
      .value("BOR", braid::ReduceOp::kBor)
      .value("BXOR", braid::ReduceOp::kBxor);

  m.def("version", [] {
    int v = 0;
    braidGetVersion(&v);
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  });

  nb::class_<PyWork>(m, "Work", "An operation in flight; wait() raises the operation's error.")
      .def("wait", &PyWork::wait, "Block until the operation completes; raise its error if it failed.")
      .def("test", &PyWork::test, "True once the operation completed; raises its error if it failed.")
      .def("is_completed", &PyWork::test);

  nb::class_<PyComm>(m, "Communicator")
      .def_static(
          "from_env",
          [] {
            nb::gil_scoped_release nogil;
            return new PyComm{std::make_unique<braid::Communicator>(braid::Communicator::fromEnv())};
          },
          nb::rv_policy::take_ownership,
          "Join the job described by the launcher's environment (braidrun, horovodrun --gloo, torchrun, OpenMPI, Slurm).")
      .def_prop_ro("rank", [](PyComm& c) { return c.get().rank(); })
      .def_prop_ro("size", [](PyComm& c) { return c.get().size(); })
      .def_prop_ro("closed", [](PyComm& c) { return !c.comm; })
      .def(
          "allreduce",
          [](PyComm& c, nb::handle send, nb::handle recv, braid::ReduceOp op) {
            Buffers b = buffers(send, recv);
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.allreduce(b.send, b.recv, b.count, b.dtype, op);
          },
          nb::arg("sendbuf"), nb::arg("recvbuf").none() = nb::none(), nb::arg("op") = braid::ReduceOp::kSum,
          "recvbuf[i] = op over all ranks of sendbuf[i]; in place on sendbuf when recvbuf is None.")
      .def(
          "allreduce_async",
          [](PyComm& c, nb::handle send, nb::handle recv, braid::ReduceOp op) {
            Buffers b = buffers(send, recv);
            return new PyWork{c.get().allreduceAsync(b.send, b.recv, b.count, b.dtype, op),
                              nb::make_tuple(send, recv)};
          },
          nb::arg("sendbuf"), nb::arg("recvbuf").none() = nb::none(), nb::arg("op") = braid::ReduceOp::kSum,
          nb::rv_policy::take_ownership, "Like allreduce, returning a Work; the buffers stay alive until it completes.")
      .def(
          "broadcast",
          [](PyComm& c, nb::handle buf, int root) {
            Buffers b = inPlace(buf);
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.broadcast(b.recv, b.count, b.dtype, root);
          },
          nb::arg("buf"), nb::arg("root") = 0, "buf = root's buf on every rank.")
      .def(
          "broadcast_async",
          [](PyComm& c, nb::handle buf, int root) {
            Buffers b = inPlace(buf);
            return new PyWork{c.get().broadcastAsync(b.recv, b.recv, b.count, b.dtype, root), nb::borrow(buf)};
          },
          nb::arg("buf"), nb::arg("root") = 0, nb::rv_policy::take_ownership)
      // ---- the rest of the collective set: `name(...)` blocks with the GIL released,
      // `name_async(...)` returns a Work that keeps the buffers alive until it completes.
      .def(
          "reduce",
          [](PyComm& c, nb::handle send, nb::handle recv, braid::ReduceOp op, int root) {
            Prepared p = prepReduce(c, send, recv, root);
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.reduce(p.send.ptr, p.recv.ptr, p.count, p.dtype, op, root);
          },
          nb::arg("sendbuf"), nb::arg("recvbuf").none() = nb::none(), nb::arg("op") = braid::ReduceOp::kSum,
          nb::arg("root") = 0,
          "The root's recvbuf = op over all ranks of sendbuf (in place on the root's sendbuf when recvbuf is "
          "None); recvbuf is not touched elsewhere.")
      .def(
          "reduce_async",
          [](PyComm& c, nb::handle send, nb::handle recv, braid::ReduceOp op, int root) {
            Prepared p = prepReduce(c, send, recv, root);
            return new PyWork{c.get().reduceAsync(p.send.ptr, p.recv.ptr, p.count, p.dtype, op, root),
                              nb::make_tuple(send, recv)};
          },
          nb::arg("sendbuf"), nb::arg("recvbuf").none() = nb::none(), nb::arg("op") = braid::ReduceOp::kSum,
          nb::arg("root") = 0, nb::rv_policy::take_ownership)
      .def(
          "allgather",
          [](PyComm& c, nb::handle send, nb::handle recv) {
            Prepared p = prepAllgather(c, send, recv);
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.allgather(p.send.ptr, p.recv.ptr, p.count, p.dtype);
          },
          nb::arg("sendbuf"), nb::arg("recvbuf"),
          "recvbuf (size x len(sendbuf) elements) = every rank's sendbuf, in rank order.")
      .def(
          "allgather_async",
          [](PyComm& c, nb::handle send, nb::handle recv) {
            Prepared p = prepAllgather(c, send, recv);
            return new PyWork{c.get().allgatherAsync(p.send.ptr, p.recv.ptr, p.count, p.dtype),
                              nb::make_tuple(send, recv)};
          },
          nb::arg("sendbuf"), nb::arg("recvbuf"), nb::rv_policy::take_ownership)
      .def(
          "reduce_scatter",
          [](PyComm& c, nb::handle send, nb::handle recv, braid::ReduceOp op) {
            Prepared p = prepReduceScatter(c, send, recv);
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.reduceScatter(p.send.ptr, p.recv.ptr, p.count, p.dtype, op);
          },
          nb::arg("sendbuf"), nb::arg("recvbuf"), nb::arg("op") = braid::ReduceOp::kSum,
          "recvbuf = op over all ranks of block `rank` of sendbuf (size blocks of len(recvbuf)).")
      .def(
          "reduce_scatter_async",
          [](PyComm& c, nb::handle send, nb::handle recv, braid::ReduceOp op) {
            Prepared p = prepReduceScatter(c, send, recv);
            return new PyWork{c.get().reduceScatterAsync(p.send.ptr, p.recv.ptr, p.count, p.dtype, op),
                              nb::make_tuple(send, recv)};
          },
          nb::arg("sendbuf"), nb::arg("recvbuf"), nb::arg("op") = braid::ReduceOp::kSum,
          nb::rv_policy::take_ownership)
      .def(
          "alltoall",
          [](PyComm& c, nb::handle send, nb::handle recv) {
            Prepared p = prepAlltoall(c, send, recv);
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.alltoall(p.send.ptr, p.recv.ptr, p.count, p.dtype);
          },
          nb::arg("sendbuf"), nb::arg("recvbuf").none() = nb::none(),
          "Block j of rank i's sendbuf lands in block i of rank j's recvbuf (size equal blocks; in place when "
          "recvbuf is None).")
      .def(
          "alltoall_async",
          [](PyComm& c, nb::handle send, nb::handle recv) {
            Prepared p = prepAlltoall(c, send, recv);
            return new PyWork{c.get().alltoallAsync(p.send.ptr, p.recv.ptr, p.count, p.dtype),
                              nb::make_tuple(send, recv)};
          },
          nb::arg("sendbuf"), nb::arg("recvbuf").none() = nb::none(), nb::rv_policy::take_ownership)
      .def(
          "gather",
          [](PyComm& c, nb::handle send, nb::handle recv, int root) {
            Prepared p = prepRooted(c, send, recv, root, /*gather=*/true);
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.gather(p.send.ptr, p.recv.ptr, p.count, p.dtype, root);
          },
          nb::arg("sendbuf"), nb::arg("recvbuf").none() = nb::none(), nb::arg("root") = 0,
          "The root's recvbuf (size x len(sendbuf)) = every rank's sendbuf, in rank order; recvbuf may be None "
          "elsewhere.")
      .def(
          "gather_async",
          [](PyComm& c, nb::handle send, nb::handle recv, int root) {
            Prepared p = prepRooted(c, send, recv, root, /*gather=*/true);
            return new PyWork{c.get().gatherAsync(p.send.ptr, p.recv.ptr, p.count, p.dtype, root),
                              nb::make_tuple(send, recv)};
          },
          nb::arg("sendbuf"), nb::arg("recvbuf").none() = nb::none(), nb::arg("root") = 0,
          nb::rv_policy::take_ownership)
      .def(
          "scatter",
          [](PyComm& c, nb::handle send, nb::handle recv, int root) {
            Prepared p = prepRooted(c, send, recv, root, /*gather=*/false);
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.scatter(p.send.ptr, p.recv.ptr, p.count, p.dtype, root);
          },
          nb::arg("sendbuf").none(), nb::arg("recvbuf"), nb::arg("root") = 0,
          "recvbuf = block `rank` of the root's sendbuf (size blocks of len(recvbuf)); sendbuf may be None "
          "off the root.")
      .def(
          "scatter_async",
          [](PyComm& c, nb::handle send, nb::handle recv, int root) {
            Prepared p = prepRooted(c, send, recv, root, /*gather=*/false);
            return new PyWork{c.get().scatterAsync(p.send.ptr, p.recv.ptr, p.count, p.dtype, root),
                              nb::make_tuple(send, recv)};
          },
          nb::arg("sendbuf").none(), nb::arg("recvbuf"), nb::arg("root") = 0, nb::rv_policy::take_ownership)
      .def(
          "barrier",
          [](PyComm& c) {
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.barrier();
          },
          "Return once every rank has entered the barrier.")
      .def(
          "barrier_async", [](PyComm& c) { return new PyWork{c.get().barrierAsync(), nb::none()}; },
          nb::rv_policy::take_ownership)
      // ---- point to point. A communicator runs its operations one after the other, and a
      // send larger than the transport buffers completes only once its receiver runs: two
      // ranks that exchange data must use one send_recv batch (which cannot deadlock), not a
      // send and a recv each.
      .def(
          "send",
          [](PyComm& c, nb::handle buf, int peer) {
            std::vector<braid::P2POp> ops{p2pOp(true, nb::make_tuple(buf, peer), "buf")};
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.sendRecv(ops);
          },
          nb::arg("buf"), nb::arg("peer"), "Send buf to rank `peer`; returns once buf may be reused.")
      .def(
          "recv",
          [](PyComm& c, nb::handle buf, int peer) {
            std::vector<braid::P2POp> ops{p2pOp(false, nb::make_tuple(buf, peer), "buf")};
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.sendRecv(ops);
          },
          nb::arg("buf"), nb::arg("peer"), "Receive into buf from rank `peer` (same element count and type).")
      .def(
          "send_async",
          [](PyComm& c, nb::handle buf, int peer) {
            std::vector<braid::P2POp> ops{p2pOp(true, nb::make_tuple(buf, peer), "buf")};
            return new PyWork{c.get().sendRecvAsync(ops), nb::borrow(buf)};
          },
          nb::arg("buf"), nb::arg("peer"), nb::rv_policy::take_ownership)
      .def(
          "recv_async",
          [](PyComm& c, nb::handle buf, int peer) {
            std::vector<braid::P2POp> ops{p2pOp(false, nb::make_tuple(buf, peer), "buf")};
            return new PyWork{c.get().sendRecvAsync(ops), nb::borrow(buf)};
          },
          nb::arg("buf"), nb::arg("peer"), nb::rv_policy::take_ownership)
      .def(
          "send_recv",
          [](PyComm& c, nb::handle sends, nb::handle recvs) {
            std::vector<braid::P2POp> ops = p2pOps(sends, recvs);
            braid::Communicator& comm = c.get();
            nb::gil_scoped_release nogil;
            comm.sendRecv(ops);
          },
          nb::arg("sends").none() = nb::none(), nb::arg("recvs").none() = nb::none(),
          "One batch of point-to-point messages: sends and recvs are lists of (buffer, peer). The messages "
          "of a pair of ranks match in order; a batch cannot deadlock, whatever peers the ranks name.")
      .def(
          "send_recv_async",
          [](PyComm& c, nb::handle sends, nb::handle recvs) {
            std::vector<braid::P2POp> ops = p2pOps(sends, recvs);
            return new PyWork{c.get().sendRecvAsync(ops), nb::make_tuple(sends, recvs)};
          },
          nb::arg("sends").none() = nb::none(), nb::arg("recvs").none() = nb::none(), nb::rv_policy::take_ownership)
      .def(
          "split",
          [](PyComm& c, int color, int key) -> PyComm* {
            braid::Communicator& comm = c.get();
            std::unique_ptr<braid::Communicator> child;
            {
              nb::gil_scoped_release nogil;
              braid::Communicator sub = comm.split(color, key);
              if (sub.valid()) child = std::make_unique<braid::Communicator>(std::move(sub));
            }
            if (!child) return nullptr;
            return new PyComm{std::move(child)};
          },
          nb::arg("color"), nb::arg("key") = 0, nb::rv_policy::take_ownership,
          "MPI_Comm_split: ranks with equal color form a new Communicator ordered by (key, rank); a negative "
          "color returns None. Collective over this communicator.")
      .def("abort", [](PyComm& c) { c.get().abort(); },
           "Fail pending operations here and on every other rank; the communicator is unusable after.")
      .def_prop_ro("epoch", [](PyComm& c) { return c.get().epoch(); },
                   "Shrinks and grows between this communicator and the one its job started with.")
      .def("joiners_waiting", [](PyComm& c) { return c.get().joinersWaiting(); },
           "Replacements (braidrun --max-np) waiting to be admitted by grow_joiners().")
      .def(
          "grow_joiners",
          [](PyComm& c) -> PyComm* {
            braid::Communicator& comm = c.get();
            std::unique_ptr<braid::Communicator> child;
            {
              nb::gil_scoped_release nogil;
              braid::Communicator grown = comm.growJoiners();
              if (grown.valid()) child = std::make_unique<braid::Communicator>(std::move(grown));
            }
            if (!child) return nullptr;
            return new PyComm{std::move(child)};
          },
          nb::rv_policy::take_ownership,
          "Collective: admit every waiting replacement and return the grown Communicator (None when none "
          "waited; this one stays valid).")
      .def("revoke", [](PyComm& c) { c.get().revoke(); },
           "Fail every rank's pending and later operations with RevokedError; the communicator can still be "
           "shrunk or split. Any thread; never blocks on peers.")
      .def(
          "shrink",
          [](PyComm& c, const std::vector<int>& exclude, bool abort) -> PyComm* {
            braid::Communicator& comm = c.get();
            std::unique_ptr<braid::Communicator> child;
            {
              nb::gil_scoped_release nogil;
              child = std::make_unique<braid::Communicator>(comm.shrink(exclude, abort));
            }
            return new PyComm{std::move(child)};
          },
          nb::arg("exclude"), nb::arg("abort") = false, nb::rv_policy::take_ownership,
          "ncclCommShrink: the survivors' new Communicator without the ranks in `exclude` (every survivor passes "
          "the same list; ranks stay in order). abort=True revokes this one first. Works on a failed or revoked "
          "communicator.")
      .def(
          "agree",
          [](PyComm& c, int flag) {
            braid::Communicator& comm = c.get();
            std::vector<int> failed;
            int v = 0;
            {
              nb::gil_scoped_release nogil;
              v = comm.agree(flag, &failed);
            }
            return nb::make_tuple(v, failed);
          },
          nb::arg("flag"),
          "MPIX_Comm_agree: (AND of the surviving ranks' flags, failed ranks), the same on every rank, even when "
          "ranks die meanwhile; a rank counted as failed before it voted gets braid.Error.")
      .def(
          "close",
          [](PyComm& c) {
            nb::gil_scoped_release nogil;
            c.comm.reset();
          },
          "Wait for pending operations, then leave the job and free the communicator.");
}
