// The collectives over real WorkerServers on 127.0.0.1 (ranks as threads of
// this process, one server per rank), group lifecycle, failure detection and
// GetState.
#include "collective/worker_service.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/chunk_codec.h"
#include "rpc/grpc_status.h"
#include "tests/collective_test_util.h"
#include "tests/test_util.h"

namespace strata {
namespace collective {
namespace {

using testing_util::CheckAllReduce;
using testing_util::CheckAllReduceAllTypes;
using testing_util::CheckBroadcast;
using testing_util::RunRanks;
using ::testing::AnyOf;
using ::testing::HasSubstr;

// N WorkerServers on 127.0.0.1:0 and, when opened, one group across them.
// Transports are declared after servers, so they are destroyed first.
struct Cluster {
  std::vector<std::unique_ptr<WorkerServer>> servers;
  std::vector<std::unique_ptr<Transport>> transports;

  std::vector<std::string> Addresses() const {
    std::vector<std::string> out;
    for (const auto& s : servers) out.push_back(s->address());
    return out;
  }
  std::vector<Transport*> Ptrs() const {
    std::vector<Transport*> out;
    for (const auto& t : transports) out.push_back(t.get());
    return out;
  }
  // Opens `group` on every server; false (with a test failure) on error.
  bool Open(int64_t group, const CollectiveOptions& options) {
    transports.clear();
    const auto peers = Addresses();
    for (size_t r = 0; r < servers.size(); ++r) {
      auto t = servers[r]->OpenGroup(group, static_cast<int>(r), peers,
                                     options);
      EXPECT_TRUE(t.ok()) << t.status();
      if (!t.ok()) return false;
      transports.push_back(*std::move(t));
    }
    return true;
  }
};

std::unique_ptr<Cluster> StartCluster(int n,
                                      const WorkerServerOptions& so = {}) {
  auto c = std::make_unique<Cluster>();
  for (int r = 0; r < n; ++r) {
    auto s = WorkerServer::Start(so, nullptr);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return nullptr;
    c->servers.push_back(*std::move(s));
  }
  return c;
}

CollectiveOptions Options(int64_t pack_bytes = 1 << 20,
                          absl::Duration timeout = absl::Seconds(60)) {
  CollectiveOptions o;
  o.pack_bytes = pack_bytes;
  o.timeout = timeout;
  return o;
}

// --- all-reduce and broadcast over gRPC ----------------------------------

class GrpcAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(GrpcAllReduceTest, SumsEveryDtypeAndUnevenCounts) {
  const int n = GetParam();
  auto c = StartCluster(n);
  ASSERT_NE(c, nullptr);
  int64_t group = 0;
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{13},
                        int64_t{1009}, int64_t{100003}}) {
    if (count < 0) continue;
    ASSERT_TRUE(c->Open(++group, Options()));
    SCOPED_TRACE(absl::StrCat(n, " ranks, ", count, " elements"));
    CheckAllReduceAllTypes(c->Ptrs(), count, Options(),
                           absl::StrCat("sum", count));
  }
}

TEST_P(GrpcAllReduceTest, SumsWithSmallPacksAndAWindowOfOne) {
  const int n = GetParam();
  WorkerServerOptions so;
  so.max_sends_in_flight = 1;
  so.channels_per_peer = 2;
  auto c = StartCluster(n, so);
  ASSERT_NE(c, nullptr);
  int64_t group = 0;
  for (int64_t pack_bytes : {int64_t{8}, int64_t{1000}}) {
    for (int64_t count : {int64_t{3}, int64_t{257}}) {
      ASSERT_TRUE(c->Open(++group, Options(pack_bytes)));
      SCOPED_TRACE(absl::StrCat(n, " ranks, ", count, " elements, packs of ",
                                pack_bytes, " bytes"));
      CheckAllReduceAllTypes(c->Ptrs(), count, Options(pack_bytes),
                             absl::StrCat("p", pack_bytes, "/", count));
    }
  }
}

TEST_P(GrpcAllReduceTest, MeanAndBroadcast) {
  const int n = GetParam();
  auto c = StartCluster(n);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Open(1, Options(4096)));
  CheckAllReduce<float>(c->Ptrs(), 30011, Options(4096), "mean32",
                        /*mean=*/true);
  CheckAllReduce<double>(c->Ptrs(), 3001, Options(4096), "mean64",
                         /*mean=*/true);
  for (int root = 0; root < n; root += 3) {
    for (size_t bytes : {size_t{0}, size_t{5}, size_t{10000}}) {
      SCOPED_TRACE(absl::StrCat("root ", root, ", ", bytes, " bytes"));
      CheckBroadcast(c->Ptrs(), root, bytes, Options(4096),
                     absl::StrCat("bcast", root, "/", bytes));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GrpcAllReduceTest, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("n", info.param);
                         });

TEST(GrpcAllReduceLargeTest, FourMegabytesOnFourRanksInManyPacks) {
  auto c = StartCluster(4);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Open(7, Options(256 << 10)));
  CheckAllReduce<float>(c->Ptrs(), 1 << 20, Options(256 << 10), "big32");
  CheckAllReduce<int64_t>(c->Ptrs(), 300007, Options(256 << 10), "big64");
}

TEST(GrpcAllReduceLargeTest, ConsecutiveGroupsOnTheSameServers) {
  auto c = StartCluster(3);
  ASSERT_NE(c, nullptr);
  for (int64_t group = 10; group < 14; ++group) {
    ASSERT_TRUE(c->Open(group, Options(512)));
    SCOPED_TRACE(absl::StrCat("group ", group));
    for (int step = 0; step < 3; ++step) {
      CheckAllReduce<float>(c->Ptrs(), 1001, Options(512),
                            absl::StrCat("step", step));
    }
  }
}

// --- failures --------------------------------------------------------------

TEST(GrpcFailureTest, RankThatNeverArrivesGivesDeadlineExceeded) {
  auto c = StartCluster(4);
  ASSERT_NE(c, nullptr);
  const CollectiveOptions options = Options(1 << 20, absl::Milliseconds(300));
  ASSERT_TRUE(c->Open(1, options));
  std::vector<absl::Status> s(3);
  std::vector<absl::Duration> took(3);
  RunRanks(3, [&](int r) {  // rank 3 never calls
    std::vector<float> data(5000, 1.0f);
    const absl::Time start = absl::Now();
    s[r] = AllReduceSum(c->transports[r].get(), DType::kFloat32, data.data(),
                        5000, "late", options);
    took[r] = absl::Now() - start;
  });
  int deadline_exceeded = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(s[r], AnyOf(StatusIs(absl::StatusCode::kDeadlineExceeded),
                            StatusIs(absl::StatusCode::kAborted)))
        << "rank " << r;
    EXPECT_THAT(std::string(s[r].message()), HasSubstr("deadline exceeded"))
        << "rank " << r;
    if (s[r].code() == absl::StatusCode::kDeadlineExceeded) {
      ++deadline_exceeded;
      // The rank that timed out waited its whole timeout (the others may
      // have started later and were aborted by it).
      EXPECT_GE(took[r], absl::Milliseconds(290)) << "rank " << r;
      EXPECT_THAT(std::string(s[r].message()), HasSubstr("'late/ar"));
      EXPECT_THAT(std::string(s[r].message()), HasSubstr("from rank"));
    }
    EXPECT_LT(took[r], absl::Milliseconds(300) + absl::Seconds(2))
        << "rank " << r;
  }
  EXPECT_GE(deadline_exceeded, 1);
  // Rank 3 was told: its group is aborted too.
  char x;
  EXPECT_THAT(c->transports[3]->Recv(0, "anything", absl::MakeSpan(&x, 1),
                                     absl::Now() + absl::Seconds(5)),
              StatusIsWithMessage(absl::StatusCode::kAborted,
                                  "deadline exceeded"));
}

TEST(GrpcFailureTest, RankThatAbortsEndsTheOthersPromptly) {
  auto c = StartCluster(4);
  ASSERT_NE(c, nullptr);
  const CollectiveOptions options = Options(1 << 16, absl::Seconds(30));
  ASSERT_TRUE(c->Open(1, options));
  std::vector<absl::Status> s(4);
  std::vector<absl::Duration> took(4);
  RunRanks(4, [&](int r) {
    if (r == 2) {
      // Take rank 1's first pack (rank 1 is inside the collective), then
      // give up.
      std::vector<char> pack(1 << 16);
      EXPECT_TRUE(c->transports[2]
                      ->Recv(1, "doomed/ar0.0", absl::MakeSpan(pack),
                             absl::Now() + absl::Seconds(20))
                      .ok());
      c->transports[2]->Abort(absl::CancelledError("rank 2 gives up"));
      return;
    }
    std::vector<float> data(200000, 1.0f);
    const absl::Time start = absl::Now();
    s[r] = AllReduceSum(c->transports[r].get(), DType::kFloat32, data.data(),
                        200000, "doomed", options);
    took[r] = absl::Now() - start;
  });
  for (int r : {0, 1, 3}) {
    EXPECT_THAT(s[r], StatusIsWithMessage(absl::StatusCode::kAborted,
                                          "rank 2 gives up"))
        << "rank " << r;
    EXPECT_THAT(std::string(s[r].message()), HasSubstr("aborted by rank 2"));
    EXPECT_LT(took[r], absl::Seconds(5)) << "rank " << r;
  }
}

TEST(GrpcFailureTest, DeadPeerServerMakesTheOthersFailFast) {
  // Rank 2's server goes away without a word (as a killed process would):
  // the rank sending to it gets UNAVAILABLE, aborts, and tells rank 0.
  auto c = StartCluster(3);
  ASSERT_NE(c, nullptr);
  const auto peers = c->Addresses();
  c->servers[2].reset();
  const CollectiveOptions options = Options(1 << 20, absl::Seconds(20));
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < 2; ++r) {
    auto t = c->servers[r]->OpenGroup(1, r, peers, options);
    ASSERT_TRUE(t.ok()) << t.status();
    ts.push_back(*std::move(t));
  }
  std::vector<absl::Status> s(2);
  std::vector<absl::Duration> took(2);
  RunRanks(2, [&](int r) {
    std::vector<double> data(30000, 2.0);
    const absl::Time start = absl::Now();
    s[r] = AllReduceSum(ts[r].get(), DType::kFloat64, data.data(), 30000,
                        "dead", options);
    took[r] = absl::Now() - start;
  });
  // Rank 1 sends to rank 2 directly.
  EXPECT_THAT(s[1], StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(s[1].message()), HasSubstr(peers[2]));
  EXPECT_THAT(s[0], StatusIsWithMessage(absl::StatusCode::kAborted,
                                        "UNAVAILABLE"));
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(took[r], absl::Seconds(5)) << "rank " << r << ": " << s[r];
  }
}

TEST(GrpcFailureTest, PeerServerShutdownAbortsTheGroupEverywhere) {
  auto c = StartCluster(3);
  ASSERT_NE(c, nullptr);
  const CollectiveOptions options = Options(1 << 20, absl::Seconds(20));
  ASSERT_TRUE(c->Open(1, options));
  const std::string address = c->servers[2]->address();
  c->servers[2]->Shutdown(absl::Seconds(1));
  std::vector<absl::Status> s(2);
  std::vector<absl::Duration> took(2);
  RunRanks(2, [&](int r) {
    std::vector<float> data(1000, 1.0f);
    const absl::Time start = absl::Now();
    s[r] = AllReduceSum(c->transports[r].get(), DType::kFloat32, data.data(),
                        1000, "after_shutdown", options);
    took[r] = absl::Now() - start;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(s[r], AnyOf(StatusIs(absl::StatusCode::kAborted),
                            StatusIs(absl::StatusCode::kUnavailable)))
        << "rank " << r;
    EXPECT_LT(took[r], absl::Seconds(5)) << "rank " << r;
  }
  // The shut-down rank's own transport outlives its server, aborted.
  char x;
  EXPECT_THAT(c->transports[2]->Recv(0, "k", absl::MakeSpan(&x, 1),
                                     absl::Now() + absl::Seconds(1)),
              StatusIsWithMessage(absl::StatusCode::kAborted,
                                  "is shutting down"));
  EXPECT_THAT(c->servers[2]->OpenGroup(2, 2, c->Addresses(), options),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// --- group lifecycle -------------------------------------------------------

TEST(GrpcGroupTest, OpenRefusesOlderGroupsAndBadArguments) {
  auto c = StartCluster(2);
  ASSERT_NE(c, nullptr);
  const auto peers = c->Addresses();
  WorkerServer* s = c->servers[0].get();
  auto t5 = s->OpenGroup(5, 0, peers, Options());
  STRATA_ASSERT_OK(t5);
  EXPECT_THAT(s->OpenGroup(5, 0, peers, Options()),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "group 5 is not newer than group 5"));
  EXPECT_THAT(s->OpenGroup(4, 0, peers, Options()),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(s->OpenGroup(6, 2, peers, Options()),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "rank 2 outside [0, 2)"));
  EXPECT_THAT(s->OpenGroup(6, 0, {}, Options()),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "empty peer list"));
  EXPECT_THAT(s->OpenGroup(6, 0, {peers[0], "no-port"}, Options()),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "peer 1"));
  EXPECT_THAT(s->OpenGroup(6, 0, peers, Options(0)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "pack_bytes 0"));
  EXPECT_THAT(s->OpenGroup(6, 0, peers, Options(int64_t{1} << 30)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "fit in max_message_bytes"));
  EXPECT_THAT(s->OpenGroup(6, 0, peers, Options(1024, absl::ZeroDuration())),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "timeout must be positive"));
}

TEST(GrpcGroupTest, OpeningANewerGroupAbortsTheOlderOne) {
  auto c = StartCluster(2);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Open(1, Options()));
  auto t2 = c->servers[0]->OpenGroup(2, 0, c->Addresses(), Options());
  STRATA_ASSERT_OK(t2);
  char x;
  EXPECT_THAT(c->transports[0]->Recv(1, "k", absl::MakeSpan(&x, 1),
                                     absl::Now() + absl::Seconds(5)),
              StatusIsWithMessage(absl::StatusCode::kAborted,
                                  "superseded by group 2"));
  // Rank 1 (still in group 1) was told as well.
  EXPECT_THAT(c->transports[1]->Recv(0, "k", absl::MakeSpan(&x, 1),
                                     absl::Now() + absl::Seconds(5)),
              StatusIsWithMessage(absl::StatusCode::kAborted,
                                  "superseded by group 2"));
}

TEST(GrpcGroupTest, MessagesForAGroupNotYetOpenedWaitForIt) {
  auto c = StartCluster(2);
  ASSERT_NE(c, nullptr);
  const auto peers = c->Addresses();
  auto t0 = c->servers[0]->OpenGroup(3, 0, peers, Options());
  STRATA_ASSERT_OK(t0);
  const std::string small = "early bird";
  const std::string big(100000, 'z');  // beyond the inline size
  STRATA_ASSERT_OK((*t0)->Send(1, "a", absl::MakeConstSpan(small)));
  STRATA_ASSERT_OK((*t0)->Send(1, "b", absl::MakeConstSpan(big)));
  // Delivered (kept by server 1) before rank 1 opens the group.
  STRATA_ASSERT_OK((*t0)->Flush(absl::Now() + absl::Seconds(10)));
  auto t1 = c->servers[1]->OpenGroup(3, 1, peers, Options());
  STRATA_ASSERT_OK(t1);
  std::string out(small.size(), '\0');
  STRATA_ASSERT_OK((*t1)->Recv(0, "a", absl::MakeSpan(out),
                               absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(out, small);
  std::string out_big(big.size(), '\0');
  STRATA_ASSERT_OK((*t1)->Recv(0, "b", absl::MakeSpan(out_big),
                               absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(out_big, big);
}

TEST(GrpcGroupTest, AnAbortForAGroupNotYetOpenedAppliesWhenItOpens) {
  auto c = StartCluster(2);
  ASSERT_NE(c, nullptr);
  const auto peers = c->Addresses();
  auto t0 = c->servers[0]->OpenGroup(3, 0, peers, Options());
  STRATA_ASSERT_OK(t0);
  (*t0)->Abort(absl::InternalError("early abort"));
  EXPECT_THAT((*t0)->Flush(absl::Now() + absl::Seconds(5)),
              StatusIs(absl::StatusCode::kAborted));
  // Closing the transport waits until the abort notices were answered, so
  // server 1 holds the abort for group 3 now.
  t0->reset();
  auto t1 = c->servers[1]->OpenGroup(3, 1, peers, Options());
  STRATA_ASSERT_OK(t1);
  char x;
  EXPECT_THAT((*t1)->Recv(0, "k", absl::MakeSpan(&x, 1),
                          absl::Now() + absl::Seconds(5)),
              StatusIsWithMessage(absl::StatusCode::kAborted,
                                  "aborted by rank 0: INTERNAL: early abort"));
}

TEST(GrpcGroupTest, MessagesForAnOlderGroupAreRefused) {
  auto c = StartCluster(2);
  ASSERT_NE(c, nullptr);
  const auto peers = c->Addresses();
  auto t0 = c->servers[0]->OpenGroup(4, 0, peers, Options());
  STRATA_ASSERT_OK(t0);
  auto t1 = c->servers[1]->OpenGroup(5, 1, peers, Options());
  STRATA_ASSERT_OK(t1);
  const std::string msg = "stale";
  STRATA_ASSERT_OK((*t0)->Send(1, "k", absl::MakeConstSpan(msg)));
  EXPECT_THAT((*t0)->Flush(absl::Now() + absl::Seconds(10)),
              StatusIsWithMessage(absl::StatusCode::kAborted,
                                  "group 4 is older than group 5"));
}

TEST(GrpcGroupTest, EarlyMessagesAreBounded) {
  WorkerServerOptions so;
  so.max_early_bytes = 10000;
  auto c = StartCluster(2, so);
  ASSERT_NE(c, nullptr);
  const auto peers = c->Addresses();
  auto t0 = c->servers[0]->OpenGroup(1, 0, peers, Options());
  STRATA_ASSERT_OK(t0);
  const std::string big(20000, 'x');
  STRATA_ASSERT_OK((*t0)->Send(1, "k", absl::MakeConstSpan(big)));
  EXPECT_THAT((*t0)->Flush(absl::Now() + absl::Seconds(10)),
              StatusIsWithMessage(absl::StatusCode::kResourceExhausted,
                                  "max_early_bytes 10000"));
}

TEST(GrpcTransportTest, PreciseErrorsForBadSendsAndRecvs) {
  WorkerServerOptions so;
  so.max_message_bytes = 1 << 20;
  auto c = StartCluster(2, so);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Open(1, Options(1024)));
  Transport* t0 = c->transports[0].get();
  Transport* t1 = c->transports[1].get();
  EXPECT_EQ(t0->rank(), 0);
  EXPECT_EQ(t1->size(), 2);
  char x = 'x';
  EXPECT_THAT(t0->Send(2, "k", absl::MakeConstSpan(&x, 1)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "peer 2 outside [0, 2)"));
  EXPECT_THAT(t0->Recv(-1, "k", absl::MakeSpan(&x, 1),
                       absl::Now() + absl::Seconds(1)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "peer -1 outside [0, 2)"));
  const std::string huge(2 << 20, 'h');
  EXPECT_THAT(t0->Send(1, "huge", absl::MakeConstSpan(huge)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "do not fit in a message"));
  EXPECT_THAT(t1->Recv(0, "never", absl::MakeSpan(&x, 1),
                       absl::Now() + absl::Milliseconds(50)),
              StatusIsWithMessage(absl::StatusCode::kDeadlineExceeded,
                                  "waiting for 'never' from rank 0"));
  const std::string msg = "twelve bytes";
  STRATA_ASSERT_OK(t0->Send(1, "sized", absl::MakeConstSpan(msg)));
  std::string out(5, '\0');
  EXPECT_THAT(t1->Recv(0, "sized", absl::MakeSpan(out),
                       absl::Now() + absl::Seconds(5)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "message has 12 bytes, the destination 5"));
  STRATA_ASSERT_OK(t0->Flush(absl::Now() + absl::Seconds(5)));
  // A key sent twice while the first is still waiting: the receiver refuses
  // it and the sender's group aborts.
  STRATA_ASSERT_OK(t0->Send(1, "dup", absl::MakeConstSpan(msg)));
  STRATA_ASSERT_OK(t0->Flush(absl::Now() + absl::Seconds(5)));
  STRATA_ASSERT_OK(t0->Send(1, "dup", absl::MakeConstSpan(msg)));
  EXPECT_THAT(t0->Flush(absl::Now() + absl::Seconds(5)),
              StatusIsWithMessage(absl::StatusCode::kAlreadyExists,
                                  "'dup' from rank 0 is already waiting"));
  EXPECT_THAT(t0->Send(1, "after", absl::MakeConstSpan(msg)),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(GrpcTransportTest, DeliverAcceptsAProtobufEncodedMessage) {
  // The hand-written decoder reads what protobuf writes, and refuses junk.
  auto c = StartCluster(2);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Open(9, Options()));
  auto channel = grpc::CreateChannel(c->servers[1]->address(),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  // A completion queue of our own (rather than the callback API) so that
  // nothing of the call outlives this test's channel.
  auto call = [&](const std::string& bytes) {
    grpc::CompletionQueue cq;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::ByteBuffer response;
    grpc::Status status;
    auto reader = stub.PrepareUnaryCall(
        &ctx, "/strata.v1.WorkerService/Deliver", StringToByteBuffer(bytes),
        &cq);
    reader->StartCall();
    reader->Finish(&response, &status, &cq);
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(tag, &cq);
    reader.reset();
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return FromGrpcStatus(status);
  };
  v1::CollectiveMessage m;
  m.set_group(9);
  m.set_from_rank(0);
  m.set_key("proto");
  m.set_data(std::string(10000, 'p'));
  STRATA_ASSERT_OK(call(m.SerializeAsString()));
  std::string out(10000, '\0');
  STRATA_ASSERT_OK(c->transports[1]->Recv(0, "proto", absl::MakeSpan(out),
                                          absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(out, m.data());
  EXPECT_THAT(call(std::string("\x0a\xff\xff\xff", 4)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "malformed CollectiveMessage"));
  m.set_from_rank(7);
  EXPECT_THAT(call(m.SerializeAsString()),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "from rank 7, outside [0, 2)"));
}

// --- server, health and state ---------------------------------------------

TEST(WorkerServerTest, StartValidatesOptionsAndServesHealth) {
  WorkerServerOptions bad;
  bad.port = 70000;
  EXPECT_THAT(WorkerServer::Start(bad, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
  bad = {};
  bad.max_message_bytes = 10;
  EXPECT_THAT(WorkerServer::Start(bad, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
  bad = {};
  bad.max_sends_in_flight = 0;
  EXPECT_THAT(WorkerServer::Start(bad, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));

  auto s = WorkerServer::Start({}, nullptr);
  STRATA_ASSERT_OK(s);
  EXPECT_GT((*s)->port(), 0);
  EXPECT_EQ((*s)->address(), absl::StrCat("127.0.0.1:", (*s)->port()));
  // The port is taken now.
  WorkerServerOptions same;
  same.port = (*s)->port();
  EXPECT_THAT(WorkerServer::Start(same, nullptr),
              StatusIsWithMessage(absl::StatusCode::kUnavailable,
                                  "cannot listen on"));

  auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      (*s)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("strata.v1.WorkerService");
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST(WorkerServerTest, GetStateRoundTrip) {
  auto s = WorkerServer::Start({}, nullptr);
  STRATA_ASSERT_OK(s);
  v1::GetStateRequest req;
  req.set_group(3);
  req.set_from_rank(1);
  EXPECT_THAT(FetchState((*s)->address(), req, absl::Seconds(10)),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "no state yet"));
  std::vector<float> weights = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.5f};
  (*s)->SetStateProvider([&weights](const v1::GetStateRequest& r)
                             -> absl::StatusOr<v1::WorkerState> {
    if (r.group() != 3) return absl::NotFoundError("wrong group");
    v1::WorkerState state;
    state.set_step(42 + r.from_rank());
    v1::NamedTensor* t = state.add_tensors();
    t->set_name("dense/kernel");
    t->set_dtype(v1::DT_FLOAT32);
    t->add_shape(2);
    t->add_shape(3);
    t->set_data(weights.data(), weights.size() * sizeof(float));
    v1::NamedTensor* b = state.add_tensors();
    b->set_name("dense/bias");
    b->set_dtype(v1::DT_INT64);
    b->add_shape(0);
    return state;
  });
  auto state = FetchState((*s)->address(), req, absl::Seconds(10));
  STRATA_ASSERT_OK(state);
  EXPECT_EQ(state->step(), 43);
  ASSERT_EQ(state->tensors_size(), 2);
  EXPECT_EQ(state->tensors(0).name(), "dense/kernel");
  EXPECT_EQ(state->tensors(0).dtype(), v1::DT_FLOAT32);
  EXPECT_THAT(state->tensors(0).shape(), ::testing::ElementsAre(2, 3));
  std::vector<float> got(6);
  ASSERT_EQ(state->tensors(0).data().size(), 6 * sizeof(float));
  std::memcpy(got.data(), state->tensors(0).data().data(), 6 * sizeof(float));
  EXPECT_EQ(got, weights);
  EXPECT_EQ(state->tensors(1).name(), "dense/bias");
  // The provider's error reaches the caller as is.
  req.set_group(4);
  EXPECT_THAT(FetchState((*s)->address(), req, absl::Seconds(10)),
              StatusIsWithMessage(absl::StatusCode::kNotFound, "wrong group"));
  // Bad arguments and a dead address.
  EXPECT_THAT(FetchState("", req, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(FetchState((*s)->address(), req, absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  const std::string address = (*s)->address();
  s->reset();
  const absl::Time start = absl::Now();
  EXPECT_THAT(FetchState(address, req, absl::Seconds(20)),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(WorkerServerTest, LargeStateTransfer) {
  auto s = WorkerServer::Start({}, nullptr);
  STRATA_ASSERT_OK(s);
  const std::string blob(20 << 20, 'w');  // above gRPC's default 4 MiB
  (*s)->SetStateProvider(
      [&blob](const v1::GetStateRequest&) -> absl::StatusOr<v1::WorkerState> {
        v1::WorkerState state;
        state.set_step(1);
        auto* t = state.add_tensors();
        t->set_name("big");
        t->set_dtype(v1::DT_FLOAT32);
        t->add_shape(static_cast<int64_t>(blob.size() / 4));
        t->set_data(blob);
        return state;
      });
  auto state = FetchState((*s)->address(), {}, absl::Seconds(30));
  STRATA_ASSERT_OK(state);
  EXPECT_EQ(state->tensors(0).data().size(), blob.size());
}

}  // namespace
}  // namespace collective
}  // namespace strata
