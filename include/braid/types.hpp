// braid: element types and reduction operators for the C++ API. Values equal the C API's
// braidDataType_t / braidRedOp_t, so the two convert by cast.
#pragma once

#include <cstdint>
#include <type_traits>
#if __has_include(<stdfloat>)
#include <stdfloat>
#endif

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

// The DataType of a C++ element type, for the typed overloads of Communicator:
// dataTypeOf<float>() == DataType::kFloat32. Types with no standard C++ spelling (fp16,
// bf16, fp8) have none unless the compiler offers std::float16_t / std::bfloat16_t (C++23);
// pass the DataType explicitly for those.
template <class T>
struct DataTypeOf;  // undefined: not an element type braid knows
template <> struct DataTypeOf<int8_t> { static constexpr DataType value = DataType::kInt8; };
template <> struct DataTypeOf<uint8_t> { static constexpr DataType value = DataType::kUint8; };
template <> struct DataTypeOf<int16_t> { static constexpr DataType value = DataType::kInt16; };
template <> struct DataTypeOf<uint16_t> { static constexpr DataType value = DataType::kUint16; };
template <> struct DataTypeOf<int32_t> { static constexpr DataType value = DataType::kInt32; };
template <> struct DataTypeOf<uint32_t> { static constexpr DataType value = DataType::kUint32; };
template <> struct DataTypeOf<int64_t> { static constexpr DataType value = DataType::kInt64; };
template <> struct DataTypeOf<uint64_t> { static constexpr DataType value = DataType::kUint64; };
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::kFloat32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::kFloat64; };
#if defined(__STDCPP_FLOAT16_T__)
template <> struct DataTypeOf<std::float16_t> { static constexpr DataType value = DataType::kFloat16; };
#endif
#if defined(__STDCPP_BFLOAT16_T__)
template <> struct DataTypeOf<std::bfloat16_t> { static constexpr DataType value = DataType::kBFloat16; };
#endif

template <class T>
constexpr DataType dataTypeOf() {
  return DataTypeOf<std::remove_cv_t<T>>::value;
}

}  // namespace braid
