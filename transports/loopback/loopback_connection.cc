#include "transports/loopback/loopback_connection.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "transports/slot_fifo.h"

namespace braid::transport::loopback {
namespace {

std::mutex& registryMutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, std::weak_ptr<Region>>& handles() {
  static auto* m = new std::map<std::string, std::weak_ptr<Region>>();
  return *m;
}

}  // namespace

Region::~Region() { std::free(mem); }

std::shared_ptr<Region> createRegion(int nslots, size_t slotBytes, uint64_t nonce, std::string* handle) {
  static std::atomic<uint64_t> counter{0};
  auto r = std::make_shared<Region>();
  r->bytes = SlotFifo::regionBytes(nslots, slotBytes);
  r->mem = std::aligned_alloc(4096, (r->bytes + 4095) / 4096 * 4096);
  if (!r->mem) return nullptr;
  std::memset(r->mem, 0, r->bytes);
  SlotFifo::format(r->mem, nslots, slotBytes, nonce);
  *handle = std::to_string(getpid()) + ":" + std::to_string(counter.fetch_add(1));
  std::lock_guard<std::mutex> lock(registryMutex());
  handles()[*handle] = r;
  return r;
}

StatusOr<std::shared_ptr<Region>> lookupRegion(const std::string& handle, uint64_t nonce) {
  std::shared_ptr<Region> r;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    auto it = handles().find(handle);
    if (it != handles().end()) r = it->second.lock();
  }
  if (!r) return Status(Code::kInternal, "loopback handle '" + handle + "' is unknown in this process");
  if (const char* err = SlotFifo::check(r->mem, r->bytes, nonce))
    return Status(Code::kInternal, std::string("loopback FIFO: ") + err);
  return r;
}

void unregisterRegion(const std::string& handle) {
  std::lock_guard<std::mutex> lock(registryMutex());
  handles().erase(handle);
}

}  // namespace braid::transport::loopback
