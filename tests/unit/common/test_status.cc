// Status keeps its message on the heap, only when there is one: copies, moves and
// assignments keep code, rank and message; an ok or message-less status reads as "". And
// the abort record the ranks of a communicator read round-trips, naming its reporter.

#include <string>
#include <utility>

#include "common/status.h"
#include "core/communicator.h"
#include "support/catch.h"

using namespace braid;

TEST_CASE("status: copies, moves and assignments keep code, rank and message", "[status]") {
  const Status ok = Status::ok();
  CHECK(ok.isOk());
  CHECK(ok.message().empty());
  CHECK(ok.toString() == "ok");
  CHECK(Status(Code::kWouldBlock).message().empty());
  CHECK(Status(Code::kInternal, "").message().empty());
  CHECK(Status(Code::kInternal, std::string()).message().empty());
  CHECK(Status(Code::kInternal, static_cast<const char*>(nullptr)).message().empty());

  const Status failed(Code::kRemoteError, "rank 3 exited", 3);
  Status copy = failed;
  CHECK(copy.code() == Code::kRemoteError);
  CHECK(copy.rank() == 3);
  CHECK(copy.message() == "rank 3 exited");
  CHECK(failed.message() == "rank 3 exited");  // the original keeps its own

  Status moved = std::move(copy);
  CHECK(moved.message() == "rank 3 exited");
  CHECK(moved.rank() == 3);

  Status assigned(Code::kTimeout, "older", 1);
  assigned = failed;
  CHECK(assigned.code() == Code::kRemoteError);
  CHECK(assigned.message() == "rank 3 exited");
  assigned = Status(Code::kAborted, "aborted by rank 0", 0);
  CHECK(assigned.code() == Code::kAborted);
  CHECK(assigned.message() == "aborted by rank 0");
  assigned = Status::ok();
  CHECK(assigned.isOk());
  CHECK(assigned.message().empty());

  Status self(Code::kInternal, "kept", 2);
  Status& alias = self;
  self = alias;
  CHECK(self.message() == "kept");
  self = std::move(alias);
  CHECK(self.message() == "kept");
  CHECK(self.rank() == 2);

  const Status ctx = failed.withContext("allreduce");
  CHECK(ctx.message() == "allreduce: rank 3 exited");
  CHECK(ctx.rank() == 3);
  CHECK(ctx.toString() == "remote error: allreduce: rank 3 exited");
  CHECK(Status::ok().withContext("allreduce").isOk());
}

TEST_CASE("status: the abort record names its reporter, or a process given no rank", "[status]") {
  const Status s(Code::kInvalidArgument, "BRAID_NSLOTS='abc' is not an integer", 1);
  const Status back = core::decodeAbortRecord(core::encodeAbortRecord(s, 1));
  CHECK(back.code() == Code::kInvalidArgument);
  CHECK(back.rank() == 1);
  CHECK(back.message() == "rank 1 reported: BRAID_NSLOTS='abc' is not an integer");

  const Status refused(Code::kInvalidArgument, "RANK=7 must be less than WORLD_SIZE=3 (pid 1 on host h)");
  const Status told = core::decodeAbortRecord(core::encodeAbortRecord(refused, -1));
  CHECK(told.code() == Code::kInvalidArgument);
  CHECK(told.rank() == -1);
  CHECK(told.message() ==
        "a process given no rank of this job reported: RANK=7 must be less than WORLD_SIZE=3 (pid 1 on host h)");

  // A message over several lines survives; a code out of range reads as a remote error.
  const Status lines = core::decodeAbortRecord(core::encodeAbortRecord(Status(Code::kTimeout, "a\nb", 2), 0));
  CHECK(lines.message() == "rank 0 reported: a\nb");
  CHECK(core::decodeAbortRecord("99\n2\n0\nwhat").code() == Code::kRemoteError);
}
