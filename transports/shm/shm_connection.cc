#include "transports/shm/shm_connection.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "topology/placement.h"
#include "transports/slot_fifo.h"

namespace braid::transport::shm {

Segment::~Segment() {
  if (mem) munmap(mem, bytes);
}

StatusOr<Segment*> createSegment(const std::function<std::string()>& nextName, int nslots, size_t slotBytes,
                                 uint64_t nonce, int numaNode) {
  size_t bytes = SlotFifo::regionBytes(nslots, slotBytes);
  std::string name;
  int fd = -1;
  std::string taken;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    name = nextName();
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno != EEXIST) return systemError("shm_open", errno).withContext("creating " + name);
    if (fd < 0) taken += (taken.empty() ? "" : ", ") + name;
  }
  if (fd < 0) return Status(Code::kSystemError, "shm: every name tried already exists (" + taken + ")");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Status s = systemError("ftruncate(shm segment)", errno);
    close(fd);
    shm_unlink(name.c_str());
    return s.withContext("creating " + name + " (is /dev/shm large enough?)");
  }
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (mem == MAP_FAILED) {
    shm_unlink(name.c_str());
    return systemError("mmap(shm segment)", err);
  }
  // Bind before first touch so the pages land on the receiver's NUMA node. Binding is a
  // placement hint: failing it costs speed, not correctness.
  Status bind = topology::Placement::local().bindMemoryToNuma(mem, bytes, numaNode);
  (void)bind;
  auto* seg = new Segment();
  seg->name = name;
  seg->mem = mem;
  seg->bytes = bytes;
  SlotFifo::format(mem, nslots, slotBytes, nonce);
  return seg;
}

StatusOr<Segment*> openSegment(const std::string& name, uint64_t nonce) {
  int fd;
  BRAID_SYSCHECK(fd = shm_open(name.c_str(), O_RDWR, 0600));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    Status s = systemError("fstat(shm segment)", errno);
    close(fd);
    return s;
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (mem == MAP_FAILED) return systemError("mmap(shm segment)", err);
  auto* seg = new Segment();
  seg->name = name;
  seg->mem = mem;
  seg->bytes = bytes;
  if (const char* why = SlotFifo::check(mem, bytes, nonce)) {
    delete seg;
    return Status(Code::kInternal, "shm segment " + name + ": " + why);
  }
  return seg;
}

}  // namespace braid::transport::shm
