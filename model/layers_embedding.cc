// Embedding: Keras's dense-vocabulary lookup table. Ids travel as floats
// (one per input element); each becomes the row of the "embeddings" weight
// [input_dim, output_dim] it names. Input (per example) of any shape S,
// output S + [output_dim] (Keras: (batch,) -> (batch, output_dim), (batch,
// k) -> (batch, k, output_dim)).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "model/layers.h"

namespace strata {
namespace model {
namespace {

// Ids are float32 on the wire: every integer up to 2^24 is exact, larger
// ones are not, so larger vocabularies are refused.
constexpr int64_t kMaxInputDim = int64_t{1} << 24;

// A Real id as text for messages: "1000", "-3", "2.5", "nan".
std::string IdText(Real x) {
  const double d = x;
  if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 1e18) {
    return absl::StrCat(static_cast<int64_t>(d));
  }
  return absl::StrCat(d);
}

class Embedding : public Layer {
 public:
  Embedding(int64_t input_dim, int64_t output_dim, WeightDef embeddings)
      : input_dim_(input_dim), output_dim_(output_dim) {
    weights_.push_back(std::move(embeddings));
  }
  std::string class_name() const override { return "Embedding"; }

  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    ids_ = NumElements(inputs[0]);
    output_shape_ = inputs[0];
    output_shape_.push_back(output_dim_);
    weights_[0].shape = {input_dim_, output_dim_};
    return absl::OkStatus();
  }

  // The check the graph runs before Forward (Forward itself cannot fail):
  // every id an integer in [0, input_dim).
  absl::Status CheckInputs(const ForwardArgs& a) const override {
    return CheckIds(a.inputs[0], a.batch);
  }

  absl::Status CheckIds(const Real* ids, int64_t batch) const {
    for (int64_t b = 0; b < batch; ++b) {
      const Real* row = ids + b * ids_;
      for (int64_t p = 0; p < ids_; ++p) {
        if (Valid(row[p])) continue;
        const Real x = row[p];
        if (!(std::isfinite(x) && std::floor(x) == x)) {
          return Error(absl::StrCat("id ", IdText(x), " at example ", b,
                                    ", position ", p,
                                    " is not an integer"));
        }
        return Error(absl::StrCat("id ", IdText(x), " at example ", b,
                                  ", position ", p, " is out of range [0, ",
                                  input_dim_, ")"));
      }
    }
    return absl::OkStatus();
  }

  // An id that fails CheckIds reads as a zero row here and takes no
  // gradient (the graph refuses such a batch before Forward).
  void Forward(const ForwardArgs& a) const override {
    const int64_t n = a.batch * ids_;
    const Real* table = a.weights[0].data();
    const Real* ids = a.inputs[0];
    const size_t row_bytes = sizeof(Real) * static_cast<size_t>(output_dim_);
    for (int64_t k = 0; k < n; ++k) {
      Real* dst = a.output + k * output_dim_;
      if (Valid(ids[k])) {
        std::memcpy(dst, table + static_cast<int64_t>(ids[k]) * output_dim_,
                    row_bytes);
      } else {
        std::memset(dst, 0, row_bytes);
      }
    }
  }

  // The weight gradient is dense: zero, then each output row added into
  // the row of its id (in id order of appearance, so repeated ids sum in a
  // fixed order).
  void Backward(const BackwardArgs& a) const override {
    const int64_t n = a.batch * ids_;
    if (a.input_grads[0] != nullptr) {
      // Ids have no gradient.
      std::memset(a.input_grads[0], 0, sizeof(Real) * static_cast<size_t>(n));
    }
    if (a.weight_grads[0] == nullptr) return;
    using RowMatrix =
        Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<RowMatrix> dw(a.weight_grads[0], input_dim_, output_dim_);
    Eigen::Map<const RowMatrix> dy(a.output_grad, n, output_dim_);
    dw.setZero();
    const Real* ids = a.inputs[0];
    for (int64_t k = 0; k < n; ++k) {
      if (!Valid(ids[k])) continue;
      dw.row(static_cast<int64_t>(ids[k])) += dy.row(k);
    }
  }

 private:
  bool Valid(Real x) const {
    // False for NaN too.
    return x >= 0.0f && x < static_cast<Real>(input_dim_) &&
           std::floor(x) == x;
  }

  int64_t input_dim_;
  int64_t output_dim_;
  int64_t ids_ = 1;  // ids per example
};

}  // namespace

// The ids check of an Embedding layer, for callers that hold it as a Layer:
// INVALID_ARGUMENT "layer 'name' (Embedding): id 1000 at example 2,
// position 0 is out of range [0, 1000)" (or "... is not an integer");
// `ids` holds batch x (ids per example) floats. A layer of another class:
// INVALID_ARGUMENT.
absl::Status CheckEmbeddingIds(const Layer& layer, const Real* ids,
                               int64_t batch) {
  const auto* e = dynamic_cast<const Embedding*>(&layer);
  if (e == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer '", layer.name(), "' (", layer.class_name(),
        "): not an Embedding layer"));
  }
  return e->CheckIds(ids, batch);
}

// Keras's Embedding (tf.keras 2.x and Keras 3): input_dim, output_dim,
// embeddings_initializer (default "uniform" = RandomUniform(-0.05, 0.05)),
// embeddings_regularizer; mask_zero, sparse, lora_rank, lora_alpha,
// quantization_config only at their defaults; input_length ignored (the
// input shape comes from the graph); embeddings_constraint and
// activity_regularizer null (Finish).
LayerOr CreateEmbedding(ConfigReader* r) {
  int64_t input_dim = 0;
  int64_t output_dim = 0;
  WeightDef emb{"embeddings"};
  absl::Status s = r->Int("input_dim", true, 0, 1, kMaxInputDim, &input_dim);
  if (!s.ok() && r->Has("input_dim") && r->At("input_dim").is_number() &&
      r->At("input_dim").get<double>() > static_cast<double>(kMaxInputDim)) {
    s = r->ArgError("input_dim",
                    absl::StrCat(ShowJson(r->At("input_dim")),
                                 " is too large for a dense Embedding (ids "
                                 "travel as float32, exact up to ",
                                 kMaxInputDim, ")"));
  }
  if (s.ok()) {
    s = r->Int("output_dim", true, 0, 1, int64_t{1} << 31, &output_dim);
  }
  if (s.ok()) {
    // Keras's string aliases "uniform" and "normal" (RandomUniform(-0.05,
    // 0.05), RandomNormal(0, 0.05)); everything else as any initializer.
    const char* key = "embeddings_initializer";
    const bool alias = r->Has(key) && r->At(key).is_string() &&
                       (r->At(key).get<std::string>() == "uniform" ||
                        r->At(key).get<std::string>() == "normal");
    if (alias) {
      const std::string name = r->At(key).get<std::string>();
      s = r->Unsupported(key, name);  // marks it read; always equal
      emb.init = InitializerSpec{name == "uniform"
                                     ? InitializerType::kRandomUniform
                                     : InitializerType::kRandomNormal};
      emb.seed_set = false;
    } else {
      s = r->Initializer(key, InitializerType::kRandomUniform, &emb.init,
                         &emb.seed_set);
    }
  }
  if (s.ok()) {
    s = r->Regularizer("embeddings_regularizer", &emb.l1, &emb.l2);
  }
  if (s.ok()) s = r->Unsupported("mask_zero", false);
  if (s.ok()) s = r->Unsupported("sparse", false);
  if (s.ok()) s = r->Unsupported("lora_rank", nullptr);
  if (s.ok()) s = r->Unsupported("lora_alpha", nullptr);
  if (s.ok()) s = r->Unsupported("quantization_config", nullptr);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<Embedding>(input_dim, output_dim, std::move(emb));
}

}  // namespace model
}  // namespace strata
