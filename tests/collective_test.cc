// The collectives over the in-process transport: ranks as threads.
#include "collective/collective.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collective/collective_message.h"
#include "collective/in_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<Transport*> Ptrs(
    const std::vector<std::unique_ptr<Transport>>& ts) {
  std::vector<Transport*> out;
  for (const auto& t : ts) out.push_back(t.get());
  return out;
}

TEST(RingSegmentTest, SplitsEvenlyWithTheRemainderFirst) {
  // 10 over 4: 3, 3, 2, 2.
  EXPECT_EQ(RingSegment(10, 4, 0).begin, 0);
  EXPECT_EQ(RingSegment(10, 4, 0).count, 3);
  EXPECT_EQ(RingSegment(10, 4, 1).begin, 3);
  EXPECT_EQ(RingSegment(10, 4, 1).count, 3);
  EXPECT_EQ(RingSegment(10, 4, 2).begin, 6);
  EXPECT_EQ(RingSegment(10, 4, 2).count, 2);
  EXPECT_EQ(RingSegment(10, 4, 3).begin, 8);
  EXPECT_EQ(RingSegment(10, 4, 3).count, 2);
  // Fewer elements than ranks: trailing segments are empty.
  EXPECT_EQ(RingSegment(2, 5, 1).count, 1);
  EXPECT_EQ(RingSegment(2, 5, 4).count, 0);
  EXPECT_EQ(RingSegment(0, 3, 0).count, 0);
  // The segments tile [0, count) for many shapes.
  for (int n = 1; n <= 9; ++n) {
    for (int64_t count : {0, 1, 2, 7, 8, 9, 97, 1000}) {
      int64_t next = 0;
      for (int i = 0; i < n; ++i) {
        Segment s = RingSegment(count, n, i);
        if (s.count > 0) {
          EXPECT_EQ(s.begin, next) << n << " " << count << " " << i;
        }
        next += s.count;
      }
      EXPECT_EQ(next, count) << n << " " << count;
    }
  }
}

TEST(RingBusBandwidthTest, ScalesByTwoNMinusOneOverN) {
  EXPECT_DOUBLE_EQ(RingBusBandwidth(1.0, 1), 0.0);
  EXPECT_DOUBLE_EQ(RingBusBandwidth(1.0, 2), 1.0);
  EXPECT_DOUBLE_EQ(RingBusBandwidth(2.0, 4), 3.0);
  EXPECT_DOUBLE_EQ(RingBusBandwidth(1.0, 0), 0.0);
}

// All-reduce for 1..8 ranks, counts around the interesting edges (empty,
// one element, fewer elements than ranks, primes, several packs), every
// dtype, default packs and tiny packs (many messages per segment).
class InProcessAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(InProcessAllReduceTest, SumsEveryDtypeAndUnevenCounts) {
  const int n = GetParam();
  const std::vector<int64_t> counts = {0,  1,  n - 1, n + 1, 2,
                                       7,  13, 97,    1009,  100003};
  for (int64_t count : counts) {
    if (count < 0) continue;
    auto ts = NewInProcessGroup(n);
    CollectiveOptions options;
    options.timeout = absl::Seconds(60);
    SCOPED_TRACE(absl::StrCat(n, " ranks, ", count, " elements"));
    CheckAllReduceAllTypes(Ptrs(ts), count, options,
                           absl::StrCat("sum", count));
  }
}

TEST_P(InProcessAllReduceTest, SumsWithSmallPacks) {
  const int n = GetParam();
  for (int64_t pack_bytes : {1, 8, 24, 1000}) {
    for (int64_t count : {int64_t{3}, int64_t{n - 1}, int64_t{61},
                          int64_t{1013}}) {
      if (count < 0) continue;
      auto ts = NewInProcessGroup(n);
      CollectiveOptions options;
      options.pack_bytes = pack_bytes;
      options.timeout = absl::Seconds(60);
      SCOPED_TRACE(absl::StrCat(n, " ranks, ", count, " elements, packs of ",
                                pack_bytes, " bytes"));
      CheckAllReduceAllTypes(Ptrs(ts), count, options,
                             absl::StrCat("packs", pack_bytes, "/", count));
    }
  }
}

TEST_P(InProcessAllReduceTest, MeanOfFloats) {
  const int n = GetParam();
  auto ts = NewInProcessGroup(n);
  CollectiveOptions options;
  options.pack_bytes = 64;
  {
    SCOPED_TRACE("float32");
    CheckAllReduce<float>(Ptrs(ts), 301, options, "mean32", /*mean=*/true);
  }
  {
    SCOPED_TRACE("float64");
    CheckAllReduce<double>(Ptrs(ts), 301, options, "mean64", /*mean=*/true);
  }
}

TEST_P(InProcessAllReduceTest, BroadcastFromEveryRoot) {
  const int n = GetParam();
  auto ts = NewInProcessGroup(n);
  CollectiveOptions options;
  options.pack_bytes = 100;
  for (int root = 0; root < n; ++root) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{99}, size_t{100},
                         size_t{1001}}) {
      SCOPED_TRACE(absl::StrCat("root ", root, ", ", bytes, " bytes"));
      CheckBroadcast(Ptrs(ts), root, bytes, options,
                     absl::StrCat("bcast", root, "/", bytes));
    }
  }
}

TEST_P(InProcessAllReduceTest, ManyCollectivesOnOneGroupInSequence) {
  const int n = GetParam();
  auto ts = NewInProcessGroup(n);
  CollectiveOptions options;
  options.pack_bytes = 40;
  for (int step = 0; step < 20; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    CheckAllReduce<float>(Ptrs(ts), 50 + step, options,
                          absl::StrCat("step", step, "/grads"));
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, InProcessAllReduceTest,
                         ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("n", info.param);
                         });

TEST(InProcessAllReduceTest, ConcurrentCollectivesWithDistinctOps) {
  // Two threads per rank run two all-reduces on the same group at once.
  const int n = 4;
  auto ts = NewInProcessGroup(n);
  std::vector<Transport*> p = Ptrs(ts);
  CollectiveOptions options;
  options.pack_bytes = 32;
  std::vector<std::vector<float>> a(n), b(n);
  std::vector<absl::Status> sa(n), sb(n);
  for (int r = 0; r < n; ++r) {
    a[r] = testing_util::Input<float>(r, 777);
    b[r] = testing_util::Input<float>(r, 555);
  }
  RunRanks(2 * n, [&](int i) {
    const int r = i % n;
    if (i < n) {
      sa[r] = AllReduceSum(p[r], DType::kFloat32, a[r].data(), 777, "a",
                           options);
    } else {
      sb[r] = AllReduceSum(p[r], DType::kFloat32, b[r].data(), 555, "b",
                           options);
    }
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(sa[r].ok()) << sa[r];
    ASSERT_TRUE(sb[r].ok()) << sb[r];
  }
  testing_util::ExpectSums(a, 777);
  testing_util::ExpectSums(b, 555);
}

TEST(InProcessAllReduceTest, IntegerSumWrapsInsteadOfOverflowing) {
  auto ts = NewInProcessGroup(2);
  std::vector<int32_t> a = {std::numeric_limits<int32_t>::max(), -5};
  std::vector<int32_t> b = {1, 7};
  std::vector<absl::Status> s(2);
  RunRanks(2, [&](int r) {
    s[r] = AllReduceSum(ts[r].get(), DType::kInt32,
                        r == 0 ? a.data() : b.data(), 2, "wrap", {});
  });
  STRATA_ASSERT_OK(s[0]);
  STRATA_ASSERT_OK(s[1]);
  EXPECT_EQ(a[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(a[1], 2);
  EXPECT_EQ(b, a);
}

// --- failures -------------------------------------------------------------

TEST(CollectiveFailureTest, RankThatNeverArrivesGivesDeadlineExceeded) {
  const int n = 4;
  auto ts = NewInProcessGroup(n);
  CollectiveOptions options;
  options.timeout = absl::Milliseconds(300);
  std::vector<absl::Status> s(n - 1);
  std::vector<absl::Duration> took(n - 1);
  // Rank 3 never calls.
  RunRanks(n - 1, [&](int r) {
    std::vector<float> data(1000, 1.0f);
    const absl::Time start = absl::Now();
    s[r] = AllReduceSum(ts[r].get(), DType::kFloat32, data.data(), 1000,
                        "late", options);
    took[r] = absl::Now() - start;
  });
  int deadline_exceeded = 0;
  for (int r = 0; r < n - 1; ++r) {
    EXPECT_THAT(s[r], AnyOf(StatusIs(absl::StatusCode::kDeadlineExceeded),
                            StatusIs(absl::StatusCode::kAborted)))
        << "rank " << r;
    EXPECT_THAT(std::string(s[r].message()), HasSubstr("deadline exceeded"));
    if (s[r].code() == absl::StatusCode::kDeadlineExceeded) {
      ++deadline_exceeded;
      // The rank that timed out waited its whole timeout (the others may
      // have started later and were aborted by it).
      EXPECT_GE(took[r], absl::Milliseconds(290)) << "rank " << r;
      EXPECT_THAT(std::string(s[r].message()), HasSubstr("from rank"));
      EXPECT_THAT(std::string(s[r].message()), HasSubstr("late/ar"));
    }
    // Within the timeout (plus scheduling slack).
    EXPECT_LT(took[r], absl::Milliseconds(300) + absl::Seconds(2))
        << "rank " << r;
  }
  EXPECT_GE(deadline_exceeded, 1);
  // The group is aborted for the late rank too.
  std::vector<float> data(1000, 1.0f);
  EXPECT_THAT(AllReduceSum(ts[3].get(), DType::kFloat32, data.data(), 1000,
                           "late", options),
              StatusIs(absl::StatusCode::kAborted));
}

TEST(CollectiveFailureTest, RankThatAbortsEndsTheOthersPromptly) {
  const int n = 4;
  auto ts = NewInProcessGroup(n);
  CollectiveOptions options;
  options.timeout = absl::Seconds(30);
  std::vector<absl::Status> s(n);
  std::vector<absl::Duration> took(n);
  RunRanks(n, [&](int r) {
    if (r == 2) {
      ts[2]->Abort(absl::CancelledError("rank 2 gives up"));
      return;
    }
    std::vector<double> data(100000, 1.0);
    const absl::Time start = absl::Now();
    s[r] = AllReduceSum(ts[r].get(), DType::kFloat64, data.data(), 100000,
                        "doomed", options);
    took[r] = absl::Now() - start;
  });
  for (int r : {0, 1, 3}) {
    EXPECT_THAT(s[r], StatusIsWithMessage(absl::StatusCode::kAborted,
                                          "rank 2 gives up"))
        << "rank " << r;
    EXPECT_LT(took[r], absl::Seconds(5)) << "rank " << r;
  }
}

TEST(CollectiveFailureTest, AbortDuringTheCollectiveWakesWaiters) {
  // Ranks 0 and 1 run the all-reduce; rank 2 takes rank 1's first pack (so
  // rank 1 is inside the collective), then aborts while both wait on it.
  const int n = 3;
  auto ts = NewInProcessGroup(n);
  CollectiveOptions options;
  options.timeout = absl::Seconds(30);
  std::vector<absl::Status> s(2);
  std::vector<absl::Duration> took(2);
  RunRanks(n, [&](int r) {
    if (r == 2) {
      // 10 int64 over 3 ranks: rank 1's segment has 3 elements.
      char pack[3 * sizeof(int64_t)];
      EXPECT_TRUE(ts[2]->Recv(1, "x/ar0.0", absl::MakeSpan(pack),
                              absl::Now() + absl::Seconds(10))
                      .ok());
      ts[2]->Abort(absl::InternalError("disk on fire"));
      return;
    }
    std::vector<int64_t> data(10, 1);
    const absl::Time start = absl::Now();
    s[r] = AllReduceSum(ts[r].get(), DType::kInt64, data.data(), 10, "x",
                        options);
    took[r] = absl::Now() - start;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(s[r],
                StatusIsWithMessage(absl::StatusCode::kAborted, "disk on fire"))
        << "rank " << r;
    EXPECT_LT(took[r], absl::Seconds(5)) << "rank " << r;
  }
}

TEST(CollectiveFailureTest, BadInputOnOneRankAbortsTheOthers) {
  const int n = 3;
  auto ts = NewInProcessGroup(n);
  std::vector<absl::Status> s(n);
  RunRanks(n, [&](int r) {
    std::vector<float> data(30, 1.0f);
    s[r] = AllReduceSum(ts[r].get(), DType::kFloat32, data.data(),
                        r == 1 ? -3 : 30, "bad", {});
  });
  EXPECT_THAT(s[1], StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                        "negative element count -3"));
  EXPECT_THAT(s[0], StatusIsWithMessage(absl::StatusCode::kAborted,
                                        "negative element count -3"));
  EXPECT_THAT(s[2], StatusIsWithMessage(absl::StatusCode::kAborted,
                                        "negative element count -3"));
}

TEST(CollectiveValidationTest, PreciseErrorsForBadArguments) {
  CollectiveOptions options;
  float x = 1;
  auto check = [&](absl::Status s, absl::StatusCode code,
                   const std::string& substr) {
    EXPECT_THAT(s, StatusIsWithMessage(code, substr));
  };
  // Each call gets a fresh single-rank group (an error aborts the group).
  check(AllReduceSum(NewInProcessGroup(1)[0].get(), DType::kFloat32, &x, -1,
                     "op", options),
        absl::StatusCode::kInvalidArgument, "negative element count -1");
  check(AllReduceSum(NewInProcessGroup(1)[0].get(), static_cast<DType>(9), &x,
                     1, "op", options),
        absl::StatusCode::kInvalidArgument, "invalid dtype 9");
  check(AllReduceSum(NewInProcessGroup(1)[0].get(), DType::kInvalid, &x, 1,
                     "op", options),
        absl::StatusCode::kInvalidArgument, "invalid dtype 0");
  check(AllReduceSum(NewInProcessGroup(1)[0].get(), DType::kFloat32, nullptr,
                     4, "op", options),
        absl::StatusCode::kInvalidArgument, "null data for 4 elements");
  check(AllReduceSum(NewInProcessGroup(1)[0].get(), DType::kFloat64, &x,
                     int64_t{1} << 61, "op", options),
        absl::StatusCode::kInvalidArgument, "overflows");
  check(AllReduceSum(NewInProcessGroup(1)[0].get(), DType::kFloat32, &x, 1, "",
                     options),
        absl::StatusCode::kInvalidArgument, "empty op name");
  check(AllReduceSum(nullptr, DType::kFloat32, &x, 1, "op", options),
        absl::StatusCode::kInvalidArgument, "null transport");
  CollectiveOptions bad_pack;
  bad_pack.pack_bytes = 0;
  check(AllReduceSum(NewInProcessGroup(1)[0].get(), DType::kFloat32, &x, 1,
                     "op", bad_pack),
        absl::StatusCode::kInvalidArgument, "pack_bytes must be positive");
  CollectiveOptions bad_timeout;
  bad_timeout.timeout = absl::ZeroDuration();
  check(AllReduceSum(NewInProcessGroup(1)[0].get(), DType::kFloat32, &x, 1,
                     "op", bad_timeout),
        absl::StatusCode::kInvalidArgument, "timeout must be positive");
  int32_t i = 1;
  check(AllReduceMean(NewInProcessGroup(1)[0].get(), DType::kInt32, &i, 1,
                      "op", options),
        absl::StatusCode::kInvalidArgument, "int32 is not a floating-point");
  check(Broadcast(NewInProcessGroup(2)[0].get(), 2, &x, 4, "op", options),
        absl::StatusCode::kInvalidArgument, "root 2 outside [0, 2)");
  check(Broadcast(NewInProcessGroup(2)[0].get(), -1, &x, 4, "op", options),
        absl::StatusCode::kInvalidArgument, "root -1 outside");
  check(Broadcast(NewInProcessGroup(1)[0].get(), 0, nullptr, 4, "op", options),
        absl::StatusCode::kInvalidArgument, "null data for 4 bytes");
  // Valid single-rank calls leave the data alone.
  STRATA_ASSERT_OK(AllReduceSum(NewInProcessGroup(1)[0].get(),
                                DType::kFloat32, &x, 1, "op", options));
  EXPECT_EQ(x, 1.0f);
  STRATA_ASSERT_OK(AllReduceMean(NewInProcessGroup(1)[0].get(),
                                 DType::kFloat32, &x, 1, "op", options));
  EXPECT_EQ(x, 1.0f);
  STRATA_ASSERT_OK(AllReduceSum(NewInProcessGroup(1)[0].get(),
                                DType::kFloat32, nullptr, 0, "op", options));
}

TEST(CollectiveValidationTest, MismatchedCountsAcrossRanksFailPrecisely) {
  // Rank 1 thinks the tensor has 5 elements, rank 0 says 8: a pack's size
  // differs, and the receiver names both sizes.
  auto ts = NewInProcessGroup(2);
  std::vector<absl::Status> s(2);
  RunRanks(2, [&](int r) {
    std::vector<float> data(8, 1.0f);
    s[r] = AllReduceSum(ts[r].get(), DType::kFloat32, data.data(),
                        r == 0 ? 8 : 5, "mismatch", {});
  });
  const bool either_invalid =
      s[0].code() == absl::StatusCode::kInvalidArgument ||
      s[1].code() == absl::StatusCode::kInvalidArgument;
  EXPECT_TRUE(either_invalid) << s[0] << " / " << s[1];
  for (const auto& st : s) {
    EXPECT_THAT(std::string(st.message()), HasSubstr("bytes, the destination"));
  }
}

// --- the in-process transport itself -------------------------------------

TEST(InProcessTransportTest, SendThenRecvCopiesTheBytes) {
  auto ts = NewInProcessGroup(2);
  EXPECT_EQ(ts[0]->rank(), 0);
  EXPECT_EQ(ts[1]->rank(), 1);
  EXPECT_EQ(ts[1]->size(), 2);
  const std::string msg = "hello";
  STRATA_ASSERT_OK(ts[0]->Send(1, "k", absl::MakeConstSpan(msg)));
  std::string out(5, '\0');
  STRATA_ASSERT_OK(ts[1]->Recv(0, "k", absl::MakeSpan(out),
                               absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(out, "hello");
  STRATA_ASSERT_OK(ts[0]->Flush(absl::Now() + absl::Seconds(5)));
}

TEST(InProcessTransportTest, RecvOfTheWrongSizeIsInvalidArgument) {
  auto ts = NewInProcessGroup(2);
  const std::string msg = "hello";
  STRATA_ASSERT_OK(ts[0]->Send(1, "k", absl::MakeConstSpan(msg)));
  std::string out(4, '\0');
  EXPECT_THAT(ts[1]->Recv(0, "k", absl::MakeSpan(out),
                          absl::Now() + absl::Seconds(5)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "message has 5 bytes, the destination 4"));
  // The message was consumed: the sender's flush completes.
  STRATA_ASSERT_OK(ts[0]->Flush(absl::Now() + absl::Seconds(5)));
}

TEST(InProcessTransportTest, RecvTimesOutNamingPeerAndKey) {
  auto ts = NewInProcessGroup(3);
  char c;
  const absl::Time start = absl::Now();
  EXPECT_THAT(ts[1]->Recv(2, "the/key", absl::MakeSpan(&c, 1),
                          absl::Now() + absl::Milliseconds(50)),
              StatusIsWithMessage(absl::StatusCode::kDeadlineExceeded,
                                  "'the/key' from rank 2"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
}

TEST(InProcessTransportTest, BadPeersAndDuplicateKeys) {
  auto ts = NewInProcessGroup(2);
  char c = 'x';
  EXPECT_THAT(ts[0]->Send(2, "k", absl::MakeConstSpan(&c, 1)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "peer 2 outside [0, 2)"));
  EXPECT_THAT(ts[0]->Recv(-1, "k", absl::MakeSpan(&c, 1),
                          absl::Now() + absl::Seconds(1)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "peer -1 outside [0, 2)"));
  STRATA_ASSERT_OK(ts[0]->Send(1, "k", absl::MakeConstSpan(&c, 1)));
  EXPECT_THAT(ts[0]->Send(1, "k", absl::MakeConstSpan(&c, 1)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "already queued"));
}

TEST(InProcessTransportTest, FlushWaitsForTheReceiver) {
  auto ts = NewInProcessGroup(2);
  char c = 'x';
  STRATA_ASSERT_OK(ts[0]->Send(1, "k", absl::MakeConstSpan(&c, 1)));
  EXPECT_THAT(ts[0]->Flush(absl::Now() + absl::Milliseconds(30)),
              StatusIsWithMessage(absl::StatusCode::kDeadlineExceeded,
                                  "1 message(s) not taken"));
  char out;
  STRATA_ASSERT_OK(ts[1]->Recv(0, "k", absl::MakeSpan(&out, 1),
                               absl::Now() + absl::Seconds(1)));
  STRATA_ASSERT_OK(ts[0]->Flush(absl::Now() + absl::Seconds(1)));
}

TEST(InProcessTransportTest, AbortFailsSendRecvAndFlushWithTheReason) {
  auto ts = NewInProcessGroup(2);
  char c = 'x';
  STRATA_ASSERT_OK(ts[0]->Send(1, "queued", absl::MakeConstSpan(&c, 1)));
  ts[1]->Abort(absl::UnavailableError("lost the chief"));
  ts[1]->Abort(absl::InternalError("second reason is ignored"));
  EXPECT_THAT(ts[0]->Send(1, "k", absl::MakeConstSpan(&c, 1)),
              StatusIsWithMessage(absl::StatusCode::kAborted,
                                  "aborted by rank 1: UNAVAILABLE: lost the "
                                  "chief"));
  EXPECT_THAT(ts[1]->Recv(0, "queued", absl::MakeSpan(&c, 1),
                          absl::Now() + absl::Seconds(1)),
              StatusIsWithMessage(absl::StatusCode::kAborted, "lost the chief"));
  EXPECT_THAT(ts[0]->Flush(absl::Now() + absl::Seconds(1)),
              StatusIs(absl::StatusCode::kAborted));
}

TEST(InProcessTransportTest, DestroyingASenderWithdrawsItsMessages) {
  auto ts = NewInProcessGroup(2);
  {
    std::string msg = "gone";
    STRATA_ASSERT_OK(ts[0]->Send(1, "k", absl::MakeConstSpan(msg)));
    ts[0].reset();  // msg dies after this: the message must not be read
  }
  std::string out(4, '\0');
  EXPECT_THAT(ts[1]->Recv(0, "k", absl::MakeSpan(out),
                          absl::Now() + absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST(AddIntoTest, AddsUnalignedRangesElementByElement) {
  // Offsets of 1 and 3 bytes: neither range is aligned for float or int64.
  std::vector<char> dst_buf(1 + 37 * sizeof(float));
  std::vector<char> src_buf(3 + 37 * sizeof(float));
  std::vector<float> want(37);
  for (int i = 0; i < 37; ++i) {
    const float d = 0.5f * i;
    const float s = 100.0f - i;
    std::memcpy(&dst_buf[1 + i * sizeof(float)], &d, sizeof(float));
    std::memcpy(&src_buf[3 + i * sizeof(float)], &s, sizeof(float));
    want[i] = d + s;
  }
  AddInto(DType::kFloat32, &dst_buf[1], &src_buf[3], 37);
  for (int i = 0; i < 37; ++i) {
    float got;
    std::memcpy(&got, &dst_buf[1 + i * sizeof(float)], sizeof(float));
    EXPECT_EQ(got, want[i]) << "element " << i;
  }
  // int32 sums wrap; nothing happens for count 0 or an invalid dtype.
  int32_t a[2] = {std::numeric_limits<int32_t>::max(), 7};
  const int32_t b[2] = {1, -9};
  AddInto(DType::kInt32, reinterpret_cast<char*>(a),
          reinterpret_cast<const char*>(b), 2);
  EXPECT_EQ(a[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(a[1], -2);
  AddInto(DType::kInt32, reinterpret_cast<char*>(a),
          reinterpret_cast<const char*>(b), 0);
  AddInto(DType::kInvalid, reinterpret_cast<char*>(a),
          reinterpret_cast<const char*>(b), 2);
  EXPECT_EQ(a[1], -2);
}

TEST(DecodedMessageTest, AddDataToPutsTogetherElementsSplitAcrossPieces) {
  // 11 int64 elements cut into pieces at odd offsets, one of them splitting
  // a single element over three pieces.
  std::vector<int64_t> payload(11);
  std::vector<int64_t> acc(11);
  for (int i = 0; i < 11; ++i) {
    payload[i] = (int64_t{1} << 40) + i * 3;
    acc[i] = -i;
  }
  const std::string bytes(reinterpret_cast<const char*>(payload.data()),
                          payload.size() * sizeof(int64_t));
  internal::DecodedMessage msg;
  size_t at = 0;
  for (size_t cut : {5, 2, 2, 27, 1, 0, 51}) {
    msg.data.push_back(absl::string_view(bytes).substr(at, cut));
    at += cut;
  }
  ASSERT_EQ(at, bytes.size()) << "the pieces cover the payload";
  msg.data_size = bytes.size();
  msg.AddDataTo(DType::kInt64, reinterpret_cast<char*>(acc.data()));
  for (int i = 0; i < 11; ++i) {
    EXPECT_EQ(acc[i], payload[i] - i) << "element " << i;
  }
}

TEST(InProcessTransportTest, RecvReduceAddsIntoTheDestination) {
  auto ts = NewInProcessGroup(2);
  const std::vector<float> sent = {1.5f, -2.0f, 4.0f};
  STRATA_ASSERT_OK(ts[0]->Send(
      1, "k",
      absl::MakeConstSpan(reinterpret_cast<const char*>(sent.data()),
                          sent.size() * sizeof(float))));
  std::vector<float> acc = {10.0f, 20.0f, 30.0f};
  auto span = absl::MakeSpan(reinterpret_cast<char*>(acc.data()),
                             acc.size() * sizeof(float));
  STRATA_ASSERT_OK(ts[1]->RecvReduce(0, "k", DType::kFloat32, span,
                                     absl::Now() + absl::Seconds(5)));
  EXPECT_THAT(acc, ElementsAre(11.5f, 18.0f, 34.0f));

  // A size that is not whole elements, or an invalid dtype, is refused
  // before waiting; a message of the wrong size is consumed and changes
  // nothing.
  EXPECT_THAT(ts[1]->RecvReduce(0, "k2", DType::kFloat32, span.subspan(0, 5),
                                absl::Now() + absl::Seconds(5)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "not a whole number of float32"));
  EXPECT_THAT(ts[1]->RecvReduce(0, "k2", DType::kInvalid, span,
                                absl::Now() + absl::Seconds(5)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "invalid dtype"));
  STRATA_ASSERT_OK(ts[0]->Send(
      1, "short",
      absl::MakeConstSpan(reinterpret_cast<const char*>(sent.data()),
                          sizeof(float))));
  EXPECT_THAT(ts[1]->RecvReduce(0, "short", DType::kFloat32, span,
                                absl::Now() + absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(acc, ElementsAre(11.5f, 18.0f, 34.0f));
}

TEST(NewInProcessGroupTest, SizeBelowOneGivesNoTransports) {
  EXPECT_TRUE(NewInProcessGroup(0).empty());
  EXPECT_TRUE(NewInProcessGroup(-2).empty());
}

}  // namespace
}  // namespace collective
}  // namespace strata
