// PS replication (server/replication.h): a primary store's changes reach a
// backup store through the ReplicationService, the backup ends bitwise
// equal (values, slots, versions, exactly-once windows, SYNC sums held),
// a state transfer mid-run gives the same, and a lost backup is fenced off
// before anything more is acknowledged.
#include "server/replication.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/buffer_pool.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace strata {
namespace {

v1::VariableSpec Spec(const std::string& name, Shape shape,
                      const std::string& optimizer,
                      v1::UpdateMode::Kind mode = v1::UpdateMode::ASYNC) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_type("random_uniform");
  spec.mutable_initializer()->set_seed(7);
  spec.mutable_optimizer()->set_type(optimizer);
  spec.mutable_optimizer()->set_learning_rate(0.1);
  spec.mutable_update_mode()->set_kind(mode);
  spec.mutable_update_mode()->set_num_replicas(2);
  return spec;
}

PushMeta Meta(int64_t worker, int64_t step) {
  PushMeta m;
  m.job = "job";
  m.worker = worker;
  m.step = step;
  return m;
}

std::vector<float> Grad(size_t n, float scale) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = scale * (static_cast<float>(i % 7) - 3);
  return g;
}

// A backup store served on 127.0.0.1:0, and the stream's events.
class Backup {
 public:
  Backup() : store_(VariableStoreOptions{}) {
    ReplicaHooks hooks;
    hooks.is_backup = [] { return true; };
    hooks.stream_opened = [this](const std::string& primary) {
      absl::MutexLock lock(&mu_);
      primary_ = primary;
    };
    hooks.stream_closed = [this](const std::string&, bool failed) {
      absl::MutexLock lock(&mu_);
      closed_ = true;
      failed_ = failed;
    };
    hooks.attach = [](const v1::AttachBackupRequest&)
        -> absl::StatusOr<std::string> {
      return absl::FailedPreconditionError("a backup");
    };
    hooks.status = [] { return v1::ReplicaStatusResponse(); };
    service_ = std::make_unique<ReplicationServiceImpl>(
        &store_, std::move(hooks), &logger_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
  }
  ~Backup() { Shutdown(); }
  void Shutdown() {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_.reset();
    }
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  VariableStore* store() { return &store_; }
  bool WaitClosed(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&closed_), timeout);
  }
  std::string primary() {
    absl::MutexLock lock(&mu_);
    return primary_;
  }

 private:
  Logger logger_{"backup"};
  VariableStore store_;
  std::unique_ptr<ReplicationServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Mutex mu_;
  std::string primary_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
};

// The two stores hold the same variables, bit for bit, with the same
// versions and checkpoint metadata (exactly-once windows, clocks).
void ExpectSameState(VariableStore* primary, VariableStore* backup) {
  auto a = primary->List();
  auto b = backup->List();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i]->name());
    ASSERT_EQ(a[i]->name(), b[i]->name());
    auto ea = a[i]->CheckpointEntry();
    auto eb = b[i]->CheckpointEntry();
    ASSERT_TRUE(ea.ok() && eb.ok());
    ASSERT_EQ(ea->value->size(), eb->value->size());
    EXPECT_EQ(std::memcmp(ea->value->data(), eb->value->data(),
                          ea->value->size()),
              0);
    ASSERT_EQ(ea->slots.size(), eb->slots.size());
    for (size_t s = 0; s < ea->slots.size(); ++s) {
      EXPECT_EQ(std::memcmp(ea->slots[s].second->data(),
                            eb->slots[s].second->data(),
                            ea->slots[s].second->size()),
                0);
    }
    EXPECT_EQ(ea->meta, eb->meta);
    EXPECT_EQ(a[i]->version(), b[i]->version());
  }
}

ReplicationLogOptions LogOptions() {
  ReplicationLogOptions o;
  o.incarnation = "primary-1";
  o.ack_timeout = absl::Seconds(5);
  o.fence = [](const std::string&) { return absl::OkStatus(); };
  return o;
}

// Concurrent pushes from several threads (async adam, sync sgd, rows,
// assignments, a creation mid-stream) leave the backup equal to the
// primary, and each push returned only once the backup had it.
TEST(PsReplicationTest, BackupEndsEqualToThePrimaryUnderConcurrentPushes) {
  Backup backup;
  Logger logger("primary");
  VariableStore primary({});
  ReplicationLog log(&primary, &logger, LogOptions());
  primary.set_replication(&log);
  STRATA_ASSERT_OK(primary.Create(Spec("dense", {64, 8}, "adam")));
  STRATA_ASSERT_OK(
      primary.Create(Spec("sync", {16}, "sgd", v1::UpdateMode::SYNC)));
  STRATA_ASSERT_OK(log.Attach(backup.address(), "backup-1"));
  auto dense = *primary.Get("dense");
  auto sync = *primary.Get("sync");
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (int step = 0; step < 40; ++step) {
        auto g = Grad(64 * 8, 0.01f * (w + 1));
        auto pushed = dense->PushDense(Meta(w, step),
                                       reinterpret_cast<const char*>(g.data()),
                                       g.size() * 4);
        EXPECT_TRUE(pushed.ok()) << pushed.status();
        // Every acknowledged push is in the backup's store already.
        auto copy = backup.store()->Get("dense");
        ASSERT_TRUE(copy.ok());
        auto s = Grad(16, 0.1f * (w + 1));
        EXPECT_TRUE(sync->PushDense(Meta(w, step),
                                    reinterpret_cast<const char*>(s.data()),
                                    s.size() * 4)
                        .ok());
        const int64_t ids[] = {step % 64, (step * 7) % 64};
        auto rows = Grad(2 * 8, 0.02f);
        EXPECT_TRUE(dense->PushRows(Meta(w + 2, step), ids,
                                    reinterpret_cast<const char*>(rows.data()),
                                    rows.size() * 4)
                        .ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  // A variable created mid-stream, and an assignment.
  STRATA_ASSERT_OK(primary.Create(Spec("late", {4}, "sgd")));
  const float value[] = {1, 2, 3, 4};
  STRATA_ASSERT_OK(
      (*primary.Get("late"))
          ->Assign(reinterpret_cast<const char*>(value), sizeof(value))
          .status());
  // Only SYNC step 39's last contribution is missing... none: both
  // workers pushed every step, so every step was applied.
  EXPECT_EQ(sync->version(), 40);
  EXPECT_EQ(log.acknowledged(), log.position());
  ExpectSameState(&primary, backup.store());
  EXPECT_EQ(backup.primary(), "primary-1");
}

// Pushes naming stale base versions, under a staleness-scaled learning
// rate, from two threads: the backup computes the same staleness from the
// entries' base versions and ends bit for bit equal.
TEST(PsReplicationTest, StalenessScaledPushesEndEqualOnTheBackup) {
  Backup backup;
  Logger logger("primary");
  VariableStore primary({});
  ReplicationLog log(&primary, &logger, LogOptions());
  primary.set_replication(&log);
  v1::VariableSpec spec = Spec("stale", {32, 4}, "adam");
  spec.mutable_update_mode()->set_num_replicas(0);
  spec.mutable_update_mode()->set_scale_by_staleness(true);
  STRATA_ASSERT_OK(primary.Create(spec));
  STRATA_ASSERT_OK(log.Attach(backup.address(), "backup-1"));
  auto stale = *primary.Get("stale");
  std::atomic<int64_t> scaled{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (int step = 0; step < 30; ++step) {
        auto g = Grad(32 * 4, 0.01f * (w + 1));
        PushMeta meta = Meta(w, step);
        meta.base_version = std::max<int64_t>(0, stale->version() - step % 4);
        auto pushed = stale->PushDense(
            meta, reinterpret_cast<const char*>(g.data()), g.size() * 4);
        EXPECT_TRUE(pushed.ok()) << pushed.status();
        if (pushed.ok() && pushed->staleness > 0) ++scaled;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(scaled.load(), 0);
  EXPECT_EQ(log.acknowledged(), log.position());
  ExpectSameState(&primary, backup.store());
}

// Stale pushes under delay compensation (fixed and adaptive), from two
// threads, some before the backup attaches (a state transfer, which
// carries no kept versions) and some after: the backup applies the
// gradients its primary corrected and ends equal to the bit.
TEST(PsReplicationTest, DelayCompensatedPushesEndEqualOnTheBackup) {
  for (bool adaptive : {false, true}) {
    SCOPED_TRACE(adaptive ? "dc_adaptive" : "dc");
    Logger logger("primary");
    VariableStore primary({});
    ReplicationLog log(&primary, &logger, LogOptions());
    primary.set_replication(&log);
    v1::VariableSpec spec = Spec("dc", {32, 4}, "adam");
    spec.mutable_update_mode()->set_num_replicas(0);
    v1::DelayCompensation* dc =
        spec.mutable_update_mode()->mutable_delay_compensation();
    dc->set_lambda(adaptive ? 2.0 : 50.0);
    dc->set_adaptive(adaptive);
    dc->set_versions(3);
    STRATA_ASSERT_OK(primary.Create(spec));
    auto var = *primary.Get("dc");
    auto push = [&](int w, int step) {
      auto g = Grad(32 * 4, 0.01f * (w + 1) + 0.001f * step);
      PushMeta meta = Meta(w, step);
      meta.base_version = std::max<int64_t>(0, var->version() - step % 5);
      auto pushed = var->PushDense(
          meta, reinterpret_cast<const char*>(g.data()), g.size() * 4);
      EXPECT_TRUE(pushed.ok()) << pushed.status();
    };
    for (int step = 0; step < 6; ++step) push(0, step);
    Backup backup;
    STRATA_ASSERT_OK(log.Attach(backup.address(), "backup-1"));
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w] {
        for (int step = 6; step < 36; ++step) push(w, step);
      });
    }
    for (auto& t : threads) t.join();
    STRATA_ASSERT_OK(log.Wait(log.Tail()));
    EXPECT_EQ(log.acknowledged(), log.position());
    ExpectSameState(&primary, backup.store());
  }
}

// Pushes stepped chunk by chunk on staged copies (the Lane's chunked
// apply) and published, racing plain pushes: the backup, which steps each
// whole gradient, ends equal to the bit.
TEST(PsReplicationTest, StagedPushesEndEqualOnTheBackup) {
  Backup backup;
  Logger logger("primary");
  VariableStore primary({});
  ReplicationLog log(&primary, &logger, LogOptions());
  primary.set_replication(&log);
  const int64_t n = 10007;  // across the kernels' blocks, a ragged tail
  STRATA_ASSERT_OK(primary.Create(Spec("staged", {n}, "adam")));
  STRATA_ASSERT_OK(log.Attach(backup.address(), "backup-1"));
  auto staged = *primary.Get("staged");
  std::shared_ptr<BufferPool> pool = BufferPool::Create(size_t{64} << 20);
  std::atomic<int> published{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (int step = 0; step < 30; ++step) {
        std::vector<float> g(n);
        for (int64_t i = 0; i < n; ++i) {
          g[i] = 0.001f * static_cast<float>((i * 31 + step * 7 + w) % 97) -
                 0.05f;
        }
        const char* p = reinterpret_cast<const char*>(g.data());
        std::unique_ptr<StagedDense> s =
            w == 0 ? staged->StageDense(Meta(w, step), pool.get()) : nullptr;
        // Pieces that are no multiple of a vector lane.
        for (int64_t at = 997; s != nullptr && at < n + 997; at += 997) {
          s->Apply(p, std::min(n, at));
        }
        auto pushed =
            staged->PushDense(Meta(w, step), p, g.size() * 4, s.get());
        EXPECT_TRUE(pushed.ok()) << pushed.status();
        if (pushed.ok() &&
            pushed->staged == PushOutcome::Staged::kPublished) {
          ++published;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(published.load(), 0);
  EXPECT_EQ(log.acknowledged(), log.position());
  ExpectSameState(&primary, backup.store());
}

// A backup attached mid-run gets the state (with a SYNC step half pushed)
// by transfer; promoted, it completes that step as the primary would and
// recognizes an acknowledged push's retry as a duplicate.
TEST(PsReplicationTest, StateTransferCarriesHeldSyncStepsAndWindows) {
  Logger logger("primary");
  VariableStore primary({});
  ReplicationLog log(&primary, &logger, LogOptions());
  primary.set_replication(&log);
  STRATA_ASSERT_OK(
      primary.Create(Spec("sync", {16}, "adam", v1::UpdateMode::SYNC)));
  STRATA_ASSERT_OK(primary.Create(Spec("async", {16}, "adagrad")));
  auto sync = *primary.Get("sync");
  auto async = *primary.Get("async");
  auto g0 = Grad(16, 0.5f);
  auto g1 = Grad(16, -0.25f);
  for (int step = 0; step < 3; ++step) {
    for (int w = 0; w < 2; ++w) {
      const auto& g = w == 0 ? g0 : g1;
      STRATA_ASSERT_OK(sync->PushDense(Meta(w, step),
                                       reinterpret_cast<const char*>(g.data()),
                                       64)
                           .status());
      STRATA_ASSERT_OK(async->PushDense(Meta(w, step),
                                        reinterpret_cast<const char*>(g.data()),
                                        64)
                           .status());
    }
  }
  // Step 3: only worker 0 has pushed.
  STRATA_ASSERT_OK(sync->PushDense(Meta(0, 3),
                                   reinterpret_cast<const char*>(g0.data()), 64)
                       .status());
  Backup backup;
  STRATA_ASSERT_OK(log.Attach(backup.address(), "backup-1"));
  STRATA_ASSERT_OK(log.Wait(log.Tail()));
  ExpectSameState(&primary, backup.store());

  // The primary dies here; the backup's store serves from now on.
  auto promoted_sync = *backup.store()->Get("sync");
  auto again = promoted_sync->PushDense(
      Meta(0, 3), reinterpret_cast<const char*>(g0.data()), 64);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  auto done = promoted_sync->PushDense(
      Meta(1, 3), reinterpret_cast<const char*>(g1.data()), 64);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->applied);
  // The primary, given the same push, reaches the same value.
  log.Stop();
  primary.set_replication(nullptr);
  auto reference = sync->PushDense(
      Meta(1, 3), reinterpret_cast<const char*>(g1.data()), 64);
  ASSERT_TRUE(reference.ok());
  EXPECT_TRUE(reference->applied);
  auto a = sync->Snapshot();
  auto b = promoted_sync->Snapshot();
  EXPECT_EQ(a.version, 4);
  EXPECT_EQ(b.version, 4);
  EXPECT_EQ(std::memcmp(a.value->data(), b.value->data(), 64), 0);
}

// A backup that goes away is fenced off before the next push is
// acknowledged, then the primary goes on alone; when the fence finds the
// backup took the task over, the primary acknowledges nothing more.
TEST(PsReplicationTest, LostBackupIsFencedBeforeAnythingMoreIsAcknowledged) {
  for (bool backup_won : {false, true}) {
    SCOPED_TRACE(backup_won ? "backup took over" : "primary fenced it");
    auto backup = std::make_unique<Backup>();
    Logger logger("primary");
    VariableStore primary({});
    std::atomic<int> fences{0};
    absl::Notification lost;
    ReplicationLogOptions options = LogOptions();
    options.ack_timeout = absl::Milliseconds(400);
    options.fence = [&](const std::string& b) {
      EXPECT_EQ(b, "backup-1");
      ++fences;
      return backup_won ? absl::NotFoundError("replaced") : absl::OkStatus();
    };
    options.on_lost = [&] { lost.Notify(); };
    ReplicationLog log(&primary, &logger, options);
    primary.set_replication(&log);
    STRATA_ASSERT_OK(primary.Create(Spec("v", {8}, "sgd")));
    STRATA_ASSERT_OK(log.Attach(backup->address(), "backup-1"));
    auto v = *primary.Get("v");
    auto g = Grad(8, 1);
    STRATA_ASSERT_OK(
        v->PushDense(Meta(0, 0), reinterpret_cast<const char*>(g.data()), 32)
            .status());
    EXPECT_TRUE(log.has_backup());
    backup->Shutdown();
    backup.reset();
    auto pushed =
        v->PushDense(Meta(0, 1), reinterpret_cast<const char*>(g.data()), 32);
    EXPECT_EQ(fences.load(), 1);
    EXPECT_FALSE(log.has_backup());
    if (backup_won) {
      EXPECT_THAT(pushed.status(),
                  StatusIsWithMessage(absl::StatusCode::kUnavailable,
                                      "taken over by its backup"));
      EXPECT_TRUE(lost.WaitForNotificationWithTimeout(absl::Seconds(10)));
    } else {
      EXPECT_TRUE(pushed.ok()) << pushed.status();
      // Alone now: later pushes need no backup.
      EXPECT_TRUE(
          v->PushDense(Meta(0, 2), reinterpret_cast<const char*>(g.data()), 32)
              .ok());
      EXPECT_EQ(log.backups_dropped(), 1);
    }
  }
}

// A new backup may attach only once the previous one is gone; a retried
// push already taken by the primary waits for the backup too.
TEST(PsReplicationTest, SecondBackupIsRefusedAndDuplicatesWaitForTheBackup) {
  Backup first;
  Backup second;
  Logger logger("primary");
  VariableStore primary({});
  ReplicationLog log(&primary, &logger, LogOptions());
  primary.set_replication(&log);
  STRATA_ASSERT_OK(primary.Create(Spec("v", {8}, "sgd")));
  STRATA_ASSERT_OK(log.Attach(first.address(), "backup-1"));
  EXPECT_THAT(log.Attach(second.address(), "backup-2"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  auto v = *primary.Get("v");
  auto g = Grad(8, 1);
  STRATA_ASSERT_OK(
      v->PushDense(Meta(0, 0), reinterpret_cast<const char*>(g.data()), 32)
          .status());
  auto dup =
      v->PushDense(Meta(0, 0), reinterpret_cast<const char*>(g.data()), 32);
  ASSERT_TRUE(dup.ok());
  EXPECT_TRUE(dup->duplicate);
  EXPECT_EQ((*first.store()->Get("v"))->version(), 1);
  // Dynamic tables are not replicated: refused with the reason.
  v1::TableSpec table;
  table.set_name("t");
  table.set_dim(4);
  EXPECT_THAT(primary.CreateTable(table, std::nullopt),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "not replicated"));
}

}  // namespace
}  // namespace strata
