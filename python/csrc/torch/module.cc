// braid._torch_backend: the pybind11 entry point torch.distributed calls to create a
// BraidBackend (see braid/torch/__init__.py, which registers it as backend "braid").
//
// Built with torch's own pybind11 headers and ABI flags (see python/CMakeLists.txt), so that
// the c10d::Store argument and the c10d::Backend result cross into torch's bindings as the
// classes torch registered.

#include <pybind11/chrono.h>
#include <torch/python.h>

#include "backend.h"
#include "store_adapter.h"

namespace py = pybind11;

namespace {

c10::intrusive_ptr<c10d::Backend> createBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                const std::chrono::duration<float>& timeout,
                                                const std::string& keyPrefix) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  // The rendezvous blocks until every rank of the group joins: let other Python threads run.
  py::gil_scoped_release nogil;
  return c10::make_intrusive<braid_torch::BraidBackend>(store, rank, size, ms, keyPrefix);
}

// The braid backend behind a process group's backend object (pg._get_backend(device)).
braid_torch::BraidBackend& braidOf(const c10::intrusive_ptr<c10d::Backend>& backend, const char* fn) {
  auto* b = dynamic_cast<braid_torch::BraidBackend*>(backend.get());
  TORCH_CHECK_TYPE(b != nullptr, "braid.torch.", fn, ": the group's backend is ",
                   backend ? backend->getBackendName() : std::string("none"), ", not braid");
  return *b;
}

}  // namespace

PYBIND11_MODULE(_torch_backend, m) {
  m.doc() = "braid's c10d::Backend for torch.distributed (CPU tensors)";
  m.def("create_backend", &createBackend, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::arg("key_prefix") = std::string("braid"),
        "Creates the braid backend of one process group (its communicator named key_prefix); called by "
        "torch.distributed.");
  m.def(
      "live_status",
      [](const c10::intrusive_ptr<c10d::Store>& store, double wait) {
        // The wait for the answers must not hold the GIL: this process's ranks answer too.
        py::gil_scoped_release nogil;
        return braid::liveStatus(std::make_shared<braid_torch::C10dStoreAdapter>(store), wait);
      },
      py::arg("store"), py::arg("wait") = 1.0,
      "Where every process of the job behind torch's store is: braid-info --status's report.");
  m.def(
      "revoke", [](const c10::intrusive_ptr<c10d::Backend>& b) { braidOf(b, "revoke").revoke(); }, py::arg("backend"),
      "Fails every rank's pending and later calls on the group (braidCommRevoke).");
  m.def(
      "agree",
      [](const c10::intrusive_ptr<c10d::Backend>& b, int flag) {
        braid_torch::BraidBackend& backend = braidOf(b, "agree");
        // Agreement waits for the other survivors: let other Python threads run.
        py::gil_scoped_release nogil;
        return backend.agree(flag);
      },
      py::arg("backend"), py::arg("flag"),
      "The AND of flag over the live ranks and the failed ranks, the same on every survivor (braidCommAgree).");
}
