// The parameter service's wire contracts, each stated in the protos and in
// docs/PROTOCOL.md, checked the way a client written in another language
// from the .proto files alone meets them: a real PS in-process on
// 127.0.0.1:0, driven through the generated stubs and plain TensorChunk
// messages (nothing of Strata's client library but the shared-memory
// region helper).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/ps_client.h"
#include "client/shared_region.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/ps_server.h"
#include "strata/v1/coordinator.pb.h"
#include "strata/v1/parameter_server.grpc.pb.h"
#include "strata/v1/worker_service.pb.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

std::string Ones(int n) { return Floats(std::vector<float>(n, 1.0f)); }

// One message of a client stream.
struct Chunk {
  int64_t offset = 0;
  std::string data;
  bool header = false;  // carry the header (the first message always does)
};

// The whole payload in one message.
std::vector<Chunk> Whole(std::string data) {
  return {Chunk{0, std::move(data), true}};
}

v1::VariableSpec Spec(const std::string& name, std::vector<int64_t> shape,
                      const std::string& optimizer = "assign_add",
                      v1::UpdateMode::Kind mode = v1::UpdateMode::ASYNC,
                      int replicas = 0) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_type(optimizer);
  spec.mutable_optimizer()->set_learning_rate(1);
  spec.mutable_update_mode()->set_kind(mode);
  spec.mutable_update_mode()->set_num_replicas(replicas);
  spec.mutable_update_mode()->set_staleness(1);
  return spec;
}

// A PushVariables header for float32 variables `first` and `second` of
// shape [2] each (16 payload bytes), untagged.
v1::PushVariablesHeader PairHeader(const char* first, const char* second) {
  v1::PushVariablesHeader h;
  for (const char* name : {first, second}) {
    v1::VariableSlot* slot = h.add_variables();
    slot->set_name(name);
    slot->set_dtype(v1::DT_FLOAT32);
    slot->add_shape(2);
    slot->set_bytes(8);
  }
  h.set_payload_bytes(16);
  return h;
}

v1::PushHeader DenseHeader(const std::string& name, std::vector<int64_t> shape,
                           int64_t payload_bytes) {
  v1::PushHeader h;
  h.set_name(name);
  h.set_dtype(v1::DT_FLOAT32);
  for (int64_t d : shape) h.add_shape(d);
  h.set_payload_bytes(payload_bytes);
  return h;
}

class WireContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PsServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.checkpoint_dir = ::testing::TempDir() + "/wire_contract_" +
                             std::to_string(::getpid());
    auto s = PsServer::Start(options, &logger_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::ParameterService::NewStub(channel_);
  }

  void Create(const v1::VariableSpec& spec) {
    grpc::ClientContext ctx;
    v1::CreateVariableRequest req;
    *req.mutable_spec() = spec;
    v1::CreateVariableResponse resp;
    grpc::Status s = stub_->CreateVariable(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  template <typename Resp, typename Open>
  grpc::Status Send(Open open, const std::string& header,
                    const std::vector<Chunk>& chunks, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    auto writer = open(&ctx, resp);
    for (size_t i = 0; i < chunks.size(); ++i) {
      v1::TensorChunk c;
      if (i == 0 || chunks[i].header) c.set_header(header);
      c.set_offset(chunks[i].offset);
      c.set_data(chunks[i].data);
      if (!writer->Write(c)) break;  // the server already answered
    }
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status Push(const v1::PushHeader& header,
                    const std::vector<Chunk>& chunks,
                    v1::PushResponse* resp = nullptr) {
    v1::PushResponse ignored;
    return Send(
        [this](grpc::ClientContext* ctx, v1::PushResponse* r) {
          return stub_->Push(ctx, r);
        },
        header.SerializeAsString(), chunks, resp ? resp : &ignored);
  }

  grpc::Status PushVariables(const v1::PushVariablesHeader& header,
                             const std::vector<Chunk>& chunks,
                             v1::PushVariablesResponse* resp = nullptr) {
    v1::PushVariablesResponse ignored;
    return Send(
        [this](grpc::ClientContext* ctx, v1::PushVariablesResponse* r) {
          return stub_->PushVariables(ctx, r);
        },
        header.SerializeAsString(), chunks, resp ? resp : &ignored);
  }

  grpc::Status Assign(const v1::AssignHeader& header,
                      const std::vector<Chunk>& chunks) {
    v1::AssignResponse resp;
    return Send(
        [this](grpc::ClientContext* ctx, v1::AssignResponse* r) {
          return stub_->Assign(ctx, r);
        },
        header.SerializeAsString(), chunks, &resp);
  }

  // Pulls a whole variable; `deadline` bounds the call.
  grpc::Status Pull(const v1::PullRequest& req, std::vector<float>* out,
                    int64_t* version = nullptr,
                    std::chrono::milliseconds deadline =
                        std::chrono::milliseconds(20000)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    auto reader = stub_->Pull(&ctx, req);
    v1::TensorChunk c;
    std::string payload;
    bool first = true;
    while (reader->Read(&c)) {
      if (first) {
        v1::PullHeader h;
        EXPECT_TRUE(h.ParseFromString(c.header()));
        if (version != nullptr) *version = h.version();
        first = false;
      }
      EXPECT_EQ(c.offset(), static_cast<int64_t>(payload.size()));
      payload += c.data();
    }
    grpc::Status s = reader->Finish();
    if (s.ok() && out != nullptr) {
      out->resize(payload.size() / sizeof(float));
      std::memcpy(out->data(), payload.data(), payload.size());
    }
    return s;
  }

  std::vector<float> Value(const std::string& name) {
    v1::PullRequest req;
    req.set_name(name);
    std::vector<float> out;
    grpc::Status s = Pull(req, &out);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out;
  }

  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::unique_ptr<PsServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ParameterService::Stub> stub_;
};

// ---------------------------------------------------------------------------
// Tags: an untagged push is applied every time; a tagged one at most once.

TEST_F(WireContractTest, UntaggedPushesFromManyThreadsAreEachApplied) {
  Create(Spec("counter", {4}));
  constexpr int kThreads = 8, kPushes = 200;
  std::atomic<int> failed{0}, duplicate{0}, not_applied{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPushes; ++i) {
        v1::PushResponse resp;
        grpc::Status s =
            Push(DenseHeader("counter", {4}, 16), Whole(Ones(4)), &resp);
        if (!s.ok()) ++failed;
        if (resp.duplicate()) ++duplicate;
        if (!resp.applied()) ++not_applied;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(duplicate.load(), 0);
  EXPECT_EQ(not_applied.load(), 0);
  EXPECT_THAT(Value("counter"),
              ::testing::Each(static_cast<float>(kThreads * kPushes)));
}

TEST_F(WireContractTest, UntaggedRowPushesAreEachApplied) {
  Create(Spec("table", {3, 2}));
  for (int i = 0; i < 5; ++i) {
    v1::PushHeader h = DenseHeader("table", {1, 2}, 8 + 8);
    h.set_rows(true);
    h.set_num_rows(1);
    const int64_t id = 2;
    std::string payload(reinterpret_cast<const char*>(&id), 8);
    payload += Ones(2);
    v1::PushResponse resp;
    grpc::Status s = Push(h, Whole(payload), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_FALSE(resp.duplicate());
  }
  EXPECT_EQ(Value("table"), (std::vector<float>{0, 0, 0, 0, 5, 5}));
}

TEST_F(WireContractTest, UntaggedPushVariablesAreEachApplied) {
  Create(Spec("a", {2}));
  Create(Spec("b", {3}));
  v1::PushVariablesHeader h;
  for (auto [name, n] : {std::pair<const char*, int>{"a", 2}, {"b", 3}}) {
    v1::VariableSlot* slot = h.add_variables();
    slot->set_name(name);
    slot->set_dtype(v1::DT_FLOAT32);
    slot->add_shape(n);
    slot->set_bytes(n * 4);
  }
  h.set_payload_bytes(20);
  for (int i = 0; i < 7; ++i) {
    v1::PushVariablesResponse resp;
    grpc::Status s = PushVariables(h, Whole(Ones(5)), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    for (const auto& r : resp.results()) EXPECT_FALSE(r.duplicate());
  }
  EXPECT_THAT(Value("a"), ::testing::Each(7.0f));
  EXPECT_THAT(Value("b"), ::testing::Each(7.0f));
}

TEST_F(WireContractTest, UntaggedSharedExchangePushesAreEachApplied) {
  Create(Spec("s", {4}));
  auto region = SharedRegion::Create(4096);
  ASSERT_TRUE(region.ok()) << region.status();
  auto client = PsClient::Connect(server_->address());
  auto id = client->AttachSharedRegion(**region);
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string ones = Ones(4);
  std::memcpy((*region)->data() + 1024, ones.data(), ones.size());
  v1::SharedExchangeRequest req;
  req.set_region(*id);
  v1::VariableSlot* slot = req.mutable_push()->add_variables();
  slot->set_name("s");
  slot->set_dtype(v1::DT_FLOAT32);
  slot->add_shape(4);
  slot->set_bytes(16);
  req.mutable_push()->set_payload_bytes(16);
  req.set_push_offset(1024);
  for (int i = 0; i < 6; ++i) {
    grpc::ClientContext ctx;
    v1::SharedExchangeResponse resp;
    grpc::Status s = stub_->ExchangeShared(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(resp.push().results_size(), 1);
    EXPECT_FALSE(resp.push().results(0).duplicate());
  }
  EXPECT_THAT(Value("s"), ::testing::Each(6.0f));
}

TEST_F(WireContractTest, TaggedPushIsAppliedOnceEvenWithEveryTagFieldAtDefault) {
  Create(Spec("w", {2}));
  v1::PushHeader h = DenseHeader("w", {2}, 8);
  h.mutable_tag();  // present, every member at its default
  v1::PushResponse first, second;
  ASSERT_TRUE(Push(h, Whole(Ones(2)), &first).ok());
  ASSERT_TRUE(Push(h, Whole(Ones(2)), &second).ok());
  EXPECT_TRUE(first.applied());
  EXPECT_FALSE(first.duplicate());
  EXPECT_TRUE(second.duplicate());
  EXPECT_FALSE(second.applied());
  EXPECT_THAT(Value("w"), ::testing::Each(1.0f));
  // The next step of the same worker is applied.
  h.mutable_tag()->set_step(1);
  ASSERT_TRUE(Push(h, Whole(Ones(2))).ok());
  EXPECT_THAT(Value("w"), ::testing::Each(2.0f));
}

// A push may name the version its gradient was computed from: counted in
// Stats; a negative one is refused naming the variable, and nothing of the
// push is applied.
TEST_F(WireContractTest, BaseVersionIsCountedAndANegativeOneIsRefused) {
  v1::VariableSpec spec = Spec("a", {2}, "sgd");
  spec.mutable_update_mode()->set_scale_by_staleness(true);
  Create(spec);
  Create(Spec("b", {2}));
  v1::PushVariablesHeader h = PairHeader("b", "a");
  h.mutable_variables(1)->set_base_version(-1);
  grpc::Status s = PushVariables(h, Whole(Ones(4)));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              ::testing::HasSubstr("gradient for variable 'a': base_version "
                                   "must be >= 0, got -1"));
  EXPECT_THAT(Value("a"), ::testing::Each(0.0f));
  EXPECT_THAT(Value("b"), ::testing::Each(0.0f));
  // Two pushes computed from version 0: the second is 1 update stale and
  // takes half the step.
  h.mutable_variables(1)->set_base_version(0);
  for (int i = 0; i < 2; ++i) {
    s = PushVariables(h, Whole(Ones(4)));
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_THAT(Value("a"), ::testing::Each(-1.5f));
  EXPECT_THAT(Value("b"), ::testing::Each(2.0f));
  grpc::ClientContext ctx;
  v1::StatsResponse stats;
  ASSERT_TRUE(stub_->Stats(&ctx, v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.pushes_with_base_version(), 2);
  EXPECT_EQ(stats.staleness_sum(), 1);
  EXPECT_EQ(stats.staleness_max(), 1);
}

TEST_F(WireContractTest, SyncAndStalenessVariablesRefuseUntaggedPushes) {
  Create(Spec("sync", {2}, "assign_add", v1::UpdateMode::SYNC, 2));
  Create(Spec("ssp", {2}, "assign_add", v1::UpdateMode::STALENESS, 2));
  for (const char* name : {"sync", "ssp"}) {
    grpc::Status s = Push(DenseHeader(name, {2}, 8), Whole(Ones(2)));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_THAT(s.error_message(), HasSubstr("PushTag.worker")) << name;
    EXPECT_THAT(s.error_message(), HasSubstr(name));
  }
  // PushVariables checks the tag against every variable before applying
  // any: the ASYNC variable listed first is left alone.
  Create(Spec("async", {2}));
  v1::PushVariablesHeader h = PairHeader("async", "sync");
  grpc::Status s = PushVariables(h, Whole(Ones(4)));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(Value("async"), ::testing::Each(0.0f));
  EXPECT_THAT(Value("sync"), ::testing::Each(0.0f));
  EXPECT_THAT(Value("ssp"), ::testing::Each(0.0f));
}

// ---------------------------------------------------------------------------
// payload_bytes is required on chunked pushes and assigns.

TEST_F(WireContractTest, PayloadBytesIsRequiredOnPushesAndAssigns) {
  Create(Spec("w", {4}));
  grpc::Status push = Push(DenseHeader("w", {4}, 0), Whole(Ones(4)));
  EXPECT_EQ(push.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(push.error_message(), HasSubstr("expected 16"));

  v1::AssignHeader a;
  a.set_name("w");
  a.set_dtype(v1::DT_FLOAT32);
  a.add_shape(4);
  grpc::Status assign = Assign(a, Whole(Ones(4)));
  EXPECT_EQ(assign.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(assign.error_message(), HasSubstr("expected 16"));

  v1::PushVariablesHeader pv;
  v1::VariableSlot* slot = pv.add_variables();
  slot->set_name("w");
  slot->set_dtype(v1::DT_FLOAT32);
  slot->add_shape(4);
  slot->set_bytes(16);
  grpc::Status many = PushVariables(pv, Whole(Ones(4)));
  EXPECT_EQ(many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(many.error_message(), HasSubstr("need 16"));
  EXPECT_THAT(Value("w"), ::testing::Each(0.0f));

  // With it, each is taken.
  a.set_payload_bytes(16);
  EXPECT_TRUE(Assign(a, Whole(Floats({1, 2, 3, 4}))).ok());
  EXPECT_TRUE(Push(DenseHeader("w", {4}, 16), Whole(Ones(4))).ok());
  EXPECT_EQ(Value("w"), (std::vector<float>{2, 3, 4, 5}));
}

// ---------------------------------------------------------------------------
// Chunks come in ascending, contiguous order and cover the payload exactly.

TEST_F(WireContractTest, ChunksInAscendingContiguousOrderAreAccepted) {
  Create(Spec("w", {4}));
  const std::string p = Floats({1, 2, 3, 4});
  // Header alone, then three pieces, with an empty message in between.
  std::vector<Chunk> chunks = {{0, "", true},
                               {0, p.substr(0, 4)},
                               {4, p.substr(4, 8)},
                               {12, ""},
                               {12, p.substr(12)}};
  v1::PushResponse resp;
  grpc::Status s = Push(DenseHeader("w", {4}, 16), chunks, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(resp.applied());
  EXPECT_EQ(Value("w"), (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(WireContractTest, ChunksOutOfOrderWithGapsOrOverlapsAreRefused) {
  Create(Spec("w", {4}));
  const std::string p = Floats({1, 2, 3, 4});
  struct Case {
    const char* what;
    std::vector<Chunk> chunks;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"reordered", {{8, p.substr(8), true}, {0, p.substr(0, 8)}},
       "chunk at offset 8, expected 0"},
      {"gap", {{0, p.substr(0, 4), true}, {8, p.substr(8)}},
       "chunk at offset 8, expected 4"},
      {"overlap", {{0, p.substr(0, 8), true}, {4, p.substr(4)}},
       "chunk at offset 4, expected 8"},
      {"too many bytes", {{0, p, true}, {16, p.substr(0, 4)}},
       "more than the 16 payload bytes"},
      {"too few bytes", {{0, p.substr(0, 12), true}},
       "ended after 12 of 16 payload bytes"},
      {"header repeated", {{0, p.substr(0, 8), true}, {8, p.substr(8), true}},
       "header repeated"},
  };
  for (const Case& c : cases) {
    grpc::Status s = Push(DenseHeader("w", {4}, 16), c.chunks);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_THAT(s.error_message(), HasSubstr(c.message)) << c.what;
  }
  // The same rules hold for Assign; nothing was ever applied.
  v1::AssignHeader a;
  a.set_name("w");
  a.set_dtype(v1::DT_FLOAT32);
  a.add_shape(4);
  a.set_payload_bytes(16);
  grpc::Status s = Assign(a, {{8, p.substr(8), true}, {0, p.substr(0, 8)}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("chunk at offset 8, expected 0"));
  EXPECT_THAT(Value("w"), ::testing::Each(0.0f));
}

// ---------------------------------------------------------------------------
// The exactly-once window: the last 4096 steps per (job, worker).

TEST_F(WireContractTest, ExactlyOnceWindowIsTheLast4096StepsPerJobAndWorker) {
  Create(Spec("w", {1}));
  auto tagged = [](const std::string& job, int64_t worker, int64_t step) {
    v1::PushHeader h = DenseHeader("w", {1}, 4);
    h.mutable_tag()->set_job(job);
    h.mutable_tag()->set_worker(worker);
    h.mutable_tag()->set_step(step);
    return h;
  };
  constexpr int64_t kWindow = 4096;
  for (int64_t step = 0; step <= kWindow; ++step) {
    grpc::Status s = Push(tagged("j", 1, step), Whole(Ones(1)));
    ASSERT_TRUE(s.ok()) << step << ": " << s.error_message();
  }
  EXPECT_THAT(Value("w"), ::testing::Each(static_cast<float>(kWindow + 1)));
  // Step 0 fell out of the window: ABORTED, not applied.
  grpc::Status old = Push(tagged("j", 1, 0), Whole(Ones(1)));
  EXPECT_EQ(old.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(old.error_message(), HasSubstr("exactly-once window"));
  // Step 1, the oldest of the 4096 remembered, is still a duplicate.
  v1::PushResponse resp;
  ASSERT_TRUE(Push(tagged("j", 1, 1), Whole(Ones(1)), &resp).ok());
  EXPECT_TRUE(resp.duplicate());
  // The window is per (job, worker): step 0 of another worker or job is new.
  ASSERT_TRUE(Push(tagged("j", 2, 0), Whole(Ones(1)), &resp).ok());
  EXPECT_TRUE(resp.applied());
  ASSERT_TRUE(Push(tagged("k", 1, 0), Whole(Ones(1)), &resp).ok());
  EXPECT_TRUE(resp.applied());
  EXPECT_THAT(Value("w"), ::testing::Each(static_cast<float>(kWindow + 3)));
}

// ---------------------------------------------------------------------------
// A wait that runs out is DEADLINE_EXCEEDED, answered by the server.

TEST_F(WireContractTest, PullWaitThatRunsOutIsDeadlineExceededFromTheServer) {
  Create(Spec("w", {2}));
  v1::PullRequest req;
  req.set_name("w");
  req.set_min_version(5);
  grpc::Status s = Pull(req, nullptr, nullptr, std::chrono::milliseconds(600));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server's answer, naming the wait (not gRPC's bare "Deadline
  // Exceeded" of a call cut off at the deadline).
  EXPECT_THAT(s.error_message(), HasSubstr("pull timed out waiting"));
  EXPECT_THAT(s.error_message(), HasSubstr("version"));

  // PullVariables says the same.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(600));
  v1::PullVariablesRequest many;
  many.add_names("w");
  many.set_min_version(5);
  auto reader = stub_->PullVariables(&ctx, many);
  v1::TensorChunk c;
  while (reader->Read(&c)) {
  }
  grpc::Status ms = reader->Finish();
  EXPECT_EQ(ms.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(ms.error_message(), HasSubstr("pull timed out waiting"));

  // Once the version is reached the same pull succeeds.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Push(DenseHeader("w", {2}, 8), Whole(Ones(2))).ok());
  }
  int64_t version = 0;
  EXPECT_TRUE(Pull(req, nullptr, &version).ok());
  EXPECT_EQ(version, 5);
}

// ---------------------------------------------------------------------------
// Error messages read as one sentence: no status nested inside another.

TEST_F(WireContractTest, ErrorMessagesNestNoStatusAndNameTheField) {
  Create(Spec("w", {4}));
  v1::PushHeader bad_dtype = DenseHeader("w", {4}, 16);
  bad_dtype.set_dtype(v1::DT_INVALID);
  grpc::Status s = Push(bad_dtype, Whole(Ones(4)));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("PushHeader.dtype"));

  v1::VariableSpec spec = Spec("x", {4});
  spec.set_dtype(v1::DT_INVALID);
  grpc::ClientContext ctx;
  v1::CreateVariableRequest req;
  *req.mutable_spec() = spec;
  v1::CreateVariableResponse resp;
  grpc::Status create = stub_->CreateVariable(&ctx, req, &resp);
  EXPECT_EQ(create.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::PushHeader nan = DenseHeader("w", {4}, 16);
  grpc::Status nan_push = Push(
      nan, Whole(Floats({1, std::numeric_limits<float>::quiet_NaN(), 0, 0})));
  EXPECT_EQ(nan_push.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::Status unknown = Push(DenseHeader("nope", {4}, 16), Whole(Ones(4)));
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);

  // (No std::regex here: gcc 12's <regex> trips -Wmaybe-uninitialized
  // under ASan.)
  const char* const kCodes[] = {
      "OK",        "CANCELLED",         "UNKNOWN",
      "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  for (const grpc::Status& st : {s, create, nan_push, unknown}) {
    for (const char* code : kCodes) {
      EXPECT_THAT(st.error_message(), Not(HasSubstr(std::string(code) + ":")))
          << st.error_message();
    }
  }
  EXPECT_THAT(Value("w"), ::testing::Each(0.0f));
}

// ---------------------------------------------------------------------------
// docs/PROTOCOL.md names only rpcs, messages and fields that exist, and
// covers every rpc of the parameter service.

TEST(ProtocolDocTest, EveryNameItUsesExistsAndEveryRpcIsCovered) {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/docs/PROTOCOL.md");
  ASSERT_TRUE(in) << "docs/PROTOCOL.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();

  // Link the descriptors of every proto file into the pool.
  (void)v1::PushHeader::descriptor();
  (void)v1::RegisterRequest::descriptor();
  (void)v1::CollectiveMessage::descriptor();
  const google::protobuf::DescriptorPool* pool =
      google::protobuf::DescriptorPool::generated_pool();
  const std::string pkg = "strata.v1.";

  // `Name`, `Name.member` and `Service.Method` in backticks, PascalCase
  // (an upper-case letter, then a lower-case one).
  auto is_word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  };
  std::set<std::string> mentioned;
  int checked = 0;
  for (size_t open = doc.find('`'); open != std::string::npos;) {
    const size_t close = doc.find('`', open + 1);
    if (close == std::string::npos) break;
    const std::string span = doc.substr(open + 1, close - open - 1);
    open = doc.find('`', close + 1);
    const size_t dot = span.find('.');
    const std::string type = span.substr(0, dot);
    const std::string member =
        dot == std::string::npos ? "" : span.substr(dot + 1);
    if (type.size() < 2 ||
        !std::isupper(static_cast<unsigned char>(type[0])) ||
        !std::islower(static_cast<unsigned char>(type[1])) ||
        !std::all_of(type.begin(), type.end(), is_word) ||
        !std::all_of(member.begin(), member.end(), is_word) ||
        (dot != std::string::npos && member.empty())) {
      continue;  // not a protocol name (a flag, a status code, a path)
    }
    ++checked;
    if (const auto* m = pool->FindMessageTypeByName(pkg + type)) {
      if (!member.empty()) {
        EXPECT_NE(m->FindFieldByName(member), nullptr)
            << "docs/PROTOCOL.md names " << type << "." << member
            << ", which " << type << " does not have";
      }
      continue;
    }
    if (const auto* svc = pool->FindServiceByName(pkg + type)) {
      if (!member.empty()) {
        EXPECT_NE(svc->FindMethodByName(member), nullptr)
            << "docs/PROTOCOL.md names rpc " << type << "." << member
            << ", which does not exist";
        mentioned.insert(type + "." + member);
      }
      continue;
    }
    if (const auto* e = pool->FindEnumTypeByName(pkg + type)) {
      if (!member.empty()) {
        EXPECT_NE(e->FindValueByName(member), nullptr)
            << "docs/PROTOCOL.md names " << type << "." << member;
      }
      continue;
    }
    ADD_FAILURE() << "docs/PROTOCOL.md names `" << span
                  << "`, which is no message, enum or service of strata.v1";
  }
  EXPECT_GT(checked, 20);
  const auto* ps = pool->FindServiceByName(pkg + "ParameterService");
  ASSERT_NE(ps, nullptr);
  for (int i = 0; i < ps->method_count(); ++i) {
    const std::string name = "ParameterService." + ps->method(i)->name();
    EXPECT_TRUE(mentioned.count(name) > 0)
        << "docs/PROTOCOL.md does not cover rpc " << name;
  }
}

}  // namespace
}  // namespace strata
