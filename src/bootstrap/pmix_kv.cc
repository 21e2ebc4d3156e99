#include "bootstrap/pmix_kv.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#ifdef BRAID_HAVE_PMIX
#include <pmix.h>
#endif

namespace braid::bootstrap {

#ifndef BRAID_HAVE_PMIX

bool pmixBuiltIn() { return false; }

Status pmixExchange(const std::string&, const std::string*, int, std::string*, Deadline) {
  return Status(Code::kSystemError, "braid was built without PMIx's headers (Debian's libpmix-dev), so it cannot read "
                                    "the store's address from mpirun's PMIx server");
}

#else

bool pmixBuiltIn() { return true; }

namespace {

// The entry points braid uses (PMIx 4's client API, pmix.h), resolved from libpmix.so.2.
struct PmixApi {
  pmix_status_t (*init)(pmix_proc_t*, pmix_info_t[], size_t) = nullptr;
  pmix_status_t (*finalize)(const pmix_info_t[], size_t) = nullptr;
  pmix_status_t (*put)(pmix_scope_t, const char[], pmix_value_t*) = nullptr;
  pmix_status_t (*commit)() = nullptr;
  pmix_status_t (*fence)(const pmix_proc_t[], size_t, const pmix_info_t[], size_t) = nullptr;
  pmix_status_t (*get)(const pmix_proc_t*, const char[], const pmix_info_t[], size_t, pmix_value_t**) = nullptr;
  const char* (*errorString)(pmix_status_t) = nullptr;
  void (*valueDestruct)(pmix_value_t*) = nullptr;
  std::string loadError;
};

const PmixApi& api() {
  static PmixApi a;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    std::string tried;
    for (const char* name : {"libpmix.so.2", BRAID_PMIX_LIBDIR "/libpmix.so.2", "libpmix.so"}) {
      h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
      if (h) break;
      tried += std::string(tried.empty() ? "" : "; ") + dlerror();
    }
    if (!h) {
      a.loadError = "cannot open libpmix (" + tried + ")";
      return;
    }
    auto sym = [&](const char* name, auto* fn) {
      *reinterpret_cast<void**>(fn) = dlsym(h, name);
      if (!*fn && a.loadError.empty()) a.loadError = std::string("libpmix has no ") + name;
    };
    sym("PMIx_Init", &a.init);
    sym("PMIx_Finalize", &a.finalize);
    sym("PMIx_Put", &a.put);
    sym("PMIx_Commit", &a.commit);
    sym("PMIx_Fence", &a.fence);
    sym("PMIx_Get", &a.get);
    sym("PMIx_Error_string", &a.errorString);
    sym("PMIx_Value_destruct", &a.valueDestruct);
  });
  return a;
}

Status failed(const PmixApi& a, const char* call, pmix_status_t rc) {
  return Status(rc == PMIX_ERR_TIMEOUT ? Code::kTimeout : Code::kSystemError,
                std::string(call) + " failed: " + a.errorString(rc) + " (" + std::to_string(rc) + ")");
}

void setKey(char* dst, const char* src) {
  std::memset(dst, 0, PMIX_MAX_KEYLEN + 1);
  std::strncpy(dst, src, PMIX_MAX_KEYLEN);
}

}  // namespace

Status pmixExchange(const std::string& key, const std::string* value, int ownerRank, std::string* out,
                    Deadline deadline) {
  const PmixApi& a = api();
  if (!a.loadError.empty()) return Status(Code::kSystemError, a.loadError);
  if (key.size() > PMIX_MAX_KEYLEN) return invalidArgument("PMIx key '" + key + "' is too long");
  // PMIx is initialized once per process and finalized at exit: a client that finalizes
  // and initializes again between two fences (a second braid init) can leave the next
  // fence waiting, and the launcher treats a client that exits without a finalize as failed.
  static pmix_proc_t me;
  static pmix_status_t initRc = [&a] {
    std::memset(&me, 0, sizeof me);
    pmix_status_t rc = a.init(&me, nullptr, 0);
    if (rc == PMIX_SUCCESS) std::atexit([] { api().finalize(nullptr, 0); });
    return rc;
  }();
  pmix_status_t rc = initRc;
  if (rc != PMIX_SUCCESS) return failed(a, "PMIx_Init", rc).withContext("is this process started by mpirun?");

  if (value) {
    pmix_value_t v;
    std::memset(&v, 0, sizeof v);
    v.type = PMIX_STRING;
    v.data.string = const_cast<char*>(value->c_str());  // PMIx_Put copies it
    if ((rc = a.put(PMIX_GLOBAL, key.c_str(), &v)) != PMIX_SUCCESS) return failed(a, "PMIx_Put", rc);
    if ((rc = a.commit()) != PMIX_SUCCESS) return failed(a, "PMIx_Commit", rc);
  }
  // A fence over the whole namespace makes the committed value visible everywhere; bounded
  // by the deadline where the server honours PMIX_TIMEOUT.
  pmix_info_t info[2];
  std::memset(info, 0, sizeof info);
  setKey(info[0].key, PMIX_COLLECT_DATA);
  info[0].value.type = PMIX_BOOL;
  info[0].value.data.flag = true;
  setKey(info[1].key, PMIX_TIMEOUT);
  info[1].value.type = PMIX_INT;
  info[1].value.data.integer = deadline.never() ? 0 : std::max(1, deadline.remainingMillis(1 << 30) / 1000);
  pmix_proc_t all = me;  // the namespace (zero-padded by PMIx_Init)
  all.rank = PMIX_RANK_WILDCARD;
  if ((rc = a.fence(&all, 1, info, 2)) != PMIX_SUCCESS) return failed(a, "PMIx_Fence", rc);
  if (value) {
    *out = *value;
    return Status::ok();
  }
  pmix_proc_t owner = all;
  owner.rank = static_cast<pmix_rank_t>(ownerRank);
  pmix_value_t* got = nullptr;
  if ((rc = a.get(&owner, key.c_str(), &info[1], 1, &got)) != PMIX_SUCCESS)
    return failed(a, "PMIx_Get", rc).withContext("key '" + key + "' of rank " + std::to_string(ownerRank));
  Status s = Status::ok();
  if (got->type == PMIX_STRING && got->data.string)
    *out = got->data.string;
  else
    s = Status(Code::kSystemError, "PMIx key '" + key + "' holds type " + std::to_string(got->type) + ", not a string");
  a.valueDestruct(got);
  std::free(got);
  return s;
}

#endif

}  // namespace braid::bootstrap
