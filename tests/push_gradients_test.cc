// PushGradients (server/requests.h): a PushVariables payload decoded and
// checked as it arrives, in pieces of any size, gives the same gradients
// and the same verdict as the whole payload at once (ApplyPushVariables).
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gradient_encoding.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "gtest/gtest.h"
#include "proto/push_id_codec.h"
#include "server/requests.h"
#include "server/variable.h"
#include "tests/test_util.h"

namespace strata {
namespace {

constexpr uint64_t kMaxBytes = uint64_t{1} << 20;

std::shared_ptr<Variable> Make(const std::string& name, v1::DType dtype,
                               int64_t n,
                               v1::UpdateMode::Kind kind = v1::UpdateMode::ASYNC) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(dtype);
  spec.add_shape(n);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_update_mode()->set_kind(kind);
  if (kind != v1::UpdateMode::ASYNC) {
    spec.mutable_update_mode()->set_num_replicas(1);
  }
  absl::StatusOr<std::shared_ptr<Variable>> v = Variable::Create(spec, kMaxBytes);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : nullptr;
}

// A push of four variables: float32 (37 elements), float32 sent as bf16
// (21), float64 (5), float32 (4), each gradient i * 0.25 - 2 (bf16-exact),
// and its payload.
struct Push {
  v1::PushVariablesHeader header;
  std::vector<std::shared_ptr<Variable>> variables;
  std::string payload;
};

Push MakePush(bool tagged, v1::UpdateMode::Kind third_kind) {
  Push p;
  p.variables = {Make("f32", v1::DT_FLOAT32, 37),
                 Make("bf16", v1::DT_FLOAT32, 21),
                 Make("f64", v1::DT_FLOAT64, 5, third_kind),
                 Make("tail", v1::DT_FLOAT32, 4)};
  std::vector<float> f32(37), bf(21), tail(4, 0.5f);
  std::vector<double> f64(5);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = i * 0.25f - 2;
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = i * 0.25f - 2;
  for (size_t i = 0; i < f64.size(); ++i) f64[i] = i * 0.25 - 2;
  std::string encoded(EncodedBytes(GradientEncoding::kBfloat16, bf.size()), 0);
  EncodeFloat32(GradientEncoding::kBfloat16, bf.data(), bf.size(),
                    encoded.data());
  p.payload.append(reinterpret_cast<const char*>(f32.data()), f32.size() * 4);
  p.payload.append(encoded);
  p.payload.append(reinterpret_cast<const char*>(f64.data()), f64.size() * 8);
  p.payload.append(reinterpret_cast<const char*>(tail.data()), tail.size() * 4);
  const struct {
    const char* name;
    v1::DType dtype;
    int64_t n;
    size_t bytes;
    v1::GradientEncoding encoding;
  } slots[] = {{"f32", v1::DT_FLOAT32, 37, 37 * 4, v1::GRADIENT_ENCODING_NONE},
               {"bf16", v1::DT_FLOAT32, 21, encoded.size(),
                v1::GRADIENT_ENCODING_BF16},
               {"f64", v1::DT_FLOAT64, 5, 5 * 8, v1::GRADIENT_ENCODING_NONE},
               {"tail", v1::DT_FLOAT32, 4, 4 * 4, v1::GRADIENT_ENCODING_NONE}};
  for (const auto& s : slots) {
    v1::VariableSlot* slot = p.header.add_variables();
    slot->set_name(s.name);
    slot->set_dtype(s.dtype);
    slot->add_shape(s.n);
    slot->set_bytes(static_cast<int64_t>(s.bytes));
    slot->set_encoding(s.encoding);
  }
  p.header.set_payload_bytes(static_cast<int64_t>(p.payload.size()));
  if (tagged) p.header.mutable_tag()->set_job("job");
  return p;
}

// Puts `value` at element `index` of variable `v` of the payload.
void Poison(Push* p, int v, int64_t index) {
  if (v == 0) {
    const float x = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(&p->payload[index * 4], &x, 4);
  } else if (v == 1) {
    const float x = std::numeric_limits<float>::infinity();
    EncodeFloat32(GradientEncoding::kBfloat16, &x, 1,
                      &p->payload[37 * 4 + index * 2]);
  } else if (v == 2) {
    const double x = -std::numeric_limits<double>::infinity();
    std::memcpy(&p->payload[37 * 4 + 21 * 2 + index * 8], &x, 8);
  } else {
    const float x = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(&p->payload[37 * 4 + 21 * 2 + 5 * 8 + index * 4], &x, 4);
  }
}

// Advances a PushGradients over `p` in pieces of `step` bytes; returns its
// verdict, and the gradients in `grads` when OK.
absl::Status InPieces(const Push& p, size_t step,
                      std::vector<std::string>* grads) {
  PushGradients g(p.header, p.variables, p.payload.data(), p.payload.size());
  absl::Status s;
  for (size_t at = step; s.ok(); at += step) {
    s = g.Advance(std::min(at, p.payload.size()));
    if (at >= p.payload.size()) break;
  }
  if (s.ok() && grads != nullptr) {
    const size_t sizes[] = {37 * 4, 21 * 4, 5 * 8, 4 * 4};
    grads->clear();
    for (size_t i = 0; i < 4; ++i) grads->emplace_back(g.grads()[i], sizes[i]);
  }
  return s;
}

// The verdict as the server gave it before payloads were taken in pieces:
// variable by variable in the header's order, its tag, then its decoded
// gradient.
absl::Status Reference(const Push& p) {
  const PushMeta meta = PushMetaFromTag(p.header.has_tag(), p.header.tag());
  size_t offset = 0;
  for (size_t i = 0; i < p.variables.size(); ++i) {
    const Variable& v = *p.variables[i];
    const v1::VariableSlot& slot = p.header.variables(static_cast<int>(i));
    const int64_t n = slot.shape(0);
    STRATA_RETURN_IF_ERROR(v.CheckPushMeta(meta));
    std::string grad(p.payload, offset, static_cast<size_t>(slot.bytes()));
    DType dtype = v.dtype();
    if (slot.encoding() == v1::GRADIENT_ENCODING_BF16) {
      std::string decoded(static_cast<size_t>(n) * 4, 0);
      DecodeToFloat32(GradientEncoding::kBfloat16, grad.data(),
                      static_cast<size_t>(n),
                      reinterpret_cast<float*>(decoded.data()));
      grad = decoded;
      dtype = DType::kFloat32;
    }
    STRATA_RETURN_IF_ERROR(CheckFinite(
        dtype, grad.data(), n,
        absl::StrCat("gradient for variable '", v.name(), "'")));
    offset += static_cast<size_t>(slot.bytes());
  }
  return absl::OkStatus();
}

TEST(PushGradientsTest, AnyPiecesGiveTheWholePayloadsGradients) {
  const Push p = MakePush(true, v1::UpdateMode::ASYNC);
  std::vector<std::string> whole;
  STRATA_ASSERT_OK(InPieces(p, p.payload.size(), &whole));
  // bf16 decoded to float32.
  float f;
  std::memcpy(&f, whole[1].data() + 5 * 4, 4);
  EXPECT_EQ(f, 5 * 0.25f - 2);
  for (size_t step = 1; step <= 64; ++step) {
    SCOPED_TRACE(step);
    std::vector<std::string> pieces;
    STRATA_ASSERT_OK(InPieces(p, step, &pieces));
    EXPECT_EQ(pieces, whole);
  }
}

TEST(PushGradientsTest, EveryBadValueGetsTheWholePayloadsVerdict) {
  const struct {
    int variable;
    int64_t index;
  } bad[] = {{0, 0}, {0, 36}, {1, 0}, {1, 13}, {1, 20}, {2, 0}, {2, 4},
             {3, 3}};
  for (const auto& b : bad) {
    SCOPED_TRACE(absl::StrCat(b.variable, "/", b.index));
    Push p = MakePush(true, v1::UpdateMode::ASYNC);
    Poison(&p, b.variable, b.index);
    const absl::Status whole = InPieces(p, p.payload.size(), nullptr);
    EXPECT_EQ(whole, Reference(p));
    EXPECT_EQ(whole.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(whole.message().find(absl::StrCat("at element ", b.index)),
              std::string::npos)
        << whole;
    for (size_t step : {1, 2, 3, 7, 64, 1000}) {
      EXPECT_EQ(InPieces(p, step, nullptr), whole) << step;
    }
  }
}

TEST(PushGradientsTest, TheFirstBadVariableInTheHeadersOrderDecides) {
  // An untagged push to a SYNC variable (the third) fails its tag check;
  // a bad value before it is reported first, in it or after it not at all.
  for (int poisoned : {-1, 1, 2, 3}) {
    SCOPED_TRACE(poisoned);
    Push p = MakePush(false, v1::UpdateMode::SYNC);
    if (poisoned >= 0) Poison(&p, poisoned, 3);
    const absl::Status whole = InPieces(p, p.payload.size(), nullptr);
    EXPECT_EQ(whole, Reference(p));
    EXPECT_EQ(whole.code(), absl::StatusCode::kInvalidArgument);
    if (poisoned == 1) {
      EXPECT_NE(whole.message().find("gradient for variable 'bf16'"),
                std::string::npos)
          << whole;
    } else {
      EXPECT_NE(whole.message().find("'f64'"), std::string::npos) << whole;
      EXPECT_EQ(whole.message().find("non-finite"), std::string::npos)
          << whole;
    }
    for (size_t step : {1, 5, 64}) {
      EXPECT_EQ(InPieces(p, step, nullptr), whole) << step;
    }
  }
  // A payload shorter than the variables need.
  Push p = MakePush(true, v1::UpdateMode::ASYNC);
  PushGradients g(p.header, p.variables, p.payload.data(), 160);
  absl::Status s = g.Advance(160);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("payload of 160 bytes ends inside variable 'bf16'"),
            std::string::npos)
      << s;
}

// Variables of no elements, plain and encoded, between others: their
// gradients are empty but never null (a null dense gradient would be taken
// for a row push).
TEST(PushGradientsTest, VariablesOfNoElementsHaveGradientsThatAreNotNull) {
  Push p;
  p.variables = {Make("empty", v1::DT_FLOAT32, 0),
                 Make("empty16", v1::DT_FLOAT32, 0),
                 Make("one", v1::DT_FLOAT32, 1)};
  for (const char* name : {"empty", "empty16", "one"}) {
    v1::VariableSlot* slot = p.header.add_variables();
    slot->set_name(name);
    slot->set_dtype(v1::DT_FLOAT32);
    const bool one = std::string(name) == "one";
    slot->add_shape(one ? 1 : 0);
    slot->set_bytes(one ? 4 : 0);
    if (std::string(name) == "empty16") {
      slot->set_encoding(v1::GRADIENT_ENCODING_BF16);
    }
  }
  const float x = 0.5f;
  p.payload.assign(reinterpret_cast<const char*>(&x), 4);
  p.header.set_payload_bytes(4);
  PushGradients g(p.header, p.variables, p.payload.data(), 4);
  STRATA_ASSERT_OK(g.Advance(4));
  for (const char* grad : g.grads()) EXPECT_NE(grad, nullptr);
  // A payload of no bytes at all (every variable empty).
  Push none;
  none.variables = {p.variables[0], p.variables[1]};
  *none.header.add_variables() = p.header.variables(0);
  *none.header.add_variables() = p.header.variables(1);
  PushGradients empty(none.header, none.variables, nullptr, 0);
  STRATA_ASSERT_OK(empty.Advance(0));
  for (const char* grad : empty.grads()) EXPECT_NE(grad, nullptr);
}

}  // namespace
}  // namespace strata
