#include "transports/ibverbs/memory_hooks.h"

#ifdef BRAID_HAVE_UCM
#include <dlfcn.h>
#include <ucm/api/ucm.h>
#endif

namespace braid::transport::ibverbs {

#ifdef BRAID_HAVE_UCM
namespace {

// libucm opened at run time, so that the plugin loads where UCX is not installed (zero copy
// is then off, saying why). Through libucs, which needs it: libucm calls back into libucs
// and does not name it, so opening libucm alone would leave those calls unresolved.
struct Ucm {
  decltype(&ucm_set_event_handler) set = nullptr;
  decltype(&ucm_unset_event_handler) unset = nullptr;
  std::string why;
};

const Ucm& ucm() {
  static const Ucm u = [] {
    Ucm r;
    void* h = dlopen("libucs.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      r.why = std::string("UCX's memory hooks are not installed here (") + (e ? e : "libucs.so.0") + ")";
      return r;
    }
    r.set = reinterpret_cast<decltype(&ucm_set_event_handler)>(dlsym(h, "ucm_set_event_handler"));
    r.unset = reinterpret_cast<decltype(&ucm_unset_event_handler)>(dlsym(h, "ucm_unset_event_handler"));
    if (!r.set || !r.unset) {
      r.set = nullptr;
      r.unset = nullptr;
      r.why = "libucm has no ucm_set_event_handler";
    }
    return r;  // the library stays open: handlers may be set until the process exits
  }();
  return u;
}

void onUnmapped(ucm_event_type_t type, ucm_event_t* event, void* arg) {
  if (type != UCM_EVENT_VM_UNMAPPED) return;
  static_cast<RegistrationCache*>(arg)->noteUnmapped(event->vm_unmapped.address, event->vm_unmapped.size);
}

}  // namespace

StatusOr<std::unique_ptr<UnmapWatch>> UnmapWatch::start(RegistrationCache* cache) {
  const Ucm& u = ucm();
  if (!u.set) return Status(Code::kSystemError, u.why);
  const ucs_status_t st = u.set(UCM_EVENT_VM_UNMAPPED, 0, &onUnmapped, cache);
  if (st != UCS_OK) {
    return Status(Code::kSystemError, "UCX's memory hooks (libucm) could not be installed (status " +
                                          std::to_string(static_cast<int>(st)) + "; UCX_MEM_EVENTS=no?)");
  }
  return std::unique_ptr<UnmapWatch>(new UnmapWatch(cache));
}

UnmapWatch::~UnmapWatch() { ucm().unset(UCM_EVENT_VM_UNMAPPED, &onUnmapped, cache_); }

#else

StatusOr<std::unique_ptr<UnmapWatch>> UnmapWatch::start(RegistrationCache*) {
  return Status(Code::kSystemError, "built without UCX's memory hooks (libucm's header)");
}

UnmapWatch::~UnmapWatch() = default;

#endif

}  // namespace braid::transport::ibverbs
