// braid: element types and reduction operators for the C++ API. Values equal the C API's
// braidDataType_t / braidRedOp_t, so the two convert by cast.
#pragma once

namespace braid {

enum class DataType : int {
  kInt8 = 0, kUint8, kInt32, kUint32, kInt64, kUint64,
  kFloat16, kBFloat16, kFloat32, kFloat64,
  kFloat8E4M3, kFloat8E5M2,  // OCP fp8; reduced in fp32, rounded once, saturating
  kInt16, kUint16,
};

// kBand/kBor/kBxor are bitwise and integer types only. Pre-multiplied sums are created per
// communicator (braidRedOpCreatePreMulSum) and are not part of this enum.
enum class ReduceOp : int { kSum = 0, kProd, kMax, kMin, kAvg, kBand, kBor, kBxor };

}  // namespace braid
