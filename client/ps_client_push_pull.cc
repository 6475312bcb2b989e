// PsClient: the streamed data calls (Pull, PullRows, PullVariables, Push,
// PushRows, PushVariables, Assign), each retried on UNAVAILABLE. The chunk
// streams themselves are in ps_client_streams.cc.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "client/ps_client_streams.h"
#include "proto/gradient_encoding_proto.h"

namespace strata {
namespace {

constexpr char kPushMethod[] = "/strata.v1.ParameterService/Push";
constexpr char kAssignMethod[] = "/strata.v1.ParameterService/Assign";
constexpr char kPushVariablesMethod[] =
    "/strata.v1.ParameterService/PushVariables";

// Row ids per pull request, keeping requests far below gRPC's 4 MiB limit.
constexpr size_t kMaxIdsPerPull = 256 * 1024;

v1::PullRequest PullRequestFor(const std::string& name,
                               const PullOptions& options) {
  v1::PullRequest req;
  req.set_name(name);
  req.set_min_version(options.min_version);
  req.set_clock(options.clock);
  req.set_worker(options.worker);
  return req;
}

PushResult PushResultOf(const v1::PushResponse& resp, int attempts) {
  PushResult r;
  r.version = resp.version();
  r.duplicate = resp.duplicate();
  r.applied = resp.applied();
  r.attempts = attempts;
  return r;
}

}  // namespace

absl::StatusOr<PullResult> PsClient::PullWithRetries(
    const v1::PullRequest& request, void* dst, size_t dst_bytes,
    std::shared_ptr<Buffer>* alloc) {
  return retrier_.Run([&](int) {
    return PullChunks(*Next().generic, options_.deadline, request, dst,
                      dst_bytes, alloc);
  });
}

absl::StatusOr<PullResult> PsClient::Pull(const std::string& name, void* dst,
                                          size_t dst_bytes,
                                          const PullOptions& options) {
  return PullWithRetries(PullRequestFor(name, options), dst, dst_bytes,
                         nullptr);
}

absl::StatusOr<Tensor> PsClient::PullTensor(const std::string& name,
                                            const PullOptions& options,
                                            int64_t* version) {
  std::shared_ptr<Buffer> buffer;
  absl::StatusOr<PullResult> result =
      PullWithRetries(PullRequestFor(name, options), nullptr, 0, &buffer);
  if (!result.ok()) return result.status();
  if (version != nullptr) *version = result->version;
  Tensor t;
  t.dtype = result->dtype;
  t.shape = result->shape;
  t.buffer = std::move(buffer);
  return t;
}

absl::StatusOr<PullResult> PsClient::PullRows(const std::string& name,
                                              absl::Span<const int64_t> ids,
                                              void* dst, size_t dst_bytes,
                                              const PullOptions& options) {
  if (ids.empty()) {
    // Still ask the server, so an unknown or non-2-D variable is reported.
  } else if (dst_bytes % ids.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull rows of '", name, "': destination of ", dst_bytes,
        " bytes is not a whole number of ", ids.size(), " rows"));
  }
  const size_t row_bytes = ids.empty() ? 0 : dst_bytes / ids.size();
  PullResult total;
  size_t done = 0;
  do {
    size_t n = std::min(kMaxIdsPerPull, ids.size() - done);
    v1::PullRequest req = PullRequestFor(name, options);
    req.set_rows(true);
    req.mutable_row_ids()->Add(ids.begin() + done, ids.begin() + done + n);
    absl::StatusOr<PullResult> result = PullWithRetries(
        req, static_cast<char*>(dst) + done * row_bytes, n * row_bytes,
        nullptr);
    if (!result.ok()) return result.status();
    if (done == 0) {
      total = *result;
    }
    done += n;
  } while (done < ids.size());
  if (!total.shape.empty()) total.shape[0] = static_cast<int64_t>(ids.size());
  return total;
}

absl::StatusOr<std::string> PsClient::UploadTagged(
    const char* method, const google::protobuf::MessageLite& header,
    v1::PushTag* tag, absl::Span<const absl::string_view> payload,
    int* attempts) {
  return retrier_.Run([&](int attempt) {
    *attempts = attempt;
    // A retry carries a new attempt id and the same (job, worker, step):
    // the server applies the push at most once.
    tag->set_attempt(attempt - 1);
    return UploadChunks(*Next().generic, method, options_.deadline,
                        header.SerializeAsString(), payload,
                        options_.chunk_bytes);
  });
}

absl::StatusOr<PushResult> PsClient::PushPayload(
    const std::string& name, v1::PushHeader header,
    std::vector<absl::string_view> payload) {
  int64_t bytes = 0;
  for (auto p : payload) bytes += static_cast<int64_t>(p.size());
  header.set_name(name);
  header.set_payload_bytes(bytes);
  int attempts = 0;
  absl::StatusOr<std::string> raw = UploadTagged(
      kPushMethod, header, header.mutable_tag(), payload, &attempts);
  if (!raw.ok()) return raw.status();
  v1::PushResponse resp;
  if (!resp.ParseFromString(*raw)) {
    return absl::InternalError("push: the response is not a PushResponse");
  }
  return PushResultOf(resp, attempts);
}

absl::StatusOr<PushResult> PsClient::Push(const std::string& name, DType dtype,
                                          const Shape& shape, const void* data,
                                          const PushTag& tag) {
  v1::PushHeader header;
  header.set_dtype(static_cast<v1::DType>(dtype));
  for (int64_t d : shape) header.add_shape(d);
  *header.mutable_tag() = ToProto(tag);
  size_t bytes = NumElements(shape) * DTypeSize(dtype);
  return PushPayload(
      name, std::move(header),
      {absl::string_view(static_cast<const char*>(data), bytes)});
}

absl::StatusOr<PushResult> PsClient::PushRows(const std::string& name,
                                              DType dtype,
                                              absl::Span<const int64_t> ids,
                                              int64_t row_width,
                                              const void* values,
                                              const PushTag& tag) {
  v1::PushHeader header;
  header.set_dtype(static_cast<v1::DType>(dtype));
  header.add_shape(static_cast<int64_t>(ids.size()));
  header.add_shape(row_width);
  header.set_rows(true);
  header.set_num_rows(static_cast<int64_t>(ids.size()));
  *header.mutable_tag() = ToProto(tag);
  size_t value_bytes = ids.size() * row_width * DTypeSize(dtype);
  return PushPayload(
      name, std::move(header),
      {absl::string_view(reinterpret_cast<const char*>(ids.data()),
                         ids.size() * sizeof(int64_t)),
       absl::string_view(static_cast<const char*>(values), value_bytes)});
}

absl::StatusOr<std::vector<int64_t>> PsClient::PullVariables(
    const std::vector<std::string>& names, const std::vector<void*>& dsts,
    const std::vector<size_t>& sizes, const PullOptions& options) {
  if (names.size() != dsts.size() || names.size() != sizes.size()) {
    return absl::InvalidArgumentError(
        "PullVariables: names, destinations and sizes differ in count");
  }
  v1::PullVariablesRequest req;
  for (const auto& n : names) req.add_names(n);
  req.set_min_version(options.min_version);
  req.set_clock(options.clock);
  req.set_worker(options.worker);
  return retrier_.Run([&](int) {
    return PullVariablesChunks(*Next().generic, options_.deadline, req, dsts,
                               sizes);
  });
}

PsClient::PreparedPush PsClient::PreparePush(
    const std::vector<std::string>& names, DType dtype,
    const std::vector<Shape>& shapes, const std::vector<const void*>& data,
    const PushTag& tag) {
  PreparedPush push;
  const bool encode = feedback_ != nullptr && dtype == DType::kFloat32;
  const v1::GradientEncoding wire_encoding =
      encode ? GradientEncodingToProto(feedback_->encoding())
             : v1::GRADIENT_ENCODING_NONE;
  int64_t total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const size_t n = NumElements(shapes[i]);
    const size_t bytes =
        encode ? EncodedBytes(feedback_->encoding(), n) : n * DTypeSize(dtype);
    v1::VariableSlot* slot = push.header.add_variables();
    slot->set_name(names[i]);
    slot->set_dtype(static_cast<v1::DType>(dtype));
    for (int64_t d : shapes[i]) slot->add_shape(d);
    slot->set_bytes(static_cast<int64_t>(bytes));
    slot->set_encoding(wire_encoding);
    if (i < tag.base_versions.size() && tag.base_versions[i] >= 0) {
      slot->set_base_version(tag.base_versions[i]);
    }
    if (encode) {
      push.owned.emplace_back(new char[std::max<size_t>(bytes, 1)]);
      feedback_->Encode(names[i], static_cast<const float*>(data[i]), n,
                        push.owned.back().get());
      push.payload.emplace_back(push.owned.back().get(), bytes);
    } else {
      push.payload.emplace_back(static_cast<const char*>(data[i]), bytes);
    }
    total += static_cast<int64_t>(bytes);
  }
  push.header.set_payload_bytes(total);
  *push.header.mutable_tag() = ToProto(tag);
  return push;
}

absl::StatusOr<std::vector<PushResult>> PsClient::PushPrepared(
    PreparedPush* push) {
  int attempts = 0;
  absl::StatusOr<std::string> raw =
      UploadTagged(kPushVariablesMethod, push->header,
                   push->header.mutable_tag(), push->payload, &attempts);
  if (!raw.ok()) return raw.status();
  v1::PushVariablesResponse resp;
  if (!resp.ParseFromString(*raw) ||
      resp.results_size() != push->header.variables_size()) {
    return absl::InternalError(
        "PushVariables: the response is not a PushVariablesResponse");
  }
  std::vector<PushResult> out;
  for (const auto& r : resp.results()) out.push_back(PushResultOf(r, attempts));
  return out;
}

absl::StatusOr<std::vector<PushResult>> PsClient::PushVariables(
    const std::vector<std::string>& names, DType dtype,
    const std::vector<Shape>& shapes, const std::vector<const void*>& data,
    const PushTag& tag) {
  if (names.size() != shapes.size() || names.size() != data.size()) {
    return absl::InvalidArgumentError(
        "PushVariables: names, shapes and data differ in count");
  }
  PreparedPush push = PreparePush(names, dtype, shapes, data, tag);
  return PushPrepared(&push);
}

absl::StatusOr<int64_t> PsClient::Assign(const std::string& name, DType dtype,
                                         const Shape& shape,
                                         const void* data) {
  v1::AssignHeader header;
  header.set_name(name);
  header.set_dtype(static_cast<v1::DType>(dtype));
  for (int64_t d : shape) header.add_shape(d);
  size_t bytes = NumElements(shape) * DTypeSize(dtype);
  header.set_payload_bytes(static_cast<int64_t>(bytes));
  const std::string header_bytes = header.SerializeAsString();
  const absl::string_view payload[] = {
      absl::string_view(static_cast<const char*>(data), bytes)};
  absl::StatusOr<std::string> raw = retrier_.Run([&](int) {
    return UploadChunks(*Next().generic, kAssignMethod, options_.deadline,
                        header_bytes, payload, options_.chunk_bytes);
  });
  if (!raw.ok()) return raw.status();
  v1::AssignResponse resp;
  if (!resp.ParseFromString(*raw)) {
    return absl::InternalError("assign: the response is not an AssignResponse");
  }
  return resp.version();
}

}  // namespace strata
