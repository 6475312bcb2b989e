#include "tools/restart_policy.h"

#include "gtest/gtest.h"

namespace strata {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(RestartPolicyTest, AServerThatServedRestartsAtOnceHoweverOftenKilled) {
  // The coordinator killed every 8 s for 10 minutes: each restart listened,
  // so no death is a failed start and none waits.
  RestartPolicy p;
  absl::Time now = kT0;
  for (int kill = 0; kill < 75; ++kill) {
    now += absl::Seconds(8);
    ASSERT_TRUE(p.Exited(now)) << "kill " << kill;
    EXPECT_EQ(p.restart_at(), now);
    EXPECT_EQ(p.failed_starts(), 0);
    now += absl::Milliseconds(1200);  // listening again
    p.Started(now, /*ready=*/true);
  }
}

TEST(RestartPolicyTest, DeathsBeforeReadyBackOffAndEndTheRun) {
  // A task without an address (a worker) that dies 1 s after each start:
  // pauses 0, 0.5, 1, 2, 4, 8, 8 s, and the 8th death ends the run.
  RestartPolicy p;
  absl::Time now = kT0;
  p.Started(now, /*ready=*/false);
  const absl::Duration pauses[] = {
      absl::ZeroDuration(), absl::Milliseconds(500), absl::Seconds(1),
      absl::Seconds(2),     absl::Seconds(4),        absl::Seconds(8),
      absl::Seconds(8)};
  for (absl::Duration pause : pauses) {
    now += absl::Seconds(1);
    ASSERT_TRUE(p.Exited(now));
    EXPECT_EQ(p.restart_at() - now, pause);
    now = p.restart_at();
    p.Started(now, /*ready=*/false);
  }
  now += absl::Seconds(1);
  EXPECT_FALSE(p.Exited(now));
  EXPECT_EQ(p.failed_starts(), RestartPolicy::kMaxFailedStarts);
}

TEST(RestartPolicyTest, ATaskThatRanAWhileServedAndResetsTheBackoff) {
  RestartPolicy p;
  absl::Time now = kT0;
  p.Started(now, false);
  for (int i = 0; i < 3; ++i) {
    now += absl::Seconds(1);
    ASSERT_TRUE(p.Exited(now));
    now = p.restart_at();
    p.Started(now, false);
  }
  EXPECT_EQ(p.failed_starts(), 3);
  now += RestartPolicy::kSoonAfterStart;
  ASSERT_TRUE(p.Exited(now));
  EXPECT_EQ(p.failed_starts(), 0);
  EXPECT_EQ(p.restart_at(), now);
}

TEST(RestartPolicyTest, StartsThatFailCountAndEndTheRun) {
  // Spawn itself failing (the server never listened) counts every time,
  // even after a ready run.
  RestartPolicy p;
  absl::Time now = kT0;
  p.Started(now, true);
  now += absl::Seconds(3);
  ASSERT_TRUE(p.Exited(now));
  for (int i = 1; i < RestartPolicy::kMaxFailedStarts; ++i) {
    now += absl::Seconds(60);
    ASSERT_TRUE(p.StartFailed(now)) << i;
    EXPECT_GT(p.restart_at(), now - absl::Seconds(1));
  }
  EXPECT_FALSE(p.StartFailed(now + absl::Seconds(60)));
}

TEST(RestartPolicyTest, AServerThatDiesBeforeListeningIsAFailedStart) {
  // Started without readiness (etcd, or a server whose Spawn does not
  // wait): a death 2 s later is a failed start.
  RestartPolicy p;
  p.Started(kT0, false);
  ASSERT_TRUE(p.Exited(kT0 + absl::Seconds(2)));
  EXPECT_EQ(p.failed_starts(), 1);
}

}  // namespace
}  // namespace strata
