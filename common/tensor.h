// Dense tensor basics shared by every layer: element types, shapes, and a
// reference-counted contiguous buffer.
#ifndef STRATA_COMMON_TENSOR_H_
#define STRATA_COMMON_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace strata {

// Element types a variable may hold. Values match strata.v1.DType.
enum class DType : int {
  kInvalid = 0,
  kFloat32 = 1,
  kFloat64 = 2,
  kInt32 = 3,
  kInt64 = 4,
};

// Size in bytes of one element; 0 for kInvalid.
size_t DTypeSize(DType dtype);
// "float32", "float64", "int32", "int64" or "invalid".
std::string DTypeName(DType dtype);
// Parses a name as printed by DTypeName (also "float", "double").
absl::StatusOr<DType> ParseDType(absl::string_view name);
bool IsFloating(DType dtype);

using Shape = std::vector<int64_t>;

// Number of elements; 1 for a scalar (empty shape).
int64_t NumElements(const Shape& shape);
// "[784, 128]".
std::string ShapeString(const Shape& shape);
// OK when every dimension is >= 0 and the element count times `elem_size`
// stays below `max_bytes`; INVALID_ARGUMENT or RESOURCE_EXHAUSTED otherwise.
absl::Status ValidateShape(const Shape& shape, size_t elem_size,
                           uint64_t max_bytes);

// A contiguous, 64-byte aligned block of bytes. Immutable size; contents are
// mutable by whoever owns the only reference (copy-on-write is the caller's
// job: see server/variable.h). Thread-compatible.
class Buffer {
 public:
  // Allocates `bytes` bytes, zero-filled when `zero` is true.
  static std::shared_ptr<Buffer> Allocate(size_t bytes, bool zero = true);
  static std::shared_ptr<Buffer> Copy(const Buffer& other);

  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }

  template <typename T>
  absl::Span<T> span() {
    return absl::Span<T>(reinterpret_cast<T*>(data_), size_ / sizeof(T));
  }
  template <typename T>
  absl::Span<const T> span() const {
    return absl::Span<const T>(reinterpret_cast<const T*>(data_),
                               size_ / sizeof(T));
  }

 private:
  Buffer(char* data, size_t size) : data_(data), size_(size) {}
  char* data_;
  size_t size_;
};

// A typed view: dtype + shape + buffer. Cheap to copy (shares the buffer).
struct Tensor {
  DType dtype = DType::kInvalid;
  Shape shape;
  std::shared_ptr<Buffer> buffer;

  static Tensor Zeros(DType dtype, const Shape& shape);
  int64_t num_elements() const { return NumElements(shape); }
  size_t byte_size() const { return buffer ? buffer->size() : 0; }
};

// Returns INVALID_ARGUMENT naming the first NaN or Inf element of `data`
// (interpreted as `dtype`); integer types always pass.
absl::Status CheckFinite(DType dtype, const void* data, int64_t num_elements,
                         absl::string_view what);

}  // namespace strata

#endif  // STRATA_COMMON_TENSOR_H_
