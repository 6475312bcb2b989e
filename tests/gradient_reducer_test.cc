// The group trainer's gradient reducers: the in-process group (threads of
// this process) and the ring over real WorkerServers on 127.0.0.1:0.
#include "worker/gradient_reducer.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collective/worker_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/v1/coordinator.pb.h"
#include "tests/test_util.h"
#include "worker/ring_reducer.h"
#include "worker/transport_reducer.h"

namespace strata {
namespace {

collective::CollectiveOptions Options() {
  collective::CollectiveOptions options;
  options.timeout = absl::Seconds(30);
  return options;
}

// Runs Reduce(r, step, data[r]) for every r on a thread of its own.
std::vector<absl::StatusOr<GradientReducer::Outcome>> ReduceAll(
    const std::vector<GradientReducer*>& reducers,
    const std::vector<int>& locals, int64_t step, std::vector<std::vector<float>>* data) {
  std::vector<absl::StatusOr<GradientReducer::Outcome>> results(
      reducers.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t r = 0; r < reducers.size(); ++r) {
    threads.emplace_back([&, r] {
      results[r] = reducers[r]->Reduce(locals[r], step,
                                       absl::MakeSpan((*data)[r]));
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

TEST(InProcessReducerTest, SumsOverTheLocalReplicas) {
  std::unique_ptr<GradientReducer> reducer = NewInProcessReducer(3, Options());
  std::vector<std::vector<float>> data = {
      {1, 2, 3, 4, 5}, {10, 20, 30, 40, 50}, {100, 200, 300, 400, 500}};
  for (int64_t step = 0; step < 2; ++step) {
    std::vector<std::vector<float>> d = data;
    auto results = ReduceAll({reducer.get(), reducer.get(), reducer.get()},
                             {0, 1, 2}, step, &d);
    for (size_t r = 0; r < d.size(); ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r].status();
      EXPECT_EQ(*results[r], GradientReducer::Outcome::kReduced);
      EXPECT_THAT(d[r], ::testing::ElementsAre(111, 222, 333, 444, 555));
    }
  }
}

TEST(InProcessReducerTest, AbortFailsLaterReduces) {
  std::unique_ptr<GradientReducer> reducer = NewInProcessReducer(2, Options());
  reducer->Abort(absl::AbortedError("rank 1 left group 3: stopping"));
  std::vector<float> data(4, 1.0f);
  EXPECT_THAT(reducer->Reduce(0, 0, absl::MakeSpan(data)),
              StatusIsWithMessage(absl::StatusCode::kAborted, "rank 1 left"));
}

TEST(InProcessReducerTest, OneReplicaIsItsOwnSum) {
  std::unique_ptr<GradientReducer> reducer = NewInProcessReducer(1, Options());
  std::vector<float> data = {1.5f, -2.0f};
  auto outcome = reducer->Reduce(0, 7, absl::MakeSpan(data));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_THAT(data, ::testing::ElementsAre(1.5f, -2.0f));
}

struct Servers {
  std::vector<std::unique_ptr<collective::WorkerServer>> servers;

  v1::GroupAssignment Assignment(int64_t group, int rank) const {
    v1::GroupAssignment a;
    a.set_group(group);
    a.set_rank(rank);
    a.set_size(static_cast<int>(servers.size()));
    for (const auto& s : servers) a.add_members()->set_address(s->address());
    return a;
  }
};

std::unique_ptr<Servers> StartServers(int n) {
  auto out = std::make_unique<Servers>();
  for (int i = 0; i < n; ++i) {
    auto s = collective::WorkerServer::Start({}, nullptr);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return nullptr;
    out->servers.push_back(*std::move(s));
  }
  return out;
}

TEST(RingReducerTest, SumsAcrossWorkerServers) {
  std::unique_ptr<Servers> servers = StartServers(2);
  ASSERT_NE(servers, nullptr);
  std::vector<std::unique_ptr<GradientReducer>> reducers;
  for (int rank = 0; rank < 2; ++rank) {
    auto r = OpenRingReducer(servers->servers[rank].get(),
                             servers->Assignment(1, rank), Options(),
                             [] { return false; });
    ASSERT_TRUE(r.ok()) << r.status();
    reducers.push_back(*std::move(r));
  }
  std::vector<std::vector<float>> data = {{1, 2, 3}, {4, 5, 6}};
  auto results = ReduceAll({reducers[0].get(), reducers[1].get()}, {0, 0},
                           /*step=*/5, &data);
  for (size_t r = 0; r < data.size(); ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status();
    EXPECT_THAT(data[r], ::testing::ElementsAre(5, 7, 9));
  }
}

TEST(RingReducerTest, EndOfGroupAbortsAWaitingReduce) {
  std::unique_ptr<Servers> servers = StartServers(2);
  ASSERT_NE(servers, nullptr);
  std::atomic<bool> replaced{false};
  // Rank 1 never joins: rank 0's all-reduce waits until the watcher sees
  // the end of the group.
  auto reducer = OpenRingReducer(servers->servers[0].get(),
                                 servers->Assignment(4, 0), Options(),
                                 [&replaced] { return replaced.load(); });
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  replaced = true;
  std::vector<float> data(16, 1.0f);
  EXPECT_THAT((*reducer)->Reduce(0, 0, absl::MakeSpan(data)),
              StatusIsWithMessage(absl::StatusCode::kAborted,
                                  "group 4 replaced by a newer group"));
}

}  // namespace
}  // namespace strata
