#include "model/layer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace strata {
namespace model {

AlignedFloats::AlignedFloats(AlignedFloats&& other) noexcept
    : data_(other.data_), capacity_(other.capacity_) {
  other.data_ = nullptr;
  other.capacity_ = 0;
}

AlignedFloats& AlignedFloats::operator=(AlignedFloats&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = other.data_;
    capacity_ = other.capacity_;
    other.data_ = nullptr;
    other.capacity_ = 0;
  }
  return *this;
}

AlignedFloats::~AlignedFloats() { std::free(data_); }

Real* AlignedFloats::Resize(size_t n) {
  if (n <= capacity_ && data_ != nullptr) return data_;
  // Whole 64-byte lines; grown geometrically so that alternating batch
  // sizes do not reallocate.
  const size_t capacity = std::max({n, capacity_ * 2, size_t{16}});
  const size_t bytes = (capacity * sizeof(Real) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::free(data_);
  data_ = static_cast<Real*>(p);
  capacity_ = bytes / sizeof(Real);
  return data_;
}

Real* LayerScratch::Get(size_t i, size_t n) {
  if (buffers_.size() <= i) buffers_.resize(i + 1);
  return buffers_[i].Resize(n);
}

absl::Status Layer::Build(const std::vector<Shape>& inputs) {
  const int n = num_inputs();
  if (n >= 1 && static_cast<int>(inputs.size()) != n) {
    return Error(absl::StrCat("takes ", n, " input", n == 1 ? "" : "s",
                              ", got ", inputs.size()));
  }
  if (n == -1 && inputs.empty()) return Error("takes at least one input");
  if (n == -2 && inputs.size() < 2) {
    return Error(absl::StrCat("takes at least 2 inputs, got ",
                              inputs.size()));
  }
  for (const Shape& s : inputs) {
    for (int64_t d : s) {
      if (d < 1) {
        return Error(absl::StrCat("input shape ", ShapeString(s),
                                  " has a dimension < 1"));
      }
    }
  }
  input_shapes_ = inputs;
  return BuildShapes(inputs);
}

absl::Status Layer::Error(const std::string& what) const {
  return absl::InvalidArgumentError(
      absl::StrCat("layer '", name_, "' (", class_name(), "): ", what));
}

absl::Status Layer::SpatialInput(const Shape& in, int rank, int64_t* h,
                                 int64_t* w, int64_t* c) const {
  if (static_cast<int>(in.size()) != rank + 1) {
    return Error(absl::StrCat(
        "expects an input of rank ", rank + 1,
        rank == 1 ? " (steps, channels)" : " (height, width, channels)",
        ", got ", ShapeString(in)));
  }
  *h = rank == 1 ? 1 : in[0];
  *w = in[rank - 1];
  *c = in[rank];
  return absl::OkStatus();
}

}  // namespace model
}  // namespace strata
