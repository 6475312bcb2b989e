#include "coordinator/etcd_client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "rpc/grpc_status.h"

namespace strata {

std::unique_ptr<EtcdClient> EtcdClient::Connect(const std::string& endpoints,
                                                absl::Duration deadline) {
  return std::unique_ptr<EtcdClient>(new EtcdClient(endpoints, deadline));
}

EtcdClient::EtcdClient(std::string endpoints, absl::Duration deadline)
    : endpoints_(std::move(endpoints)), deadline_(deadline) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A refused connection makes the channel re-resolve its target; gRPC's
  // default cool-down between resolutions held a client made before etcd
  // listened (or across an etcd restart) unconnected for ~10 s.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 100);
  for (absl::string_view one :
       absl::StrSplit(endpoints_, ',', absl::SkipWhitespace())) {
    auto channel = grpc::CreateCustomChannel(
        std::string(absl::StripAsciiWhitespace(one)),
        grpc::InsecureChannelCredentials(), args);
    kv_.push_back(etcdserverpb::KV::NewStub(channel));
    lease_.push_back(etcdserverpb::Lease::NewStub(channel));
  }
}

template <typename Fn>
absl::Status EtcdClient::Call(const char* method, Fn fn) {
  if (kv_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd ", method, ": no endpoint in '", endpoints_, "'"));
  }
  absl::Status status;
  for (size_t tried = 0; tried < kv_.size(); ++tried) {
    const size_t index = current_.load() % kv_.size();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     absl::ToChronoMilliseconds(deadline_));
    status = FromGrpcStatus(fn(&ctx, index));
    if (status.code() != absl::StatusCode::kUnavailable &&
        status.code() != absl::StatusCode::kDeadlineExceeded) {
      break;
    }
    size_t expected = index;
    current_.compare_exchange_strong(expected, (index + 1) % kv_.size());
  }
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("etcd ", method, " (", endpoints_,
                                   "): ", status.message()));
}

absl::StatusOr<std::optional<EtcdKeyValue>> EtcdClient::Get(
    const std::string& key) {
  etcdserverpb::RangeRequest req;
  req.set_key(key);
  etcdserverpb::RangeResponse resp;
  absl::Status s = Call("Range", [&](grpc::ClientContext* ctx, size_t i) {
    return kv_[i]->Range(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  if (resp.kvs_size() == 0) return std::optional<EtcdKeyValue>();
  const etcdserverpb::KeyValue& kv = resp.kvs(0);
  EtcdKeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.lease = kv.lease();
  return std::optional<EtcdKeyValue>(std::move(out));
}

absl::StatusOr<int64_t> EtcdClient::Put(const std::string& key,
                                        const std::string& value,
                                        int64_t lease) {
  etcdserverpb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  etcdserverpb::PutResponse resp;
  absl::Status s = Call("Put", [&](grpc::ClientContext* ctx, size_t i) {
    return kv_[i]->Put(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return resp.header().revision();
}

absl::StatusOr<int64_t> EtcdClient::Delete(const std::string& key) {
  etcdserverpb::DeleteRangeRequest req;
  req.set_key(key);
  etcdserverpb::DeleteRangeResponse resp;
  absl::Status s = Call("DeleteRange", [&](grpc::ClientContext* ctx, size_t i) {
    return kv_[i]->DeleteRange(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return resp.deleted();
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(
    const etcdserverpb::TxnRequest& request) {
  etcdserverpb::TxnResponse resp;
  absl::Status s = Call("Txn", [&](grpc::ClientContext* ctx, size_t i) {
    return kv_[i]->Txn(ctx, request, &resp);
  });
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<EtcdLease> EtcdClient::GrantLease(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(
                                       ttl, absl::Seconds(1)))));
  etcdserverpb::LeaseGrantResponse resp;
  absl::Status s = Call("LeaseGrant", [&](grpc::ClientContext* ctx, size_t i) {
    return lease_[i]->LeaseGrant(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  if (!resp.error().empty()) {
    return absl::UnavailableError(
        absl::StrCat("etcd LeaseGrant: ", resp.error()));
  }
  return EtcdLease{resp.id(), resp.ttl()};
}

absl::StatusOr<int64_t> EtcdClient::KeepAliveOnce(int64_t lease) {
  // etcd renews leases on a stream only: one request, one answer.
  etcdserverpb::LeaseKeepAliveResponse resp;
  bool got = false;
  absl::Status s =
      Call("LeaseKeepAlive", [&](grpc::ClientContext* ctx, size_t i) {
        auto stream = lease_[i]->LeaseKeepAlive(ctx);
        etcdserverpb::LeaseKeepAliveRequest req;
        req.set_id(lease);
        if (stream->Write(req)) {
          stream->WritesDone();
          got = stream->Read(&resp);
        }
        ctx->TryCancel();
        grpc::Status finished = stream->Finish();
        if (got) return grpc::Status::OK;
        return finished.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                            "the stream ended with no answer")
                             : finished;
      });
  if (!s.ok()) return s;
  return resp.ttl();
}

absl::Status EtcdClient::RevokeLease(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseRevokeResponse resp;
  return Call("LeaseRevoke", [&](grpc::ClientContext* ctx, size_t i) {
    return lease_[i]->LeaseRevoke(ctx, req, &resp);
  });
}

etcdserverpb::Compare CreateRevisionIs(const std::string& key,
                                       int64_t revision) {
  etcdserverpb::Compare c;
  c.set_result(etcdserverpb::Compare::EQUAL);
  c.set_target(etcdserverpb::Compare::CREATE);
  c.set_key(key);
  c.set_create_revision(revision);
  return c;
}

etcdserverpb::RequestOp PutOp(const std::string& key, const std::string& value,
                              int64_t lease) {
  etcdserverpb::RequestOp op;
  etcdserverpb::PutRequest* put = op.mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  return op;
}

etcdserverpb::RequestOp GetOp(const std::string& key) {
  etcdserverpb::RequestOp op;
  op.mutable_request_range()->set_key(key);
  return op;
}

}  // namespace strata
