// The parameter server's pure-logic core under concurrent use: many threads
// creating, pushing, reading, waiting, saving and restoring at once. Run by
// `make test` and, built with ThreadSanitizer, by `make tsan` (which sees
// every lock these threads share; the gRPC tests it cannot judge, see
// tests/tsan.supp).
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/deadline_timer.h"
#include "server/variable_store.h"
#include "tests/test_util.h"

namespace strata {
namespace {

v1::VariableSpec SgdSpec(const std::string& name, int64_t n,
                         v1::UpdateMode::Kind mode = v1::UpdateMode::ASYNC,
                         int replicas = 0) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(n);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(1.0);
  spec.mutable_update_mode()->set_kind(mode);
  spec.mutable_update_mode()->set_num_replicas(replicas);
  return spec;
}

TEST(VariableStoreConcurrencyTest, RacingCreatesOfOneVariableCreateItOnce) {
  VariableStore store({});
  std::atomic<int> created{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      absl::StatusOr<bool> r = store.Create(SgdSpec("v", 1024));
      if (!r.ok()) {
        ++failed;
      } else if (*r) {
        ++created;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(created.load(), 1);
  EXPECT_EQ(failed.load(), 0);
}

// SGD with learning rate 1 and gradients of ones: every push subtracts 1
// from every element and adds 1 to the version, so a consistent snapshot
// is uniform and equals -version.
TEST(VariableStoreConcurrencyTest, ReadersNeverSeeHalfAnUpdate) {
  VariableStore store({});
  STRATA_ASSERT_OK(store.Create(SgdSpec("w", 4096)));
  std::shared_ptr<Variable> v = *store.Get("w");
  constexpr int kPushers = 4;
  constexpr int kPushes = 100;
  std::atomic<bool> pushing{true};
  std::atomic<int> bad_snapshots{0};
  std::atomic<int> snapshots{0};

  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (pushing.load()) {
        VariableSnapshot s = v->Snapshot();
        const float* p = reinterpret_cast<const float*>(s.value->data());
        const float expected = -static_cast<float>(s.version);
        for (int64_t i = 0; i < 4096; ++i) {
          if (p[i] != expected) {
            ++bad_snapshots;
            break;
          }
        }
        ++snapshots;
      }
    });
  }
  std::vector<std::thread> pushers;
  for (int w = 0; w < kPushers; ++w) {
    pushers.emplace_back([&, w] {
      std::vector<float> grad(4096, 1.0f);
      for (int step = 0; step < kPushes; ++step) {
        absl::StatusOr<PushOutcome> out = v->PushDense(
            PushMeta{"job", w, step, 0},
            reinterpret_cast<const char*>(grad.data()),
            grad.size() * sizeof(float));
        ASSERT_TRUE(out.ok()) << out.status();
        store.RecordPush(*out, static_cast<int64_t>(grad.size() * 4));
      }
    });
  }
  for (auto& t : pushers) t.join();
  pushing.store(false);
  for (auto& t : readers) t.join();

  EXPECT_EQ(bad_snapshots.load(), 0) << "of " << snapshots.load();
  VariableSnapshot last = v->Snapshot();
  EXPECT_EQ(last.version, kPushers * kPushes);
  EXPECT_EQ(reinterpret_cast<const float*>(last.value->data())[17],
            -static_cast<float>(kPushers * kPushes));
  EXPECT_EQ(store.Stats().pushes_applied, kPushers * kPushes);
}

TEST(VariableStoreConcurrencyTest, SyncStepsReleaseEveryWaitingPullOnce) {
  VariableStore store({});
  constexpr int kReplicas = 4;
  constexpr int kSteps = 40;  // below the 64 steps a replica may run ahead
  STRATA_ASSERT_OK(
      store.Create(SgdSpec("s", 64, v1::UpdateMode::SYNC, kReplicas)));
  std::shared_ptr<Variable> v = *store.Get("s");
  std::atomic<int> fired{0};
  std::atomic<int> failed{0};
  for (int step = 0; step < kSteps; ++step) {
    v->WaitForPull(step + 1, 0, [&, step, v](absl::Status s) {
      if (!s.ok() || v->version() < step + 1) ++failed;
      ++fired;
    });
  }
  std::vector<std::thread> replicas;
  for (int r = 0; r < kReplicas; ++r) {
    replicas.emplace_back([&, r] {
      std::vector<float> grad(64, 1.0f);
      for (int step = 0; step < kSteps; ++step) {
        absl::StatusOr<PushOutcome> out = v->PushDense(
            PushMeta{"job", r, step, 0},
            reinterpret_cast<const char*>(grad.data()),
            grad.size() * sizeof(float));
        ASSERT_TRUE(out.ok()) << out.status();
      }
    });
  }
  for (auto& t : replicas) t.join();
  EXPECT_EQ(v->version(), kSteps);
  EXPECT_EQ(fired.load(), kSteps);
  EXPECT_EQ(failed.load(), 0);
  // Each step applied the mean of its 4 gradients of ones once.
  EXPECT_EQ(reinterpret_cast<const float*>(v->Snapshot().value->data())[0],
            -static_cast<float>(kSteps));
}

TEST(VariableStoreConcurrencyTest, RowPushesAndRowReadsInterleave) {
  VariableStore store({});
  v1::VariableSpec spec = SgdSpec("emb", 0);
  spec.clear_shape();
  spec.add_shape(256);
  spec.add_shape(8);
  STRATA_ASSERT_OK(store.Create(spec));
  std::shared_ptr<Variable> v = *store.Get("emb");
  std::atomic<bool> pushing{true};
  std::atomic<int> bad_rows{0};
  std::thread reader([&] {
    std::vector<int64_t> ids = {0, 5, 255, 5};
    while (pushing.load()) {
      absl::StatusOr<VariableSnapshot> rows = v->ReadRows(ids);
      if (!rows.ok()) {
        ++bad_rows;
        continue;
      }
      // Every row push touches whole rows: each row read is uniform.
      const float* p = reinterpret_cast<const float*>(rows->value->data());
      for (size_t r = 0; r < ids.size(); ++r) {
        for (int c = 1; c < 8; ++c) {
          if (p[r * 8 + c] != p[r * 8]) ++bad_rows;
        }
      }
    }
  });
  std::vector<std::thread> pushers;
  for (int w = 0; w < 4; ++w) {
    pushers.emplace_back([&, w] {
      std::vector<int64_t> ids = {5, static_cast<int64_t>(w), 5, 255};
      std::vector<float> rows(ids.size() * 8, 0.5f);
      for (int step = 0; step < 100; ++step) {
        absl::StatusOr<PushOutcome> out =
            v->PushRows(PushMeta{"job", w, step, 0}, ids,
                        reinterpret_cast<const char*>(rows.data()),
                        rows.size() * sizeof(float));
        ASSERT_TRUE(out.ok()) << out.status();
      }
    });
  }
  for (auto& t : pushers) t.join();
  pushing.store(false);
  reader.join();
  EXPECT_EQ(bad_rows.load(), 0);
  // Row 5 appears twice per push (summed): 4 workers x 100 pushes x 1.0.
  absl::StatusOr<VariableSnapshot> row5 = v->ReadRows({5});
  ASSERT_TRUE(row5.ok());
  EXPECT_EQ(reinterpret_cast<const float*>(row5->value->data())[0], -400.0f);
}

TEST(VariableStoreConcurrencyTest, SaveAndRestoreRaceWithPushesAndWaiters) {
  char dir_template[] = "/tmp/strata-concurrency-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  VariableStoreOptions options;
  options.checkpoint_dir = dir;
  VariableStore store(options);
  STRATA_ASSERT_OK(store.Create(SgdSpec("a", 512)));
  STRATA_ASSERT_OK(store.Create(SgdSpec("b", 512)));
  ASSERT_TRUE(store.Save("base").ok());

  // Pulls waiting for a version that no push reaches: a restore fails them.
  std::atomic<int> aborted{0};
  for (const char* name : {"a", "b"}) {
    (*store.Get(name))->WaitForPull(1 << 30, 0, [&](absl::Status s) {
      if (absl::IsAborted(s)) ++aborted;
    });
  }
  std::atomic<bool> running{true};
  std::vector<std::thread> pushers;
  for (int w = 0; w < 3; ++w) {
    pushers.emplace_back([&, w] {
      std::vector<float> grad(512, 1.0f);
      for (int step = 0; running.load(); ++step) {
        // The variable may be replaced by a restore between Get and Push:
        // both outcomes are fine, neither may crash or corrupt.
        absl::StatusOr<std::shared_ptr<Variable>> v =
            store.Get(step % 2 == 0 ? "a" : "b");
        ASSERT_TRUE(v.ok());
        absl::StatusOr<PushOutcome> out = (*v)->PushDense(
            PushMeta{"job", w, step, 0},
            reinterpret_cast<const char*>(grad.data()),
            grad.size() * sizeof(float));
        ASSERT_TRUE(out.ok()) << out.status();
      }
    });
  }
  std::thread saver([&] {
    for (int i = 0; i < 5; ++i) {
      absl::StatusOr<SaveResult> saved = store.Save("ckpt");
      ASSERT_TRUE(saved.ok()) << saved.status();
      EXPECT_EQ(saved->num_variables, 2);
    }
  });
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<int64_t> restored = store.Restore("base");
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ(*restored, 2);
  }
  saver.join();
  running.store(false);
  for (auto& t : pushers) t.join();
  EXPECT_EQ(aborted.load(), 2);
  std::filesystem::remove_all(dir);
}

TEST(VariableStoreConcurrencyTest, DeadlineTimerRunsEveryCallbackOnce) {
  std::atomic<int> ran{0};
  {
    DeadlineTimer timer;
    std::vector<std::thread> schedulers;
    for (int t = 0; t < 4; ++t) {
      schedulers.emplace_back([&, t] {
        for (int i = 0; i < 100; ++i) {
          // Half already due, half far in the future (run by Stop).
          absl::Time when = i % 2 == 0 ? absl::Now() - absl::Seconds(1)
                                       : absl::Now() + absl::Hours(1);
          timer.Schedule(when, [&] { ++ran; });
        }
      });
    }
    for (auto& s : schedulers) s.join();
    timer.Stop();
  }
  EXPECT_EQ(ran.load(), 400);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A store whose checkpoint reads wait until the test releases them.
class SlowReadStore final : public VariableStore {
 public:
  using VariableStore::VariableStore;
  absl::Notification reading;
  absl::Notification release;

 protected:
  absl::StatusOr<Checkpoint> ReadCheckpointFiles(
      const std::string& path) override {
    if (!reading.HasBeenNotified()) reading.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(30));
    return VariableStore::ReadCheckpointFiles(path);
  }
};

// A table another job creates while a job's restore reads its files is
// neither dropped nor given to the restoring job: the restore is refused
// and changes nothing.
TEST(VariableStoreTablesTest, TableCreatedByAnotherJobDuringARestoreSurvives) {
  const std::string dir = std::filesystem::path(::testing::TempDir()) /
                          ("restore_tables_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  VariableStoreOptions options;
  options.checkpoint_dir = dir;
  SlowReadStore store(options);
  const Caller a{"a", Role::kCoordinator};
  const Caller b{"b", Role::kCoordinator};
  v1::TableSpec spec;
  spec.set_name("a.t");
  spec.set_dim(2);
  ASSERT_TRUE(store.CreateTable(spec, a).ok());
  ASSERT_TRUE(store.Save("ckpt", a).ok());
  absl::Status restored;
  std::thread restore([&] { restored = store.Restore("ckpt", a).status(); });
  ASSERT_TRUE(store.reading.WaitForNotificationWithTimeout(absl::Seconds(30)));
  v1::TableSpec other = spec;
  other.set_name("b.t");
  ASSERT_TRUE(store.CreateTable(other, b).ok());
  store.release.Notify();
  restore.join();
  EXPECT_EQ(restored.code(), absl::StatusCode::kPermissionDenied) << restored;
  // Job b's table is there and still b's; job a's table too.
  EXPECT_TRUE(store.tables()->Stats("b.t").ok());
  EXPECT_TRUE(store.tables()->Stats("a.t").ok());
  EXPECT_EQ(store.CheckTableOwner(a, "b.t").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(store.CheckTableOwner(b, "b.t").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
