#include "proto/gradient_encoding_proto.h"

#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<GradientEncoding> GradientEncodingFromProto(
    v1::GradientEncoding encoding) {
  switch (encoding) {
    case v1::GRADIENT_ENCODING_NONE:
      return GradientEncoding::kNone;
    case v1::GRADIENT_ENCODING_BF16:
      return GradientEncoding::kBfloat16;
    case v1::GRADIENT_ENCODING_FP16:
      return GradientEncoding::kFloat16;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown gradient encoding ", static_cast<int>(encoding),
                   " (VariableSlot.encoding)"));
}

v1::GradientEncoding GradientEncodingToProto(GradientEncoding encoding) {
  switch (encoding) {
    case GradientEncoding::kNone:
      return v1::GRADIENT_ENCODING_NONE;
    case GradientEncoding::kBfloat16:
      return v1::GRADIENT_ENCODING_BF16;
    case GradientEncoding::kFloat16:
      return v1::GRADIENT_ENCODING_FP16;
  }
  return v1::GRADIENT_ENCODING_NONE;
}

}  // namespace strata
