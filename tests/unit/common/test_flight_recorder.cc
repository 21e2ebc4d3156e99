// The flight recorder's bookkeeping and the decoded call descriptions errors show.

#include <string>

#include "core/flight_recorder.h"
#include "support/catch.h"

using namespace braid;
using braid::core::CallShape;
using braid::core::describeCall;
using braid::core::FlightRecorder;
using C = braid::algorithms::Collective;

namespace {

CallShape shape(C coll, size_t count, DataType dt = DataType::kFloat32, ReduceOp op = ReduceOp::kSum, int root = 0) {
  CallShape c;
  c.coll = coll;
  c.count = count;
  c.dtype = dt;
  c.op = op;
  c.root = root;
  return c;
}

}  // namespace

TEST_CASE("describeCall shows the fields each collective uses", "[flight]") {
  CHECK(describeCall(shape(C::kAllReduce, 1000)) == "allreduce count=1000 float sum");
  CHECK(describeCall(shape(C::kBroadcast, 10, DataType::kInt32, ReduceOp::kMax, 2)) == "broadcast count=10 int32 root=2");
  CHECK(describeCall(shape(C::kReduce, 7, DataType::kBFloat16, ReduceOp::kMax, 3)) ==
        "reduce count=7 bfloat16 max root=3");
  CHECK(describeCall(shape(C::kAllGather, 5)) == "allgather count=5 float");
  CHECK(describeCall(shape(C::kBarrier, 0)) == "barrier");
  CallShape pre = shape(C::kAllReduce, 4);
  pre.preMul = true;
  CHECK(describeCall(pre) == "allreduce count=4 float premul_sum");
  // v-variants: counts differ per rank by design, so none is shown.
  CHECK(describeCall(shape(C::kAllGatherV, 99)).find("count") == std::string::npos);
}

TEST_CASE("the flight recorder keeps the last N operations and the last completed one", "[flight]") {
  FlightRecorder rec(4);
  CHECK(rec.lastCompleted().empty());
  CHECK(rec.json() == "[]");
  for (uint32_t seq = 0; seq < 6; ++seq) {
    rec.queued(seq, shape(C::kAllReduce, 100 + seq), 4 * (100 + seq), "ring");
    rec.started(seq);
    if (seq < 5) rec.finished(seq, true);
  }
  CHECK(rec.lastCompleted() == "#4 allreduce count=104 float sum");
  CHECK(rec.describe(5) == "#5 allreduce count=105 float sum");
  CHECK(rec.describe(1).empty());  // overwritten: the ring holds 2..5
  std::string text = rec.text();
  INFO(text);
  CHECK(text.find("#1 ") == std::string::npos);
  CHECK(text.find("#2 allreduce count=102 float sum bytes=408 algorithm=ring state=done") != std::string::npos);
  CHECK(text.find("#5 allreduce count=105 float sum bytes=420 algorithm=ring state=running") != std::string::npos);
  // Oldest first.
  CHECK(text.find("#2 ") < text.find("#5 "));
  rec.finished(5, false, 3);
  CHECK(rec.text().find("state=failed waiting_for=3") != std::string::npos);
  CHECK(rec.lastCompleted() == "#4 allreduce count=104 float sum");  // a failure completes nothing
  std::string json = rec.json();
  INFO(json);
  CHECK(json.find("\"seq\": 5") != std::string::npos);
  CHECK(json.find("\"state\": \"failed\", \"waiting_for\": 3") != std::string::npos);
  CHECK(json.find("\"call\": \"allreduce count=102 float sum\"") != std::string::npos);
}

TEST_CASE("the flight recorder's last completed operation survives sequence wrap-around", "[flight]") {
  FlightRecorder rec(8);
  const uint32_t top = 0xFFFFFFFFu;
  rec.queued(top, shape(C::kBroadcast, 1), 4, "chain");
  rec.finished(top, true);
  rec.queued(0, shape(C::kBroadcast, 2), 8, "chain");
  rec.finished(0, true);
  CHECK(rec.lastCompleted() == "#0 broadcast count=2 float root=0");
}

TEST_CASE("the flight recorder says what is in flight now: the oldest unfinished, else the last done", "[flight]") {
  FlightRecorder rec(8);
  FlightRecorder::Current none = rec.current();
  CHECK_FALSE(none.busy);
  CHECK(none.op.empty());
  CHECK(none.sinceNs == 0);
  rec.queued(0, shape(C::kAllReduce, 10), 40, "ring", /*running=*/true);
  rec.queued(1, shape(C::kBroadcast, 5, DataType::kInt32, ReduceOp::kSum, 1), 20, "chain");
  FlightRecorder::Current c = rec.current();
  CHECK(c.busy);
  CHECK(c.running);
  CHECK(c.op == "#0 allreduce count=10 float sum");
  CHECK(c.sinceNs > 0);
  CHECK(c.sinceNs <= FlightRecorder::clockNanos());
  rec.finished(0, true);
  c = rec.current();
  CHECK(c.busy);
  CHECK_FALSE(c.running);  // queued behind it, not started
  CHECK(c.op == "#1 broadcast count=5 int32 root=1");
  rec.started(1);
  CHECK(rec.current().running);
  rec.finished(1, true);
  c = rec.current();
  CHECK_FALSE(c.busy);
  CHECK(c.op == "#1 broadcast count=5 int32 root=1");
  CHECK(c.sinceNs > 0);
  // A failed operation is not in flight any more, nor the last completed.
  rec.queued(2, shape(C::kAllReduce, 3), 12, "ring", true);
  rec.finished(2, false, 1);
  c = rec.current();
  CHECK_FALSE(c.busy);
  CHECK(c.op == "#1 broadcast count=5 int32 root=1");
}
