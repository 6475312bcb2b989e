#include "server/requests.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/gradient_encoding.h"
#include "common/status_macros.h"
#include "proto/gradient_encoding_proto.h"
#include "proto/push_id_codec.h"

namespace strata {

absl::StatusOr<uint64_t> ValidatePushHeader(const v1::PushHeader& header,
                                            const Variable& variable) {
  const std::string& name = header.name();
  const std::string var = absl::StrCat("variable '", name, "'");
  auto dtype = DTypeFromProto(header.dtype());
  if (!dtype.ok() || *dtype != variable.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        var, " is ", DTypeName(variable.dtype()), ", the gradient's dtype ",
        dtype.ok() ? absl::StrCat("is ", DTypeName(*dtype))
                   : absl::StrCat("(PushHeader.dtype) is invalid: ",
                                  dtype.status().message())));
  }
  Shape shape(header.shape().begin(), header.shape().end());
  const size_t esize = DTypeSize(variable.dtype());
  if (header.rows()) {
    const Shape& vs = variable.shape();
    if (vs.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          var, ": row push needs a 2-D variable, it is ", ShapeString(vs)));
    }
    if (header.num_rows() < 0 || shape.size() != 2 ||
        shape[0] != header.num_rows() || shape[1] != vs[1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          var, ": row gradient shape ", ShapeString(shape),
          " must be [num_rows=", header.num_rows(), ", ", vs[1], "]"));
    }
    const uint64_t per_row = 8 + static_cast<uint64_t>(vs[1]) * esize;
    if (static_cast<uint64_t>(header.num_rows()) >
        std::numeric_limits<uint64_t>::max() / per_row) {
      // The product would wrap (to a small size that could match).
      return absl::ResourceExhaustedError(absl::StrCat(
          var, ": a row push of ", header.num_rows(),
          " rows overflows a 64-bit byte count"));
    }
    const uint64_t expected =
        static_cast<uint64_t>(header.num_rows()) * per_row;
    if (static_cast<uint64_t>(header.payload_bytes()) != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          var, ": row push payload is ", header.payload_bytes(),
          " bytes, expected ", expected, " (", header.num_rows(),
          " int64 ids then the rows)"));
    }
  } else {
    if (shape != variable.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          var, " has shape ", ShapeString(variable.shape()),
          ", the gradient has shape ", ShapeString(shape)));
    }
    if (static_cast<uint64_t>(header.payload_bytes()) != variable.byte_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          var, ": gradient payload is ", header.payload_bytes(),
          " bytes, expected ", variable.byte_size()));
    }
  }
  return static_cast<uint64_t>(header.payload_bytes());
}

absl::StatusOr<PushOutcome> ApplyPush(const v1::PushHeader& header,
                                      Variable* variable, const char* data,
                                      size_t size) {
  const PushMeta meta = PushMetaFromTag(header.has_tag(), header.tag());
  if (header.rows()) {
    const size_t n = static_cast<size_t>(header.num_rows());
    std::vector<int64_t> ids(n);
    if (n > 0) std::memcpy(ids.data(), data, n * sizeof(int64_t));
    return variable->PushRows(meta, ids, data + n * sizeof(int64_t),
                              size - n * sizeof(int64_t));
  }
  return variable->PushDense(meta, data, size);
}

absl::StatusOr<uint64_t> ValidateAssignHeader(const v1::AssignHeader& header,
                                              const Variable& variable) {
  const std::string& name = header.name();
  auto dtype = DTypeFromProto(header.dtype());
  Shape shape(header.shape().begin(), header.shape().end());
  if (!dtype.ok() || *dtype != variable.dtype() || shape != variable.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", name, "' is ", DTypeName(variable.dtype()), " ",
        ShapeString(variable.shape()), ", the assigned value is ",
        dtype.ok() ? DTypeName(*dtype) : "invalid", " ", ShapeString(shape)));
  }
  if (static_cast<uint64_t>(header.payload_bytes()) != variable.byte_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", name, "': assigned payload is ", header.payload_bytes(),
        " bytes, expected ", variable.byte_size()));
  }
  return static_cast<uint64_t>(header.payload_bytes());
}

absl::StatusOr<std::vector<std::shared_ptr<Variable>>>
ValidatePushVariablesHeader(const v1::PushVariablesHeader& header,
                            const ParameterStore& store,
                            uint64_t* payload_bytes) {
  std::vector<std::shared_ptr<Variable>> variables;
  uint64_t total = 0;
  for (const v1::VariableSlot& slot : header.variables()) {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Variable> v, store.Get(slot.name()));
    if (slot.has_base_version() && slot.base_version() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient for variable '", slot.name(), "': base_version must be "
          ">= 0, got ", slot.base_version()));
    }
    auto dtype = DTypeFromProto(slot.dtype());
    Shape shape(slot.shape().begin(), slot.shape().end());
    const absl::StatusOr<GradientEncoding> encoding =
        GradientEncodingFromProto(slot.encoding());
    if (!encoding.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient for variable '", slot.name(), "': ",
                       encoding.status().message()));
    }
    if (*encoding != GradientEncoding::kNone &&
        v->dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient for variable '", slot.name(), "' is encoded as ",
          GradientEncodingName(*encoding), ", but the variable is ",
          DTypeName(v->dtype()), " (only float32 gradients are encoded)"));
    }
    const uint64_t wire =
        *encoding == GradientEncoding::kNone
            ? v->byte_size()
            : EncodedBytes(*encoding, NumElements(v->shape()));
    if (!dtype.ok() || *dtype != v->dtype() || shape != v->shape() ||
        static_cast<uint64_t>(slot.bytes()) != wire) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable '", slot.name(), "' is ", DTypeName(v->dtype()), " ",
          ShapeString(v->shape()), " (", wire, " bytes",
          *encoding == GradientEncoding::kNone
              ? ""
              : absl::StrCat(" as ", GradientEncodingName(*encoding)),
          "), the gradient is ", dtype.ok() ? DTypeName(*dtype) : "invalid",
          " ", ShapeString(shape), " (", slot.bytes(), " bytes)"));
    }
    total += wire;
    variables.push_back(std::move(v));
  }
  if (static_cast<uint64_t>(header.payload_bytes()) != total) {
    return absl::InvalidArgumentError(
        absl::StrCat("PushVariables: payload is ", header.payload_bytes(),
                     " bytes, the variables need ", total));
  }
  *payload_bytes = total;
  return variables;
}

PushGradients::PushGradients(
    const v1::PushVariablesHeader& header,
    const std::vector<std::shared_ptr<Variable>>& variables, const char* data,
    size_t size)
    : data_(data),
      size_(size),
      meta_(PushMetaFromTag(header.has_tag(), header.tag())),
      parts_(variables.size()),
      grads_(variables.size()) {
  // Encoded gradients are decoded into float32 (one buffer for all of
  // them); the others are read where they arrive.
  size_t decoded_elems = 0;
  for (size_t i = 0; i < variables.size(); ++i) {
    if (header.variables(static_cast<int>(i)).encoding() !=
        v1::GRADIENT_ENCODING_NONE) {
      decoded_elems += NumElements(variables[i]->shape());
    }
  }
  // At least one element: a gradient pointer is never null, even for
  // variables of no elements (a null dense gradient means a row push).
  decoded_.reset(new float[std::max<size_t>(decoded_elems, 1)]);
  size_t offset = 0;
  size_t at = 0;
  for (size_t i = 0; i < variables.size(); ++i) {
    const v1::VariableSlot& slot = header.variables(static_cast<int>(i));
    const Variable& v = *variables[i];
    Part& part = parts_[i];
    part.offset = offset;
    part.wire = static_cast<size_t>(slot.bytes());
    part.n = static_cast<int64_t>(NumElements(v.shape()));
    part.what = absl::StrCat("gradient for variable '", v.name(), "'");
    part.meta = meta_;
    if (slot.has_base_version()) part.meta.base_version = slot.base_version();
    part.variable = variables[i].get();
    if (error_.ok() && offset + part.wire > size) {
      error_ = absl::InvalidArgumentError(absl::StrCat(
          "PushVariables: payload of ", size, " bytes ends inside variable '",
          slot.name(), "'"));
    }
    part.encoded = slot.encoding() != v1::GRADIENT_ENCODING_NONE;
    if (part.encoded) {
      part.encoding = *GradientEncodingFromProto(slot.encoding());
      part.wire_elem = EncodedBytes(part.encoding, 1);
      part.dtype = DType::kFloat32;
      part.elem = sizeof(float);
      grads_[i] = reinterpret_cast<const char*>(decoded_.get() + at);
      at += static_cast<size_t>(part.n);
    } else {
      part.dtype = v.dtype();
      part.elem = DTypeSize(v.dtype());
      part.wire_elem = part.elem;
      grads_[i] = data != nullptr
                      ? data + offset
                      : reinterpret_cast<const char*>(decoded_.get());
      // A gradient that does not start at a multiple of its element size
      // in the payload (a float64 after an odd count of 16-bit or 32-bit
      // elements) is copied out to an aligned buffer of its own as it
      // arrives: the check and the optimizer read it as its type.
      if (part.elem > 1 &&
          reinterpret_cast<uintptr_t>(grads_[i]) % part.elem != 0) {
        part.copied = true;
        part.aligned.reset(
            new uint64_t[std::max<size_t>(1, (part.wire + 7) / 8)]);
        grads_[i] = reinterpret_cast<const char*>(part.aligned.get());
      }
    }
    // The tag against every variable's update mode, as the whole push is
    // judged: in the header's order, before the variable's gradient.
    if (bad_meta_ < 0) {
      absl::Status s = v.CheckPushMeta(meta_);
      if (!s.ok()) {
        bad_meta_ = static_cast<int>(i);
        meta_error_ = s;
      }
    }
    offset += part.wire;
  }
}

absl::Status PushGradients::Advance(size_t received) {
  if (!error_.ok()) return error_;
  received = std::min(received, size_);
  // Variables after one whose tag does not fit are not judged.
  const size_t limit =
      bad_meta_ < 0 ? parts_.size() : static_cast<size_t>(bad_meta_);
  bool all_done = true;
  for (size_t i = 0; i < limit; ++i) {
    Part& part = parts_[i];
    const int64_t avail =
        received <= part.offset || part.wire_elem == 0
            ? 0
            : std::min<int64_t>(part.n, static_cast<int64_t>(
                                            (received - part.offset) /
                                            part.wire_elem));
    if (avail > part.done) {
      const int64_t count = avail - part.done;
      char* grad = const_cast<char*>(grads_[i]);
      const char* wire =
          data_ + part.offset + static_cast<size_t>(part.done) * part.wire_elem;
      if (part.encoded) {
        DecodeToFloat32(part.encoding, wire, static_cast<size_t>(count),
                        reinterpret_cast<float*>(grad) + part.done);
      } else if (part.copied) {
        std::memcpy(grad + static_cast<size_t>(part.done) * part.elem, wire,
                    static_cast<size_t>(count) * part.elem);
      }
      if (!CheckFinite(part.dtype,
                       grad + static_cast<size_t>(part.done) * part.elem,
                       count, part.what)
               .ok()) {
        // Judged again from the start, to name the element as a whole
        // check does.
        error_ = CheckFinite(part.dtype, grad, avail, part.what);
        for (Part& p : parts_) p.staged.reset();
        return error_;
      }
      // A push whose tag does not fit some variable fails whole: nothing
      // of it is staged.
      if (stage_pool_ != nullptr && bad_meta_ < 0) {
        if (part.done == 0) {
          part.staged = part.variable->StageDense(part.meta, stage_pool_,
                                                  stage_max_bytes_);
        }
        if (part.staged != nullptr) part.staged->Apply(grad, avail);
      }
      part.done = avail;
    }
    all_done = all_done && part.done == part.n;
  }
  if (all_done && bad_meta_ >= 0) error_ = meta_error_;
  return error_;
}

absl::StatusOr<v1::PushVariablesResponse> ApplyCheckedPushVariables(
    const v1::PushVariablesHeader& header,
    const std::vector<std::shared_ptr<Variable>>& variables,
    const PushGradients& gradients, ParameterStore* store) {
  v1::PushVariablesResponse resp;
  for (size_t i = 0; i < variables.size(); ++i) {
    const auto& v = variables[i];
    STRATA_ASSIGN_OR_RETURN(
        PushOutcome outcome,
        v->PushCheckedDense(gradients.meta(i), gradients.grads()[i],
                            gradients.staged(i)));
    store->RecordPush(outcome, static_cast<int64_t>(gradients.wire_bytes(i)));
    v1::PushResponse* r = resp.add_results();
    r->set_version(outcome.version);
    r->set_duplicate(outcome.duplicate);
    r->set_applied(outcome.applied);
  }
  return resp;
}

absl::StatusOr<v1::PushVariablesResponse> ApplyPushVariables(
    const v1::PushVariablesHeader& header,
    const std::vector<std::shared_ptr<Variable>>& variables, const char* data,
    size_t size, ParameterStore* store) {
  PushGradients gradients(header, variables, data, size);
  STRATA_RETURN_IF_ERROR(gradients.Advance(size));
  return ApplyCheckedPushVariables(header, variables, gradients, store);
}

absl::Status ValidatePullRequest(const v1::PullRequest& request) {
  if (request.min_version() < 0 || request.clock() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Pull of variable '", request.name(),
                     "': min_version and clock must be >= 0"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePullVariablesRequest(
    const v1::PullVariablesRequest& request) {
  if (request.min_version() < 0 || request.clock() < 0) {
    return absl::InvalidArgumentError(
        "PullVariables: min_version and clock must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<VariableSnapshot> ReadPull(const v1::PullRequest& request,
                                          const Variable& variable,
                                          uint64_t max_bytes) {
  if (request.rows()) {
    const uint64_t row_bytes =
        static_cast<uint64_t>(variable.row_width()) * DTypeSize(variable.dtype());
    const uint64_t ids = static_cast<uint64_t>(request.row_ids_size());
    if (variable.shape().size() == 2 && row_bytes > 0 &&
        ids > max_bytes / row_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "Pull of variable '", request.name(), "': ", ids, " rows of ",
          row_bytes, " bytes are above the server limit of ", max_bytes,
          " bytes"));
    }
    return variable.ReadRows(request.row_ids());
  }
  return variable.Snapshot();
}

v1::PullHeader MakePullHeader(const VariableSnapshot& snapshot) {
  v1::PullHeader header;
  header.set_dtype(DTypeToProto(snapshot.dtype));
  for (int64_t d : snapshot.shape) header.add_shape(d);
  header.set_version(snapshot.version);
  header.set_payload_bytes(static_cast<int64_t>(snapshot.value->size()));
  return header;
}

v1::PullVariablesHeader MakePullVariablesPayload(
    const std::vector<std::shared_ptr<Variable>>& variables,
    std::vector<std::shared_ptr<const Buffer>>* buffers) {
  v1::PullVariablesHeader header;
  int64_t total = 0;
  for (const auto& v : variables) {
    VariableSnapshot snap = v->Snapshot();
    v1::VariableSlot* slot = header.add_variables();
    slot->set_name(v->name());
    slot->set_dtype(DTypeToProto(snap.dtype));
    for (int64_t d : snap.shape) slot->add_shape(d);
    slot->set_bytes(static_cast<int64_t>(snap.value->size()));
    slot->set_version(snap.version);
    total += static_cast<int64_t>(snap.value->size());
    buffers->push_back(std::move(snap.value));
  }
  header.set_payload_bytes(total);
  return header;
}

}  // namespace strata
