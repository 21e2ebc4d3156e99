// braid._torch_backend: the pybind11 entry point torch.distributed calls to create a
// BraidBackend (see braid/torch/__init__.py, which registers it as backend "braid").
//
// Built with torch's own pybind11 headers and ABI flags (see python/CMakeLists.txt), so that
// the c10d::Store argument and the c10d::Backend result cross into torch's bindings as the
// classes torch registered.

#include <pybind11/chrono.h>
#include <torch/python.h>

#include "backend.h"

namespace py = pybind11;

namespace {

c10::intrusive_ptr<c10d::Backend> createBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                const std::chrono::duration<float>& timeout) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  // The rendezvous blocks until every rank of the group joins: let other Python threads run.
  py::gil_scoped_release nogil;
  return c10::make_intrusive<braid_torch::BraidBackend>(store, rank, size, ms);
}

}  // namespace

PYBIND11_MODULE(_torch_backend, m) {
  m.doc() = "braid's c10d::Backend for torch.distributed (CPU tensors)";
  m.def("create_backend", &createBackend, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
        "Creates the braid backend of one process group; called by torch.distributed.");
}
