#include "core/flight_recorder.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "common/clock.h"
#include "topology/json.h"

namespace braid::core {

namespace {

using algorithms::Collective;
using topology::jsonQuote;

std::string millis(int64_t fromNs, int64_t toNs) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", (toNs - fromNs) / 1e6);
  return buf;
}


}  // namespace

bool callHasOp(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduce || c == Collective::kReduceScatter ||
         c == Collective::kReduceScatterV;
}

bool callHasRoot(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}

CallShape CallShape::of(const algorithms::Request& req) {
  CallShape c;
  c.coll = req.coll;
  c.count = req.count;
  c.dtype = req.dtype;
  c.op = req.op;
  c.root = req.root;
  c.preMul = req.preMul;
  return c;
}

std::string describeCall(const CallShape& c) {
  std::string s = algorithms::collectiveName(c.coll);
  if (c.coll == Collective::kBarrier || c.coll == Collective::kSendRecv) return s;
  // The v-variants' counts are per rank; what they share is the type (and the op).
  const bool vector = c.coll == Collective::kAllGatherV || c.coll == Collective::kReduceScatterV ||
                      c.coll == Collective::kAllToAllV;
  if (!vector) s += " count=" + std::to_string(c.count);
  s += std::string(" ") + dataTypeName(c.dtype);
  if (callHasOp(c.coll)) s += std::string(" ") + (c.preMul ? "premul_sum" : reduceOpName(c.op));
  if (callHasRoot(c.coll)) s += " root=" + std::to_string(c.root);
  return s;
}

const char* flightStateName(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::kQueued: return "queued";
    case FlightRecorder::State::kRunning: return "running";
    case FlightRecorder::State::kDone: return "done";
    case FlightRecorder::State::kFailed: return "failed";
  }
  return "?";
}

FlightRecorder::FlightRecorder(size_t capacity)
    : ring_(std::max<size_t>(1, capacity)), pow2_((ring_.size() & (ring_.size() - 1)) == 0) {}

FlightRecorder::Entry* FlightRecorder::find(uint32_t seq) {
  Entry& e = ring_[slot(seq)];
  return e.used && e.seq == seq ? &e : nullptr;
}

const FlightRecorder::Entry* FlightRecorder::find(uint32_t seq) const {
  const Entry& e = ring_[slot(seq)];
  return e.used && e.seq == seq ? &e : nullptr;
}

void FlightRecorder::queued(uint32_t seq, const CallShape& shape, size_t bytes, const std::string& algorithm,
                            bool running) {
  const int64_t now = coarseNanos();
  Lock lock(busy_);
  Entry& e = ring_[slot(seq)];
  e.used = true;
  e.seq = seq;
  lastQueued_ = seq;
  e.shape = shape;
  e.bytes = bytes;
  if (e.algorithm != algorithm) e.algorithm = algorithm;  // usually the same: no allocation
  e.state = running ? State::kRunning : State::kQueued;
  e.peer = -1;
  e.queuedNs = now;
  e.startNs = running ? now : 0;
  e.endNs = 0;
}

void FlightRecorder::started(uint32_t seq) {
  const int64_t now = coarseNanos();
  Lock lock(busy_);
  Entry* e = find(seq);
  if (e && e->state == State::kQueued) {
    e->state = State::kRunning;
    e->startNs = now;
  }
}

void FlightRecorder::finished(uint32_t seq, bool ok, int peer) {
  const int64_t now = coarseNanos();
  Lock lock(busy_);
  Entry* e = find(seq);
  if (!e) return;
  e->state = ok ? State::kDone : State::kFailed;
  e->peer = peer;
  e->endNs = now;
  if (!e->startNs) e->startNs = e->endNs;
  if (ok && (!anyDone_ || static_cast<int32_t>(seq - lastDone_) > 0)) {
    anyDone_ = true;
    lastDone_ = seq;
  }
}

std::string FlightRecorder::describe(uint32_t seq) const {
  Lock lock(busy_);
  const Entry* e = find(seq);
  return e ? "#" + std::to_string(seq) + " " + describeCall(e->shape) : std::string();
}

std::vector<std::pair<uint32_t, std::string>> FlightRecorder::recent(size_t n) const {
  Lock lock(busy_);
  std::vector<const Entry*> v = ordered();
  std::vector<std::pair<uint32_t, std::string>> out;
  for (size_t i = v.size() > n ? v.size() - n : 0; i < v.size(); ++i)
    out.emplace_back(v[i]->seq, "#" + std::to_string(v[i]->seq) + " " + describeCall(v[i]->shape));
  return out;
}

std::string FlightRecorder::lastCompleted() const {
  Lock lock(busy_);
  if (!anyDone_) return "";
  const Entry* e = find(lastDone_);
  return e ? "#" + std::to_string(lastDone_) + " " + describeCall(e->shape) : "#" + std::to_string(lastDone_);
}

int64_t FlightRecorder::clockNanos() { return coarseNanos(); }

FlightRecorder::Current FlightRecorder::current() const {
  Entry pending;
  bool busy = false;
  Entry done;
  bool haveDone = false;
  {
    Lock lock(busy_);
    for (const Entry* e : ordered()) {
      if (e->state == State::kQueued || e->state == State::kRunning) {
        pending = *e;
        busy = true;
        break;
      }
    }
    if (!busy && anyDone_) {
      if (const Entry* e = find(lastDone_)) {
        done = *e;
        haveDone = true;
      }
    }
  }
  Current c;
  if (busy) {
    c.busy = true;
    c.running = pending.state == State::kRunning;
    c.op = "#" + std::to_string(pending.seq) + " " + describeCall(pending.shape);
    c.sinceNs = pending.queuedNs;
  } else if (haveDone) {
    c.op = "#" + std::to_string(done.seq) + " " + describeCall(done.shape);
    c.sinceNs = done.endNs;
  }
  return c;
}

std::vector<const FlightRecorder::Entry*> FlightRecorder::ordered() const {
  std::vector<const Entry*> v;
  for (const Entry& e : ring_)
    if (e.used) v.push_back(&e);
  // By sequence number, oldest first, across wrap-around (the coarse clock ties often).
  const uint32_t newest = lastQueued_;
  std::sort(v.begin(), v.end(), [newest](const Entry* a, const Entry* b) {
    return static_cast<int32_t>(a->seq - newest) < static_cast<int32_t>(b->seq - newest);
  });
  return v;
}

std::string FlightRecorder::text() const {
  const int64_t now = coarseNanos();
  Lock lock(busy_);
  std::string out;
  for (const Entry* e : ordered()) {
    out += "#" + std::to_string(e->seq) + " " + describeCall(e->shape) + " bytes=" + std::to_string(e->bytes) +
           " algorithm=" + e->algorithm + " state=" + flightStateName(e->state);
    if (e->peer >= 0) out += " waiting_for=" + std::to_string(e->peer);
    out += " queued_ms_ago=" + millis(e->queuedNs, now);
    if (e->startNs) out += " started_after_ms=" + millis(e->queuedNs, e->startNs);
    if (e->endNs) out += " took_ms=" + millis(e->startNs, e->endNs);
    out += "\n";
  }
  return out;
}

std::string FlightRecorder::json() const {
  const int64_t now = coarseNanos();
  Lock lock(busy_);
  std::string out = "[";
  bool first = true;
  for (const Entry* e : ordered()) {
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += "{\"seq\": " + std::to_string(e->seq) + ", \"collective\": " +
           jsonQuote(algorithms::collectiveName(e->shape.coll)) + ", \"call\": " + jsonQuote(describeCall(e->shape)) +
           ", \"count\": " + std::to_string(e->shape.count) + ", \"dtype\": " + jsonQuote(dataTypeName(e->shape.dtype)) +
           ", \"bytes\": " + std::to_string(e->bytes) + ", \"algorithm\": " + jsonQuote(e->algorithm) +
           ", \"state\": " + jsonQuote(flightStateName(e->state)) + ", \"waiting_for\": " + std::to_string(e->peer) +
           ", \"queued_ms_ago\": " + millis(e->queuedNs, now) +
           ", \"started_after_ms\": " + (e->startNs ? millis(e->queuedNs, e->startNs) : std::string("null")) +
           ", \"took_ms\": " + (e->endNs ? millis(e->startNs, e->endNs) : std::string("null")) + "}";
  }
  return out + (first ? "]" : "\n]");
}

}  // namespace braid::core
