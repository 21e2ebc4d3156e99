#pragma once
// The braid calls behind BraidBackend's collectives, on contiguous CPU tensors. Everything
// here runs on a backend's worker thread and blocks until done; errors are braid exceptions.
//
// Native braid calls (allreduce, broadcast) are used directly. Collectives the braid core does
// not offer yet are composed from those two in namespace `fallback` below: THIS IS THE ONE
// PLACE TO CHANGE when the core lands reduce, allgather, reduce_scatter, alltoall, gather,
// scatter, barrier and the bitwise ops: replace each function's body by the native call. Each
// fallback is exact (bit-for-bit what the native collective returns) but moves more data.

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

// t = op over all ranks of t (t contiguous). Handles AVG, PREMUL_SUM (scale, then SUM),
// bool (SUM is logical or, PRODUCT logical and, as in ProcessGroupNCCL) and the bitwise ops.
void allreduceInPlace(braid::Communicator& comm, at::Tensor& t, const c10d::ReduceOp& op);

// t = root's t (t contiguous).
void broadcastInPlace(braid::Communicator& comm, at::Tensor& t, int root);

namespace fallback {

// root's t = op over all ranks' t; the other ranks' t is left unchanged.
void reduce(braid::Communicator& comm, at::Tensor& t, const c10d::ReduceOp& op, int root);

// outputs[r] = rank r's input, for every r (outputs[rank] may alias nothing in input).
void allgather(braid::Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs);

// On root, outputs[r] = rank r's input; outputs is empty on the other ranks.
void gather(braid::Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs, int root);

// output = root's inputs[rank]; inputs is empty on the other ranks.
void scatter(braid::Communicator& comm, const std::vector<at::Tensor>& inputs, at::Tensor& output, int root);

// output = op over all ranks of `input`'s rank-th block of output.numel() elements (input
// holds size() such blocks, contiguous).
void reduceScatter(braid::Communicator& comm, const at::Tensor& input, at::Tensor& output, const c10d::ReduceOp& op);

// Rank r sends sendCounts[d] elements of `send` (blocks in rank order) to each rank d and
// receives recvCounts[s] elements from each rank s into `recv` (blocks in rank order).
void alltoallv(braid::Communicator& comm, const at::Tensor& send, const std::vector<int64_t>& sendCounts,
               at::Tensor& recv, const std::vector<int64_t>& recvCounts);

// Returns once every rank has entered.
void barrier(braid::Communicator& comm);

// Bitwise and/or/xor over all ranks for cores without native bitwise reductions.
void bitwiseAllreduce(braid::Communicator& comm, at::Tensor& t, c10d::ReduceOp::RedOpType op);

}  // namespace fallback
}  // namespace braid_torch
