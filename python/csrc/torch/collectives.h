#pragma once
// The braid calls behind BraidBackend's collectives, on CPU tensors. Everything here runs on
// a backend's worker thread and blocks until done; errors are braid exceptions.
//
// Every collective maps to one native braid call (the v-variants where torch allows uneven
// sizes). What remains here is the translation between torch's conventions and braid's:
// dtype and reduce-op mapping (bool, PREMUL_SUM), and lists of tensors <-> one buffer.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <vector>

#include "braid/braid.hpp"

namespace braid_torch {

// at::ScalarType -> braid::DataType; bool travels as uint8 (same bytes, 0 or 1). Throws
// c10::ValueError (Python ValueError) for types braid has no kernels for.
braid::DataType braidType(at::ScalarType t);

// Checks that (tensor type, reduce op) is a supported pair; throws c10::ValueError if not.
void checkReduce(at::ScalarType t, const c10d::ReduceOp& op);

// torch's reduce op on tensors of type `t` as a braid::Reduction: PREMUL_SUM becomes
// Reduction::preMulSum, and on bool SUM is logical or (MAX) and PRODUCT logical and (MIN), as
// in ProcessGroupNCCL. Call checkReduce first.
braid::Reduction reduction(at::ScalarType t, const c10d::ReduceOp& op);

// t = op over all ranks of t (t contiguous).
void allreduceInPlace(braid::Communicator& comm, at::Tensor& t, const c10d::ReduceOp& op);

// t (sparse COO, CPU) = the sum over all ranks of t: every rank's indices and values
// gathered (allgatherv), then coalesced, as gloo's sparse allreduce. Ranks whose tensors
// differ in shape, dtype or sparse/dense dimensions fail with a ValueError naming the rank.
void allreduceSparse(braid::Communicator& comm, at::Tensor& t);

// t = root's t (t contiguous).
void broadcastInPlace(braid::Communicator& comm, at::Tensor& t, int root);

// root's t = op over all ranks' t; the other ranks' t is left unchanged (t contiguous).
void reduceInPlace(braid::Communicator& comm, at::Tensor& t, const c10d::ReduceOp& op, int root);

// output (contiguous, size() x input.numel()) = every rank's input, in rank order.
void allgatherInto(braid::Communicator& comm, const at::Tensor& input, at::Tensor& output);

// outputs[r] = rank r's input, for every r. The outputs may differ in size (uneven
// all_gather: allgatherv); outputs[rank] has input's size.
void allgatherList(braid::Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs);

// On root, outputs[r] = rank r's input; outputs is empty on the other ranks.
void gatherList(braid::Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs, int root);

// output = root's inputs[rank]; inputs is empty on the other ranks.
void scatterList(braid::Communicator& comm, const std::vector<at::Tensor>& inputs, at::Tensor& output, int root);

// output (contiguous) = op over all ranks of `input`'s rank-th block of output.numel()
// elements (input holds size() such blocks).
void reduceScatterInto(braid::Communicator& comm, const at::Tensor& input, at::Tensor& output,
                       const c10d::ReduceOp& op);

// output = op over all ranks of inputs[rank]; inputs[i] may differ in size between i
// (uneven reduce_scatter: reduceScatterv), output has inputs[rank]'s size.
void reduceScatterList(braid::Communicator& comm, const std::vector<at::Tensor>& inputs, at::Tensor& output,
                       const c10d::ReduceOp& op);

// Rank r sends sendCounts[d] elements of `send` (blocks in rank order) to each rank d and
// receives recvCounts[s] elements from each rank s into `recv` (blocks in rank order); both
// contiguous. `even` (every count equal, on every rank: torch's "no split sizes") runs
// braid's alltoall, else alltoallv. The choice must be the same on every rank, so it cannot
// be made from one rank's counts (a rank may see equal counts while its peers do not).
void alltoallv(braid::Communicator& comm, const at::Tensor& send, const std::vector<int64_t>& sendCounts,
               at::Tensor& recv, const std::vector<int64_t>& recvCounts, bool even);

}  // namespace braid_torch
