// MaxPooling1D/2D, AveragePooling1D/2D, GlobalAveragePooling1D/2D and
// GlobalMaxPooling1D/2D, channels-last. The 1D layers are the 2D ones over
// a height of 1.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/eigen_maps.h"
#include "model/layers.h"

namespace strata {
namespace model {
namespace {

static_assert(sizeof(int32_t) <= sizeof(Real), "argmax kept in scratch");

// Scratch buffer 0 of the max layers: per output element, the argmax's
// offset in its example's input, as int32 (first maximum on ties).
constexpr size_t kArgmax = 0;

int32_t* ArgmaxBuffer(LayerScratch* scratch, int64_t n) {
  return reinterpret_cast<int32_t*>(scratch->Get(kArgmax,
                                                 static_cast<size_t>(n)));
}
const int32_t* ArgmaxAt(const LayerScratch* scratch) {
  return reinterpret_cast<const int32_t*>(scratch->At(kArgmax));
}

// The windows of one axis: output i covers input [lo[i], hi[i]), clipped
// to the input (TensorFlow's 'same': the padding is never read).
struct AxisWindows {
  int64_t out = 0;
  std::vector<int64_t> lo, hi;
};

bool MakeWindows(const std::string& padding, int64_t in, int64_t k,
                 int64_t stride, AxisWindows* w) {
  int64_t pad = 0;
  if (padding == "valid") {
    if (in < k) return false;
    w->out = (in - k) / stride + 1;
  } else {
    w->out = (in + stride - 1) / stride;
    pad = std::max<int64_t>((w->out - 1) * stride + k - in, 0) / 2;
  }
  w->lo.resize(w->out);
  w->hi.resize(w->out);
  for (int64_t i = 0; i < w->out; ++i) {
    const int64_t start = i * stride - pad;
    w->lo[i] = std::max<int64_t>(start, 0);
    w->hi[i] = std::min(start + k, in);
  }
  return true;
}

class Pooling : public Layer {
 public:
  Pooling(int rank, bool max, std::vector<int64_t> pool_size,
          std::vector<int64_t> strides, std::string padding)
      : rank_(rank),
        max_(max),
        pool_size_(std::move(pool_size)),
        strides_(std::move(strides)),
        padding_(std::move(padding)) {}

  std::string class_name() const override {
    return absl::StrCat(max_ ? "MaxPooling" : "AveragePooling", rank_, "D");
  }

  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    const Shape& in = inputs[0];
    STRATA_RETURN_IF_ERROR(SpatialInput(in, rank_, &h_, &w_, &c_));
    in_size_ = h_ * w_ * c_;
    if (in_size_ > int64_t{0x7fffffff}) {
      return Error(absl::StrCat("input ", ShapeString(in),
                                " is too large (more than 2^31 values)"));
    }
    bool fits = true;
    if (rank_ == 2) {
      fits = MakeWindows(padding_, h_, pool_size_[0], strides_[0], &rows_);
    } else {
      rows_.out = 1;
      rows_.lo = {0};
      rows_.hi = {1};
    }
    fits = fits && MakeWindows(padding_, w_, pool_size_[rank_ - 1],
                               strides_[rank_ - 1], &cols_);
    if (!fits) {
      return Error(absl::StrCat("argument 'pool_size' (",
                                absl::StrJoin(pool_size_, ", "),
                                ") is larger than the input ", ShapeString(in),
                                " with padding 'valid'"));
    }
    if (rank_ == 1) {
      output_shape_ = {cols_.out, c_};
    } else {
      output_shape_ = {rows_.out, cols_.out, c_};
    }
    out_size_ = rows_.out * cols_.out * c_;
    return absl::OkStatus();
  }

  int64_t ScratchPerExample() const override { return max_ ? out_size_ : 0; }

  void Forward(const ForwardArgs& a) const override {
    int32_t* arg = max_ ? ArgmaxBuffer(a.scratch, a.batch * out_size_)
                        : nullptr;
    for (int64_t b = 0; b < a.batch; ++b) {
      const Real* x = a.inputs[0] + b * in_size_;
      Real* o = a.output + b * out_size_;
      int32_t* idx = max_ ? arg + b * out_size_ : nullptr;
      for (int64_t oy = 0; oy < rows_.out; ++oy) {
        for (int64_t ox = 0; ox < cols_.out; ++ox, o += c_) {
          if (max_) {
            MaxWindow(x, oy, ox, o, idx);
            idx += c_;
          } else {
            AverageWindow(x, oy, ox, o);
          }
        }
      }
    }
  }

  void Backward(const BackwardArgs& a) const override {
    Real* dx_all = a.input_grads[0];
    if (dx_all == nullptr) return;
    std::fill(dx_all, dx_all + a.batch * in_size_, 0.0f);
    const int32_t* arg = max_ ? ArgmaxAt(a.scratch) : nullptr;
    for (int64_t b = 0; b < a.batch; ++b) {
      Real* dx = dx_all + b * in_size_;
      const Real* dy = a.output_grad + b * out_size_;
      if (max_) {
        const int32_t* idx = arg + b * out_size_;
        for (int64_t e = 0; e < out_size_; ++e) dx[idx[e]] += dy[e];
        continue;
      }
      for (int64_t oy = 0; oy < rows_.out; ++oy) {
        for (int64_t ox = 0; ox < cols_.out; ++ox, dy += c_) {
          const Real inv = 1.0f / static_cast<Real>(
                                       (rows_.hi[oy] - rows_.lo[oy]) *
                                       (cols_.hi[ox] - cols_.lo[ox]));
          for (int64_t iy = rows_.lo[oy]; iy < rows_.hi[oy]; ++iy) {
            for (int64_t ix = cols_.lo[ox]; ix < cols_.hi[ox]; ++ix) {
              Real* d = dx + (iy * w_ + ix) * c_;
              for (int64_t c = 0; c < c_; ++c) d[c] += dy[c] * inv;
            }
          }
        }
      }
    }
  }

 private:
  void MaxWindow(const Real* x, int64_t oy, int64_t ox,
                 Real* __restrict o, int32_t* __restrict idx) const {
    bool first = true;
    for (int64_t iy = rows_.lo[oy]; iy < rows_.hi[oy]; ++iy) {
      for (int64_t ix = cols_.lo[ox]; ix < cols_.hi[ox]; ++ix) {
        const int32_t pos = static_cast<int32_t>((iy * w_ + ix) * c_);
        const Real* __restrict s = x + pos;
        const int32_t n = static_cast<int32_t>(c_);
        if (first) {
          for (int32_t c = 0; c < n; ++c) {
            o[c] = s[c];
            idx[c] = pos + c;
          }
          first = false;
          continue;
        }
        // Branch-free selects over the channels, which the compiler
        // vectorizes (the first maximum wins a tie: strictly greater).
        for (int32_t c = 0; c < n; ++c) {
          const bool greater = s[c] > o[c];
          o[c] = greater ? s[c] : o[c];
          idx[c] = greater ? pos + c : idx[c];
        }
      }
    }
  }

  // Keras's average over the window's elements inside the input.
  void AverageWindow(const Real* x, int64_t oy, int64_t ox, Real* o) const {
    std::fill(o, o + c_, 0.0f);
    for (int64_t iy = rows_.lo[oy]; iy < rows_.hi[oy]; ++iy) {
      for (int64_t ix = cols_.lo[ox]; ix < cols_.hi[ox]; ++ix) {
        const Real* s = x + (iy * w_ + ix) * c_;
        for (int64_t c = 0; c < c_; ++c) o[c] += s[c];
      }
    }
    const Real inv = 1.0f / static_cast<Real>(
                                 (rows_.hi[oy] - rows_.lo[oy]) *
                                 (cols_.hi[ox] - cols_.lo[ox]));
    for (int64_t c = 0; c < c_; ++c) o[c] *= inv;
  }

  int rank_;
  bool max_;
  std::vector<int64_t> pool_size_;
  std::vector<int64_t> strides_;
  std::string padding_;
  // Set by BuildShapes (1D: h 1, one row window).
  int64_t h_ = 0, w_ = 0, c_ = 0;
  int64_t in_size_ = 0, out_size_ = 0;
  AxisWindows rows_, cols_;
};

// Global pooling: [steps, c] or [h, w, c] -> [c] (keepdims: [1, c] or
// [1, 1, c]).
class GlobalPooling : public Layer {
 public:
  GlobalPooling(int rank, bool max, bool keepdims)
      : rank_(rank), max_(max), keepdims_(keepdims) {}

  std::string class_name() const override {
    return absl::StrCat(max_ ? "GlobalMaxPooling" : "GlobalAveragePooling",
                        rank_, "D");
  }

  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    const Shape& in = inputs[0];
    if (static_cast<int>(in.size()) != rank_ + 1) {
      return Error(absl::StrCat(
          "expects an input of rank ", rank_ + 1,
          rank_ == 1 ? " (steps, channels)" : " (height, width, channels)",
          ", got ", ShapeString(in)));
    }
    c_ = in.back();
    s_ = NumElements(in) / c_;
    if (s_ > int64_t{0x7fffffff}) {
      return Error(absl::StrCat("input ", ShapeString(in),
                                " is too large (more than 2^31 positions)"));
    }
    output_shape_ = keepdims_ ? Shape(static_cast<size_t>(rank_), 1) : Shape{};
    output_shape_.push_back(c_);
    return absl::OkStatus();
  }

  int64_t ScratchPerExample() const override { return max_ ? c_ : 0; }

  void Forward(const ForwardArgs& a) const override {
    if (max_) {
      int32_t* arg = ArgmaxBuffer(a.scratch, a.batch * c_);
      for (int64_t b = 0; b < a.batch; ++b) {
        const Real* x = a.inputs[0] + b * s_ * c_;
        Real* o = a.output + b * c_;
        int32_t* idx = arg + b * c_;
        std::memcpy(o, x, sizeof(Real) * c_);
        std::fill(idx, idx + c_, 0);
        for (int64_t s = 1; s < s_; ++s) {
          const Real* row = x + s * c_;
          for (int64_t c = 0; c < c_; ++c) {
            if (row[c] > o[c]) {
              o[c] = row[c];
              idx[c] = static_cast<int32_t>(s);
            }
          }
        }
      }
      return;
    }
    const Real inv = 1.0f / static_cast<Real>(s_);
    for (int64_t b = 0; b < a.batch; ++b) {
      const Real* x = a.inputs[0] + b * s_ * c_;
      Eigen::Map<ArrayXr> o(a.output + b * c_, c_);
      // Row by row: the rounding does not depend on alignment.
      o = Eigen::Map<const ArrayXr>(x, c_);
      for (int64_t s = 1; s < s_; ++s) {
        o += Eigen::Map<const ArrayXr>(x + s * c_, c_);
      }
      o *= inv;
    }
  }

  void Backward(const BackwardArgs& a) const override {
    Real* dx_all = a.input_grads[0];
    if (dx_all == nullptr) return;
    if (max_) {
      std::fill(dx_all, dx_all + a.batch * s_ * c_, 0.0f);
      const int32_t* arg = ArgmaxAt(a.scratch);
      for (int64_t b = 0; b < a.batch; ++b) {
        Real* dx = dx_all + b * s_ * c_;
        const Real* dy = a.output_grad + b * c_;
        const int32_t* idx = arg + b * c_;
        for (int64_t c = 0; c < c_; ++c) dx[idx[c] * c_ + c] = dy[c];
      }
      return;
    }
    const Real inv = 1.0f / static_cast<Real>(s_);
    for (int64_t b = 0; b < a.batch; ++b) {
      Real* dx = dx_all + b * s_ * c_;
      const Real* dy = a.output_grad + b * c_;
      for (int64_t c = 0; c < c_; ++c) dx[c] = dy[c] * inv;
      for (int64_t s = 1; s < s_; ++s) {
        std::memcpy(dx + s * c_, dx, sizeof(Real) * c_);
      }
    }
  }

 private:
  int rank_;
  bool max_;
  bool keepdims_;
  int64_t c_ = 0;  // channels
  int64_t s_ = 0;  // positions (steps, or height * width)
};

LayerOr CreatePooling(ConfigReader* r, int rank, bool max) {
  const size_t n = static_cast<size_t>(rank);
  std::vector<int64_t> pool_size, strides;
  std::string padding;
  absl::Status s = r->IntTuple("pool_size", n, std::vector<int64_t>(n, 2), 1,
                               &pool_size);
  // strides: None (absent or null) means pool_size.
  if (s.ok()) s = r->IntTuple("strides", n, pool_size, 1, &strides);
  if (s.ok()) s = r->Enum("padding", "valid", {"valid", "same"}, &padding);
  // data_format: Finish() accepts channels_last (and null) only.
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<Pooling>(rank, max, std::move(pool_size),
                                   std::move(strides), std::move(padding));
}

LayerOr CreateGlobalPooling(ConfigReader* r, int rank, bool max) {
  bool keepdims = false;
  absl::Status s = r->Bool("keepdims", false, &keepdims);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<GlobalPooling>(rank, max, keepdims);
}

}  // namespace

LayerOr CreateMaxPooling1D(ConfigReader* r) {
  return CreatePooling(r, 1, true);
}
LayerOr CreateMaxPooling2D(ConfigReader* r) {
  return CreatePooling(r, 2, true);
}
LayerOr CreateAveragePooling1D(ConfigReader* r) {
  return CreatePooling(r, 1, false);
}
LayerOr CreateAveragePooling2D(ConfigReader* r) {
  return CreatePooling(r, 2, false);
}
LayerOr CreateGlobalAveragePooling1D(ConfigReader* r) {
  return CreateGlobalPooling(r, 1, false);
}
LayerOr CreateGlobalAveragePooling2D(ConfigReader* r) {
  return CreateGlobalPooling(r, 2, false);
}
LayerOr CreateGlobalMaxPooling1D(ConfigReader* r) {
  return CreateGlobalPooling(r, 1, true);
}
LayerOr CreateGlobalMaxPooling2D(ConfigReader* r) {
  return CreateGlobalPooling(r, 2, true);
}

}  // namespace model
}  // namespace strata
