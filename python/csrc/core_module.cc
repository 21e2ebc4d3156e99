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

#include <memory>

#include <cstring>
#include <string>

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
        case 32: return braid::DataType::kInt32;
        case 64: return braid::DataType::kInt64;
      }
    } else if (t.code == static_cast<uint8_t>(C::UInt)) {
      switch (t.bits) {
        case 8: return braid::DataType::kUint8;
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
                         ", " + std::to_string(t.bits) + " bits); braid takes int8/32/64, uint8/32/64, "
                         "float16/32/64 and bfloat16")
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
      raiseBraidError("Error", e, -1);
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
          "Join the job described by the launcher's environment (braidrun, torchrun, OpenMPI, Slurm).")
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
      .def("abort", [](PyComm& c) { c.get().abort(); },
           "Fail pending operations here and on every other rank; the communicator is unusable after.")
      .def(
          "close",
          [](PyComm& c) {
            nb::gil_scoped_release nogil;
            c.comm.reset();
          },
          "Wait for pending operations, then leave the job and free the communicator.");
}
