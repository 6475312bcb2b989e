// GradientEncoding (common/gradient_encoding.h) to and from its wire enum
// (VariableSlot.encoding in parameter_server.proto).
#ifndef STRATA_PROTO_GRADIENT_ENCODING_PROTO_H_
#define STRATA_PROTO_GRADIENT_ENCODING_PROTO_H_

#include "absl/status/statusor.h"
#include "common/gradient_encoding.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

// Errors: INVALID_ARGUMENT for a value the enum does not define (a newer
// or corrupt sender), naming it.
absl::StatusOr<GradientEncoding> GradientEncodingFromProto(
    v1::GradientEncoding encoding);
v1::GradientEncoding GradientEncodingToProto(GradientEncoding encoding);

}  // namespace strata

#endif  // STRATA_PROTO_GRADIENT_ENCODING_PROTO_H_
