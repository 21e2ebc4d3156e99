#include "collectives.h"

#include <algorithm>
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
    case at::kShort: return braid::DataType::kInt16;
    case at::kUInt16: return braid::DataType::kUint16;
    case at::kFloat8_e4m3fn: return braid::DataType::kFloat8E4M3;
    case at::kFloat8_e5m2: return braid::DataType::kFloat8E5M2;
    default:
      TORCH_CHECK_VALUE(false, "braid: unsupported tensor dtype ", t,
                        "; braid supports float32/64, float16, bfloat16, float8_e4m3fn, float8_e5m2, "
                        "int8/16/32/64, uint8/16/32/64 and bool");
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

size_t elems(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

// The element offsets of consecutive blocks of the given sizes.
std::vector<size_t> offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size());
  size_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = off;
    off += counts[i];
  }
  return displs;
}

bool allEqual(const std::vector<size_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](size_t c) { return c == v.front(); });
}

// Copies `flat` (the blocks of `parts`, back to back) into `parts`.
void unpack(const at::Tensor& flat, std::vector<at::Tensor>& parts) {
  int64_t off = 0;
  for (auto& p : parts) {
    p.view(-1).copy_(flat.narrow(0, off, p.numel()));
    off += p.numel();
  }
}

// The tensors concatenated into one contiguous 1-D tensor.
at::Tensor pack(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> flat;
  flat.reserve(parts.size());
  for (auto& p : parts) flat.push_back(p.reshape(-1));
  return at::cat(flat);
}

}  // namespace

void checkReduce(at::ScalarType t, const c10d::ReduceOp& op) {
  const auto type = op.op_;
  braidType(t);
  if (isBitwise(type)) {
    TORCH_CHECK_VALUE(at::isIntegralType(t, /*includeBool=*/true), "braid: ", opName(type),
                      " needs an integer or bool tensor, got ", t);
  } else if (type == c10d::ReduceOp::PREMUL_SUM) {
    TORCH_CHECK_VALUE(at::isFloatingType(t), "braid: PREMUL_SUM needs a floating-point tensor, got ", t);
    TORCH_CHECK_VALUE(dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get()) != nullptr,
                      "braid: PREMUL_SUM without its factor (create it with torch.distributed._make_nccl_premul_sum)");
  } else if (type == c10d::ReduceOp::AVG) {
    TORCH_CHECK_VALUE(t != at::kBool, "braid: AVG is undefined for bool tensors");
  } else {
    TORCH_CHECK_VALUE(type == c10d::ReduceOp::SUM || type == c10d::ReduceOp::PRODUCT || type == c10d::ReduceOp::MIN ||
                          type == c10d::ReduceOp::MAX,
                      "braid: unsupported reduce op ", opName(type));
  }
}

braid::Reduction reduction(at::ScalarType t, const c10d::ReduceOp& op) {
  auto type = op.op_;
  if (type == c10d::ReduceOp::PREMUL_SUM) {
    // NCCLPreMulSumSupplement: the name in every torch release (2.14 makes it an alias of
    // PreMulSumSupplement, which earlier releases lack).
    auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK_VALUE(s != nullptr, "braid: PREMUL_SUM without its factor");
    const double factor = s->tensor_factor.defined() ? s->tensor_factor.item<double>() : s->double_factor;
    return braid::Reduction::preMulSum(factor);
  }
  if (t == at::kBool) {
    // 0/1 bytes: logical or is max, logical and is min (what ProcessGroupNCCL does).
    if (type == c10d::ReduceOp::SUM) type = c10d::ReduceOp::MAX;
    if (type == c10d::ReduceOp::PRODUCT) type = c10d::ReduceOp::MIN;
  }
  return braidOp(type);
}

void allreduceInPlace(braid::Communicator& comm, at::Tensor& t, const c10d::ReduceOp& op) {
  if (t.numel() == 0) return;  // every rank has the same count, so every rank skips
  comm.allreduce(t.data_ptr(), elems(t), braidType(t.scalar_type()), reduction(t.scalar_type(), op));
}

void broadcastInPlace(braid::Communicator& comm, at::Tensor& t, int root) {
  if (t.numel() == 0) return;
  comm.broadcast(t.data_ptr(), elems(t), braidType(t.scalar_type()), root);
}

void allreduceSparse(braid::Communicator& comm, at::Tensor& t) {
  const at::Tensor in = t.coalesce();
  // What every rank must agree on, and its nnz: [nnz, sparse dims, dense dims, dtype, ndim,
  // sizes...], gathered first so that a mismatch is an error rather than garbage.
  constexpr int kMaxDims = 24;
  TORCH_CHECK_VALUE(in.dim() <= kMaxDims, "braid: sparse all_reduce of a ", in.dim(), "-dimensional tensor (at most ",
                    kMaxDims, ")");
  constexpr int kMeta = 5 + kMaxDims;
  std::vector<int64_t> meta(kMeta, -1);
  meta[0] = in._nnz();
  meta[1] = in.sparse_dim();
  meta[2] = in.dense_dim();
  meta[3] = static_cast<int64_t>(in.scalar_type());
  meta[4] = in.dim();
  for (int64_t d = 0; d < in.dim(); ++d) meta[5 + d] = in.size(d);
  const int n = comm.size();
  std::vector<int64_t> all(static_cast<size_t>(kMeta) * n);
  comm.allgather(meta.data(), all.data(), kMeta, braid::DataType::kInt64);
  std::vector<size_t> idxCounts(n), valCounts(n);
  int64_t rowElems = 1;
  for (int64_t d = in.sparse_dim(); d < in.dim(); ++d) rowElems *= in.size(d);
  size_t totalNnz = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t* m = &all[static_cast<size_t>(r) * kMeta];
    TORCH_CHECK_VALUE(std::equal(m + 1, m + kMeta, meta.begin() + 1), "braid: sparse all_reduce: rank ", r,
                      "'s tensor differs from rank ", comm.rank(), "'s (", in.sizes(), ", ", in.scalar_type(),
                      ", sparse_dim ", in.sparse_dim(), ") in shape, dtype or sparse dimensions");
    idxCounts[r] = static_cast<size_t>(m[0] * in.sparse_dim());
    valCounts[r] = static_cast<size_t>(m[0] * rowElems);
    totalNnz += static_cast<size_t>(m[0]);
  }
  if (totalNnz == 0) {
    t.copy_(in);
    return;
  }
  // Indices as [nnz, sparse_dim] rows so that each rank's block is contiguous.
  const at::Tensor idx = in.indices().t().contiguous();
  const at::Tensor val = in.values().contiguous();
  at::Tensor allIdx = at::empty({static_cast<int64_t>(totalNnz), in.sparse_dim()}, idx.options());
  std::vector<int64_t> valShape = val.sizes().vec();
  valShape[0] = static_cast<int64_t>(totalNnz);
  at::Tensor allVal = at::empty(valShape, val.options());
  comm.allgatherv(idx.data_ptr(), elems(idx), allIdx.data_ptr(), idxCounts, offsets(idxCounts),
                  braid::DataType::kInt64);
  comm.allgatherv(val.data_ptr(), elems(val), allVal.data_ptr(), valCounts, offsets(valCounts),
                  braidType(val.scalar_type()));
  at::Tensor sum = at::sparse_coo_tensor(allIdx.t(), allVal, in.sizes(), in.options()).coalesce();
  t.copy_(sum);
}

void reduceInPlace(braid::Communicator& comm, at::Tensor& t, const c10d::ReduceOp& op, int root) {
  if (t.numel() == 0) return;
  // In place on the root; braid writes recvbuf on the root only.
  comm.reduce(t.data_ptr(), t.data_ptr(), elems(t), braidType(t.scalar_type()), reduction(t.scalar_type(), op),
              root);
}

void allgatherInto(braid::Communicator& comm, const at::Tensor& input, at::Tensor& output) {
  if (input.numel() == 0) return;
  comm.allgather(input.data_ptr(), output.data_ptr(), elems(input), braidType(input.scalar_type()));
}

void allgatherList(braid::Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs) {
  std::vector<size_t> counts;
  for (auto& o : outputs) counts.push_back(elems(o));
  size_t total = 0;
  for (size_t c : counts) total += c;
  if (total == 0) return;
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, input.options());
  at::Tensor in = input.contiguous();
  if (allEqual(counts))
    comm.allgather(in.data_ptr(), flat.data_ptr(), counts.front(), braidType(in.scalar_type()));
  else
    comm.allgatherv(in.data_ptr(), elems(in), flat.data_ptr(), counts, offsets(counts), braidType(in.scalar_type()));
  unpack(flat, outputs);
}

void gatherList(braid::Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs, int root) {
  if (input.numel() == 0) return;  // every rank's input has the root's outputs' size
  at::Tensor in = input.contiguous();
  at::Tensor flat;
  if (comm.rank() == root) flat = at::empty({input.numel() * comm.size()}, input.options());
  comm.gather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, elems(in), braidType(in.scalar_type()),
              root);
  if (flat.defined()) unpack(flat, outputs);
}

void scatterList(braid::Communicator& comm, const std::vector<at::Tensor>& inputs, at::Tensor& output, int root) {
  if (output.numel() == 0) return;
  at::Tensor flat;
  if (comm.rank() == root) flat = pack(inputs);
  comm.scatter(flat.defined() ? flat.data_ptr() : nullptr, output.data_ptr(), elems(output),
               braidType(output.scalar_type()), root);
}

void reduceScatterInto(braid::Communicator& comm, const at::Tensor& input, at::Tensor& output,
                       const c10d::ReduceOp& op) {
  if (output.numel() == 0) return;
  at::Tensor in = input.contiguous();
  comm.reduceScatter(in.data_ptr(), output.data_ptr(), elems(output), braidType(in.scalar_type()),
                     reduction(in.scalar_type(), op));
}

void reduceScatterList(braid::Communicator& comm, const std::vector<at::Tensor>& inputs, at::Tensor& output,
                       const c10d::ReduceOp& op) {
  std::vector<size_t> counts;
  for (auto& i : inputs) counts.push_back(elems(i));
  size_t total = 0;
  for (size_t c : counts) total += c;
  if (total == 0) return;
  at::Tensor flat = pack(inputs);
  const auto st = output.scalar_type();
  if (allEqual(counts))
    comm.reduceScatter(flat.data_ptr(), output.data_ptr(), counts.front(), braidType(st), reduction(st, op));
  else
    comm.reduceScatterv(flat.data_ptr(), output.data_ptr(), counts, braidType(st), reduction(st, op));
}

void alltoallv(braid::Communicator& comm, const at::Tensor& send, const std::vector<int64_t>& sendCounts,
               at::Tensor& recv, const std::vector<int64_t>& recvCounts, bool even) {
  const braid::DataType dt = braidType(send.scalar_type());
  if (even) {
    if (sendCounts.front() == 0) return;
    comm.alltoall(send.data_ptr(), recv.data_ptr(), static_cast<size_t>(sendCounts.front()), dt);
    return;
  }
  std::vector<size_t> sc(sendCounts.begin(), sendCounts.end()), rc(recvCounts.begin(), recvCounts.end());
  comm.alltoallv(send.data_ptr(), sc, offsets(sc), recv.data_ptr(), rc, offsets(rc), dt);
}

}  // namespace braid_torch
