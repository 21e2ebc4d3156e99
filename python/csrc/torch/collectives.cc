#include "collectives.h"

#include <atomic>
#include <cstdint>
#include <string>

#include <c10/util/Exception.h>

namespace braid_torch {

braid::DataType braidType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return braid::DataType::kFloat32;
    case at::kDouble: return braid::DataType::kFloat64;
    case at::kHalf: return braid::DataType::kFloat16;
    case at::kBFloat16: return braid::DataType::kBFloat16;
    case at::kChar: return braid::DataType::kInt8;
    case at::kByte: return braid::DataType::kUint8;
    case at::kBool: return braid::DataType::kUint8;
    case at::kInt: return braid::DataType::kInt32;
    case at::kLong: return braid::DataType::kInt64;
    case at::kUInt32: return braid::DataType::kUint32;
    case at::kUInt64: return braid::DataType::kUint64;
    default:
      TORCH_CHECK_VALUE(false, "braid: unsupported tensor dtype ", t,
                        "; braid supports float32/64, float16, bfloat16, int8/32/64, uint8/32/64 and bool");
  }
}

namespace {

bool isBitwise(c10d::ReduceOp::RedOpType op) {
  return op == c10d::ReduceOp::BAND || op == c10d::ReduceOp::BOR || op == c10d::ReduceOp::BXOR;
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

braid::ReduceOp braidOp(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return braid::ReduceOp::kSum;
    case c10d::ReduceOp::AVG: return braid::ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT: return braid::ReduceOp::kProd;
    case c10d::ReduceOp::MIN: return braid::ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return braid::ReduceOp::kMax;
    case c10d::ReduceOp::BAND: return braid::ReduceOp::kBand;
    case c10d::ReduceOp::BOR: return braid::ReduceOp::kBor;
    case c10d::ReduceOp::BXOR: return braid::ReduceOp::kBxor;
    default: TORCH_CHECK_VALUE(false, "braid: reduce op ", opName(op), " has no braid equivalent");
  }
}

// -1 unknown, 0 the core rejects bitwise ops (use the fallback), 1 native. The core's
// argument check runs before any data moves and gives the same answer on every rank, so
// probing with a real call and falling back on InvalidArgument keeps ranks in step.
std::atomic<int> gNativeBitwise{-1};

}  // namespace

void checkReduce(at::ScalarType t, const c10d::ReduceOp& op) {
  const auto type = op.op_;
  braidType(t);
  if (isBitwise(type)) {
    TORCH_CHECK_VALUE(at::isIntegralType(t, /*includeBool=*/true), "braid: ", opName(type),
                      " needs an integer or bool tensor, got ", t);
  } else if (type == c10d::ReduceOp::PREMUL_SUM) {
    TORCH_CHECK_VALUE(at::isFloatingType(t), "braid: PREMUL_SUM needs a floating-point tensor, got ", t);
    TORCH_CHECK_VALUE(dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get()) != nullptr,
                      "braid: PREMUL_SUM without its factor (create it with torch.distributed._make_nccl_premul_sum)");
  } else if (type == c10d::ReduceOp::AVG) {
    TORCH_CHECK_VALUE(t != at::kBool, "braid: AVG is undefined for bool tensors");
  } else {
    TORCH_CHECK_VALUE(type == c10d::ReduceOp::SUM || type == c10d::ReduceOp::PRODUCT || type == c10d::ReduceOp::MIN ||
                          type == c10d::ReduceOp::MAX,
                      "braid: unsupported reduce op ", opName(type));
  }
}

void allreduceInPlace(braid::Communicator& comm, at::Tensor& t, const c10d::ReduceOp& op) {
  if (t.numel() == 0) return;  // every rank has the same count, so every rank skips
  auto type = op.op_;
  if (t.scalar_type() == at::kBool) {
    // 0/1 bytes: logical or is max, logical and is min (what ProcessGroupNCCL does).
    if (type == c10d::ReduceOp::SUM) type = c10d::ReduceOp::MAX;
    if (type == c10d::ReduceOp::PRODUCT) type = c10d::ReduceOp::MIN;
  }
  if (type == c10d::ReduceOp::PREMUL_SUM) {
    // sum_i(f * x_i): scale locally in the tensor's own type (as NCCL does), then SUM.
    auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    if (s->tensor_factor.defined())
      t.mul_(s->tensor_factor.to(t.device(), t.scalar_type()));
    else
      t.mul_(s->double_factor);
    type = c10d::ReduceOp::SUM;
  }
  const braid::DataType dt = braidType(t.scalar_type());
  if (isBitwise(type)) {
    if (gNativeBitwise.load() != 0) {
      try {
        comm.allreduce(t.data_ptr(), static_cast<size_t>(t.numel()), dt, braidOp(type));
        gNativeBitwise.store(1);
        return;
      } catch (const braid::InvalidArgument&) {
        if (gNativeBitwise.load() == 1) throw;  // the core does support them: a real argument error
        gNativeBitwise.store(0);
      }
    }
    fallback::bitwiseAllreduce(comm, t, type);
    return;
  }
  comm.allreduce(t.data_ptr(), static_cast<size_t>(t.numel()), dt, braidOp(type));
}

void broadcastInPlace(braid::Communicator& comm, at::Tensor& t, int root) {
  if (t.numel() == 0) return;
  comm.broadcast(t.data_ptr(), static_cast<size_t>(t.numel()), braidType(t.scalar_type()), root);
}

// ============================================================================================
// FALLBACKS: collectives composed from allreduce and broadcast until the braid core has them.
// Replace each body by the native braid call when it lands (see collectives.h).
// ============================================================================================
namespace fallback {

void reduce(braid::Communicator& comm, at::Tensor& t, const c10d::ReduceOp& op, int root) {
  // Allreduce a copy so that non-root ranks keep their input, as a native reduce would.
  at::Tensor tmp = t.clone();
  allreduceInPlace(comm, tmp, op);
  if (comm.rank() == root) t.copy_(tmp);
}

void allgather(braid::Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs) {
  // One broadcast per rank: exact for every type (an allreduce of zero-padded blocks would
  // turn -0.0 into +0.0).
  const int me = comm.rank();
  for (int r = 0; r < comm.size(); ++r) {
    at::Tensor& o = outputs[r];
    if (r == me) o.view(-1).copy_(input.view(-1));
    broadcastInPlace(comm, o, r);
  }
}

void gather(braid::Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs, int root) {
  const int me = comm.rank();
  at::Tensor scratch;
  for (int r = 0; r < comm.size(); ++r) {
    at::Tensor buf;
    if (me == root) {
      buf = outputs[r];
      if (r == me) {
        buf.view(-1).copy_(input.view(-1));
        continue;  // nobody else needs the root's own block; every rank skips r == root
      }
    } else if (r == root) {
      continue;
    } else if (r == me) {
      buf = input;  // a broadcast's root only reads its buffer
    } else {
      if (!scratch.defined()) scratch = at::empty_like(input);
      buf = scratch;
    }
    broadcastInPlace(comm, buf, r);
  }
}

void scatter(braid::Communicator& comm, const std::vector<at::Tensor>& inputs, at::Tensor& output, int root) {
  const int me = comm.rank();
  at::Tensor scratch;
  for (int r = 0; r < comm.size(); ++r) {
    if (r == root) continue;  // the root's own block stays local
    at::Tensor buf;
    if (me == root)
      buf = inputs[r];
    else if (me == r)
      buf = output;
    else {
      if (!scratch.defined()) scratch = at::empty_like(output);
      buf = scratch;
    }
    broadcastInPlace(comm, buf, root);
  }
  if (me == root) output.view(-1).copy_(inputs[root].view(-1));
}

void reduceScatter(braid::Communicator& comm, const at::Tensor& input, at::Tensor& output, const c10d::ReduceOp& op) {
  at::Tensor tmp = input.reshape(-1).clone();
  allreduceInPlace(comm, tmp, op);
  const int64_t m = output.numel();
  output.view(-1).copy_(tmp.narrow(0, comm.rank() * m, m));
}

void alltoallv(braid::Communicator& comm, const at::Tensor& send, const std::vector<int64_t>& sendCounts,
               at::Tensor& recv, const std::vector<int64_t>& recvCounts) {
  const int n = comm.size();
  const int me = comm.rank();
  // Every rank learns every rank's send and receive counts (one exact int64 SUM of a matrix
  // where each rank fills its own rows), so that all ranks reach the same verdict on
  // mismatched splits and the same sequence of broadcasts below.
  at::Tensor counts = at::zeros({2, n, n}, at::kLong);
  auto acc = counts.accessor<int64_t, 3>();
  for (int d = 0; d < n; ++d) {
    acc[0][me][d] = sendCounts[d];
    acc[1][me][d] = recvCounts[d];
  }
  comm.allreduce(counts.data_ptr(), static_cast<size_t>(counts.numel()), braid::DataType::kInt64,
                 braid::ReduceOp::kSum);
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < n; ++d)
      if (acc[0][s][d] != acc[1][d][s])
        throw braid::InvalidArgument("all_to_all: rank " + std::to_string(s) + " sends " +
                                     std::to_string(acc[0][s][d]) + " elements to rank " + std::to_string(d) +
                                     ", which expects " + std::to_string(acc[1][d][s]));
  at::Tensor sendFlat = send.view(-1);
  at::Tensor recvFlat = recv.view(-1);
  int64_t maxTotal = 0;
  for (int s = 0; s < n; ++s) {
    int64_t total = 0;
    for (int d = 0; d < n; ++d) total += acc[0][s][d];
    if (s != me) maxTotal = std::max(maxTotal, total);
  }
  at::Tensor scratch = at::empty({maxTotal}, send.options());
  int64_t recvOffset = 0;
  for (int s = 0; s < n; ++s) {
    int64_t total = 0, offset = 0;
    for (int d = 0; d < n; ++d) {
      if (d < me) offset += acc[0][s][d];
      total += acc[0][s][d];
    }
    const int64_t count = acc[0][s][me];
    if (s == me) {
      recvFlat.narrow(0, recvOffset, count).copy_(sendFlat.narrow(0, offset, count));
    } else if (total > 0) {
      at::Tensor buf = scratch.narrow(0, 0, total);
      broadcastInPlace(comm, buf, s);
      recvFlat.narrow(0, recvOffset, count).copy_(buf.narrow(0, offset, count));
    }
    if (s == me && total > 0) {
      at::Tensor mine = sendFlat.narrow(0, 0, total);
      broadcastInPlace(comm, mine, s);
    }
    recvOffset += count;
  }
}

void barrier(braid::Communicator& comm) {
  int32_t one = 1;
  comm.allreduce(&one, 1, braid::DataType::kInt32, braid::ReduceOp::kSum);
}

void bitwiseAllreduce(braid::Communicator& comm, at::Tensor& t, c10d::ReduceOp::RedOpType op) {
  // Gather every rank's bits, then combine locally in rank order (the ops are associative and
  // commutative, so every rank computes the same result).
  std::vector<at::Tensor> all;
  for (int r = 0; r < comm.size(); ++r) all.push_back(at::empty_like(t));
  allgather(comm, t, all);
  at::Tensor acc = all[0];
  for (int r = 1; r < comm.size(); ++r) {
    if (op == c10d::ReduceOp::BAND)
      acc.bitwise_and_(all[r]);
    else if (op == c10d::ReduceOp::BOR)
      acc.bitwise_or_(all[r]);
    else
      acc.bitwise_xor_(all[r]);
  }
  t.copy_(acc);
}

}  // namespace fallback
}  // namespace braid_torch
