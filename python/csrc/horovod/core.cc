// braid's Horovod core: negotiation, fusion and execution (see core.h for the model).

#include "core.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <sys/stat.h>

namespace braid_hvd {

namespace {

constexpr uint32_t kFlagUncached = 1;  // a pending entry the cache does not cover
constexpr uint32_t kFlagShutdown = 2;
constexpr uint32_t kFlagJoined = 4;
constexpr const char* kNoName = ".noname.";

using Clock = std::chrono::steady_clock;

// ---- serialization ------------------------------------------------------------------------

template <typename T>
void put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
bool get(const std::string& in, size_t* pos, T* v) {
  if (in.size() - *pos < sizeof *v) return false;
  std::memcpy(v, in.data() + *pos, sizeof *v);
  *pos += sizeof *v;
  return true;
}

// Lengths come from peers: bounded so that a corrupt message cannot ask for gigabytes.
constexpr uint32_t kMaxDims = 64;
constexpr uint32_t kMaxName = 1 << 16;

std::string shapeString(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

std::string dtypeName(int32_t st) { return c10::toString(static_cast<at::ScalarType>(st)); }

const char* opName(int32_t op) {
  switch (op) {
    case kOpAverage: return "Average";
    case kOpSum: return "Sum";
    case kOpAdasum: return "Adasum";
    case kOpMin: return "Min";
    case kOpMax: return "Max";
    case kOpProduct: return "Product";
  }
  return "unknown";
}

braid::DataType braidType(at::ScalarType t) {
  switch (t) {
    case at::kByte: case at::kBool: return braid::DataType::kUint8;
    case at::kChar: return braid::DataType::kInt8;
    case at::kShort: return braid::DataType::kInt16;
    case at::kInt: return braid::DataType::kInt32;
    case at::kLong: return braid::DataType::kInt64;
    case at::kHalf: return braid::DataType::kFloat16;
    case at::kBFloat16: return braid::DataType::kBFloat16;
    case at::kFloat: return braid::DataType::kFloat32;
    case at::kDouble: return braid::DataType::kFloat64;
    default: throw std::runtime_error("braid horovod: no reduction for tensors of type " + std::string(c10::toString(t)));
  }
}

braid::ReduceOp braidOp(int32_t op) {
  switch (op) {
    case kOpAverage: case kOpSum: return braid::ReduceOp::kSum;
    case kOpMin: return braid::ReduceOp::kMin;
    case kOpMax: return braid::ReduceOp::kMax;
    case kOpProduct: return braid::ReduceOp::kProd;
  }
  throw std::runtime_error(std::string("braid horovod: reduce op ") + opName(op) + " is not supported");
}

// Multiplies in place, in the precision Horovod's CPU path uses: fp16 and bf16 in fp32 (the
// factor rounded to fp32 first), integers in fp64 truncated back as a cast does, fp32 and
// fp64 in their own precision.
void scaleBy(at::Tensor t, double f) {
  auto st = t.scalar_type();
  if (st == at::kHalf || st == at::kBFloat16) {
    t.copy_(t.to(at::kFloat).mul_(static_cast<double>(static_cast<float>(f))));
  } else if (at::isFloatingType(st)) {
    t.mul_(f);
  } else {
    t.copy_(t.to(at::kDouble).mul_(f));
  }
}

void scale(at::Tensor t, double f) {
  if (f == 1.0 || t.numel() == 0) return;
  scaleBy(t, f);
}

// The last step of a reduction: postscale, and for Average the division by the set's size
// (exact truncating division for integers, as torch's div(rounding_mode='trunc')).
void finishReduction(at::Tensor t, int32_t op, double postscale, int n) {
  if (t.numel() == 0) return;
  if (op != kOpAverage) return scale(t, postscale);
  if (!at::isFloatingType(t.scalar_type()) && postscale == 1.0) {
    t.div_(n, "trunc");
  } else {
    scaleBy(t, postscale / n);
  }
}

// A valid address for zero-byte buffers (an empty tensor's data_ptr() may be null).
void* ptr(const at::Tensor& t) {
  static char dummy[16];
  void* p = t.numel() ? t.data_ptr() : nullptr;
  return p ? p : dummy;
}

int64_t numelOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t rowElems(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<int64_t> withFirst(const std::vector<int64_t>& shape, int64_t first) {
  std::vector<int64_t> s = shape;
  if (s.empty()) s.push_back(first);
  else s[0] = first;
  return s;
}

// What identifies this process's host (and network namespace, which test hosts differ in):
// ranks with equal keys are local to each other.
std::string hostKey() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string key = host;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (boot >> id) key += "/" + id;
  struct stat st {};
  if (stat("/proc/self/ns/net", &st) == 0) key += "/" + std::to_string(st.st_ino);
  key.resize(192, '\0');
  return key;
}

std::string upper(const char* s) {
  std::string u = s;
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

}  // namespace

const char* kindName(Kind k) {
  switch (k) {
    case Kind::kAllreduce: return "allreduce";
    case Kind::kAllgather: return "allgather";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kAlltoall: return "alltoall";
    case Kind::kReducescatter: return "reducescatter";
    case Kind::kBarrier: return "barrier";
    case Kind::kJoin: return "join";
    case Kind::kAddSet: return "add_process_set";
    case Kind::kRemoveSet: return "remove_process_set";
  }
  return "unknown";
}

void Request::serialize(std::string* out) const {
  put(out, static_cast<uint8_t>(kind));
  put(out, dtype);
  put(out, op);
  put(out, root);
  put(out, prescale);
  put(out, postscale);
  put(out, static_cast<uint32_t>(shape.size()));
  for (int64_t d : shape) put(out, d);
  put(out, static_cast<uint32_t>(ranks.size()));
  for (int32_t r : ranks) put(out, r);
  put(out, static_cast<uint32_t>(name.size()));
  out->append(name);
}

bool Request::parse(const std::string& in, size_t* pos) {
  uint8_t k = 0;
  uint32_t n = 0;
  if (!get(in, pos, &k) || k > static_cast<uint8_t>(Kind::kRemoveSet)) return false;
  kind = static_cast<Kind>(k);
  if (!get(in, pos, &dtype) || !get(in, pos, &op) || !get(in, pos, &root) || !get(in, pos, &prescale) ||
      !get(in, pos, &postscale) || !get(in, pos, &n) || n > kMaxDims)
    return false;
  shape.resize(n);
  for (auto& d : shape)
    if (!get(in, pos, &d)) return false;
  if (!get(in, pos, &n) || n > (1u << 22)) return false;
  ranks.resize(n);
  for (auto& r : ranks)
    if (!get(in, pos, &r)) return false;
  if (!get(in, pos, &n) || n > kMaxName || in.size() - *pos < n) return false;
  name.assign(in, *pos, n);
  *pos += n;
  return true;
}

std::string Request::signature() const {
  Request r = *this;
  r.name.clear();
  if ((kind == Kind::kAllgather || kind == Kind::kAlltoall) && !r.shape.empty()) r.shape[0] = 0;
  std::string s;
  r.serialize(&s);
  return s;
}

void Handle::finish(const std::string& err) {
  std::lock_guard<std::mutex> lk(mu);
  if (!err.empty() && error.empty()) error = err;
  if (--remaining <= 0 && !done) {
    done = true;
    cv.notify_all();
  }
}

// ---- the core -----------------------------------------------------------------------------

struct Core::Response {
  std::string name;
  Kind kind = Kind::kAllreduce;
  std::string error;
  Request req;                   // the request of the lowest rank that made it
  std::shared_ptr<Entry> local;  // this rank's entry; null on a joined rank (allreduce of zeros)
  bool anyJoined = false;
  int32_t lastJoined = -1;  // kJoin
};

Core& Core::instance() {
  static Core* core = new Core();  // never destroyed: the interpreter's exit may still call in
  return *core;
}

bool Core::init(const std::vector<int32_t>& ranks, const std::vector<std::vector<int32_t>>& sets) {
  if (running_) return true;
  try {
    const char* el = std::getenv("BRAID_ELASTIC");
    const char* hel = std::getenv("HOROVOD_ELASTIC");
    // horovodrun's own elastic driver renumbers the workers itself (braid's launch
    // environment asks it); braid's recovery is for braidrun --min-np.
    elastic_ = el && std::string(el) == "1" && !(hel && std::string(hel) == "1");
    std::unique_ptr<braid::Communicator> world;
    if (kept_ && elastic_) world = recover(std::move(kept_));
    kept_.reset();  // kept by an elastic run this process no longer is
    const bool recovered = world != nullptr;
    if (!world) world = std::make_unique<braid::Communicator>(braid::Communicator::fromEnv());
    if (!ranks.empty() && !recovered) {
      auto it = std::find(ranks.begin(), ranks.end(), world->rank());
      int color = it == ranks.end() ? -1 : 0;
      auto sub = world->split(color, static_cast<int>(it - ranks.begin()));
      if (!sub.valid()) {
        std::fprintf(stderr, "braid horovod: rank %d is not among the ranks given to hvd.init()\n", world->rank());
        return false;
      }
      world = std::make_unique<braid::Communicator>(std::move(sub));
    }
    rank_ = world->rank();
    size_ = world->size();

    // Local and cross ranks from the hosts the ranks run on (any launcher).
    std::string key = hostKey();
    std::string keys(key.size() * size_, '\0');
    world->allgather(key.data(), keys.data(), key.size(), braid::DataType::kUint8);
    std::vector<int> hostOf(size_);
    std::vector<std::string> hosts;
    for (int r = 0; r < size_; ++r) {
      std::string k = keys.substr(r * key.size(), key.size());
      auto it = std::find(hosts.begin(), hosts.end(), k);
      hostOf[r] = static_cast<int>(it - hosts.begin());
      if (it == hosts.end()) hosts.push_back(k);
    }
    std::vector<int> localOf(size_), perHost(hosts.size(), 0);
    for (int r = 0; r < size_; ++r) localOf[r] = perHost[hostOf[r]]++;
    localRank_ = localOf[rank_];
    localSize_ = perHost[hostOf[rank_]];
    crossRank_ = 0;
    crossSize_ = 0;
    for (int r = 0; r < size_; ++r) {
      if (localOf[r] != localRank_) continue;
      if (r < rank_) ++crossRank_;
      ++crossSize_;
    }
    homogeneous_ = std::all_of(perHost.begin(), perHost.end(), [&](int c) { return c == perHost[0]; });

    cycleTime_ = std::chrono::microseconds(static_cast<int64_t>(envDouble("HOROVOD_CYCLE_TIME", 1.0) * 1000));
    fusionThreshold_ = static_cast<size_t>(envInt("HOROVOD_FUSION_THRESHOLD", 128 << 20));
    fuseBelow_ = static_cast<size_t>(envInt("BRAID_HOROVOD_FUSE_BELOW", 1 << 20));
    adasumHalvingBytes_ = static_cast<size_t>(envInt("BRAID_HOROVOD_ADASUM_HALVING", 64 << 10));
    cacheCapacity_ = static_cast<size_t>(envInt("HOROVOD_CACHE_CAPACITY", 1024));
    stallWarning_ = std::chrono::seconds(envInt("HOROVOD_STALL_CHECK_TIME_SECONDS", 60));
    if (const char* d = std::getenv("HOROVOD_STALL_CHECK_DISABLE"); d && std::string(d) == "1")
      stallWarning_ = std::chrono::seconds(0);
    const char* dyn = std::getenv("HOROVOD_DYNAMIC_PROCESS_SETS");
    dynamicSets_ = dyn && *dyn && std::string(dyn) != "0";

    std::map<int32_t, std::shared_ptr<ProcessSet>> table;
    auto global = std::make_shared<ProcessSet>();
    global->id = 0;
    for (int r = 0; r < size_; ++r) global->ranks.push_back(r);
    global->member = true;
    global->cache.resize(cacheCapacity_);
    table[0] = global;
    int32_t next = 1;
    for (const auto& s : sets) {
      auto ps = std::make_shared<ProcessSet>();
      ps->id = next++;
      ps->ranks = s;
      std::sort(ps->ranks.begin(), ps->ranks.end());
      for (int32_t r : ps->ranks)
        if (r < 0 || r >= size_) {
          std::fprintf(stderr, "braid horovod: process set %d names rank %d, outside 0..%d\n", ps->id, r, size_ - 1);
          return false;
        }
      for (const auto& [id, other] : table)
        if (other->ranks == ps->ranks) {
          std::fprintf(stderr, "braid horovod: process sets %d and %d have the same ranks\n", id, ps->id);
          return false;
        }
      ps->member = std::binary_search(ps->ranks.begin(), ps->ranks.end(), rank_);
      ps->comm = std::make_unique<braid::Communicator>(world->split(ps->member ? 0 : -1, rank_));
      ps->cache.resize(cacheCapacity_);
      table[ps->id] = ps;
    }
    // The global set negotiates on a communicator of its own, so that the world stays free
    // for splitting new sets from inside a cycle.
    global->comm = std::make_unique<braid::Communicator>(world->split(0, rank_));

    if (const char* tl = std::getenv("HOROVOD_TIMELINE"); tl && *tl && std::string(tl) != "DYNAMIC" && rank_ == 0) {
      const char* mark = std::getenv("HOROVOD_TIMELINE_MARK_CYCLES");
      if (!timeline_.start(tl, mark && std::string(mark) == "1"))
        std::fprintf(stderr, "braid horovod: cannot write the timeline to HOROVOD_TIMELINE=%s\n", tl);
    }

    std::lock_guard<std::mutex> lk(mu_);
    world_ = std::move(world);
    sets_ = std::move(table);
    nextSetId_ = next;
    stopRequested_ = false;
    stopAgreed_ = false;
    fatal_.clear();
    joinEntry_.reset();
    joinCycle_ = 0;
    running_ = true;
    joinersNotified_ = false;
    nextJoinersLook_ = Clock::now();
    notifyPending_ = false;
    notifierStop_ = false;
    thread_ = std::thread([this] { loop(); });
    if (elastic_ && rank_ == 0 && joinersNotifier_) notifier_ = std::thread([this] { watchJoiners(); });
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid horovod: initialization failed: %s\n", e.what());
    return false;
  }
}

void Core::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!running_) return;
    stopRequested_ = true;
  }
  if (thread_.joinable()) thread_.join();
  stopNotifier();
  std::map<int32_t, std::shared_ptr<ProcessSet>> sets;
  {
    std::lock_guard<std::mutex> lk(mu_);
    sets.swap(sets_);
    running_ = false;
  }
  sets.clear();  // the communicators, then the world
  if (elastic_) {
    // Horovod's elastic loop calls init() next, which recovers this world; a process that
    // ends instead destroys it at exit.
    static std::once_flag atExit;
    std::call_once(atExit, [] { std::atexit([] { Core::instance().dropKeptWorld(); }); });
    kept_ = std::move(world_);
  }
  world_.reset();
  timeline_.stop();
  fusion_ = at::Tensor();
}

void Core::dropKeptWorld() { kept_.reset(); }

// The world after a failure or a change of hosts: the survivors agree on who is lost (a
// rank that died or stalled is counted by braid's agreement even if no collective saw it),
// shrink without them, then admit the replacements waiting. A rank lost during this is
// handled by agreeing again on what is left.
std::unique_ptr<braid::Communicator> Core::recover(std::unique_ptr<braid::Communicator> world) {
  for (int attempt = 1;; ++attempt) {
    try {
      std::vector<int> failed;
      world->agree(1, &failed);
      if (!failed.empty()) {
        std::string lost;
        for (int r : failed) lost += (lost.empty() ? "" : ",") + std::to_string(r);
        auto next = std::make_unique<braid::Communicator>(world->shrink(failed, true));
        std::fprintf(stderr, "braid horovod: rank %d: going on without rank(s) %s: now rank %d of %d\n",
                     world->rank(), lost.c_str(), next->rank(), next->size());
        world = std::move(next);
      }
      braid::Communicator grown = world->growJoiners();
      if (grown.valid()) {
        if (grown.rank() == 0)
          std::fprintf(stderr, "braid horovod: admitted %d replacement(s): %d ranks\n", grown.size() - world->size(),
                       grown.size());
        world = std::make_unique<braid::Communicator>(std::move(grown));
      }
      return world;
    } catch (const braid::Error& e) {
      if (e.code() == braidAborted || attempt >= 3) throw;
      std::fprintf(stderr, "braid horovod: recovering: %s; agreeing again\n", e.what());
    }
  }
}

// Rank 0 of an elastic job: tells Horovod's front end, from this thread, that replacements
// wait (the notifier takes Python's lock, which the background thread must never wait for).
void Core::watchJoiners() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    wake_.wait(lk, [&] { return notifyPending_ || notifierStop_; });
    if (notifierStop_) return;
    notifyPending_ = false;
    lk.unlock();
    try {
      joinersNotifier_();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "braid horovod: could not tell Horovod that replacements wait: %s\n", e.what());
    }
    lk.lock();
  }
}

void Core::stopNotifier() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    notifierStop_ = true;
  }
  wake_.notify_all();
  if (notifier_.joinable()) notifier_.join();
}

std::shared_ptr<ProcessSet> Core::findSet(int32_t id) {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second;
}

std::string Core::autoName(int32_t setId, Kind kind) {
  std::lock_guard<std::mutex> lk(mu_);
  auto ps = findSet(setId);
  uint64_t n = ps ? ps->noname[static_cast<int>(kind)]++ : 0;
  return std::string(kindName(kind)) + kNoName + std::to_string(n);
}

std::shared_ptr<Handle> Core::submit(int32_t setId, std::vector<Entry> entries) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!running_) throw std::runtime_error("Horovod has not been initialized; use hvd.init().");
  if (!fatal_.empty()) throw std::runtime_error(fatal_);
  if (stopRequested_) throw std::runtime_error("Horovod is shutting down.");
  auto ps = findSet(setId);
  if (!ps) throw std::runtime_error("process set " + std::to_string(setId) + " is not registered (rank " +
                                    std::to_string(rank_) + ")");
  if (!ps->member)
    throw std::runtime_error("rank " + std::to_string(rank_) + " is not part of process set " +
                             std::to_string(setId));
  auto handle = std::make_shared<Handle>();
  handle->remaining = static_cast<int>(entries.size());
  if (entries.empty()) {
    handle->done = true;
    return handle;
  }
  bool join = entries.size() == 1 && entries[0].req.kind == Kind::kJoin;
  if (join) {
    if (setId != 0) throw std::runtime_error("join is an operation of the global process set");
    if (joinEntry_) throw std::invalid_argument("join() is already in progress on rank " + std::to_string(rank_));
    auto e = std::make_shared<Entry>(std::move(entries[0]));
    e->handle = handle;
    joinEntry_ = e;
    return handle;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& name = entries[i].req.name;
    bool twice = ps->pending.count(name) > 0;
    for (size_t j = 0; j < i && !twice; ++j) twice = entries[j].req.name == name;
    if (twice)
      throw std::invalid_argument("Requested to " + std::string(kindName(entries[i].req.kind)) +
                                  " a tensor with the same name as another tensor that is currently being "
                                  "processed (name '" + name + "', rank " + std::to_string(rank_) +
                                  "). If you want to request another tensor, use a different tensor name.");
  }
  auto now = Clock::now();
  for (auto& in : entries) {
    auto e = std::make_shared<Entry>(std::move(in));
    e->handle = handle;
    e->signature = e->req.signature();
    e->enqueued = now;
    ps->pending[e->req.name] = e;
    ps->queue.push_back(e);
    if (timeline_.on()) timeline_.begin(e->req.name, "NEGOTIATE_" + upper(kindName(e->req.kind)));
  }
  wake_.notify_all();
  return handle;
}

void Core::complete(ProcessSet& ps, const std::shared_ptr<Entry>& e, const std::string& err) {
  if (!e) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = std::find(ps.queue.begin(), ps.queue.end(), e);
    if (it != ps.queue.end()) ps.queue.erase(it);
    auto p = ps.pending.find(e->req.name);
    if (p != ps.pending.end() && p->second == e) ps.pending.erase(p);
  }
  // Outputs and inputs are released before the caller is told, so that a waiting thread
  // owns its tensors again when it wakes.
  if (timeline_.on()) timeline_.end(e->req.name);
  auto h = e->handle;
  e->input = at::Tensor();
  e->splits = at::Tensor();
  if (!err.empty()) e->output = at::Tensor();
  h->finish(err);
}

void Core::failAll(const std::string& why) {
  std::vector<std::pair<std::shared_ptr<ProcessSet>, std::shared_ptr<Entry>>> doomed;
  std::shared_ptr<Entry> join;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (fatal_.empty()) fatal_ = why;
    for (auto& [id, ps] : sets_)
      for (auto& e : ps->queue) doomed.emplace_back(ps, e);
    join = std::move(joinEntry_);
  }
  for (auto& [ps, e] : doomed) complete(*ps, e, why);
  if (join) join->handle->finish(why);
}

void Core::loop() {
  std::string ending =
      "Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to "
      "run a collective after one of the ranks finished execution.";
  try {
    bool stop = false;
    while (!stop) {
      auto start = Clock::now();
      timeline_.cycle();
      std::vector<std::shared_ptr<ProcessSet>> sets;
      {
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& [id, ps] : sets_)
          if (ps->member) sets.push_back(ps);
      }
      bool worked = false;
      for (auto& ps : sets) {
        if (ps->removed) continue;
        worked |= cycle(*ps);
        if (ps->id == 0 && stopAgreed_) {
          stop = true;
          break;
        }
      }
      if (elastic_ && rank_ == 0 && joinersNotifier_ && !joinersNotified_ && !stop && Clock::now() >= nextJoinersLook_) {
        nextJoinersLook_ = Clock::now() + std::chrono::milliseconds(500);
        int waiting = 0;
        try {
          waiting = world_->joinersWaiting();
        } catch (const braid::Error&) {
          // A store that cannot be read fails the next collective, with its reason.
        }
        if (waiting > 0) {
          joinersNotified_ = true;
          {
            std::lock_guard<std::mutex> lk(mu_);
            notifyPending_ = true;
          }
          wake_.notify_all();
        }
      }
      if (!worked && !stop) {
        std::unique_lock<std::mutex> lk(mu_);
        wake_.wait_until(lk, start + cycleTime_, [&] { return stopRequested_; });
      }
    }
  } catch (const std::exception& e) {
    ending = std::string("braid horovod (rank ") + std::to_string(rank_) + "): " + e.what();
  }
  failAll(ending);
}

void Core::remember(ProcessSet& ps, const std::string& name, const std::string& signature) {
  if (ps.cache.empty() || name.find(kNoName) != std::string::npos) return;
  size_t slot;
  auto it = ps.cacheIndex.find(name);
  if (it != ps.cacheIndex.end()) {
    slot = it->second;
  } else {
    // A free slot, else the least recently used one; every rank sees the same sequence of
    // executions, so every rank picks the same slot.
    slot = 0;
    for (size_t i = 0; i < ps.cache.size(); ++i) {
      if (!ps.cache[i].used) {
        slot = i;
        break;
      }
      if (ps.cache[i].lastUse < ps.cache[slot].lastUse) slot = i;
    }
    if (ps.cache[slot].used) ps.cacheIndex.erase(ps.cache[slot].name);
    ps.cacheIndex[name] = slot;
  }
  auto& s = ps.cache[slot];
  s.name = name;
  s.signature = signature;
  s.used = true;
  s.lastUse = ++ps.useClock;
}

bool Core::cycle(ProcessSet& ps) {
  ++ps.cycle;
  std::vector<std::shared_ptr<Entry>> snapshot;
  uint32_t flags = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    snapshot.assign(ps.queue.begin(), ps.queue.end());
    if (ps.id == 0) {
      if (stopRequested_) flags |= kFlagShutdown;
      if (joinEntry_) {
        flags |= kFlagJoined;
        if (joinCycle_ == 0) joinCycle_ = ps.cycle;
      }
    }
  }
  // Fast path: the bit vector over the cache, behind one word of inverted flags.
  size_t words = 1 + (ps.cache.size() + 63) / 64;
  std::vector<uint64_t> vec(words, 0);
  std::vector<std::shared_ptr<Entry>> bySlot(ps.cache.size());
  for (auto& e : snapshot) {
    auto it = ps.cacheIndex.find(e->req.name);
    if (it == ps.cacheIndex.end() || ps.cache[it->second].signature != e->signature) {
      flags |= kFlagUncached;
      continue;
    }
    vec[1 + it->second / 64] |= uint64_t{1} << (it->second % 64);
    bySlot[it->second] = e;
  }
  vec[0] = ~static_cast<uint64_t>(flags);
  ps.comm->allreduce(vec.data(), words, braid::DataType::kUint64, braid::ReduceOp::kBand);
  uint32_t any = static_cast<uint32_t>(~vec[0]);

  std::vector<Response> responses;
  if (any == 0) {
    for (size_t slot = 0; slot < ps.cache.size(); ++slot) {
      if (!(vec[1 + slot / 64] >> (slot % 64) & 1)) continue;
      Response r;
      r.local = bySlot[slot];
      r.req = r.local->req;
      r.name = r.req.name;
      r.kind = r.req.kind;
      responses.push_back(std::move(r));
    }
  } else {
    fullRound(ps, snapshot, flags, &responses);
    if (ps.id == 0 && stopAgreed_) return true;
  }
  if (responses.empty()) return false;
  execute(ps, responses);
  return true;
}

void Core::fullRound(ProcessSet& ps, const std::vector<std::shared_ptr<Entry>>& snapshot, uint32_t flags,
                     std::vector<Response>* out) {
  const int n = ps.comm->size();
  std::string mine;
  put(&mine, flags);
  put(&mine, static_cast<uint64_t>(flags & kFlagJoined ? joinCycle_ : 0));
  put(&mine, static_cast<uint32_t>(snapshot.size()));
  for (auto& e : snapshot) e->req.serialize(&mine);

  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(n);
  ps.comm->allgather(&len, lens.data(), 1, braid::DataType::kInt64);
  std::vector<size_t> counts(n), displs(n);
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    if (lens[r] < 0 || lens[r] > (int64_t{1} << 32))
      throw std::runtime_error("rank " + std::to_string(ps.ranks[r]) + " sent a malformed negotiation message");
    counts[r] = static_cast<size_t>(lens[r]);
    displs[r] = total;
    total += counts[r];
  }
  std::string all(total, '\0');
  ps.comm->allgatherv(mine.data(), mine.size(), all.data(), counts, displs, braid::DataType::kUint8);

  std::vector<uint32_t> rankFlags(n);
  std::vector<uint64_t> joinCycles(n);
  std::vector<std::vector<Request>> lists(n);
  for (int r = 0; r < n; ++r) {
    std::string part = all.substr(displs[r], counts[r]);
    size_t pos = 0;
    uint32_t count = 0;
    bool ok = get(part, &pos, &rankFlags[r]) && get(part, &pos, &joinCycles[r]) && get(part, &pos, &count);
    for (uint32_t i = 0; ok && i < count; ++i) {
      Request q;
      ok = q.parse(part, &pos);
      if (ok) lists[r].push_back(std::move(q));
    }
    if (!ok) throw std::runtime_error("rank " + std::to_string(ps.ranks[r]) + " sent a malformed negotiation message");
  }

  for (int r = 0; r < n; ++r)
    if (rankFlags[r] & kFlagShutdown) {
      stopAgreed_ = true;
      return;
    }

  std::vector<bool> joined(n);
  int joinedCount = 0;
  for (int r = 0; r < n; ++r) {
    joined[r] = (rankFlags[r] & kFlagJoined) != 0;
    joinedCount += joined[r];
  }

  // Names in a deterministic order: by rank, then by each rank's submission order.
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<const Request*>> byName;
  for (int r = 0; r < n; ++r)
    for (const auto& q : lists[r]) {
      auto& v = byName[q.name];
      if (v.empty()) {
        v.assign(n, nullptr);
        order.push_back(q.name);
      }
      if (!v[r]) v[r] = &q;
    }

  std::unordered_map<std::string, std::shared_ptr<Entry>> local;
  for (auto& e : snapshot) local[e->req.name] = e;

  for (const auto& name : order) {
    const auto& reqs = byName[name];
    bool ready = true;
    for (int r = 0; r < n && ready; ++r) ready = reqs[r] || joined[r];
    auto mineIt = local.find(name);
    if (!ready) {
      if (stallWarning_.count() > 0 && mineIt != local.end() && !mineIt->second->warned &&
          Clock::now() - mineIt->second->enqueued > stallWarning_) {
        mineIt->second->warned = true;
        std::string missing;
        for (int r = 0; r < n; ++r)
          if (!reqs[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(ps.ranks[r]);
        std::fprintf(stderr,
                     "braid horovod (rank %d): %s of '%s' has waited more than %lld s; ranks [%s] have not "
                     "submitted it\n",
                     rank_, kindName(mineIt->second->req.kind), name.c_str(),
                     static_cast<long long>(stallWarning_.count()), missing.c_str());
      }
      continue;
    }
    Response resp;
    resp.name = name;
    int first = 0;
    while (!reqs[first]) ++first;
    resp.req = *reqs[first];
    resp.kind = resp.req.kind;
    resp.anyJoined = joinedCount > 0;
    if (mineIt != local.end()) resp.local = mineIt->second;
    const Request& a = resp.req;
    int fr = ps.ranks[first];
    for (int r = first + 1; r < n && resp.error.empty(); ++r) {
      if (!reqs[r]) continue;
      const Request& b = *reqs[r];
      int br = ps.ranks[r];
      std::ostringstream m;
      if (b.kind != a.kind) {
        m << "Mismatched operations on tensor '" << name << "': rank " << fr << " requested " << kindName(a.kind)
          << ", rank " << br << " requested " << kindName(b.kind) << ".";
      } else if (b.dtype != a.dtype && a.kind != Kind::kBarrier) {
        m << "Mismatched data types on " << kindName(a.kind) << " of tensor '" << name << "': rank " << fr
          << " sent " << dtypeName(a.dtype) << ", rank " << br << " sent " << dtypeName(b.dtype) << ".";
      } else if ((a.kind == Kind::kAllreduce || a.kind == Kind::kReducescatter) && b.op != a.op) {
        m << "Mismatched reduce operations on " << kindName(a.kind) << " of tensor '" << name << "': rank " << fr
          << " asked for " << opName(a.op) << ", rank " << br << " for " << opName(b.op) << ".";
      } else if ((a.kind == Kind::kAllreduce || a.kind == Kind::kReducescatter) &&
                 (b.prescale != a.prescale || b.postscale != a.postscale)) {
        m << "Mismatched prescale or postscale factors on " << kindName(a.kind) << " of tensor '" << name
          << "': rank " << fr << " (" << a.prescale << ", " << a.postscale << "), rank " << br << " ("
          << b.prescale << ", " << b.postscale << ").";
      } else if ((a.kind == Kind::kAllreduce || a.kind == Kind::kReducescatter || a.kind == Kind::kBroadcast) &&
                 b.shape != a.shape) {
        m << "Mismatched " << kindName(a.kind) << " tensor shapes of '" << name << "': rank " << fr
          << " sent a tensor of shape " << shapeString(a.shape) << ", rank " << br << " a tensor of shape "
          << shapeString(b.shape) << ".";
      } else if ((a.kind == Kind::kAllgather || a.kind == Kind::kAlltoall) &&
                 (b.shape.size() != a.shape.size() ||
                  !std::equal(a.shape.begin() + std::min<size_t>(1, a.shape.size()), a.shape.end(),
                              b.shape.begin() + std::min<size_t>(1, b.shape.size())))) {
        m << "Mismatched " << kindName(a.kind) << " tensor shapes of '" << name
          << "' (all dimensions but the first must agree): rank " << fr << " sent " << shapeString(a.shape)
          << ", rank " << br << " sent " << shapeString(b.shape) << ".";
      } else if (a.kind == Kind::kBroadcast && b.root != a.root) {
        m << "Mismatched broadcast root ranks of tensor '" << name << "': rank " << fr << " named root " << a.root
          << ", rank " << br << " named root " << b.root << ".";
      } else if (a.kind == Kind::kAddSet && b.ranks != a.ranks) {
        m << "Mismatched ranks in add_process_set: rank " << fr << " and rank " << br << " named different ranks.";
      } else if (a.kind == Kind::kRemoveSet && b.root != a.root) {
        m << "Mismatched process set ids in remove_process_set: rank " << fr << " removes " << a.root
          << ", rank " << br << " removes " << b.root << ".";
      }
      resp.error = m.str();
    }
    if (resp.error.empty() && joinedCount > 0 && a.kind != Kind::kAllreduce) {
      std::string who;
      for (int r = 0; r < n; ++r)
        if (joined[r]) who += (who.empty() ? "" : ", ") + std::to_string(ps.ranks[r]);
      resp.error = std::string(kindName(a.kind)) + " of '" + name +
                   "' cannot run while ranks have called join(): only allreduce can (joined: ranks [" + who + "])";
    }
    out->push_back(std::move(resp));
  }

  if (ps.id == 0 && joinedCount == n) {
    // Every rank joined: the last to join is the one with the latest cycle (ties: the highest rank).
    int last = 0;
    for (int r = 1; r < n; ++r)
      if (joinCycles[r] >= joinCycles[last]) last = r;
    Response resp;
    resp.kind = Kind::kJoin;
    resp.name = "join";
    resp.lastJoined = ps.ranks[last];
    out->push_back(std::move(resp));
  }
}

void Core::execute(ProcessSet& ps, std::vector<Response>& responses) {
  if (timeline_.on()) {
    for (auto& r : responses) {
      if (!r.local) continue;
      timeline_.end(r.name);  // NEGOTIATE_<OP>
      timeline_.begin(r.name, upper(kindName(r.kind)));
    }
  }
  size_t i = 0;
  while (i < responses.size()) {
    Response& r = responses[i];
    if (!r.error.empty()) {
      complete(ps, r.local, r.error);
      ++i;
      continue;
    }
    if (r.kind == Kind::kAllreduce) {
      // Consecutive allreduces of one dtype, op and scale factors fuse, up to the threshold.
      std::vector<Response*> group{&r};
      size_t esz = c10::elementSize(static_cast<at::ScalarType>(r.req.dtype));
      size_t bytes = numelOf(r.req.shape) * esz;
      size_t j = i + 1;
      while (j < responses.size()) {
        Response& q = responses[j];
        if (!q.error.empty() || q.kind != Kind::kAllreduce || q.req.dtype != r.req.dtype || q.req.op != r.req.op ||
            q.req.prescale != r.req.prescale || q.req.postscale != r.req.postscale)
          break;
        size_t qb = numelOf(q.req.shape) * esz;
        if (bytes + qb > fusionThreshold_) break;
        bytes += qb;
        group.push_back(&q);
        ++j;
      }
      runAllreduces(ps, group);
      for (auto* g : group)
        if (!g->anyJoined) remember(ps, g->name, g->req.signature());
      i = j;
      continue;
    }
    runOne(ps, r);
    if (!r.anyJoined && r.kind != Kind::kBarrier && r.kind != Kind::kJoin && r.kind != Kind::kAddSet &&
        r.kind != Kind::kRemoveSet)
      remember(ps, r.name, r.req.signature());
    ++i;
  }
}

void Core::runAllreduces(ProcessSet& ps, std::vector<Response*>& group) {
  const Request& rq = group[0]->req;
  if (rq.op == kOpAdasum) return runAdasum(ps, group);
  auto st = static_cast<at::ScalarType>(rq.dtype);
  braid::DataType dt = braidType(st);
  // Average of floating-point data is braid's own average (one pass fewer than a sum and a
  // division); integers keep Horovod's truncating division after the sum.
  const bool braidAverage = rq.op == kOpAverage && at::isFloatingType(st);
  braid::ReduceOp op = braidAverage ? braid::ReduceOp::kAvg : braidOp(rq.op);
  const int32_t finishOp = braidAverage ? kOpSum : rq.op;
  const int n = ps.comm->size();
  size_t esz = c10::elementSize(st);

  // Tensors of fuseBelow_ bytes and more are reduced where they are (in place in the output;
  // fusing them would only add two copies of their bytes); the others are fused into one
  // buffer. All of them are in flight together.
  std::vector<Response*> fused;
  std::vector<std::pair<Response*, at::Tensor>> direct;
  for (auto* g : group) {
    size_t b = numelOf(g->req.shape) * esz;
    if (b < fuseBelow_ || group.size() == 1) {
      if (group.size() == 1 && g->local) direct.emplace_back(g, g->local->output);
      else fused.push_back(g);
    } else {
      direct.emplace_back(g, g->local ? g->local->output : at::Tensor());
    }
  }
  std::vector<braid::Work> works;
  for (auto& [g, out] : direct) {
    if (g->local) {
      auto& e = *g->local;
      if (e.output.data_ptr() != e.input.data_ptr()) e.output.copy_(e.input);
      scale(e.output, rq.prescale);
    } else {
      out = at::zeros(g->req.shape, at::TensorOptions().dtype(st));  // a joined rank contributes zeros
    }
    if (g->local && timeline_.on()) timeline_.begin(g->name, "BRAID_ALLREDUCE");
    works.push_back(ps.comm->allreduceAsync(ptr(out), ptr(out), out.numel(), dt, op));
  }

  auto activity = [&](const char* what) {
    if (!timeline_.on()) return;
    for (auto* g : fused)
      if (g->local) {
        if (what) timeline_.begin(g->name, what);
        else timeline_.end(g->name);
      }
  };
  size_t total = 0;
  for (auto* g : fused) total += numelOf(g->req.shape) * esz;
  char* buf = nullptr;
  at::Tensor view;
  if (!fused.empty()) {
    if (!fusion_.defined() || static_cast<size_t>(fusion_.numel()) < total)
      fusion_ = at::empty({static_cast<int64_t>(std::max<size_t>(total, 1))}, at::kByte);
    buf = static_cast<char*>(fusion_.data_ptr());
    activity("MEMCPY_IN_FUSION_BUFFER");
    size_t off = 0;
    for (auto* g : fused) {
      size_t b = numelOf(g->req.shape) * esz;
      if (g->local) std::memcpy(buf + off, ptr(g->local->input), b);
      else std::memset(buf + off, 0, b);  // a joined rank contributes zeros
      off += b;
    }
    view = at::from_blob(buf, {static_cast<int64_t>(total / esz)}, at::TensorOptions().dtype(st));
    scale(view, rq.prescale);
    activity(nullptr);
    activity("BRAID_ALLREDUCE");
    works.push_back(ps.comm->allreduceAsync(buf, buf, total / esz, dt, op));
  }
  for (auto& w : works) w.wait();

  for (auto& [g, out] : direct) {
    finishReduction(out, finishOp, rq.postscale, n);
    if (g->local && timeline_.on()) timeline_.end(g->name);
    complete(ps, g->local, "");
  }
  if (fused.empty()) return;
  finishReduction(view, finishOp, rq.postscale, n);
  activity(nullptr);
  activity("MEMCPY_OUT_FUSION_BUFFER");
  size_t off = 0;
  for (auto* g : fused) {
    size_t b = numelOf(g->req.shape) * esz;
    if (g->local) std::memcpy(ptr(g->local->output), buf + off, b);
    off += b;
    if (g->local && timeline_.on()) timeline_.end(g->name);
    complete(ps, g->local, "");
  }
}

// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys
// 2021), with Horovod's definition for two vectors a and b: a scaled by 1 - a.b / (2 |a|^2)
// plus b scaled by 1 - a.b / (2 |b|^2), a coefficient being 1 when its vector's squared
// norm is under 1e-8. Over 2^k ranks the vectors combine pairwise, rank r with r ^ 1, then
// the pairs' results with those of r ^ 2, and so on; a is always the lower ranks' vector.
// Each tensor of a fused group gets coefficients of its own. Sums and products are in
// fp64, with one rounding to the tensor's type per level.
namespace {

double adasumCoefficient(double dot, double normSq) { return normSq >= 1e-8 ? 1.0 - dot / normSq * 0.5 : 1.0; }

// Four partial sums of each kind, so that the additions do not wait on each other (the
// order is fixed, so every rank that sums the same data gets the same bits).
template <typename T>
void adasumDots(const T* a, const T* b, size_t n, double* sums) {
  double dot[4] = {0, 0, 0, 0}, aa[4] = {0, 0, 0, 0}, bb[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      const double x = static_cast<double>(a[i + k]), y = static_cast<double>(b[i + k]);
      dot[k] += x * y;
      aa[k] += x * x;
      bb[k] += y * y;
    }
  }
  for (; i < n; ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    dot[0] += x * y;
    aa[0] += x * x;
    bb[0] += y * y;
  }
  sums[0] += (dot[0] + dot[1]) + (dot[2] + dot[3]);
  sums[1] += (aa[0] + aa[1]) + (aa[2] + aa[3]);
  sums[2] += (bb[0] + bb[1]) + (bb[2] + bb[3]);
}

// out = ca a + cb b; out may be a or b.
template <typename T>
void adasumCombine(T* out, const T* a, const T* b, size_t n, double ca, double cb) {
  for (size_t i = 0; i < n; ++i) {
    const double v = ca * static_cast<double>(a[i]) + cb * static_cast<double>(b[i]);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      out[i] = static_cast<T>(v);
    } else {
      out[i] = static_cast<T>(static_cast<float>(v));
    }
  }
}

void exchange(braid::Communicator& comm, int peer, const void* send, size_t sendBytes, void* recv,
              size_t recvBytes) {
  comm.sendRecv({braid::P2POp{true, const_cast<void*>(send), sendBytes, braid::DataType::kUint8, peer},
                 braid::P2POp{false, recv, recvBytes, braid::DataType::kUint8, peer}});
}

// Adasum over the communicator, in place in `buf` (tensor i at elements seg[i] to seg[i+1]),
// with `peer` as large as `buf` for what the partners send.
//
// Below `halvingBytes` bytes: at each level the partners swap their whole vectors and both
// compute the combination, with the same operations in the same order, so both hold the
// same bits.
//
// From `halvingBytes` up, as Horovod's MPI path does it (vector halving, distance
// doubling): at each level a rank keeps half of its current stretch and sends the partner
// the other half, so each combines only its half. The dot products and norms of a level are
// then partial sums, added up over the 2 * level ranks whose stretches make up the whole
// vector (in the same pairs on each, so every one gets the same bits). After the last level
// each rank holds 1/n of the result, and the stretches travel back level by level.
template <typename T>
void adasumLevels(braid::Communicator& comm, T* buf, T* peer, const std::vector<size_t>& seg, size_t halvingBytes) {
  const int n = comm.size();
  const int me = comm.rank();
  const size_t groups = seg.size() - 1;
  const size_t count = seg.back();
  std::vector<double> sums(3 * groups), theirs(3 * groups);
  auto combineRange = [&](size_t lo, size_t hi, bool left) {
    for (size_t i = 0; i < groups; ++i) {
      const size_t a0 = std::max(seg[i], lo), a1 = std::min(seg[i + 1], hi);
      if (a0 >= a1) continue;
      const double ca = adasumCoefficient(sums[3 * i], sums[3 * i + 1]);
      const double cb = adasumCoefficient(sums[3 * i], sums[3 * i + 2]);
      adasumCombine(buf + a0, left ? buf + a0 : peer + a0, left ? peer + a0 : buf + a0, a1 - a0, ca, cb);
    }
  };
  auto dotsOver = [&](size_t lo, size_t hi, bool left) {
    std::fill(sums.begin(), sums.end(), 0.0);
    for (size_t i = 0; i < groups; ++i) {
      const size_t a0 = std::max(seg[i], lo), a1 = std::min(seg[i + 1], hi);
      if (a0 < a1) adasumDots(left ? buf + a0 : peer + a0, left ? peer + a0 : buf + a0, a1 - a0, &sums[3 * i]);
    }
  };
  if (count * sizeof(T) < halvingBytes) {
    for (int level = 1; level < n; level <<= 1) {
      const bool left = (me & level) == 0;
      exchange(comm, me ^ level, buf, count * sizeof(T), peer, count * sizeof(T));
      dotsOver(0, count, left);
      combineRange(0, count, left);
    }
    return;
  }
  size_t lo = 0, hi = count;
  std::vector<std::pair<size_t, size_t>> stretches;
  for (int level = 1; level < n; level <<= 1) {
    const bool left = (me & level) == 0;
    const size_t mid = lo + (hi - lo) / 2;
    stretches.emplace_back(lo, hi);
    const size_t keepLo = left ? lo : mid, keepHi = left ? mid : hi;
    const size_t sendLo = left ? mid : lo, sendHi = left ? hi : mid;
    exchange(comm, me ^ level, buf + sendLo, (sendHi - sendLo) * sizeof(T), peer + keepLo,
             (keepHi - keepLo) * sizeof(T));
    lo = keepLo;
    hi = keepHi;
    dotsOver(lo, hi, left);
    for (int bit = 1; bit <= level; bit <<= 1) {
      exchange(comm, me ^ bit, sums.data(), sums.size() * sizeof(double), theirs.data(),
               theirs.size() * sizeof(double));
      const bool lower = (me & bit) == 0;
      for (size_t j = 0; j < sums.size(); ++j) sums[j] = lower ? sums[j] + theirs[j] : theirs[j] + sums[j];
    }
    combineRange(lo, hi, left);
  }
  for (int level = n >> 1; level >= 1; level >>= 1) {
    const auto [plo, phi] = stretches.back();
    stretches.pop_back();
    const bool left = (me & level) == 0;
    const size_t otherLo = left ? hi : plo, otherHi = left ? phi : lo;
    exchange(comm, me ^ level, buf + lo, (hi - lo) * sizeof(T), buf + otherLo, (otherHi - otherLo) * sizeof(T));
    lo = plo;
    hi = phi;
  }
}

}  // namespace

void Core::runAdasum(ProcessSet& ps, std::vector<Response*>& group) {
  const Request& rq = group[0]->req;
  const auto st = static_cast<at::ScalarType>(rq.dtype);
  const int n = ps.comm->size();
  // The call refused other types and sizes (module.cc); a set can shrink since (elastic).
  if ((n & (n - 1)) != 0) {
    const std::string err = "allreduce with op=Adasum needs a power-of-two number of ranks; this process set has " +
                            std::to_string(n);
    for (auto* g : group) complete(ps, g->local, err);
    return;
  }
  const size_t esz = c10::elementSize(st);
  std::vector<size_t> seg{0};
  for (auto* g : group) seg.push_back(seg.back() + static_cast<size_t>(numelOf(g->req.shape)));
  const size_t total = seg.back() * esz;
  // A tensor alone is combined in its output, as a sum reduces in place; a group is fused.
  // The fusion buffer holds the fused tensors (unless alone) and what the partners send.
  const bool alone = group.size() == 1 && group[0]->local;
  const size_t need = alone ? total : 2 * total;
  if (!fusion_.defined() || static_cast<size_t>(fusion_.numel()) < need)
    fusion_ = at::empty({static_cast<int64_t>(std::max<size_t>(need, 1))}, at::kByte);
  char* buf = static_cast<char*>(fusion_.data_ptr());
  char* peerBuf = buf + total;
  if (alone) {
    Entry& e = *group[0]->local;
    if (e.output.data_ptr() != e.input.data_ptr()) e.output.copy_(e.input);
    buf = static_cast<char*>(ptr(e.output));
    peerBuf = static_cast<char*>(fusion_.data_ptr());
  }
  for (size_t i = 0; i < group.size(); ++i) {
    Response* g = group[i];
    const size_t b = (seg[i + 1] - seg[i]) * esz;
    if (!g->local) std::memset(buf + seg[i] * esz, 0, b);  // a joined rank contributes zeros: Adasum(a, 0) is a
    else if (!alone) std::memcpy(buf + seg[i] * esz, ptr(g->local->input), b);
    if (g->local && timeline_.on()) timeline_.begin(g->name, "BRAID_ADASUM");
  }
  if (rq.prescale != 1.0 && total > 0)
    scale(at::from_blob(buf, {static_cast<int64_t>(seg.back())}, at::TensorOptions().dtype(st)), rq.prescale);
  auto levels = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    adasumLevels(*ps.comm, typed, reinterpret_cast<T*>(peerBuf), seg, adasumHalvingBytes_);
  };
  if (total > 0) {
    switch (st) {
      case at::kHalf: levels(reinterpret_cast<c10::Half*>(buf)); break;
      case at::kBFloat16: levels(reinterpret_cast<c10::BFloat16*>(buf)); break;
      case at::kFloat: levels(reinterpret_cast<float*>(buf)); break;
      case at::kDouble: levels(reinterpret_cast<double*>(buf)); break;
      default: throw std::logic_error(std::string("Adasum on tensors of type ") + c10::toString(st));
    }
  }
  for (size_t i = 0; i < group.size(); ++i) {
    Response* g = group[i];
    if (g->local) {
      if (!alone) std::memcpy(ptr(g->local->output), buf + seg[i] * esz, (seg[i + 1] - seg[i]) * esz);
      scale(g->local->output, rq.postscale);
      if (timeline_.on()) timeline_.end(g->name);
    }
    complete(ps, g->local, "");
  }
}

void Core::runOne(ProcessSet& ps, Response& r) {
  const int n = ps.comm->size();
  const int me = ps.comm->rank();
  if (r.kind == Kind::kJoin) {
    std::shared_ptr<Entry> join;
    {
      std::lock_guard<std::mutex> lk(mu_);
      join = std::move(joinEntry_);
      joinCycle_ = 0;
    }
    if (join) {
      join->output.fill_(r.lastJoined);
      join->handle->result = r.lastJoined;
      join->handle->finish("");
    }
    return;
  }
  if (r.kind == Kind::kBarrier) {
    ps.comm->barrier();
    complete(ps, r.local, "");
    return;
  }
  if (r.kind == Kind::kAddSet) {
    std::vector<int32_t> ranks = r.req.ranks;
    int32_t result = 0;
    bool exists = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& [id, s] : sets_) exists |= s->ranks == ranks;
    }
    if (exists) {
      result = -6;
    } else {
      auto s = std::make_shared<ProcessSet>();
      s->ranks = ranks;
      s->member = std::binary_search(ranks.begin(), ranks.end(), rank_);
      s->comm = std::make_unique<braid::Communicator>(world_->split(s->member ? 0 : -1, rank_));
      s->cache.resize(cacheCapacity_);
      std::lock_guard<std::mutex> lk(mu_);
      s->id = nextSetId_++;
      result = s->id;
      sets_[s->id] = s;
    }
    if (r.local) r.local->handle->result = result;
    complete(ps, r.local, "");
    return;
  }
  if (r.kind == Kind::kRemoveSet) {
    int32_t id = r.req.root;
    std::shared_ptr<ProcessSet> gone;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = sets_.find(id);
      if (id != 0 && it != sets_.end()) {
        gone = it->second;
        sets_.erase(it);
      }
    }
    if (gone) {
      gone->removed = true;
      std::vector<std::shared_ptr<Entry>> doomed(gone->queue.begin(), gone->queue.end());
      for (auto& e : doomed) complete(*gone, e, "process set " + std::to_string(id) + " was removed");
    }
    if (r.local) r.local->handle->result = gone ? id : -3;
    complete(ps, r.local, "");
    return;
  }

  auto& e = *r.local;  // only allreduce runs on joined ranks, and that went to runAllreduces
  if (timeline_.on()) timeline_.begin(r.name, "BRAID_" + upper(kindName(r.kind)));
  auto st = e.input.scalar_type();
  size_t esz = c10::elementSize(st);
  std::vector<int64_t> shape = e.input.sizes().vec();
  switch (r.kind) {
    case Kind::kAllgather: {
      int64_t rows = shape.empty() ? 1 : shape[0];
      int64_t rowBytes = rowElems(shape) * static_cast<int64_t>(esz);
      std::vector<int64_t> all(n);
      ps.comm->allgather(&rows, all.data(), 1, braid::DataType::kInt64);
      std::vector<size_t> counts(n), displs(n);
      int64_t sum = 0;
      for (int q = 0; q < n; ++q) {
        counts[q] = static_cast<size_t>(all[q] * rowBytes);
        displs[q] = static_cast<size_t>(sum * rowBytes);
        sum += all[q];
      }
      e.output.resize_(withFirst(shape, sum));
      ps.comm->allgatherv(ptr(e.input), static_cast<size_t>(rows * rowBytes), ptr(e.output), counts, displs,
                         braid::DataType::kUint8);
      break;
    }
    case Kind::kBroadcast: {
      auto it = std::find(ps.ranks.begin(), ps.ranks.end(), r.req.root);
      int root = static_cast<int>(it - ps.ranks.begin());
      if (me == root && e.output.data_ptr() != e.input.data_ptr()) e.output.copy_(e.input);
      ps.comm->broadcast(ptr(e.output), e.output.numel() * esz, braid::DataType::kUint8, root);
      break;
    }
    case Kind::kAlltoall: {
      int64_t rows = shape[0];
      int64_t rowBytes = rowElems(shape) * static_cast<int64_t>(esz);
      std::vector<int64_t> send(n), recv(n);
      if (e.splits.defined() && e.splits.numel() > 0) {
        auto s = e.splits.to(at::kLong).contiguous();
        std::memcpy(send.data(), s.data_ptr(), n * sizeof(int64_t));
      } else {
        std::fill(send.begin(), send.end(), rows / n);
      }
      ps.comm->alltoall(send.data(), recv.data(), 1, braid::DataType::kInt64);
      std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
      int64_t so = 0, ro = 0;
      for (int q = 0; q < n; ++q) {
        sc[q] = static_cast<size_t>(send[q] * rowBytes);
        sd[q] = static_cast<size_t>(so * rowBytes);
        so += send[q];
        rc[q] = static_cast<size_t>(recv[q] * rowBytes);
        rd[q] = static_cast<size_t>(ro * rowBytes);
        ro += recv[q];
      }
      e.output.resize_(withFirst(shape, ro));
      e.receivedSplits.resize_({n});
      auto* rs = e.receivedSplits.data_ptr<int32_t>();
      for (int q = 0; q < n; ++q) rs[q] = static_cast<int32_t>(recv[q]);
      ps.comm->alltoallv(ptr(e.input), sc, sd, ptr(e.output), rc, rd, braid::DataType::kUint8);
      break;
    }
    case Kind::kReducescatter: {
      int64_t rows = shape[0];
      int64_t per = rowElems(shape);
      std::vector<size_t> counts(n);
      for (int q = 0; q < n; ++q) counts[q] = static_cast<size_t>((rows / n + (q < rows % n ? 1 : 0)) * per);
      e.output.resize_(withFirst(shape, rows / n + (me < rows % n ? 1 : 0)));
      at::Tensor work = e.input;
      if (r.req.prescale != 1.0) {
        work = e.input.clone();
        scale(work, r.req.prescale);
      }
      ps.comm->reduceScatterv(ptr(work), ptr(e.output), counts, braidType(st), braidOp(r.req.op));
      finishReduction(e.output, r.req.op, r.req.postscale, n);
      break;
    }
    default:
      throw std::runtime_error(std::string("braid horovod: unexpected operation ") + kindName(r.kind));
  }
  if (timeline_.on()) timeline_.end(r.name);
  complete(ps, r.local, "");
}

int Core::startTimeline(const std::string& path, bool markCycles) {
  if (!running_) return -1;
  if (rank_ != 0) return 1;
  return timeline_.start(path, markCycles) ? 1 : 0;
}

int Core::stopTimeline() {
  if (!running_) return -1;
  timeline_.stop();
  return 1;
}

// ---- process sets -------------------------------------------------------------------------

// Adding and removing a set are operations of the global set, negotiated like the others so
// that every rank applies them at the same point; the caller waits for the result.
int32_t Core::changeSets(Entry e) {
  const char* what = kindName(e.req.kind);
  e.req.name = autoName(0, e.req.kind);
  std::shared_ptr<Handle> h;
  try {
    std::vector<Entry> v;
    v.push_back(std::move(e));
    h = submit(0, std::move(v));
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "braid horovod: %s: %s\n", what, ex.what());
    return -5;
  }
  std::unique_lock<std::mutex> lk(h->mu);
  h->cv.wait(lk, [&] { return h->done; });
  if (!h->error.empty()) {
    std::fprintf(stderr, "braid horovod: %s: %s\n", what, h->error.c_str());
    return -5;
  }
  return h->result;
}

int32_t Core::addProcessSet(const std::vector<int32_t>& ranksIn) {
  if (!running_) return -1;
  if (!dynamicSets_) return -2;
  std::vector<int32_t> ranks = ranksIn;
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  for (int32_t r : ranks)
    if (r < 0 || r >= size_) return -3;
  Entry e;
  e.req.kind = Kind::kAddSet;
  e.req.ranks = ranks;
  return changeSets(std::move(e));
}

int32_t Core::removeProcessSet(int32_t id) {
  if (!running_) return -1;
  if (!dynamicSets_) return -2;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (id == 0 || !findSet(id)) return -3;
  }
  Entry e;
  e.req.kind = Kind::kRemoveSet;
  e.req.root = id;
  return changeSets(std::move(e));
}

int32_t Core::processSetRank(int32_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!running_) return -1;
  auto ps = findSet(id);
  if (!ps) return -3;
  if (!ps->member) return -4;
  return static_cast<int32_t>(std::lower_bound(ps->ranks.begin(), ps->ranks.end(), rank_) - ps->ranks.begin());
}

int32_t Core::processSetSize(int32_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!running_) return -1;
  auto ps = findSet(id);
  return ps ? static_cast<int32_t>(ps->ranks.size()) : -3;
}

int32_t Core::processSetRanks(int32_t id, int32_t* out) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!running_) return -1;
  auto ps = findSet(id);
  if (!ps) return -3;
  std::copy(ps->ranks.begin(), ps->ranks.end(), out);
  return 0;
}

std::vector<int32_t> Core::processSetIds() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<int32_t> ids;
  if (!running_) return ids;
  for (auto& [id, ps] : sets_) ids.push_back(id);
  return ids;
}

}  // namespace braid_hvd
