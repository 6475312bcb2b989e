// Same-host shared-memory exchange with the parameter server
// (AttachSharedRegion, ExchangeShared, DetachSharedRegion, MirrorVariables,
// ServeSharedRegion's doorbell and PsCluster::PullLatest): in-process
// servers on 127.0.0.1:0 driven through PsClient, PsCluster, raw stubs and
// doorbells rung by hand, and SharedRegionTable on its own with the time
// injected.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "client/ps_cluster.h"
#include "client/shared_region.h"
#include "common/fd_closer.h"
#include "common/futex.h"
#include "common/shared_layout.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/server_interceptor.h"
#include "gtest/gtest.h"
#include "rpc/auth.h"
#include "rpc/grpc_status.h"
#include "server/ps_server.h"
#include "server/shared_regions.h"
#include "server/variable.h"
#include "strategies/partitioner.h"
#include "tests/test_util.h"

namespace strata {
namespace {

// Region layout the tests use: gradients at kPushOffset, values pulled at
// kPullOffset (both past SharedRegion::kHeaderBytes).
constexpr uint64_t kPushOffset = 64;
constexpr uint64_t kPullOffset = 1024;
constexpr size_t kRegionBytes = 4096;

v1::VariableSpec Spec(const std::string& name, const Shape& shape,
                      const std::string& initializer = "ones") {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_type(initializer);
  spec.mutable_initializer()->set_seed(7);
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.1);
  return spec;
}

PsClientOptions ClientOptions() {
  PsClientOptions options;
  options.deadline = absl::Seconds(20);
  options.max_attempts = 1;
  return options;
}

// Calls `method` answered with `code` (the server's own accounting).
double RpcCount(PsServer* server, const std::string& method,
                const std::string& code = "OK") {
  return server->metrics()
      ->GetCounter("strata_ps_rpcs_total", "RPCs handled",
                   {{"method", method}, {"code", code}})
      ->value();
}

// An ExchangeShared request pushing float32 [n] variable `name` (gradient
// at kPushOffset) with `tag`, then pulling `pull` at kPullOffset.
v1::SharedExchangeRequest Exchange(uint64_t region, const std::string& name,
                                   int64_t n, const PushTag& tag,
                                   const std::vector<std::string>& pull) {
  v1::SharedExchangeRequest request;
  request.set_region(region);
  if (!name.empty()) {
    v1::PushVariablesHeader* push = request.mutable_push();
    v1::VariableSlot* slot = push->add_variables();
    slot->set_name(name);
    slot->set_dtype(v1::DT_FLOAT32);
    slot->add_shape(n);
    slot->set_bytes(n * 4);
    push->set_payload_bytes(n * 4);
    push->mutable_tag()->set_job(tag.job);
    push->mutable_tag()->set_worker(tag.worker);
    push->mutable_tag()->set_step(tag.step);
    request.set_push_offset(kPushOffset);
  }
  for (const std::string& p : pull) request.mutable_pull()->add_names(p);
  request.set_pull_offset(kPullOffset);
  return request;
}

void WriteFloats(SharedRegion* region, uint64_t offset,
                 const std::vector<float>& values) {
  std::memcpy(region->data() + offset, values.data(),
              values.size() * sizeof(float));
}

std::vector<float> ReadFloats(const SharedRegion& region, uint64_t offset,
                              size_t n) {
  std::vector<float> out(n);
  std::memcpy(out.data(), region.data() + offset, n * sizeof(float));
  return out;
}

std::unique_ptr<SharedRegion> NewRegion() {
  auto region = SharedRegion::Create(kRegionBytes);
  EXPECT_TRUE(region.ok()) << region.status();
  return region.ok() ? *std::move(region) : nullptr;
}

// One PS on 127.0.0.1:0 with float32 [4] variable "w" (ones, SGD 0.1), a
// client and a region the client attached.
class SharedExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = PsServer::Start(PsServerOptions{}, &logger_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    client_ = PsClient::Connect(server_->address(), ClientOptions());
    ASSERT_TRUE(client_->TargetIsLoopback());
    STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {4})));
    auto region = SharedRegion::Create(kRegionBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
    auto id = client_->AttachSharedRegion(*region_);
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = *id;
    ASSERT_NE(id_, 0u);
  }

  // Pulls "w" over the streaming path; its version in `*version`.
  std::vector<float> PullW(int64_t* version) {
    std::vector<float> out(4);
    auto r = client_->Pull("w", out.data(), out.size() * sizeof(float));
    EXPECT_TRUE(r.ok()) << r.status();
    *version = r.ok() ? r->version : -1;
    return out;
  }

  // Asserts that "w" still holds its initial ones at version 0.
  void ExpectWUnchanged() {
    int64_t version = -1;
    EXPECT_EQ(PullW(&version), std::vector<float>(4, 1.0f));
    EXPECT_EQ(version, 0);
  }

  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::unique_ptr<PsServer> server_;
  std::unique_ptr<PsClient> client_;
  std::unique_ptr<SharedRegion> region_;
  uint64_t id_ = 0;
};

TEST_F(SharedExchangeTest, PushThenPullGoesThroughTheRegion) {
  WriteFloats(region_.get(), kPushOffset, {1, 2, 3, 4});
  auto resp =
      client_->ExchangeShared(Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"}));
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->push().results_size(), 1);
  EXPECT_FALSE(resp->push().results(0).duplicate());
  EXPECT_TRUE(resp->push().results(0).applied());
  EXPECT_EQ(resp->push().results(0).version(), 1);
  ASSERT_EQ(resp->pulled_size(), 1);
  EXPECT_EQ(resp->pulled(0).name(), "w");
  EXPECT_EQ(resp->pulled(0).version(), 1);
  EXPECT_EQ(resp->pulled(0).bytes(), 16);
  const std::vector<float> got = ReadFloats(*region_, kPullOffset, 4);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(got[i], 1.0f - 0.1f * (i + 1));
  // The nonce at the region's start is untouched.
  EXPECT_EQ(std::string(region_->data(), 16), region_->nonce());
}

TEST_F(SharedExchangeTest, SameTagTwiceIsAppliedOnce) {
  WriteFloats(region_.get(), kPushOffset, {1, 1, 1, 1});
  const v1::SharedExchangeRequest request =
      Exchange(id_, "w", 4, PushTag{"j", 3, 5}, {"w"});
  auto first = client_->ExchangeShared(request);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->push().results_size(), 1);
  EXPECT_FALSE(first->push().results(0).duplicate());
  EXPECT_EQ(first->push().results(0).version(), 1);
  const std::vector<float> after_first = ReadFloats(*region_, kPullOffset, 4);
  EXPECT_FLOAT_EQ(after_first[0], 0.9f);

  std::memset(region_->data() + kPullOffset, 0, 16);
  auto second = client_->ExchangeShared(request);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->push().results_size(), 1);
  EXPECT_TRUE(second->push().results(0).duplicate());
  EXPECT_EQ(second->push().results(0).version(), 1);
  ASSERT_EQ(second->pulled_size(), 1);
  EXPECT_EQ(second->pulled(0).version(), 1);
  EXPECT_EQ(ReadFloats(*region_, kPullOffset, 4), after_first);

  int64_t version = -1;
  EXPECT_EQ(PullW(&version), after_first);
  EXPECT_EQ(version, 1);
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pushes_applied(), 1);
  EXPECT_EQ(stats->pushes_duplicate(), 1);
}

TEST_F(SharedExchangeTest, NanGradientIsInvalidAndChangesNothing) {
  WriteFloats(region_.get(), kPushOffset,
              {1, std::numeric_limits<float>::quiet_NaN(), 1, 1});
  EXPECT_THAT(
      client_->ExchangeShared(Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"})),
      StatusIs(absl::StatusCode::kInvalidArgument));
  WriteFloats(region_.get(), kPushOffset,
              {1, std::numeric_limits<float>::infinity(), 1, 1});
  EXPECT_THAT(
      client_->ExchangeShared(Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"})),
      StatusIs(absl::StatusCode::kInvalidArgument));
  ExpectWUnchanged();
}

TEST_F(SharedExchangeTest, UnknownPulledVariableIsNotFoundAndPushIsNotApplied) {
  WriteFloats(region_.get(), kPushOffset, {1, 1, 1, 1});
  EXPECT_THAT(client_->ExchangeShared(
                  Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w", "nope"})),
              StatusIs(absl::StatusCode::kNotFound));
  ExpectWUnchanged();
  // The refused push left no trace: the same tag is applied afterwards.
  auto resp =
      client_->ExchangeShared(Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {}));
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->push().results_size(), 1);
  EXPECT_FALSE(resp->push().results(0).duplicate());
  EXPECT_EQ(resp->push().results(0).version(), 1);
  EXPECT_EQ(resp->pulled_size(), 0);
}

TEST_F(SharedExchangeTest, UnknownPushedVariableIsNotFound) {
  EXPECT_THAT(client_->ExchangeShared(
                  Exchange(id_, "nope", 4, PushTag{"j", 0, 1}, {"w"})),
              StatusIs(absl::StatusCode::kNotFound));
  ExpectWUnchanged();
}

TEST_F(SharedExchangeTest, OffsetsOutsideTheRegionOrInTheNonceAreInvalid) {
  WriteFloats(region_.get(), kPushOffset, {1, 1, 1, 1});
  struct Case {
    const char* what;
    uint64_t push_offset;
    uint64_t pull_offset;
  };
  const Case cases[] = {
      {"push at the nonce", 0, kPullOffset},
      {"push inside the nonce", 8, kPullOffset},
      {"push straddling the end", kRegionBytes - 8, kPullOffset},
      {"push past the end", kRegionBytes + 64, kPullOffset},
      {"push at 2^64 - 8", std::numeric_limits<uint64_t>::max() - 7,
       kPullOffset},
      {"pull at the nonce", kPushOffset, 0},
      {"pull inside the nonce", kPushOffset, 15},
      {"pull straddling the end", kPushOffset, kRegionBytes - 8},
      {"pull past the end", kPushOffset, kRegionBytes},
      {"pull at 2^64 - 8", kPushOffset,
       std::numeric_limits<uint64_t>::max() - 7},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::SharedExchangeRequest request =
        Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"});
    request.set_push_offset(c.push_offset);
    request.set_pull_offset(c.pull_offset);
    EXPECT_THAT(client_->ExchangeShared(request),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    "do not lie inside the shared region"));
  }
  // A pull-only exchange at the nonce is refused too (nothing overwritten).
  v1::SharedExchangeRequest pull_only = Exchange(id_, "", 0, {}, {"w"});
  pull_only.set_pull_offset(0);
  EXPECT_THAT(client_->ExchangeShared(pull_only),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(std::string(region_->data(), 16), region_->nonce());
  ExpectWUnchanged();
  // The last valid bytes are accepted: the check is not off by one.
  v1::SharedExchangeRequest edge =
      Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"});
  edge.set_push_offset(kRegionBytes - 32);
  edge.set_pull_offset(kRegionBytes - 16);
  WriteFloats(region_.get(), kRegionBytes - 32, {1, 1, 1, 1});
  auto ok = client_->ExchangeShared(edge);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FLOAT_EQ(ReadFloats(*region_, kRegionBytes - 16, 4)[3], 0.9f);
}

TEST_F(SharedExchangeTest, WrongShapeDtypeOrPayloadInThePushHeaderIsInvalid) {
  WriteFloats(region_.get(), kPushOffset, {1, 1, 1, 1});
  {
    SCOPED_TRACE("shape [2, 2]");
    v1::SharedExchangeRequest request =
        Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"});
    auto* slot = request.mutable_push()->mutable_variables(0);
    slot->clear_shape();
    slot->add_shape(2);
    slot->add_shape(2);
    EXPECT_THAT(client_->ExchangeShared(request),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  {
    SCOPED_TRACE("shape [5]");
    v1::SharedExchangeRequest request =
        Exchange(id_, "w", 5, PushTag{"j", 0, 1}, {"w"});
    EXPECT_THAT(client_->ExchangeShared(request),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  {
    SCOPED_TRACE("dtype float64");
    v1::SharedExchangeRequest request =
        Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"});
    request.mutable_push()->mutable_variables(0)->set_dtype(v1::DT_FLOAT64);
    EXPECT_THAT(client_->ExchangeShared(request),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  {
    SCOPED_TRACE("payload_bytes 32");
    v1::SharedExchangeRequest request =
        Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"});
    request.mutable_push()->set_payload_bytes(32);
    EXPECT_THAT(client_->ExchangeShared(request),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  ExpectWUnchanged();
}

TEST_F(SharedExchangeTest, UnknownRegionIsFailedPrecondition) {
  WriteFloats(region_.get(), kPushOffset, {1, 1, 1, 1});
  auto resp = client_->ExchangeShared(
      Exchange(id_ + 1, "w", 4, PushTag{"j", 0, 1}, {"w"}));
  ASSERT_THAT(resp, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(absl::StartsWith(resp.status().message(), "shared region "))
      << resp.status();
  ExpectWUnchanged();
}

TEST_F(SharedExchangeTest, DetachedRegionIsFailedPrecondition) {
  STRATA_ASSERT_OK(client_->DetachSharedRegion(id_));
  EXPECT_THAT(client_->DetachSharedRegion(id_),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  WriteFloats(region_.get(), kPushOffset, {1, 1, 1, 1});
  auto resp =
      client_->ExchangeShared(Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"}));
  ASSERT_THAT(resp, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(absl::StartsWith(resp.status().message(), "shared region "))
      << resp.status();
  ExpectWUnchanged();
  // The server marked the detached region gone (over its nonce), so it
  // cannot be attached again; a new region can.
  uint64_t gone = 0;
  std::memcpy(&gone, region_->data(), sizeof(gone));
  EXPECT_EQ(gone, kMirrorGone);
  EXPECT_THAT(client_->AttachSharedRegion(*region_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto fresh = NewRegion();
  ASSERT_NE(fresh, nullptr);
  auto id = client_->AttachSharedRegion(*fresh);
  ASSERT_TRUE(id.ok()) << id.status();
  STRATA_ASSERT_OK(client_->ExchangeShared(
      Exchange(*id, "w", 4, PushTag{"j", 0, 1}, {"w"})));
}

// --- AttachSharedRegion refusals, through a raw stub so that every field of
// the request can be wrong.

class AttachTest : public SharedExchangeTest {
 protected:
  absl::StatusOr<uint64_t> RawAttach(int64_t pid, int fd, int64_t bytes,
                                     const std::string& nonce) {
    if (stub_ == nullptr) {
      stub_ = v1::ParameterService::NewStub(grpc::CreateChannel(
          server_->address(), grpc::InsecureChannelCredentials()));
    }
    v1::AttachSharedRegionRequest req;
    req.set_pid(pid);
    req.set_fd(fd);
    req.set_bytes(bytes);
    req.set_nonce(nonce);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    v1::AttachSharedRegionResponse resp;
    grpc::Status s = stub_->AttachSharedRegion(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp.region();
  }

  std::unique_ptr<v1::ParameterService::Stub> stub_;
};

// Fills an open file to kRegionBytes starting with `nonce`.
bool FillRegionFile(int fd, const std::string& nonce) {
  return fd >= 0 && ::ftruncate(fd, kRegionBytes) == 0 &&
         ::pwrite(fd, nonce.data(), nonce.size(), 0) ==
             static_cast<ssize_t>(nonce.size());
}

TEST_F(AttachTest, TheRightRequestIsAccepted) {
  auto id = RawAttach(::getpid(), region_->fd(),
                      static_cast<int64_t>(region_->size()), region_->nonce());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_NE(*id, 0u);
  EXPECT_NE(*id, id_);
}

TEST_F(AttachTest, WrongNonceIsInvalid) {
  std::string nonce = region_->nonce();
  nonce[5] ^= 0x40;
  EXPECT_THAT(RawAttach(::getpid(), region_->fd(),
                        static_cast<int64_t>(region_->size()), nonce),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "nonce"));
  EXPECT_THAT(RawAttach(::getpid(), region_->fd(),
                        static_cast<int64_t>(region_->size()),
                        region_->nonce().substr(0, 8)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "nonce"));
}

TEST_F(AttachTest, WrongBytesIsInvalid) {
  for (int64_t bytes :
       {static_cast<int64_t>(kRegionBytes) - 64,
        static_cast<int64_t>(kRegionBytes) + 64, int64_t{32}, int64_t{-1}}) {
    SCOPED_TRACE(bytes);
    EXPECT_THAT(RawAttach(::getpid(), region_->fd(), bytes, region_->nonce()),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
}

TEST_F(AttachTest, UnsealedMemfdIsInvalid) {
  FdCloser file(::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(FillRegionFile(file.fd(), region_->nonce()))
      << std::strerror(errno);
  // Sealed against growing only: still not enough.
  ASSERT_EQ(::fcntl(file.fd(), F_ADD_SEALS, F_SEAL_GROW), 0);
  EXPECT_THAT(
      RawAttach(::getpid(), file.fd(), kRegionBytes, region_->nonce()),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "F_SEAL_SHRINK"));
}

TEST_F(AttachTest, RegularFileIsInvalid) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) /
       ("shared_exchange_test_" + std::to_string(::getpid())))
          .string();
  FdCloser file(
      ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ::unlink(path.c_str());
  ASSERT_TRUE(FillRegionFile(file.fd(), region_->nonce()))
      << std::strerror(errno);
  EXPECT_THAT(
      RawAttach(::getpid(), file.fd(), kRegionBytes, region_->nonce()),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "F_SEAL_SHRINK"));
}

TEST_F(AttachTest, BogusFdIsPermissionDenied) {
  constexpr int kBogusFd = 1 << 20;  // above any RLIMIT_NOFILE in use
  ASSERT_EQ(::fcntl(kBogusFd, F_GETFD), -1);
  EXPECT_THAT(RawAttach(::getpid(), kBogusFd, kRegionBytes, region_->nonce()),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // A process that does not exist.
  EXPECT_THAT(RawAttach(std::numeric_limits<int32_t>::max(), region_->fd(),
                        kRegionBytes, region_->nonce()),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

// --- SharedRegionTable and IsLoopbackPeer on their own.

TEST(IsLoopbackPeerTest, AcceptsLoopbackOnly) {
  // Peer strings as gRPC writes them, fed to a pure function: nothing here
  // connects anywhere.
  EXPECT_TRUE(IsLoopbackPeer("ipv4:127.0.0.1:1"));
  EXPECT_TRUE(IsLoopbackPeer("ipv4:127.3.4.5:65535"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:[::1]:1"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:%5B::1%5D:1"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:%5B::ffff:127.0.0.1%5D:1"));
  EXPECT_TRUE(IsLoopbackPeer("unix:/x"));
  EXPECT_FALSE(IsLoopbackPeer("ipv4:10.1.2.3:1"));
  EXPECT_FALSE(IsLoopbackPeer("ipv4:128.0.0.1:1"));
  EXPECT_FALSE(IsLoopbackPeer("ipv6:[::2]:1"));
  EXPECT_FALSE(IsLoopbackPeer("ipv6:%5B::ffff:10.0.0.1%5D:1"));
  EXPECT_FALSE(IsLoopbackPeer(""));
}

constexpr char kLoopback[] = "ipv4:127.0.0.1:5000";


absl::StatusOr<uint64_t> TableAttach(SharedRegionTable* table,
                                     const SharedRegion& region,
                                     const std::string& peer,
                                     const std::string& job, absl::Time now) {
  return table->Attach(peer, ::getpid(), region.fd(), region.size(),
                       region.nonce(), job, now);
}

TEST(SharedRegionTableTest, NonLoopbackPeerIsPermissionDenied) {
  SharedRegionTable table;
  auto region = NewRegion();
  ASSERT_NE(region, nullptr);
  const absl::Time now = absl::FromUnixSeconds(1000);
  // Remote peers' strings only; the attach is refused before any I/O.
  EXPECT_THAT(
      TableAttach(&table, *region, "ipv4:10.0.0.1:5000", "", now),
      StatusIsWithMessage(absl::StatusCode::kPermissionDenied, "loopback"));
  EXPECT_THAT(TableAttach(&table, *region, "ipv6:[2001:db8::1]:5000", "", now),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(table.size(), 0);
  STRATA_ASSERT_OK(TableAttach(&table, *region, kLoopback, "", now));
  EXPECT_EQ(table.size(), 1);
  EXPECT_EQ(table.total_bytes(), kRegionBytes);
}

TEST(SharedRegionTableTest, FullTableDropsOnlyIdleRegions) {
  SharedRegionOptions options;
  options.max_regions = 2;
  options.idle_timeout = absl::Seconds(60);
  SharedRegionTable table(options);
  auto r1 = NewRegion();
  auto r2 = NewRegion();
  auto r3 = NewRegion();
  ASSERT_TRUE(r1 && r2 && r3);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  auto id1 = TableAttach(&table, *r1, kLoopback, "", t0);
  auto id2 = TableAttach(&table, *r2, kLoopback, "", t0);
  ASSERT_TRUE(id1.ok()) << id1.status();
  ASSERT_TRUE(id2.ok()) << id2.status();
  EXPECT_NE(*id1, *id2);
  EXPECT_THAT(TableAttach(&table, *r3, kLoopback, "", t0),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(TableAttach(&table, *r3, kLoopback, "", t0 + absl::Seconds(59)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(table.size(), 2);
  // Region 2 is used at t0 + 30s, so at t0 + 60s only region 1 is idle.
  STRATA_ASSERT_OK(table.Get(*id2, "", t0 + absl::Seconds(30)));
  auto id3 = TableAttach(&table, *r3, kLoopback, "", t0 + absl::Seconds(60));
  ASSERT_TRUE(id3.ok()) << id3.status();
  EXPECT_EQ(table.size(), 2);
  EXPECT_EQ(table.total_bytes(), 2 * kRegionBytes);
  EXPECT_THAT(table.Get(*id1, "", t0 + absl::Seconds(60)),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "shared region "));
  STRATA_ASSERT_OK(table.Get(*id2, "", t0 + absl::Seconds(60)));
  STRATA_ASSERT_OK(table.Get(*id3, "", t0 + absl::Seconds(60)));
}

TEST(SharedRegionTableTest, TotalBytesLimitAndDetach) {
  SharedRegionOptions options;
  options.max_total_bytes = kRegionBytes;
  SharedRegionTable table(options);
  auto r1 = NewRegion();
  auto r2 = NewRegion();
  ASSERT_TRUE(r1 && r2);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  auto id1 = TableAttach(&table, *r1, kLoopback, "", t0);
  ASSERT_TRUE(id1.ok()) << id1.status();
  EXPECT_THAT(TableAttach(&table, *r2, kLoopback, "", t0),
              StatusIs(absl::StatusCode::kResourceExhausted));
  STRATA_ASSERT_OK(table.Detach(*id1, ""));
  EXPECT_EQ(table.size(), 0);
  EXPECT_EQ(table.total_bytes(), 0u);
  STRATA_ASSERT_OK(TableAttach(&table, *r2, kLoopback, "", t0));
}

TEST(SharedRegionTableTest, RegionsBelongToTheirJob) {
  SharedRegionTable table;
  auto region = NewRegion();
  ASSERT_NE(region, nullptr);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  auto id = TableAttach(&table, *region, kLoopback, "a", t0);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_THAT(table.Get(*id, "b", t0),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(table.Detach(*id, "b"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  STRATA_ASSERT_OK(table.Get(*id, "a", t0));
  // An empty job (no credentials, or an admin) reaches every region.
  STRATA_ASSERT_OK(table.Get(*id, "", t0));
  STRATA_ASSERT_OK(table.Detach(*id, "a"));
  // A region attached by a caller without a job is not open to every job.
  auto other = NewRegion();
  ASSERT_NE(other, nullptr);
  auto unowned = TableAttach(&table, *other, kLoopback, "", t0);
  ASSERT_TRUE(unowned.ok()) << unowned.status();
  EXPECT_THAT(table.Get(*unowned, "b", t0),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST(MappedRegionTest, CheckRangeKeepsOutOfTheNonceAndTheEnd) {
  // A mapping of our own, handed to MappedRegion (which unmaps it).
  void* data = ::mmap(nullptr, 256, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(data, MAP_FAILED);
  MappedRegion region(static_cast<char*>(data), 256, "");
  EXPECT_TRUE(region.CheckRange(16, 240, "x").ok());
  EXPECT_TRUE(region.CheckRange(256, 0, "x").ok());
  EXPECT_THAT(region.CheckRange(15, 1, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(region.CheckRange(16, 241, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(region.CheckRange(257, 0, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(region.CheckRange(16, std::numeric_limits<uint64_t>::max(), "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(region.CheckRange(std::numeric_limits<uint64_t>::max(), 2, "x"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "x"));
}

// --- PsCluster::PushPullMany.

// Two PS tasks on 127.0.0.1:0 (started with `server_options`) and a
// cluster over them with `options`.
struct TwoPs {
  std::vector<std::unique_ptr<PsServer>> servers;
  std::unique_ptr<PsCluster> cluster;
};

absl::StatusOr<TwoPs> StartTwoPs(
    Logger* logger, const PsClientOptions& options,
    const PsServerOptions& server_options = PsServerOptions{}) {
  TwoPs ps;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    auto s = PsServer::Start(server_options, logger);
    if (!s.ok()) return s.status();
    addresses.push_back((*s)->address());
    ps.servers.push_back(*std::move(s));
  }
  ps.cluster = PsCluster::Connect(addresses, options);
  return ps;
}

// Steps PushSameSteps runs.
constexpr int kSameSteps = 3;

// Pushes kSameSteps steps of the same gradients (varied by `salt`) for
// dense/kernel [300, 7] and dense/bias [7] through `shared` and `stream`
// (PushPullMany, lane 0), expecting the same bytes pulled back from both
// after each step; `last` gets the last step's values from both.
// `check` (when set) sees each step's values pulled through `shared` and
// the gradients pushed.
struct SameSteps {
  std::vector<float> shm_kernel, shm_bias, stream_kernel, stream_bias;
};
using StepCheck = std::function<void(
    int step, const std::vector<float>& kernel, const std::vector<float>& bias,
    const std::vector<float>& gk, const std::vector<float>& gb)>;
void PushSameSteps(PsCluster* shared, PsCluster* stream, int salt,
                   SameSteps* last, const StepCheck& check = nullptr) {
  const size_t kernel_n = 300 * 7;
  const std::vector<std::string> names = {"dense/kernel", "dense/bias"};
  std::vector<float>& shm_kernel = last->shm_kernel;
  std::vector<float>& shm_bias = last->shm_bias;
  std::vector<float>& stream_kernel = last->stream_kernel;
  std::vector<float>& stream_bias = last->stream_bias;
  shm_kernel.assign(kernel_n, 0);
  shm_bias.assign(7, 0);
  stream_kernel.assign(kernel_n, 0);
  stream_bias.assign(7, 0);
  std::vector<float> gk(kernel_n), gb(7);
  for (int step = 0; step < kSameSteps; ++step) {
    SCOPED_TRACE(step);
    for (size_t i = 0; i < kernel_n; ++i) {
      gk[i] = 0.001f * static_cast<float>((i * (7 + salt) + step * 13) % 97) -
              0.05f;
    }
    for (size_t i = 0; i < gb.size(); ++i) gb[i] = 0.25f * (i + step + salt);
    const PushTag tag{"job", 0, step};
    STRATA_ASSERT_OK(shared->PushPullMany(0, names, {gk.data(), gb.data()},
                                          tag,
                                          {shm_kernel.data(), shm_bias.data()}));
    STRATA_ASSERT_OK(stream->PushPullMany(
        0, names, {gk.data(), gb.data()}, tag,
        {stream_kernel.data(), stream_bias.data()}));
    EXPECT_EQ(shm_kernel, stream_kernel);
    EXPECT_EQ(shm_bias, stream_bias);
    if (check) check(step, shm_kernel, shm_bias, gk, gb);
  }
}

TEST(PushPullManyTest, SharedMemoryGivesTheSameValuesAndVersionsAsStreaming) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  PsClientOptions shm_options = ClientOptions();
  PsClientOptions stream_options = ClientOptions();
  stream_options.shared_memory = false;
  auto shm = StartTwoPs(&logger, shm_options);
  ASSERT_TRUE(shm.ok()) << shm.status();
  auto stream = StartTwoPs(&logger, stream_options);
  ASSERT_TRUE(stream.ok()) << stream.status();

  const Shape kernel_shape = {300, 7};
  auto slices = FixedShardsPartition(kernel_shape, 2);
  ASSERT_TRUE(slices.ok()) << slices.status();
  for (PsCluster* c : {shm->cluster.get(), stream->cluster.get()}) {
    auto kernel = c->CreateVariable(
        Spec("dense/kernel", kernel_shape, "glorot_uniform"), *slices);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    ASSERT_EQ(kernel->shards.size(), 2u);
    EXPECT_EQ(kernel->shards[0].ps, 0);
    EXPECT_EQ(kernel->shards[1].ps, 1);
    STRATA_ASSERT_OK(c->CreateVariable(Spec("dense/bias", {7}, "zeros"), {}));
  }

  const size_t kernel_n = 300 * 7;
  std::vector<float> initial(kernel_n);
  // (Through the streaming cluster: the shared one must see no pull call.)
  STRATA_ASSERT_OK(
      stream->cluster->PullMany({"dense/kernel"}, {initial.data()}));
  std::vector<float> last_kernel;
  SameSteps last;
  PushSameSteps(shm->cluster.get(), stream->cluster.get(), 0, &last,
                [&](int step, const std::vector<float>& kernel,
                    const std::vector<float>& bias,
                    const std::vector<float>& gk,
                    const std::vector<float>& gb) {
                  if (step == 0) {
                    // The pull saw the push: initial - 0.1 * gradient.
                    for (size_t i = 0; i < kernel_n; i += 97) {
                      EXPECT_FLOAT_EQ(kernel[i], initial[i] - 0.1f * gk[i])
                          << i;
                    }
                    EXPECT_FLOAT_EQ(bias[6], -0.1f * gb[6]);
                  }
                  last_kernel = kernel;
                });
  EXPECT_NE(last_kernel, initial);
  const std::vector<float>& stream_kernel = last.stream_kernel;

  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(shm->cluster->UsesSharedMemory(0, i));
    EXPECT_FALSE(stream->cluster->UsesSharedMemory(0, i));
    // What each server really saw.
    EXPECT_EQ(RpcCount(shm->servers[i].get(), "ExchangeShared"), kSameSteps);
    EXPECT_EQ(RpcCount(shm->servers[i].get(), "PushVariables"), 0);
    EXPECT_EQ(RpcCount(shm->servers[i].get(), "PullVariables"), 0);
    EXPECT_EQ(RpcCount(stream->servers[i].get(), "ExchangeShared"), 0);
    EXPECT_EQ(RpcCount(stream->servers[i].get(), "AttachSharedRegion"), 0);
    // The streaming side: one lane frame per step, and the first PullMany.
    EXPECT_EQ(RpcCount(stream->servers[i].get(), "Lane"), kSameSteps + 1);
    EXPECT_EQ(RpcCount(stream->servers[i].get(), "PushVariables"), 0);

    // Same variables at the same versions on both.
    auto a = shm->cluster->ps(i)->ListVariables();
    auto b = stream->cluster->ps(i)->ListVariables();
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->variables_size(), b->variables_size());
    ASSERT_GT(a->variables_size(), 0);
    for (int v = 0; v < a->variables_size(); ++v) {
      EXPECT_EQ(a->variables(v).spec().name(), b->variables(v).spec().name());
      EXPECT_EQ(a->variables(v).version(), kSameSteps)
          << a->variables(v).spec().name();
      EXPECT_EQ(a->variables(v).version(), b->variables(v).version());
    }
    auto sa = shm->cluster->ps(i)->Stats();
    auto sb = stream->cluster->ps(i)->Stats();
    ASSERT_TRUE(sa.ok() && sb.ok());
    EXPECT_EQ(sa->pushes_applied(), sb->pushes_applied());
    EXPECT_EQ(sa->pushes_duplicate(), 0);
  }
  // The streaming path agrees on a fresh pull too.
  std::vector<float> again(kernel_n);
  STRATA_ASSERT_OK(shm->cluster->PullMany({"dense/kernel"}, {again.data()}));
  EXPECT_EQ(
      std::memcmp(again.data(), stream_kernel.data(), kernel_n * sizeof(float)),
      0);
}

// One PS whose region table holds `max_regions`, every region idle from
// the start (an attach beyond the limit drops the others), holding float32
// [4] "w"; and a cluster of it.
struct SmallTable {
  std::ostringstream log;
  Logger logger{"ps:test", &log};
  std::unique_ptr<PsServer> server;
  std::unique_ptr<PsCluster> cluster;
};
void StartSmallTable(int max_regions, SmallTable* t) {
  PsServerOptions options;
  options.service.shared_regions.max_regions = max_regions;
  options.service.shared_regions.idle_timeout = absl::ZeroDuration();
  auto server = PsServer::Start(options, &t->logger);
  ASSERT_TRUE(server.ok()) << server.status();
  t->server = *std::move(server);
  t->cluster = PsCluster::Connect({t->server->address()}, ClientOptions());
  STRATA_ASSERT_OK(t->cluster->CreateVariable(Spec("w", {4}), {}));
}

TEST(PushPullManyTest, ReattachesARegionTheServerDropped) {
  // Room for one region: lane 1's attach drops lane 0's.
  SmallTable t;
  ASSERT_NO_FATAL_FAILURE(StartSmallTable(1, &t));
  PsCluster* cluster = t.cluster.get();

  std::vector<float> g = {1, 1, 1, 1};
  std::vector<float> got(4);
  // Lane 0 attaches; lane 1's attach then drops lane 0's region.
  STRATA_ASSERT_OK(cluster->PushPullMany(0, {"w"}, {g.data()},
                                         PushTag{"j", 0, 0}, {got.data()}));
  EXPECT_TRUE(cluster->UsesSharedMemory(0, 0));
  EXPECT_FLOAT_EQ(got[0], 0.9f);
  STRATA_ASSERT_OK(cluster->PushPullMany(1, {"w"}, {g.data()},
                                         PushTag{"j", 1, 0}, {got.data()}));
  EXPECT_TRUE(cluster->UsesSharedMemory(1, 0));
  EXPECT_FLOAT_EQ(got[0], 0.8f);
  // Lane 0's region is gone: its next call attaches again, still shared.
  STRATA_ASSERT_OK(cluster->PushPullMany(0, {"w"}, {g.data()},
                                         PushTag{"j", 0, 1}, {got.data()}));
  EXPECT_TRUE(cluster->UsesSharedMemory(0, 0));
  EXPECT_FLOAT_EQ(got[0], 0.7f);

  PsServer* s = t.server.get();
  EXPECT_EQ(RpcCount(s, "AttachSharedRegion"), 3);
  // The refusal came from the server (the doorbell answered "not
  // attached"), or the dropped region's doorbell had closed already (its
  // thread checks every 100 ms) and the client attached again at once.
  EXPECT_LE(RpcCount(s, "ExchangeShared", "FAILED_PRECONDITION"), 1);
  EXPECT_EQ(RpcCount(s, "ExchangeShared"), 3);
  EXPECT_EQ(RpcCount(s, "PushVariables"), 0);
  EXPECT_EQ(RpcCount(s, "PullVariables"), 0);
  auto pulled = cluster->ps(0)->Pull("w", got.data(), 16);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->version, 3);
}

TEST(PullLatestTest, AMirrorRegionTheServerDroppedIsNotReadAgain) {
  // Room for a lane's and a mirror region; any attach beyond drops both.
  SmallTable t;
  ASSERT_NO_FATAL_FAILURE(StartSmallTable(2, &t));
  PsCluster* cluster = t.cluster.get();
  std::vector<float> g = {1, 1, 1, 1};
  std::vector<float> got(4);
  STRATA_ASSERT_OK(cluster->PushPullMany(0, {"w"}, {g.data()},
                                         PushTag{"j", 0, 0}, {}));
  STRATA_ASSERT_OK(cluster->PullLatest(0, {"w"}, {got.data()}));
  EXPECT_TRUE(cluster->ReadsMirror(0));
  EXPECT_FLOAT_EQ(got[0], 0.9f);

  // Another client's attach drops both regions; the server stops writing
  // the mirror (it marks the region gone over its nonce).
  auto other = PsClient::Connect(t.server->address(), ClientOptions());
  auto region = NewRegion();
  ASSERT_NE(region, nullptr);
  ASSERT_TRUE(other->AttachSharedRegion(*region).ok());
  ASSERT_TRUE(other->AttachSharedRegion(*NewRegion()).ok());
  ASSERT_TRUE(other->Push("w", DType::kFloat32, {4}, g.data(),
                          PushTag{"j", 1, 0})
                  .ok());
  // Not the stale 0.9 of the dropped mirror: pulled instead.
  STRATA_ASSERT_OK(cluster->PullLatest(0, {"w"}, {got.data()}));
  EXPECT_FALSE(cluster->ReadsMirror(0));
  EXPECT_FLOAT_EQ(got[0], 0.8f);
  // The next read sets the mirrors up again.
  STRATA_ASSERT_OK(cluster->PullLatest(0, {"w"}, {got.data()}));
  EXPECT_TRUE(cluster->ReadsMirror(0));
  EXPECT_FLOAT_EQ(got[0], 0.8f);
}

TEST(PushPullManyTest, ServerThatRefusesRegionsGetsStreamingCalls) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  PsServerOptions options;
  options.service.shared_regions.max_regions = 0;
  auto server = PsServer::Start(options, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  auto cluster = PsCluster::Connect({(*server)->address()}, ClientOptions());
  STRATA_ASSERT_OK(cluster->CreateVariable(Spec("w", {4}), {}));
  std::vector<float> g = {1, 1, 1, 1};
  std::vector<float> got(4);
  for (int step = 0; step < 2; ++step) {
    STRATA_ASSERT_OK(cluster->PushPullMany(
        0, {"w"}, {g.data()}, PushTag{"j", 0, step}, {got.data()}));
  }
  EXPECT_FLOAT_EQ(got[0], 0.8f);
  EXPECT_FALSE(cluster->UsesSharedMemory(0, 0));
  PsServer* s = server->get();
  // Refused once, then streaming without asking again.
  EXPECT_EQ(RpcCount(s, "AttachSharedRegion", "RESOURCE_EXHAUSTED"), 1);
  EXPECT_EQ(RpcCount(s, "ExchangeShared"), 0);
  EXPECT_EQ(RpcCount(s, "Lane"), 2);
}

// --- Job isolation with credentials.

constexpr char kCredentials[] = R"({"credentials": [
  {"token": "worker-a", "job": "a", "role": "worker"},
  {"token": "coord-a", "job": "a", "role": "coordinator"},
  {"token": "worker-b", "job": "b", "role": "worker"},
  {"token": "coord-b", "job": "b", "role": "coordinator"}]})";

// A PS whose credentials know jobs "a" and "b" (kCredentials), holding
// float32 [4] "w" of job a and "v" of job b.
class SharedExchangeAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PsServerOptions options;
    auto creds = CredentialStore::Parse(kCredentials);
    ASSERT_TRUE(creds.ok()) << creds.status();
    options.service.credentials =
        std::make_shared<CredentialStore>(*std::move(creds));
    auto server = PsServer::Start(options, &logger_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    STRATA_ASSERT_OK(Client("coord-a")->CreateVariable(Spec("w", {4})));
    STRATA_ASSERT_OK(Client("coord-b")->CreateVariable(Spec("v", {4})));
  }

  // A client of the server carrying `token` ("" for none).
  std::unique_ptr<PsClient> Client(const std::string& token) {
    PsClientOptions copts = ClientOptions();
    copts.security.auth_token = token;
    return PsClient::Connect(server_->address(), copts);
  }

  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::unique_ptr<PsServer> server_;
};

TEST_F(SharedExchangeAuthTest, AnotherJobCannotUseOrDetachARegion) {
  auto worker_a = Client("worker-a");
  auto worker_b = Client("worker-b");

  // No token: no region.
  auto region = NewRegion();
  ASSERT_NE(region, nullptr);
  EXPECT_THAT(Client("")->AttachSharedRegion(*region),
              StatusIs(absl::StatusCode::kUnauthenticated));

  auto id = worker_a->AttachSharedRegion(*region);
  ASSERT_TRUE(id.ok()) << id.status();
  WriteFloats(region.get(), kPushOffset, {1, 1, 1, 1});
  STRATA_ASSERT_OK(worker_a->ExchangeShared(
      Exchange(*id, "w", 4, PushTag{"a", 0, 0}, {"w"})));
  EXPECT_FLOAT_EQ(ReadFloats(*region, kPullOffset, 4)[0], 0.9f);

  // Job b's worker, with its own variable, through job a's region.
  std::memset(region->data() + kPullOffset, 0x5a, 16);
  const std::vector<float> marker = ReadFloats(*region, kPullOffset, 4);
  EXPECT_THAT(worker_b->ExchangeShared(
                  Exchange(*id, "v", 4, PushTag{"b", 0, 0}, {"v"})),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(worker_b->ExchangeShared(Exchange(*id, "", 0, {}, {"v"})),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(ReadFloats(*region, kPullOffset, 4), marker);
  EXPECT_THAT(worker_b->DetachSharedRegion(*id),
              StatusIs(absl::StatusCode::kPermissionDenied));
  std::vector<float> v(4);
  auto pulled = worker_b->Pull("v", v.data(), 16);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->version, 0);
  EXPECT_EQ(v, std::vector<float>(4, 1.0f));

  // Job a's worker still has its region; job a's variable through job a's
  // region is still refused to job b, and job b's variable to job a.
  STRATA_ASSERT_OK(worker_a->ExchangeShared(Exchange(*id, "", 0, {}, {"w"})));
  EXPECT_THAT(
      worker_a->ExchangeShared(Exchange(*id, "v", 4, PushTag{"a", 0, 1}, {})),
      StatusIs(absl::StatusCode::kPermissionDenied));
  STRATA_ASSERT_OK(worker_a->DetachSharedRegion(*id));
}

// --- IPv6 loopback: the peer string gRPC really produces is accepted.

// Records the peer string of every AttachSharedRegion call.
class PeerRecorder : public grpc::experimental::Interceptor {
 public:
  PeerRecorder(grpc::experimental::ServerRpcInfo* info, absl::Mutex* mu,
               std::vector<std::string>* peers) {
    if (std::string(info->method()) ==
        "/strata.v1.ParameterService/AttachSharedRegion") {
      absl::MutexLock lock(mu);
      peers->push_back(info->server_context()->peer());
    }
  }
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }
};

class PeerRecorderFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  PeerRecorderFactory(absl::Mutex* mu, std::vector<std::string>* peers)
      : mu_(mu), peers_(peers) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new PeerRecorder(info, mu_, peers_);
  }

 private:
  absl::Mutex* mu_;
  std::vector<std::string>* peers_;
};

TEST(SharedExchangeIpv6Test, AttachOverIpv6LoopbackIsAccepted) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  absl::Mutex mu;
  std::vector<std::string> peers;
  PsServerOptions options;
  options.host = "::1";
  options.configure_builder = [&](grpc::ServerBuilder& b) {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        factories;
    factories.push_back(std::make_unique<PeerRecorderFactory>(&mu, &peers));
    b.experimental().SetInterceptorCreators(std::move(factories));
  };
  auto server = PsServer::Start(options, &logger);
  if (!server.ok()) {
    GTEST_SKIP() << "cannot listen on [::1] (no IPv6 loopback here?): "
                 << server.status();
  }
  const std::string target = (*server)->address();
  ASSERT_TRUE(absl::StartsWith(target, "[::1]:")) << target;
  auto client = PsClient::Connect(target, ClientOptions());
  EXPECT_TRUE(client->TargetIsLoopback());
  STRATA_ASSERT_OK(client->CreateVariable(Spec("w", {4})));
  auto region = NewRegion();
  ASSERT_NE(region, nullptr);
  // On refusal the message names the peer string the server saw.
  auto id = client->AttachSharedRegion(*region);
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(peers.size(), 1u);
    std::cout << "[::1] client's peer string on the server: " << peers[0]
              << "\n";
    EXPECT_TRUE(IsLoopbackPeer(peers[0])) << peers[0];
  }
  ASSERT_TRUE(id.ok()) << id.status();
  WriteFloats(region.get(), kPushOffset, {1, 1, 1, 1});
  STRATA_ASSERT_OK(
      client->ExchangeShared(Exchange(*id, "w", 4, PushTag{"j", 0, 0}, {"w"})));
  EXPECT_FLOAT_EQ(ReadFloats(*region, kPullOffset, 4)[0], 0.9f);

  // And PsCluster picks shared memory for it.
  auto cluster = PsCluster::Connect({target}, ClientOptions());
  std::vector<float> g = {1, 1, 1, 1};
  std::vector<float> got(4);
  STRATA_ASSERT_OK(cluster->CreateVariable(Spec("c", {4}), {}));
  STRATA_ASSERT_OK(cluster->PushPullMany(0, {"c"}, {g.data()},
                                         PushTag{"j", 0, 0}, {got.data()}));
  EXPECT_TRUE(cluster->UsesSharedMemory(0, 0));
  EXPECT_FLOAT_EQ(got[0], 0.9f);
}

// --- MirrorVariables: the server keeps a region's copies of variables up to
// date (header: sequence number, version at byte 8; value at
// kMirrorHeaderBytes).

// Where the tests put a mirror of "w" in a kRegionBytes region (clear of
// kPushOffset and kPullOffset).
constexpr uint64_t kMirrorOffset = 2048;

// A mirror as it lies in a region.
struct MirrorView {
  uint64_t seq = 0;
  int64_t version = -1;
  std::vector<float> value;
};

MirrorView ReadMirror(const SharedRegion& region, uint64_t offset, size_t n) {
  MirrorView m;
  const char* header = region.data() + offset;
  m.seq = reinterpret_cast<const std::atomic<uint64_t>*>(header)->load(
      std::memory_order_acquire);
  std::memcpy(&m.version, header + 8, sizeof(m.version));
  m.value = ReadFloats(region, offset + kMirrorHeaderBytes, n);
  return m;
}

// Whether bytes [from, to) of `region` are all zero.
bool AllZero(const SharedRegion& region, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; ++i) {
    if (region.data()[i] != 0) return false;
  }
  return true;
}

// A directory under the test's temporary directory, removed on destruction.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& name)
      : path_(std::filesystem::path(::testing::TempDir()) /
              ("shared_exchange_test_" + name + "_" +
               std::to_string(::getpid()))) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::create_directories(path_, ec);
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  std::string path() const { return path_.string(); }

 private:
  const std::filesystem::path path_;
};

class MirrorTest : public SharedExchangeTest {
 protected:
  // Expects the mirror of "w" at `offset` to be complete (even, nonzero
  // sequence number) and to hold what a Pull returns, version included.
  MirrorView ExpectMirrorOfWMatchesPull(uint64_t offset) {
    int64_t version = -1;
    const std::vector<float> pulled = PullW(&version);
    MirrorView m = ReadMirror(*region_, offset, 4);
    EXPECT_NE(m.seq, 0u);
    EXPECT_NE(m.seq, kMirrorGone);
    EXPECT_EQ(m.seq % 2, 0u) << m.seq;
    EXPECT_EQ(m.version, version);
    EXPECT_EQ(std::memcmp(m.value.data(), pulled.data(), 16), 0);
    return m;
  }
};

TEST_F(MirrorTest, MirrorHoldsTheValueAndVersionAfterEveryChange) {
  // Markers around the mirror: the server writes nothing outside it.
  constexpr uint64_t kMirrorEnd = kMirrorOffset + kMirrorHeaderBytes + 16;
  std::memset(region_->data() + kMirrorOffset - 64, 0x5a, 64);
  std::memset(region_->data() + kMirrorEnd, 0x5a, 64);
  STRATA_ASSERT_OK(client_->MirrorVariables(id_, {"w"}, {kMirrorOffset}));
  MirrorView m0;
  {
    SCOPED_TRACE("at MirrorVariables");
    m0 = ExpectMirrorOfWMatchesPull(kMirrorOffset);
    EXPECT_EQ(m0.version, 0);
    EXPECT_EQ(m0.value, std::vector<float>(4, 1.0f));
  }

  // A push through the region: the server writes the mirror before it
  // answers.
  WriteFloats(region_.get(), kPushOffset, {1, 2, 3, 4});
  auto exchanged =
      client_->ExchangeShared(Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {}));
  ASSERT_TRUE(exchanged.ok()) << exchanged.status();
  ASSERT_EQ(exchanged->push().results_size(), 1);
  EXPECT_EQ(exchanged->push().results(0).version(), 1);
  MirrorView m1;
  {
    SCOPED_TRACE("after ExchangeShared");
    m1 = ExpectMirrorOfWMatchesPull(kMirrorOffset);
    EXPECT_EQ(m1.version, 1);
    EXPECT_GT(m1.seq, m0.seq);
    for (int i = 0; i < 4; ++i) {
      EXPECT_FLOAT_EQ(m1.value[i], 1.0f - 0.1f * (i + 1)) << i;
    }
  }

  // A streamed push.
  const std::vector<float> g = {4, 3, 2, 1};
  auto pushed = client_->PushVariables({"w"}, DType::kFloat32, {Shape{4}},
                                       {g.data()}, PushTag{"j", 0, 2});
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  ASSERT_EQ(pushed->size(), 1u);
  EXPECT_EQ((*pushed)[0].version, 2);
  MirrorView m2;
  {
    SCOPED_TRACE("after PushVariables");
    m2 = ExpectMirrorOfWMatchesPull(kMirrorOffset);
    EXPECT_EQ(m2.version, 2);
    EXPECT_GT(m2.seq, m1.seq);
    EXPECT_FLOAT_EQ(m2.value[0], m1.value[0] - 0.4f);
  }

  // An assignment.
  const std::vector<float> assigned = {5, 6, 7, 8};
  auto version = client_->Assign("w", DType::kFloat32, {4}, assigned.data());
  ASSERT_TRUE(version.ok()) << version.status();
  {
    SCOPED_TRACE("after Assign");
    MirrorView m3 = ExpectMirrorOfWMatchesPull(kMirrorOffset);
    EXPECT_EQ(m3.version, *version);
    EXPECT_EQ(m3.version, 3);
    EXPECT_GT(m3.seq, m2.seq);
    EXPECT_EQ(m3.value, assigned);
  }

  for (uint64_t i = kMirrorOffset - 64; i < kMirrorOffset; ++i) {
    ASSERT_EQ(region_->data()[i], 0x5a) << i;
  }
  for (uint64_t i = kMirrorEnd; i < kMirrorEnd + 64; ++i) {
    ASSERT_EQ(region_->data()[i], 0x5a) << i;
  }
  EXPECT_EQ(std::string(region_->data(), kSharedRegionNonceBytes),
            region_->nonce());
}

TEST_F(MirrorTest, MirrorOfASyncVariableFollowsAnAssign) {
  // A SYNC variable's version counts steps: an assignment changes its value
  // but not its version.
  v1::VariableSpec spec = Spec("s", {4});
  spec.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
  spec.mutable_update_mode()->set_num_replicas(1);
  STRATA_ASSERT_OK(client_->CreateVariable(spec));
  STRATA_ASSERT_OK(client_->MirrorVariables(id_, {"s"}, {kMirrorOffset}));
  const std::vector<float> assigned = {5, 6, 7, 8};
  STRATA_ASSERT_OK(client_->Assign("s", DType::kFloat32, {4}, assigned.data()));
  std::vector<float> pulled(4);
  auto r = client_->Pull("s", pulled.data(), 16);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(pulled, assigned);
  const MirrorView m = ReadMirror(*region_, kMirrorOffset, 4);
  EXPECT_EQ(m.seq % 2, 0u) << m.seq;
  EXPECT_EQ(m.version, r->version);
  EXPECT_EQ(m.value, pulled) << "the mirror still shows the value before the "
                                "assignment";
}

TEST_F(MirrorTest, BadRequestsAddNoMirror) {
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("v", {4})));
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  struct Case {
    const char* what;
    std::vector<std::string> names;
    std::vector<size_t> offsets;
    absl::StatusCode code;
  };
  // Each asks for a valid mirror of "w" too (first, where the order can
  // matter): none may be added.
  // clang-format off
  const Case cases[] = {
      {"unknown name after a valid one", {"w", "nope"}, {2048, 2560},
       absl::StatusCode::kNotFound},
      {"unknown name before a valid one", {"nope", "w"}, {2560, 2048},
       absl::StatusCode::kNotFound},
      {"value past the end", {"w", "v"}, {2048, kRegionBytes - 64},
       absl::StatusCode::kInvalidArgument},
      {"straddling the end by 8", {"w", "v"}, {2048, kRegionBytes - 72},
       absl::StatusCode::kInvalidArgument},
      {"header past the end", {"w", "v"}, {2048, kRegionBytes},
       absl::StatusCode::kInvalidArgument},
      {"at 2^64 - 8", {"w", "v"}, {2048, kMax - 7},
       absl::StatusCode::kInvalidArgument},
      {"at the nonce", {"w", "v"}, {2048, 0},
       absl::StatusCode::kInvalidArgument},
      {"inside the nonce", {"w", "v"}, {2048, 8},
       absl::StatusCode::kInvalidArgument},
      {"offset not a multiple of 8", {"w", "v"}, {2048, 2564},
       absl::StatusCode::kInvalidArgument},
      {"more names than offsets", {"w", "v"}, {2048},
       absl::StatusCode::kInvalidArgument},
      {"more offsets than names", {"w"}, {2048, 2560},
       absl::StatusCode::kInvalidArgument},
  };
  // clang-format on
  // Each case in a region of its own, so that one added by mistake shows
  // in its case only.
  std::vector<std::unique_ptr<SharedRegion>> regions;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    regions.push_back(NewRegion());
    ASSERT_NE(regions.back(), nullptr);
    const SharedRegion& region = *regions.back();
    auto id = client_->AttachSharedRegion(region);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_THAT(client_->MirrorVariables(*id, c.names, c.offsets),
                StatusIs(c.code));
    EXPECT_TRUE(AllZero(region, kSharedRegionNonceBytes, kRegionBytes));
    EXPECT_EQ(std::string(region.data(), kSharedRegionNonceBytes),
              region.nonce());
  }
  EXPECT_THAT(client_->MirrorVariables(id_ + 1000, {"w"}, {2048}),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "shared region "));

  // Changes of both variables write nothing: no mirror was added.
  WriteFloats(region_.get(), kPushOffset, {1, 1, 1, 1});
  STRATA_ASSERT_OK(
      client_->ExchangeShared(Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {})));
  STRATA_ASSERT_OK(
      client_->ExchangeShared(Exchange(id_, "v", 4, PushTag{"j", 0, 1}, {})));
  std::memset(region_->data() + kPushOffset, 0, 16);
  for (size_t i = 0; i < regions.size(); ++i) {
    SCOPED_TRACE(cases[i].what);
    EXPECT_TRUE(AllZero(*regions[i], kSharedRegionNonceBytes, kRegionBytes));
  }

  // The last bytes of the region and the first after the nonce are
  // accepted: the checks are not off by one.
  STRATA_ASSERT_OK(client_->MirrorVariables(
      id_, {"w", "v"},
      {kRegionBytes - kMirrorHeaderBytes - 16, kSharedRegionNonceBytes}));
  {
    SCOPED_TRACE("mirror at the end");
    ExpectMirrorOfWMatchesPull(kRegionBytes - kMirrorHeaderBytes - 16);
  }
  const MirrorView v = ReadMirror(*region_, kSharedRegionNonceBytes, 4);
  EXPECT_EQ(v.version, 1);
  EXPECT_FLOAT_EQ(v.value[0], 0.9f);
  EXPECT_EQ(std::string(region_->data(), kSharedRegionNonceBytes),
            region_->nonce());
}

TEST_F(MirrorTest, MirrorBeyondTheLimitIsResourceExhaustedAndAddsNothing) {
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("v", {4})));
  constexpr size_t kStride = 128;
  auto big = SharedRegion::Create(kStride * (kMaxMirrorsPerVariable + 2));
  ASSERT_TRUE(big.ok()) << big.status();
  auto big_id = client_->AttachSharedRegion(**big);
  ASSERT_TRUE(big_id.ok()) << big_id.status();
  std::vector<std::string> names(kMaxMirrorsPerVariable, "v");
  std::vector<size_t> offsets;
  for (int i = 0; i < kMaxMirrorsPerVariable; ++i) {
    offsets.push_back(kStride * (i + 1));
  }
  STRATA_ASSERT_OK(client_->MirrorVariables(*big_id, names, offsets));
  // A mirror asked again at the same place replaces the one there.
  STRATA_ASSERT_OK(client_->MirrorVariables(*big_id, {"v"}, {kStride}));

  // One more: refused, and the mirror of "w" asked with it is not added.
  EXPECT_THAT(client_->MirrorVariables(id_, {"w", "v"}, {kMirrorOffset, 2560}),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(AllZero(*region_, kSharedRegionNonceBytes, kRegionBytes));

  // A detached region's mirrors no longer count.
  STRATA_ASSERT_OK(client_->DetachSharedRegion(*big_id));
  STRATA_ASSERT_OK(
      client_->MirrorVariables(id_, {"w", "v"}, {kMirrorOffset, 2560}));
  ExpectMirrorOfWMatchesPull(kMirrorOffset);
  const MirrorView v = ReadMirror(*region_, 2560, 4);
  EXPECT_EQ(v.seq % 2, 0u);
  EXPECT_NE(v.seq, 0u);
  EXPECT_EQ(v.value, std::vector<float>(4, 1.0f));
}

// One PS with a checkpoint directory, float32 [4] "w" (ones, SGD 0.1)
// mirrored at kMirrorOffset of an attached region, pushed twice and saved
// as "mirror_ckpt".
class MirrorRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PsServerOptions options;
    options.checkpoint_dir = dir_.path();
    auto s = PsServer::Start(options, &logger_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    client_ = PsClient::Connect(server_->address(), ClientOptions());
    STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {4})));
    region_ = NewRegion();
    ASSERT_NE(region_, nullptr);
    auto id = client_->AttachSharedRegion(*region_);
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = *id;
    STRATA_ASSERT_OK(client_->MirrorVariables(id_, {"w"}, {kMirrorOffset}));
    WriteFloats(region_.get(), kPushOffset, {1, 1, 1, 1});
    for (int step = 0; step < 2; ++step) {
      STRATA_ASSERT_OK(client_->ExchangeShared(
          Exchange(id_, "w", 4, PushTag{"j", 0, step}, {})));
    }
    STRATA_ASSERT_OK(client_->Save("mirror_ckpt"));
    const MirrorView m = ReadMirror(*region_, kMirrorOffset, 4);
    ASSERT_EQ(m.version, 2);
    ASSERT_EQ(m.seq % 2, 0u);
    ASSERT_NE(m.seq, 0u);
    ASSERT_FLOAT_EQ(m.value[0], 0.8f);
  }

  ScopedTempDir dir_{"mirror_restore"};
  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::unique_ptr<PsServer> server_;
  std::unique_ptr<PsClient> client_;
  std::unique_ptr<SharedRegion> region_;
  uint64_t id_ = 0;
};

TEST_F(MirrorRestoreTest, RestoreMarksTheOldMirrorGone) {
  STRATA_ASSERT_OK(client_->Restore("mirror_ckpt"));
  EXPECT_EQ(ReadMirror(*region_, kMirrorOffset, 4).seq, kMirrorGone);

  // The restored variable does not write the old mirror.
  STRATA_ASSERT_OK(
      client_->ExchangeShared(Exchange(id_, "w", 4, PushTag{"j", 0, 2}, {})));
  EXPECT_EQ(ReadMirror(*region_, kMirrorOffset, 4).seq, kMirrorGone);

  // Asked again, the server mirrors the restored variable at the same place.
  STRATA_ASSERT_OK(client_->MirrorVariables(id_, {"w"}, {kMirrorOffset}));
  std::vector<float> pulled(4);
  auto r = client_->Pull("w", pulled.data(), 16);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version, 3);
  const MirrorView m = ReadMirror(*region_, kMirrorOffset, 4);
  EXPECT_NE(m.seq, kMirrorGone);
  EXPECT_NE(m.seq, 0u);
  EXPECT_EQ(m.seq % 2, 0u) << m.seq;
  EXPECT_EQ(m.version, 3);
  EXPECT_EQ(m.value, pulled);
}

TEST_F(MirrorRestoreTest, RestoreMarksTheMirrorGoneWhileTheOldVariableIsHeld) {
  // An in-flight call holds the variable it works on (an ExchangeShared or
  // PushVariables reactor until its OnDone, which may run after the client
  // has its answer); the test holds it the same way.
  auto held = server_->store()->Get("w");
  ASSERT_TRUE(held.ok()) << held.status();
  STRATA_ASSERT_OK(client_->Restore("mirror_ckpt"));
  EXPECT_EQ(ReadMirror(*region_, kMirrorOffset, 4).seq, kMirrorGone)
      << "a client reading the mirror after the restore answered gets the "
         "replaced variable's value";
}

// --- PsCluster::PullLatest.

// Pulls float32 variables `names` (`counts` elements each) with PullLatest
// on `lane` and with PullMany; expects the same bytes and returns
// PullLatest's.
std::vector<std::vector<float>> ExpectLatestEqualsPull(
    PsCluster* cluster, int lane, const std::vector<std::string>& names,
    const std::vector<size_t>& counts) {
  std::vector<std::vector<float>> latest, pulled;
  std::vector<void*> latest_dsts, pulled_dsts;
  for (size_t n : counts) {
    latest.emplace_back(n, std::numeric_limits<float>::quiet_NaN());
    pulled.emplace_back(n, std::numeric_limits<float>::quiet_NaN());
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    latest_dsts.push_back(latest[i].data());
    pulled_dsts.push_back(pulled[i].data());
  }
  absl::Status s = cluster->PullLatest(lane, names, latest_dsts);
  EXPECT_TRUE(s.ok()) << "PullLatest: " << s;
  s = cluster->PullMany(names, pulled_dsts);
  EXPECT_TRUE(s.ok()) << "PullMany: " << s;
  for (size_t i = 0; i < counts.size(); ++i) {
    EXPECT_EQ(std::memcmp(latest[i].data(), pulled[i].data(),
                          counts[i] * sizeof(float)),
              0)
        << names[i];
  }
  return latest;
}

// Creates a [300, 7] kernel sharded over both tasks and a [7] bias.
void CreateDense(PsCluster* cluster) {
  const Shape kernel_shape = {300, 7};
  auto slices = FixedShardsPartition(kernel_shape, 2);
  ASSERT_TRUE(slices.ok()) << slices.status();
  auto kernel = cluster->CreateVariable(
      Spec("dense/kernel", kernel_shape, "glorot_uniform"), *slices);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_EQ(kernel->shards.size(), 2u);
  ASSERT_EQ(kernel->shards[0].ps, 0);
  ASSERT_EQ(kernel->shards[1].ps, 1);
  STRATA_ASSERT_OK(
      cluster->CreateVariable(Spec("dense/bias", {7}, "zeros"), {}));
}

const std::vector<std::string> kDenseNames = {"dense/kernel", "dense/bias"};
const std::vector<size_t> kDenseCounts = {300 * 7, 7};

// A push-only PushPullMany of step `step`'s gradients to the dense layer.
absl::Status PushDense(PsCluster* cluster, int step) {
  std::vector<float> gk(kDenseCounts[0]), gb(kDenseCounts[1]);
  for (size_t i = 0; i < gk.size(); ++i) {
    gk[i] = 0.001f * static_cast<float>((i * 7 + step * 13) % 97) - 0.05f;
  }
  for (size_t i = 0; i < gb.size(); ++i) gb[i] = 0.25f * (i + step);
  return cluster->PushPullMany(0, kDenseNames, {gk.data(), gb.data()},
                               PushTag{"job", 0, step}, {});
}

TEST(PullLatestTest, ReadsMirrorsAndFallsBackWhenARestoreReplacedThem) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  ScopedTempDir dir("pull_latest");
  PsServerOptions server_options;
  server_options.checkpoint_dir = dir.path();
  auto ps = StartTwoPs(&logger, ClientOptions(), server_options);
  ASSERT_TRUE(ps.ok()) << ps.status();
  PsCluster* cluster = ps->cluster.get();
  CreateDense(cluster);
  if (HasFatalFailure()) return;
  int pull_many_calls = 0;
  auto latest = [&] {
    ++pull_many_calls;
    return ExpectLatestEqualsPull(cluster, 1, kDenseNames, kDenseCounts);
  };

  for (int step = 0; step < 3; ++step) {
    STRATA_ASSERT_OK(PushDense(cluster, step));
  }
  std::vector<std::vector<float>> saved;
  {
    SCOPED_TRACE("after 3 pushes");
    saved = latest();
    EXPECT_TRUE(cluster->ReadsMirror(0));
    EXPECT_TRUE(cluster->ReadsMirror(1));
  }
  // The mirrors follow a push at once.
  STRATA_ASSERT_OK(PushDense(cluster, 3));
  {
    SCOPED_TRACE("after 4 pushes");
    std::vector<std::vector<float>> now = latest();
    EXPECT_NE(now[0], saved[0]);
    EXPECT_TRUE(cluster->ReadsMirror(0));
    EXPECT_TRUE(cluster->ReadsMirror(1));
    saved = now;
  }
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    PsServer* s = ps->servers[i].get();
    // PullLatest made no call of its own beyond setting the mirrors up.
    EXPECT_EQ(RpcCount(s, "MirrorVariables"), 1);
    EXPECT_EQ(RpcCount(s, "ExchangeShared"), 4);
    EXPECT_EQ(RpcCount(s, "Lane"), pull_many_calls);
    STRATA_ASSERT_OK(cluster->ps(i)->Save("ps" + std::to_string(i)));
  }

  // Move past the checkpoint, then restore it.
  for (int step = 4; step < 6; ++step) {
    STRATA_ASSERT_OK(PushDense(cluster, step));
  }
  std::vector<std::vector<float>> moved;
  {
    SCOPED_TRACE("after 6 pushes");
    moved = latest();
    EXPECT_NE(moved[0], saved[0]);
    EXPECT_TRUE(cluster->ReadsMirror(0));
    EXPECT_TRUE(cluster->ReadsMirror(1));
  }
  for (int i = 0; i < 2; ++i) {
    STRATA_ASSERT_OK(cluster->ps(i)->Restore("ps" + std::to_string(i)));
  }
  {
    SCOPED_TRACE("first PullLatest after the restore: pulls");
    std::vector<std::vector<float>> restored = latest();
    EXPECT_EQ(restored, saved);
    EXPECT_FALSE(cluster->ReadsMirror(0));
    EXPECT_FALSE(cluster->ReadsMirror(1));
  }
  {
    SCOPED_TRACE("second PullLatest after the restore: mirrors again");
    std::vector<std::vector<float>> restored = latest();
    EXPECT_EQ(restored, saved);
    EXPECT_TRUE(cluster->ReadsMirror(0));
    EXPECT_TRUE(cluster->ReadsMirror(1));
  }
  STRATA_ASSERT_OK(PushDense(cluster, 6));
  {
    SCOPED_TRACE("a push after the restore");
    std::vector<std::vector<float>> now = latest();
    EXPECT_NE(now[0], saved[0]);
    EXPECT_TRUE(cluster->ReadsMirror(0));
    EXPECT_TRUE(cluster->ReadsMirror(1));
  }
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(RpcCount(ps->servers[i].get(), "MirrorVariables"), 2);
  }
}

TEST(PullLatestTest, WithoutSharedMemoryPullsOverTheStream) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  PsClientOptions options = ClientOptions();
  options.shared_memory = false;
  auto ps = StartTwoPs(&logger, options);
  ASSERT_TRUE(ps.ok()) << ps.status();
  PsCluster* cluster = ps->cluster.get();
  CreateDense(cluster);
  if (HasFatalFailure()) return;
  for (int step = 0; step < 3; ++step) {
    STRATA_ASSERT_OK(PushDense(cluster, step));
    SCOPED_TRACE(step);
    ExpectLatestEqualsPull(cluster, 1, kDenseNames, kDenseCounts);
    EXPECT_FALSE(cluster->ReadsMirror(0));
    EXPECT_FALSE(cluster->ReadsMirror(1));
  }
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    PsServer* s = ps->servers[i].get();
    EXPECT_EQ(RpcCount(s, "AttachSharedRegion"), 0);
    EXPECT_EQ(RpcCount(s, "MirrorVariables"), 0);
    EXPECT_EQ(RpcCount(s, "ExchangeShared"), 0);
    // A lane frame per push (3), per PullLatest and per PullMany (6).
    EXPECT_EQ(RpcCount(s, "Lane"), 9);
    EXPECT_EQ(RpcCount(s, "PullVariables"), 0);
  }
}

TEST(PullLatestTest, ConcurrentPushesNeverShowATornValue) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  auto ps = StartTwoPs(&logger, ClientOptions());
  ASSERT_TRUE(ps.ok()) << ps.status();
  PsCluster* cluster = ps->cluster.get();
  // Every element starts at 1 and every push subtracts kGrad from every
  // element (exact in float32): each shard's elements are equal at every
  // version, so a torn read shows two different values.
  const Shape shape = {512, 8};
  constexpr size_t kElements = 512 * 8;
  constexpr int kPushes = 200;
  constexpr float kGrad = 0.125f;
  v1::VariableSpec spec = Spec("table", shape, "ones");
  spec.mutable_optimizer()->set_learning_rate(1.0);
  auto slices = FixedShardsPartition(shape, 2);
  ASSERT_TRUE(slices.ok()) << slices.status();
  auto placement = cluster->CreateVariable(spec, *slices);
  ASSERT_TRUE(placement.ok()) << placement.status();
  const std::vector<ShardPlacement> shards = placement->shards;
  ASSERT_EQ(shards.size(), 2u);

  const std::vector<float> grad(kElements, kGrad);
  absl::Notification first_read;
  std::atomic<bool> pushes_done{false};
  std::thread pusher([&] {
    first_read.WaitForNotification();
    for (int step = 0; step < kPushes; ++step) {
      absl::Status s = cluster->PushPullMany(0, {"table"}, {grad.data()},
                                             PushTag{"job", 0, step}, {});
      if (!s.ok()) {
        ADD_FAILURE() << "push " << step << ": " << s;
        break;
      }
    }
    pushes_done.store(true);
  });

  std::vector<float> got(kElements);
  int reads = 0;
  int mirror_reads = 0;
  int torn = 0;
  int unexpected = 0;
  int backwards = 0;
  std::string first_problem;
  std::vector<int64_t> last_steps(shards.size(), 0);
  bool last_read = false;
  while (!last_read) {
    // Once the pusher is done, one more read sees every push.
    last_read = pushes_done.load();
    std::fill(got.begin(), got.end(), std::numeric_limits<float>::quiet_NaN());
    absl::Status s = cluster->PullLatest(1, {"table"}, {got.data()});
    if (!first_read.HasBeenNotified()) first_read.Notify();
    if (!s.ok()) {
      ADD_FAILURE() << "PullLatest: " << s;
      break;
    }
    ++reads;
    if (cluster->ReadsMirror(0) && cluster->ReadsMirror(1)) ++mirror_reads;
    for (size_t k = 0; k < shards.size(); ++k) {
      const float* p = got.data() + shards[k].byte_offset / sizeof(float);
      const size_t n = shards[k].bytes / sizeof(float);
      for (size_t j = 1; j < n; ++j) {
        if (!(p[j] == p[0])) {
          if (torn++ == 0) {
            first_problem =
                absl::StrCat("read ", reads, " shard ", k, ": element 0 is ",
                             p[0], ", element ", j, " is ", p[j]);
          }
          break;
        }
      }
      // The value after `steps` pushes is 1 - steps * kGrad.
      const float steps_f = (1.0f - p[0]) / kGrad;
      const bool in_range = std::isfinite(steps_f) && steps_f >= 0 &&
                            steps_f <= static_cast<float>(kPushes);
      const int64_t steps = in_range ? static_cast<int64_t>(steps_f) : -1;
      if (!in_range || steps_f != static_cast<float>(steps)) {
        ++unexpected;
        if (first_problem.empty()) {
          first_problem =
              absl::StrCat("read ", reads, " shard ", k, ": value ", p[0]);
        }
        continue;
      }
      if (steps < last_steps[k]) ++backwards;
      last_steps[k] = steps;
    }
  }
  pusher.join();
  std::cout << reads << " PullLatest calls, " << mirror_reads
            << " read both mirrors\n";
  EXPECT_EQ(torn, 0) << first_problem;
  EXPECT_EQ(unexpected, 0) << first_problem;
  EXPECT_EQ(backwards, 0);
  EXPECT_GT(mirror_reads, 0);
  // The last read came after the last push.
  for (size_t k = 0; k < shards.size(); ++k) {
    EXPECT_EQ(last_steps[k], kPushes) << k;
  }
  EXPECT_TRUE(cluster->ReadsMirror(0));
  EXPECT_TRUE(cluster->ReadsMirror(1));
}

// --- MirrorVariables across jobs.

TEST_F(SharedExchangeAuthTest, AnotherJobCannotMirrorIntoARegionOrAVariable) {
  auto worker_a = Client("worker-a");
  auto worker_b = Client("worker-b");
  auto region_a = NewRegion();
  auto region_b = NewRegion();
  ASSERT_TRUE(region_a && region_b);
  auto id_a = worker_a->AttachSharedRegion(*region_a);
  ASSERT_TRUE(id_a.ok()) << id_a.status();
  auto id_b = worker_b->AttachSharedRegion(*region_b);
  ASSERT_TRUE(id_b.ok()) << id_b.status();

  EXPECT_THAT(Client("")->MirrorVariables(*id_a, {"w"}, {kMirrorOffset}),
              StatusIs(absl::StatusCode::kUnauthenticated));
  // Job b's worker, its own variable, job a's region.
  EXPECT_THAT(worker_b->MirrorVariables(*id_a, {"v"}, {kMirrorOffset}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // Job a's worker, its own region, job b's variable (alone or after one
  // of its own).
  EXPECT_THAT(worker_a->MirrorVariables(*id_a, {"v"}, {kMirrorOffset}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(
      worker_a->MirrorVariables(*id_a, {"w", "v"}, {kMirrorOffset, 2560}),
      StatusIs(absl::StatusCode::kPermissionDenied));
  // Job b's worker, its own region, job a's variable.
  EXPECT_THAT(worker_b->MirrorVariables(*id_b, {"w"}, {kMirrorOffset}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_TRUE(AllZero(*region_a, kSharedRegionNonceBytes, kRegionBytes));
  EXPECT_TRUE(AllZero(*region_b, kSharedRegionNonceBytes, kRegionBytes));

  // Each job mirrors its own variables into its own region.
  STRATA_ASSERT_OK(worker_a->MirrorVariables(*id_a, {"w"}, {kMirrorOffset}));
  STRATA_ASSERT_OK(worker_b->MirrorVariables(*id_b, {"v"}, {kMirrorOffset}));
  for (SharedRegion* r : {region_a.get(), region_b.get()}) {
    const MirrorView m = ReadMirror(*r, kMirrorOffset, 4);
    EXPECT_EQ(m.seq % 2, 0u);
    EXPECT_NE(m.seq, 0u);
    EXPECT_EQ(m.version, 0);
    EXPECT_EQ(m.value, std::vector<float>(4, 1.0f));
  }
}

// --- ServeSharedRegion: the doorbell (layout in common/shared_layout.h),
// rung by hand through the region and by PsCluster.

// Where the tests put a doorbell in a kRegionBytes region, clear of
// kPushOffset and kPullOffset: the control block, then two message areas
// of kMessageBytes (up to byte 2624).
constexpr uint64_t kDoorbellOffset = 2048;
constexpr uint32_t kMessageBytes = 256;
// A doorbell that exactly fills the end of a kRegionBytes region.
constexpr uint64_t kLastDoorbellOffset =
    kRegionBytes - kDoorbellControlBytes - 2 * kMessageBytes;
static_assert(kLastDoorbellOffset % 64 == 0, "a doorbell offset");

// The uint32 at byte `at` of the doorbell at `control_offset`.
std::atomic<uint32_t>* DoorbellWord(const SharedRegion& region,
                                    uint64_t control_offset, size_t at) {
  return reinterpret_cast<std::atomic<uint32_t>*>(region.data() +
                                                  control_offset + at);
}

// What a doorbell answered.
struct DoorbellAnswer {
  bool answered = false;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  uint32_t answer_bytes = 0;  // as the control block says
  std::string bytes;          // the answer area's first answer_bytes
};

// Writes `bytes` into the request area of the doorbell at `control_offset`
// (message areas of kMessageBytes), declares `declared` request bytes,
// posts the request and waits up to `timeout` for the answer. An answered
// doorbell is set idle again; an unanswered one keeps the request posted.
DoorbellAnswer Ring(const SharedRegion& region, const std::string& bytes,
                    uint32_t declared,
                    absl::Duration timeout = absl::Seconds(2),
                    uint64_t control_offset = kDoorbellOffset) {
  char* control = region.data() + control_offset;
  std::atomic<uint32_t>* state = DoorbellWord(region, control_offset, 0);
  std::memcpy(control + kDoorbellControlBytes, bytes.data(), bytes.size());
  DoorbellWord(region, control_offset, 4)
      ->store(declared, std::memory_order_relaxed);
  state->store(kDoorbellRequest, std::memory_order_release);
  FutexWakeAll(state);
  const absl::Time deadline = absl::Now() + timeout;
  DoorbellAnswer answer;
  while (state->load(std::memory_order_acquire) != kDoorbellAnswer) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return answer;
    FutexWait(state, kDoorbellRequest, std::min(left, absl::Milliseconds(20)));
  }
  answer.answered = true;
  answer.answer_bytes =
      DoorbellWord(region, control_offset, 8)->load(std::memory_order_relaxed);
  answer.code = static_cast<absl::StatusCode>(
      DoorbellWord(region, control_offset, 12)
          ->load(std::memory_order_relaxed));
  answer.bytes.assign(control + kDoorbellControlBytes + kMessageBytes,
                      std::min(answer.answer_bytes, kMessageBytes));
  state->store(kDoorbellIdle, std::memory_order_release);
  return answer;
}

// Rings `request`, serialized, at the doorbell at `control_offset`.
DoorbellAnswer RingRequest(const SharedRegion& region,
                           const v1::SharedExchangeRequest& request,
                           absl::Duration timeout = absl::Seconds(2),
                           uint64_t control_offset = kDoorbellOffset) {
  const std::string bytes = request.SerializeAsString();
  EXPECT_LE(bytes.size(), kMessageBytes);
  return Ring(region, bytes, static_cast<uint32_t>(bytes.size()), timeout,
              control_offset);
}

// The response of an answered, successful exchange.
v1::SharedExchangeResponse Parsed(const DoorbellAnswer& answer) {
  v1::SharedExchangeResponse response;
  EXPECT_TRUE(answer.answered);
  EXPECT_EQ(answer.code, absl::StatusCode::kOk) << answer.bytes;
  EXPECT_TRUE(response.ParseFromString(answer.bytes));
  return response;
}

// SharedExchangeTest with the region's doorbell served at kDoorbellOffset.
class DoorbellTest : public SharedExchangeTest {
 protected:
  void SetUp() override {
    SharedExchangeTest::SetUp();
    if (HasFatalFailure()) return;
    auto pid = client_->ServeSharedRegion(id_, kDoorbellOffset, kMessageBytes);
    ASSERT_TRUE(pid.ok()) << pid.status();
    EXPECT_EQ(*pid, static_cast<int64_t>(::getpid()));  // in-process server
  }

  // Expects the doorbell at `control_offset` to leave a posted push of
  // "w" unanswered for 300 ms.
  void ExpectNoAnswer(uint64_t control_offset) {
    WriteFloats(region_.get(), kPushOffset, {1, 1, 1, 1});
    const DoorbellAnswer answer = RingRequest(
        *region_, Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"}),
        absl::Milliseconds(300), control_offset);
    EXPECT_FALSE(answer.answered)
        << absl::StatusCodeToString(answer.code) << ": " << answer.bytes;
    EXPECT_EQ(DoorbellWord(*region_, control_offset, 0)->load(),
              kDoorbellRequest);
  }
};

TEST_F(DoorbellTest, RoundTripPushesPullsAndAppliesATagOnce) {
  WriteFloats(region_.get(), kPushOffset, {1, 2, 3, 4});
  const v1::SharedExchangeRequest request =
      Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"});
  const v1::SharedExchangeResponse first =
      Parsed(RingRequest(*region_, request));
  ASSERT_EQ(first.push().results_size(), 1);
  EXPECT_TRUE(first.push().results(0).applied());
  EXPECT_FALSE(first.push().results(0).duplicate());
  EXPECT_EQ(first.push().results(0).version(), 1);
  ASSERT_EQ(first.pulled_size(), 1);
  EXPECT_EQ(first.pulled(0).name(), "w");
  EXPECT_EQ(first.pulled(0).version(), 1);
  EXPECT_EQ(first.pulled(0).bytes(), 16);
  const std::vector<float> pulled = ReadFloats(*region_, kPullOffset, 4);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(pulled[i], 1.0f - 0.1f * (i + 1));
  int64_t version = -1;
  EXPECT_EQ(PullW(&version), pulled);
  EXPECT_EQ(version, 1);
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pushes_applied(), 1);
  EXPECT_EQ(stats->pushes_duplicate(), 0);

  // The same tag again: a duplicate, the pull still written.
  std::memset(region_->data() + kPullOffset, 0, 16);
  const v1::SharedExchangeResponse second =
      Parsed(RingRequest(*region_, request));
  ASSERT_EQ(second.push().results_size(), 1);
  EXPECT_TRUE(second.push().results(0).duplicate());
  EXPECT_EQ(second.push().results(0).version(), 1);
  ASSERT_EQ(second.pulled_size(), 1);
  EXPECT_EQ(second.pulled(0).version(), 1);
  EXPECT_EQ(ReadFloats(*region_, kPullOffset, 4), pulled);
  EXPECT_EQ(PullW(&version), pulled);
  EXPECT_EQ(version, 1);
  stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pushes_applied(), 1);
  EXPECT_EQ(stats->pushes_duplicate(), 1);
  // Accounted under the call's name; the nonce is untouched.
  EXPECT_EQ(RpcCount(server_.get(), "ExchangeShared"), 2);
  EXPECT_EQ(std::string(region_->data(), 16), region_->nonce());
}

TEST_F(DoorbellTest, BadRequestsChangeNothingAndTheDoorbellKeepsServing) {
  std::memset(region_->data() + kPullOffset, 0x5a, 16);
  const std::vector<float> marker = ReadFloats(*region_, kPullOffset, 4);
  {
    SCOPED_TRACE("garbage");
    const DoorbellAnswer a = Ring(*region_, std::string(64, '\xff'), 64);
    ASSERT_TRUE(a.answered);
    EXPECT_EQ(a.code, absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(a.answer_bytes, a.bytes.size());
    EXPECT_THAT(a.bytes, ::testing::HasSubstr("not a SharedExchangeRequest"));
  }
  {
    SCOPED_TRACE("request bytes past the request area");
    const DoorbellAnswer a =
        Ring(*region_, std::string(kMessageBytes, '\xff'),
             std::numeric_limits<uint32_t>::max());
    ASSERT_TRUE(a.answered);
    EXPECT_EQ(a.code, absl::StatusCode::kInvalidArgument);
    EXPECT_LE(a.answer_bytes, kMessageBytes);
    EXPECT_THAT(a.bytes, ::testing::HasSubstr("not a SharedExchangeRequest"));
  }
  {
    SCOPED_TRACE("NaN gradient");
    WriteFloats(region_.get(), kPushOffset,
                {1, std::numeric_limits<float>::quiet_NaN(), 1, 1});
    const DoorbellAnswer a = RingRequest(
        *region_, Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"}));
    ASSERT_TRUE(a.answered);
    EXPECT_EQ(a.code, absl::StatusCode::kInvalidArgument) << a.bytes;
    EXPECT_FALSE(a.bytes.empty());
  }
  WriteFloats(region_.get(), kPushOffset, {1, 1, 1, 1});
  for (const char* what : {"min_version", "clock"}) {
    SCOPED_TRACE(what);
    v1::SharedExchangeRequest request =
        Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"});
    if (std::string(what) == "clock") {
      request.mutable_pull()->set_clock(1);
    } else {
      request.mutable_pull()->set_min_version(1);
    }
    const DoorbellAnswer a = RingRequest(*region_, request);
    ASSERT_TRUE(a.answered);
    EXPECT_EQ(a.code, absl::StatusCode::kInvalidArgument) << a.bytes;
    EXPECT_THAT(a.bytes, ::testing::HasSubstr("ExchangeShared call"));
  }
  EXPECT_EQ(ReadFloats(*region_, kPullOffset, 4), marker);
  ExpectWUnchanged();

  // Still served; the refused pushes left no trace of their tag.
  const v1::SharedExchangeResponse ok = Parsed(RingRequest(
      *region_, Exchange(id_, "w", 4, PushTag{"j", 0, 1}, {"w"})));
  ASSERT_EQ(ok.push().results_size(), 1);
  EXPECT_FALSE(ok.push().results(0).duplicate());
  EXPECT_EQ(ok.push().results(0).version(), 1);
  EXPECT_FLOAT_EQ(ReadFloats(*region_, kPullOffset, 4)[0], 0.9f);
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pushes_applied(), 1);
  EXPECT_EQ(stats->pushes_duplicate(), 0);
}

TEST_F(DoorbellTest, BadServeRequestsAreRefusedAndKeepTheDoorbell) {
  struct Case {
    const char* what;
    uint64_t region;
    uint64_t control_offset;
    uint32_t message_bytes;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {"offset 32", id_, 32, kMessageBytes,
       absl::StatusCode::kInvalidArgument},
      {"offset 2047", id_, kDoorbellOffset - 1, kMessageBytes,
       absl::StatusCode::kInvalidArgument},
      {"message_bytes 100", id_, kDoorbellOffset, 100,
       absl::StatusCode::kInvalidArgument},
      {"message_bytes 255", id_, kDoorbellOffset, 255,
       absl::StatusCode::kInvalidArgument},
      {"message_bytes 2 MiB", id_, kDoorbellOffset, 2u << 20,
       absl::StatusCode::kInvalidArgument},
      {"control block in the nonce", id_, 0, kMessageBytes,
       absl::StatusCode::kInvalidArgument},
      {"past the end", id_, kLastDoorbellOffset + 64, kMessageBytes,
       absl::StatusCode::kInvalidArgument},
      {"at 2^64 - 64", id_, std::numeric_limits<uint64_t>::max() - 63,
       kMessageBytes, absl::StatusCode::kInvalidArgument},
      {"unknown region", id_ + 1, kDoorbellOffset, kMessageBytes,
       absl::StatusCode::kFailedPrecondition},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_THAT(
        client_->ServeSharedRegion(c.region, c.control_offset, c.message_bytes),
        StatusIs(c.code));
  }
  EXPECT_EQ(RpcCount(server_.get(), "ServeSharedRegion"), 1);
  // The doorbell served before is still served.
  EXPECT_EQ(Parsed(RingRequest(*region_, Exchange(id_, "", 0, {}, {"w"})))
                .pulled_size(),
            1);

  // The last bytes of the region are accepted (this moves the doorbell).
  STRATA_ASSERT_OK(client_->ServeSharedRegion(id_, kLastDoorbellOffset,
                                              kMessageBytes));
  EXPECT_EQ(Parsed(RingRequest(*region_, Exchange(id_, "", 0, {}, {"w"}),
                               absl::Seconds(2), kLastDoorbellOffset))
                .pulled_size(),
            1);
  // 1 MiB message areas are accepted, one byte more is not.
  auto big = SharedRegion::Create(SharedRegion::kHeaderBytes +
                                  kDoorbellControlBytes + (2u << 20));
  ASSERT_TRUE(big.ok()) << big.status();
  auto big_id = client_->AttachSharedRegion(**big);
  ASSERT_TRUE(big_id.ok()) << big_id.status();
  EXPECT_THAT(client_->ServeSharedRegion(*big_id, SharedRegion::kHeaderBytes,
                                         (1u << 20) + 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  STRATA_ASSERT_OK(client_->ServeSharedRegion(
      *big_id, SharedRegion::kHeaderBytes, 1u << 20));
}

TEST_F(DoorbellTest, DetachStopsTheDoorbellAndOtherRegionsAreStillServed) {
  STRATA_ASSERT_OK(client_->DetachSharedRegion(id_));
  ExpectNoAnswer(kDoorbellOffset);
  ExpectWUnchanged();
  auto other = NewRegion();
  ASSERT_NE(other, nullptr);
  auto other_id = client_->AttachSharedRegion(*other);
  ASSERT_TRUE(other_id.ok()) << other_id.status();
  STRATA_ASSERT_OK(
      client_->ServeSharedRegion(*other_id, kDoorbellOffset, kMessageBytes));
  WriteFloats(other.get(), kPushOffset, {1, 1, 1, 1});
  const v1::SharedExchangeResponse ok = Parsed(RingRequest(
      *other, Exchange(*other_id, "w", 4, PushTag{"j", 0, 1}, {"w"})));
  ASSERT_EQ(ok.push().results_size(), 1);
  EXPECT_EQ(ok.push().results(0).version(), 1);
  EXPECT_FLOAT_EQ(ReadFloats(*other, kPullOffset, 4)[0], 0.9f);
}

TEST_F(DoorbellTest, ServingARegionAgainReplacesItsDoorbell) {
  STRATA_ASSERT_OK(client_->ServeSharedRegion(id_, kLastDoorbellOffset,
                                              kMessageBytes));
  ExpectNoAnswer(kDoorbellOffset);
  ExpectWUnchanged();
}

TEST_F(DoorbellTest, ShutdownStopsTheDoorbells) {
  EXPECT_EQ(Parsed(RingRequest(*region_, Exchange(id_, "", 0, {}, {"w"})))
                .pulled_size(),
            1);
  server_->Shutdown(absl::Seconds(1));
  ExpectNoAnswer(kDoorbellOffset);
  // (The store outlives the shut-down server's calls.)
  EXPECT_EQ(server_->store()->Stats().pushes_applied, 0);
}

TEST(ServeSharedRegionTest, BeyondMaxDoorbellsIsResourceExhausted) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  PsServerOptions options;
  options.service.shared_regions.max_doorbells = 1;
  auto server = PsServer::Start(options, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = PsClient::Connect((*server)->address(), ClientOptions());
  STRATA_ASSERT_OK(client->CreateVariable(Spec("w", {4})));
  auto r1 = NewRegion();
  auto r2 = NewRegion();
  ASSERT_TRUE(r1 && r2);
  auto id1 = client->AttachSharedRegion(*r1);
  auto id2 = client->AttachSharedRegion(*r2);
  ASSERT_TRUE(id1.ok() && id2.ok());

  STRATA_ASSERT_OK(client->ServeSharedRegion(*id1, kDoorbellOffset,
                                             kMessageBytes));
  EXPECT_THAT(
      client->ServeSharedRegion(*id2, kDoorbellOffset, kMessageBytes),
      StatusIsWithMessage(absl::StatusCode::kResourceExhausted, "limit 1"));
  // Serving the same region again replaces its doorbell: still one.
  STRATA_ASSERT_OK(client->ServeSharedRegion(*id1, kDoorbellOffset,
                                             kMessageBytes));
  EXPECT_EQ(Parsed(RingRequest(*r1, Exchange(*id1, "", 0, {}, {"w"})))
                .pulled_size(),
            1);
  // A detach frees its doorbell at once.
  STRATA_ASSERT_OK(client->DetachSharedRegion(*id1));
  STRATA_ASSERT_OK(client->ServeSharedRegion(*id2, kDoorbellOffset,
                                             kMessageBytes));
  EXPECT_EQ(Parsed(RingRequest(*r2, Exchange(*id2, "", 0, {}, {"w"})))
                .pulled_size(),
            1);
}

TEST_F(SharedExchangeAuthTest, AnotherJobCannotServeARegion) {
  auto worker_a = Client("worker-a");
  auto region = NewRegion();
  ASSERT_NE(region, nullptr);
  auto id = worker_a->AttachSharedRegion(*region);
  ASSERT_TRUE(id.ok()) << id.status();

  EXPECT_THAT(
      Client("")->ServeSharedRegion(*id, kDoorbellOffset, kMessageBytes),
      StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(Client("worker-b")->ServeSharedRegion(*id, kDoorbellOffset,
                                                    kMessageBytes),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(RpcCount(server_.get(), "ServeSharedRegion"), 0);

  // Job a's doorbell acts for job a: its variable, not job b's.
  STRATA_ASSERT_OK(
      worker_a->ServeSharedRegion(*id, kDoorbellOffset, kMessageBytes));
  std::memset(region->data() + kPullOffset, 0x5a, 16);
  const std::vector<float> marker = ReadFloats(*region, kPullOffset, 4);
  const DoorbellAnswer refused =
      RingRequest(*region, Exchange(*id, "", 0, {}, {"v"}));
  ASSERT_TRUE(refused.answered);
  EXPECT_EQ(refused.code, absl::StatusCode::kPermissionDenied)
      << refused.bytes;
  EXPECT_EQ(ReadFloats(*region, kPullOffset, 4), marker);
  EXPECT_EQ(Parsed(RingRequest(*region, Exchange(*id, "", 0, {}, {"w"})))
                .pulled_size(),
            1);
  EXPECT_EQ(ReadFloats(*region, kPullOffset, 4), std::vector<float>(4, 1.0f));
}

// Counts the calls of one method that reach a server through gRPC.
class MethodCounter : public grpc::experimental::Interceptor {
 public:
  MethodCounter(grpc::experimental::ServerRpcInfo* info,
                const std::string& method, std::atomic<int>* count) {
    if (method == info->method()) count->fetch_add(1);
  }
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }
};

class MethodCounterFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  MethodCounterFactory(std::string method, std::atomic<int>* count)
      : method_(std::move(method)), count_(count) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MethodCounter(info, method_, count_);
  }

 private:
  const std::string method_;
  std::atomic<int>* const count_;
};

TEST(DoorbellClusterTest, PushPullManyRingsTheDoorbellInsteadOfCalling) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  std::atomic<int> exchange_calls{0};
  PsServerOptions counted;
  counted.configure_builder = [&](grpc::ServerBuilder& b) {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        factories;
    factories.push_back(std::make_unique<MethodCounterFactory>(
        "/strata.v1.ParameterService/ExchangeShared", &exchange_calls));
    b.experimental().SetInterceptorCreators(std::move(factories));
  };
  PsClientOptions stream_options = ClientOptions();
  stream_options.shared_memory = false;
  auto shm = StartTwoPs(&logger, ClientOptions(), counted);
  ASSERT_TRUE(shm.ok()) << shm.status();
  auto stream = StartTwoPs(&logger, stream_options);
  ASSERT_TRUE(stream.ok()) << stream.status();

  const Shape kernel_shape = {300, 7};
  auto slices = FixedShardsPartition(kernel_shape, 2);
  ASSERT_TRUE(slices.ok()) << slices.status();
  for (PsCluster* c : {shm->cluster.get(), stream->cluster.get()}) {
    STRATA_ASSERT_OK(c->CreateVariable(
        Spec("dense/kernel", kernel_shape, "glorot_uniform"), *slices));
    STRATA_ASSERT_OK(c->CreateVariable(Spec("dense/bias", {7}, "zeros"), {}));
  }
  SameSteps last;
  PushSameSteps(shm->cluster.get(), stream->cluster.get(), 1, &last);
  const std::vector<std::string> names = {"dense/kernel", "dense/bias"};
  std::vector<float>& shm_kernel = last.shm_kernel;
  std::vector<float>& shm_bias = last.shm_bias;
  const std::vector<float>& stream_kernel = last.stream_kernel;
  const std::vector<float>& stream_bias = last.stream_bias;
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    PsServer* s = shm->servers[i].get();
    EXPECT_TRUE(shm->cluster->UsesSharedMemory(0, i));
    EXPECT_EQ(RpcCount(s, "ServeSharedRegion"), 1);
    EXPECT_EQ(RpcCount(s, "ExchangeShared"), kSameSteps);
    EXPECT_EQ(RpcCount(s, "PushVariables"), 0);
    EXPECT_EQ(RpcCount(s, "PullVariables"), 0);
  }
  // Every exchange went through a doorbell: no ExchangeShared call.
  EXPECT_EQ(exchange_calls.load(), 0);

  // A pull that waits for a version takes the call, one per task.
  PullOptions wait;
  wait.min_version = kSameSteps;
  std::fill(shm_kernel.begin(), shm_kernel.end(), 0.0f);
  STRATA_ASSERT_OK(shm->cluster->PushPullMany(
      0, names, {}, PushTag{}, {shm_kernel.data(), shm_bias.data()}, wait));
  EXPECT_EQ(shm_kernel, stream_kernel);
  EXPECT_EQ(shm_bias, stream_bias);
  EXPECT_EQ(exchange_calls.load(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(RpcCount(shm->servers[i].get(), "ExchangeShared"), kSameSteps + 1)
        << i;
  }
}

TEST(DoorbellClusterTest, ALaneWhoseDoorbellStoppedAttachesAgain) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  PsServerOptions options;
  // Room for one region (an attach drops any other) and one doorbell.
  options.service.shared_regions.max_regions = 1;
  options.service.shared_regions.idle_timeout = absl::ZeroDuration();
  options.service.shared_regions.max_doorbells = 1;
  auto server = PsServer::Start(options, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  PsClientOptions copts = ClientOptions();
  copts.deadline = absl::Milliseconds(800);
  auto cluster = PsCluster::Connect({(*server)->address()}, copts);
  STRATA_ASSERT_OK(cluster->CreateVariable(Spec("w", {4}), {}));
  std::vector<float> g = {1, 1, 1, 1};
  std::vector<float> got(4);
  // Lane 0 attaches and gets the doorbell; lane 1's attach drops lane 0's
  // region.
  STRATA_ASSERT_OK(cluster->PushPullMany(0, {"w"}, {g.data()},
                                         PushTag{"j", 0, 0}, {got.data()}));
  EXPECT_TRUE(cluster->UsesSharedMemory(0, 0));
  STRATA_ASSERT_OK(cluster->PushPullMany(1, {"w"}, {g.data()},
                                         PushTag{"j", 1, 0}, {got.data()}));
  EXPECT_FLOAT_EQ(got[0], 0.8f);
  // Wait until lane 0's doorbell thread saw its region gone and stopped:
  // with one doorbell allowed, a region of the test's own is served only
  // once no other doorbell runs.
  auto probe = PsClient::Connect((*server)->address(), ClientOptions());
  auto probe_region = NewRegion();
  ASSERT_NE(probe_region, nullptr);
  auto probe_id = probe->AttachSharedRegion(*probe_region);
  ASSERT_TRUE(probe_id.ok()) << probe_id.status();
  const absl::Time poll_deadline = absl::Now() + absl::Seconds(2);
  absl::Status served;
  while (true) {
    served = probe->ServeSharedRegion(*probe_id, kDoorbellOffset, kMessageBytes)
                 .status();
    if (served.code() != absl::StatusCode::kResourceExhausted ||
        absl::Now() > poll_deadline) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  STRATA_ASSERT_OK(served);

  // Lane 0's next call finds its region gone and attaches again (as
  // without a doorbell), long before its deadline.
  const absl::Time start = absl::Now();
  const absl::Status first = cluster->PushPullMany(
      0, {"w"}, {g.data()}, PushTag{"j", 0, 1}, {got.data()});
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(first.ok()) << first << " after " << took;
  EXPECT_LT(took, copts.deadline);
  // The lane works afterwards either way, still through shared memory.
  STRATA_ASSERT_OK(cluster->PushPullMany(0, {"w"}, {g.data()},
                                         PushTag{"j", 0, 2}, {got.data()}));
  EXPECT_TRUE(cluster->UsesSharedMemory(0, 0));
  std::vector<float> pulled(4);
  auto r = cluster->ps(0)->Pull("w", pulled.data(), 16);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(got, pulled);
  EXPECT_EQ(r->version, first.ok() ? 4 : 3);
}

}  // namespace
}  // namespace strata
