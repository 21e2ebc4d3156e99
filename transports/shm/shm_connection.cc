#include "transports/shm/shm_connection.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "topology/placement.h"
#include "transports/slot_fifo.h"

namespace braid::transport::shm {

namespace {

// Maps every page of a segment into this process now, allocating it where it is not yet
// (with the NUMA policy bound before). Left to first touch, the pages fault in during the
// first calls that reach them: a 1 MiB allreduce on 2 ranks over 4 MiB FIFOs took
// 0.84-1.5 ms for each of its first four calls, 0.11-0.19 ms with the pages mapped here. MADV_POPULATE_WRITE (Linux 5.14) also turns
// a /dev/shm too small for the FIFOs into an error here instead of a SIGBUS mid-call; older
// kernels get a read of each page, which allocates tmpfs pages as well.
Status populate(void* mem, size_t bytes, const std::string& name) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(mem, bytes, MADV_POPULATE_WRITE) == 0) return Status::ok();
  const int err = errno;
  if (err == EFAULT || err == ENOSPC)  // the tmpfs behind /dev/shm is full
    return Status(Code::kSystemError,
                  "/dev/shm has no room for the " + std::to_string(bytes) + " bytes of shm segment " + name +
                      " (each shared-memory connection takes BRAID_NSLOTS x BRAID_SLOT_BYTES: give /dev/shm "
                      "more, e.g. docker run --shm-size, or lower those)");
  if (err != EINVAL) return systemError("madvise(MADV_POPULATE_WRITE)", err).withContext("allocating shm segment " + name);
#endif
  const long page = sysconf(_SC_PAGESIZE);
  const size_t step = page > 0 ? static_cast<size_t>(page) : 4096;
  const volatile unsigned char* p = static_cast<const unsigned char*>(mem);
  for (size_t off = 0; off < bytes; off += step) (void)p[off];
  return Status::ok();
}

}  // namespace

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
  if (Status s = populate(mem, bytes, name); !s.isOk()) {
    shm_unlink(name.c_str());
    delete seg;
    return s;
  }
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
  if (Status s = populate(mem, bytes, name); !s.isOk()) {
    delete seg;
    return s;
  }
  return seg;
}

}  // namespace braid::transport::shm
