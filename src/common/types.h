#pragma once
// Element types and reduction operators as the engine sees them. The numeric values match
// braidDataType_t / braidRedOp_t in include/braid/braid.h so the API converts by cast after
// a range check.

#include <cstddef>
#include <cstdint>

#include "braid/types.hpp"

namespace braid {

// DataType and ReduceOp are the public C++ enums (include/braid/types.hpp).
constexpr int kNumDataTypes = 14;
constexpr int kNumReduceOps = 8;

inline bool validDataType(int v) { return v >= 0 && v < kNumDataTypes; }
inline bool validReduceOp(int v) { return v >= 0 && v < kNumReduceOps; }

inline size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::kInt8: case DataType::kUint8: return 1;
    case DataType::kFloat8E4M3: case DataType::kFloat8E5M2: return 1;
    case DataType::kInt16: case DataType::kUint16: return 2;
    case DataType::kFloat16: case DataType::kBFloat16: return 2;
    case DataType::kInt32: case DataType::kUint32: case DataType::kFloat32: return 4;
    case DataType::kInt64: case DataType::kUint64: case DataType::kFloat64: return 8;
  }
  return 0;
}

inline bool isFloatType(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64 || t == DataType::kFloat8E4M3 || t == DataType::kFloat8E5M2;
}

const char* dataTypeName(DataType t);   // "float", "half", "bfloat16", ... as nccl-tests
const char* reduceOpName(ReduceOp op);  // "sum", "prod", "max", "min", "avg", "band", "bor", "bxor"

inline bool isBitwiseOp(ReduceOp op) {
  return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
}

}  // namespace braid
