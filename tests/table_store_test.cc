// TableStore (the PS task's dynamic embedding tables) and its service:
// specs, lookups and pushes with exactly-once tags, shards, checkpoints
// (same layout and resharded into another number of tasks), over an
// in-process strata-ps and PsClient.
#include "tables/table_store.h"

#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ps_server.h"
#include "server/variable_store.h"
#include "tests/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

v1::TableSpec Spec(const std::string& name, int64_t dim,
                   const std::string& optimizer = "sgd", double lr = 0.5) {
  v1::TableSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.set_seed(7);
  spec.mutable_optimizer()->set_type(optimizer);
  spec.mutable_optimizer()->set_learning_rate(lr);
  return spec;
}

PushMeta Tag(int64_t worker, int64_t step) {
  PushMeta meta;
  meta.job = "job";
  meta.worker = worker;
  meta.step = step;
  return meta;
}

std::string TempDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat(name, "_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TEST(TableStoreTest, SpecsAreNormalizedCheckedAndIdempotent) {
  TableStore store;
  absl::StatusOr<v1::TableSpec> n = TableStore::Normalize(Spec("emb", 4));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->initializer(), "random_uniform");
  EXPECT_EQ(n->eviction(), "lru");
  EXPECT_EQ(n->min_count(), 1);
  EXPECT_EQ(n->num_shards(), 1);
  EXPECT_EQ(n->optimizer().type(), "sgd");
  EXPECT_EQ(store.Create(Spec("emb", 4)).value(), true);
  EXPECT_EQ(store.Create(Spec("emb", 4)).value(), false);
  EXPECT_THAT(store.Create(Spec("emb", 8)),
              StatusIs(absl::StatusCode::kAlreadyExists));
  struct Case {
    v1::TableSpec spec;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({Spec("", 4), "TableSpec.name"});
  cases.push_back({Spec("x", 0), "TableSpec.dim"});
  cases.push_back({Spec("x", 4, "momentum"), "TableSpec.optimizer"});
  v1::TableSpec s = Spec("x", 4, "lazy_adam");
  s.mutable_optimizer()->set_beta_1(1.5);
  cases.push_back({s, "TableSpec.optimizer: lazy_adam: beta_1"});
  s = Spec("x", 4);
  s.set_eviction("fifo");
  cases.push_back({s, "TableSpec.eviction"});
  s = Spec("x", 4);
  s.set_num_shards(2);
  s.set_shard(2);
  cases.push_back({s, "TableSpec.shard"});
  s = Spec("x", 4);
  s.set_initializer("ones");
  cases.push_back({s, "TableSpec.initializer"});
  s = Spec("x", 4);
  s.set_ttl_seconds(-1);
  cases.push_back({s, "TableSpec.ttl_seconds"});
  for (const Case& c : cases) {
    EXPECT_THAT(store.Create(c.spec),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    c.message))
        << c.message;
  }
  EXPECT_EQ(store.num_tables(), 1);
}

TEST(TableStoreTest, PushesApplyOnceSumDuplicatesAndRefuseBadInput) {
  TableStore store;
  ASSERT_TRUE(store.Create(Spec("emb", 2)).ok());
  const std::vector<int64_t> ids = {5, -9, 1LL << 60};
  std::vector<float> before;
  STRATA_ASSERT_OK(store.Lookup("emb", ids, /*train=*/true, &before));
  ASSERT_EQ(before.size(), 6u);
  // Row 5 twice: its gradients are summed. SGD, learning rate 0.5.
  const std::vector<int64_t> push_ids = {5, -9, 5};
  const std::vector<float> grads = {1, 2, 3, 4, 1, 1};
  absl::StatusOr<TablePushOutcome> out =
      store.Push("emb", Tag(0, 0), push_ids, grads);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->duplicate);
  EXPECT_EQ(out->rows_applied, 2);
  // The same tag again: acknowledged, not applied.
  out = store.Push("emb", Tag(0, 0), push_ids, grads);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->duplicate);
  std::vector<float> after;
  STRATA_ASSERT_OK(store.Lookup("emb", ids, false, &after));
  EXPECT_FLOAT_EQ(after[0], before[0] - 0.5f * 2);
  EXPECT_FLOAT_EQ(after[1], before[1] - 0.5f * 3);
  EXPECT_FLOAT_EQ(after[2], before[2] - 0.5f * 3);
  EXPECT_FLOAT_EQ(after[3], before[3] - 0.5f * 4);
  EXPECT_EQ(after[4], before[4]);  // untouched
  // Bad input changes nothing.
  const std::vector<float> nan = {1, std::nanf("")};
  EXPECT_THAT(store.Push("emb", Tag(0, 1), {5}, nan),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "id 5 holds a NaN"));
  EXPECT_THAT(store.Push("emb", Tag(0, 1), {5}, {1, 2, 3}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "need 2 gradient values"));
  EXPECT_THAT(store.Push("nope", Tag(0, 1), {5}, {1, 2}),
              StatusIs(absl::StatusCode::kNotFound));
  std::vector<float> again;
  STRATA_ASSERT_OK(store.Lookup("emb", ids, false, &again));
  EXPECT_EQ(again, after);
  absl::StatusOr<std::vector<v1::TableInfo>> stats = store.Stats("emb");
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].rows(), 3);
  EXPECT_EQ((*stats)[0].pushes_duplicate(), 1);
  EXPECT_THAT(store.Stats("nope"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(TableStoreTest, AShardRefusesIdsOfOtherShards) {
  TableStore store;
  v1::TableSpec spec = Spec("emb", 2);
  spec.set_num_shards(3);
  spec.set_shard(1);
  ASSERT_TRUE(store.Create(spec).ok());
  int64_t mine = -1, other = -1;
  for (int64_t id = 0; mine < 0 || other < 0; ++id) {
    (DynamicTable::ShardOf(id, 3) == 1 ? mine : other) = id;
  }
  std::vector<float> out;
  STRATA_ASSERT_OK(store.Lookup("emb", {mine}, true, &out));
  EXPECT_THAT(store.Lookup("emb", {mine, other}, true, &out),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  absl::StrCat("id ", other,
                                               " belongs to shard")));
  EXPECT_THAT(store.Push("emb", Tag(0, 0), {other}, {1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TableStoreTest, AdmissionDropsGradientsOfIdsNotSeenEnough) {
  TableStore store;
  v1::TableSpec spec = Spec("emb", 2);
  spec.set_min_count(2);
  ASSERT_TRUE(store.Create(spec).ok());
  std::vector<float> out;
  STRATA_ASSERT_OK(store.Lookup("emb", {42}, true, &out));
  absl::StatusOr<TablePushOutcome> o =
      store.Push("emb", Tag(0, 0), {42}, {1, 1});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->rows_dropped, 1);
  EXPECT_EQ(o->rows_applied, 0);
  STRATA_ASSERT_OK(store.Lookup("emb", {42}, true, &out));  // admitted now
  o = store.Push("emb", Tag(0, 1), {42}, {1, 1});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->rows_applied, 1);
}

// Rows, optimizer slots, update counts and the exactly-once window survive
// a checkpoint: written by 2 tasks, restored into 3 (resharded) and back
// into 1, every row reads the same and every taken push stays taken.
TEST(TableStoreTest, CheckpointsRestoreAndReshardIntoAnyNumberOfTasks) {
  const int64_t dim = 3;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 200; ++i) ids.push_back(i * 7919 - 500);
  auto make = [&](int shard, int num_shards) {
    v1::TableSpec spec = Spec("emb", dim, "adagrad", 0.1);
    spec.set_num_shards(num_shards);
    spec.set_shard(shard);
    auto store = std::make_unique<TableStore>();
    EXPECT_TRUE(store->Create(spec).ok());
    return store;
  };
  auto mine = [](const std::vector<int64_t>& all, int shard, int n) {
    std::vector<int64_t> out;
    for (int64_t id : all) {
      if (DynamicTable::ShardOf(id, n) == shard) out.push_back(id);
    }
    return out;
  };
  // Two tasks train: a lookup, then two pushes of every row.
  std::vector<std::unique_ptr<TableStore>> two;
  std::map<int64_t, std::vector<float>> expected;
  for (int s = 0; s < 2; ++s) {
    two.push_back(make(s, 2));
    const std::vector<int64_t> ids_s = mine(ids, s, 2);
    std::vector<float> rows;
    STRATA_ASSERT_OK(two[s]->Lookup("emb", ids_s, true, &rows));
    for (int step = 0; step < 2; ++step) {
      std::vector<float> g(ids_s.size() * dim);
      for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * (i % 11) - 0.03f;
      ASSERT_TRUE(two[s]->Push("emb", Tag(0, step), ids_s, g).ok());
    }
    STRATA_ASSERT_OK(two[s]->Lookup("emb", ids_s, false, &rows));
    for (size_t i = 0; i < ids_s.size(); ++i) {
      expected[ids_s[i]].assign(rows.begin() + i * dim,
                                rows.begin() + (i + 1) * dim);
    }
  }
  std::vector<Checkpoint> saved(2);
  for (int s = 0; s < 2; ++s) saved[s].variables = two[s]->CheckpointEntries();

  // Same layout: Restore.
  TableStore again;
  STRATA_ASSERT_OK(again.Restore(saved[0]));
  std::vector<float> rows;
  const std::vector<int64_t> ids0 = mine(ids, 0, 2);
  STRATA_ASSERT_OK(again.Lookup("emb", ids0, false, &rows));
  for (size_t i = 0; i < ids0.size(); ++i) {
    EXPECT_EQ(std::vector<float>(rows.begin() + i * dim,
                                 rows.begin() + (i + 1) * dim),
              expected[ids0[i]]);
  }
  EXPECT_TRUE(again.Push("emb", Tag(0, 1), {ids0[0]}, {1, 1, 1})->duplicate);

  // Three tasks: each loads its ids from both checkpoints.
  int64_t loaded = 0;
  std::vector<std::unique_ptr<TableStore>> three;
  for (int s = 0; s < 3; ++s) {
    three.push_back(make(s, 3));
    absl::StatusOr<int64_t> n = three[s]->Reshard(saved);
    ASSERT_TRUE(n.ok()) << n.status();
    loaded += *n;
    const std::vector<int64_t> ids_s = mine(ids, s, 3);
    STRATA_ASSERT_OK(three[s]->Lookup("emb", ids_s, false, &rows));
    for (size_t i = 0; i < ids_s.size(); ++i) {
      EXPECT_EQ(std::vector<float>(rows.begin() + i * dim,
                                   rows.begin() + (i + 1) * dim),
                expected[ids_s[i]])
          << "id " << ids_s[i];
    }
    // A push taken by the old tasks is still taken.
    if (!ids_s.empty()) {
      EXPECT_TRUE(three[s]->Push("emb", Tag(0, 1), {ids_s[0]}, {1, 1, 1})
                      ->duplicate);
    }
  }
  EXPECT_EQ(loaded, static_cast<int64_t>(ids.size()));
  // The same optimizer state came along: one more identical update on the
  // 3-task layout and on a 1-task one restored from it agree.
  std::vector<Checkpoint> saved3(3);
  for (int s = 0; s < 3; ++s) saved3[s].variables = three[s]->CheckpointEntries();
  auto one = make(0, 1);
  ASSERT_EQ(one->Reshard(saved3).value(), static_cast<int64_t>(ids.size()));
  const int64_t id = ids[17];
  const int s = DynamicTable::ShardOf(id, 3);
  ASSERT_TRUE(three[s]->Push("emb", Tag(0, 2), {id}, {0.5f, -0.5f, 0.25f}).ok());
  ASSERT_TRUE(one->Push("emb", Tag(0, 2), {id}, {0.5f, -0.5f, 0.25f}).ok());
  std::vector<float> a, b;
  STRATA_ASSERT_OK(three[s]->Lookup("emb", {id}, false, &a));
  STRATA_ASSERT_OK(one->Lookup("emb", {id}, false, &b));
  EXPECT_EQ(a, b);
  // A checkpoint whose rows do not fit the table is refused; nothing
  // changes.
  auto wide = std::make_unique<TableStore>();
  ASSERT_TRUE(wide->Create(Spec("emb", dim + 1, "adagrad", 0.1)).ok());
  EXPECT_THAT(wide->Reshard(saved), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(wide->Stats("emb").value()[0].rows(), 0);
}

// Over gRPC: a PS task with a table, saved to disk, killed-and-restarted
// as a new server that restores the checkpoint file.
TEST(TableServiceTest, TablesOverGrpcSurviveASaveAndRestoreOnDisk) {
  const std::string dir = TempDir("table_service");
  std::ostringstream log;
  Logger logger("ps:test", &log);
  PsServerOptions options;
  options.checkpoint_dir = dir;
  absl::StatusOr<std::unique_ptr<PsServer>> server =
      PsServer::Start(options, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<PsClient> client = PsClient::Connect((*server)->address());
  v1::TableSpec spec = Spec("user_id", 4, "ftrl", 0.05);
  spec.set_max_rows(1000);
  ASSERT_EQ(client->CreateTable(spec).value(), true);
  ASSERT_EQ(client->CreateTable(spec).value(), false);
  std::vector<int64_t> ids(3000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) * 31;
  std::vector<float> rows(ids.size() * 4);
  // The capacity bounds the rows: the first 2000 are evicted.
  STRATA_ASSERT_OK(client->LookupRows("user_id", ids, true, absl::MakeSpan(rows)));
  const std::vector<int64_t> last(ids.end() - 500, ids.end());
  std::vector<float> grads(last.size() * 4, 0.25f);
  absl::StatusOr<v1::PushTableRowsResponse> pushed =
      client->PushTableRows("user_id", last, grads, PushTag{"job", 0, 3});
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->rows_applied(), 500);
  pushed = client->PushTableRows("user_id", last, grads, PushTag{"job", 0, 3});
  ASSERT_TRUE(pushed.ok());
  EXPECT_TRUE(pushed->duplicate());
  absl::StatusOr<v1::TableStatsResponse> stats = client->TableStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->tables_size(), 1);
  EXPECT_EQ(stats->tables(0).rows(), 1000);
  EXPECT_EQ(stats->tables(0).evictions(), 2000);
  EXPECT_EQ(stats->tables(0).lookups(), 3000);
  EXPECT_EQ(stats->tables(0).spec().optimizer().type(), "ftrl");
  std::vector<float> trained(last.size() * 4);
  STRATA_ASSERT_OK(
      client->LookupRows("user_id", last, false, absl::MakeSpan(trained)));
  ASSERT_TRUE(client->Save("ckpt-1").ok());
  // Bad input over the wire: named, nothing changes.
  EXPECT_THAT(client->PushTableRows("user_id", {last[0]},
                                    {1, 2, std::nanf(""), 4},
                                    PushTag{"job", 0, 4}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "NaN"));
  EXPECT_THAT(client->LookupRows("nope", {1}, true, absl::MakeSpan(rows).first(4)),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(client->LookupRows("user_id", {1}, true, absl::MakeSpan(rows).first(3)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  client.reset();
  server->reset();

  // A new task restores the checkpoint (tables included).
  server = PsServer::Start(options, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  client = PsClient::Connect((*server)->address());
  ASSERT_TRUE(client->Restore("ckpt-1").ok());
  std::vector<float> restored(trained.size());
  STRATA_ASSERT_OK(
      client->LookupRows("user_id", last, false, absl::MakeSpan(restored)));
  EXPECT_EQ(restored, trained);
  pushed = client->PushTableRows("user_id", last, grads, PushTag{"job", 0, 3});
  ASSERT_TRUE(pushed.ok());
  EXPECT_TRUE(pushed->duplicate());
  // RestoreTables over the wire: the checkpoint's rows of this task's
  // tables.
  EXPECT_EQ(client->RestoreTables({"ckpt-1"}).value(), 1000);
  fs::remove_all(dir);
}

// Several tables in one call: lookups answer each table's rows in order; a
// push is checked whole before any table applies it (a NaN in the second
// part changes neither), and each table takes its tag once.
TEST(TableServiceTest, OneCallCarriesSeveralTables) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  absl::StatusOr<std::unique_ptr<PsServer>> server =
      PsServer::Start(PsServerOptions{}, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<PsClient> client = PsClient::Connect((*server)->address());
  ASSERT_TRUE(client->CreateTable(Spec("a", 2)).ok());
  ASSERT_TRUE(client->CreateTable(Spec("b", 3)).ok());
  const std::vector<int64_t> a_ids = {1, 2}, b_ids = {7};
  std::vector<float> a_rows(4), b_rows(3);
  STRATA_ASSERT_OK(client->LookupTables(
      {"a", "b"}, {a_ids, b_ids}, true,
      {absl::MakeSpan(a_rows), absl::MakeSpan(b_rows)}));
  std::vector<float> a_one(4), b_one(3);
  STRATA_ASSERT_OK(client->LookupRows("a", a_ids, false, absl::MakeSpan(a_one)));
  STRATA_ASSERT_OK(client->LookupRows("b", b_ids, false, absl::MakeSpan(b_one)));
  EXPECT_EQ(a_rows, a_one);
  EXPECT_EQ(b_rows, b_one);
  const std::vector<float> a_grad = {1, 1, 1, 1};
  const std::vector<float> bad = {1, std::nanf(""), 1};
  EXPECT_THAT(client->PushTables({"a", "b"}, {a_ids, b_ids}, {a_grad, bad},
                                 PushTag{"job", 0, 1}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "NaN"));
  STRATA_ASSERT_OK(client->LookupRows("a", a_ids, false, absl::MakeSpan(a_one)));
  EXPECT_EQ(a_one, a_rows);  // unchanged
  const std::vector<float> b_grad = {2, 2, 2};
  STRATA_ASSERT_OK(client->PushTables({"a", "b"}, {a_ids, b_ids},
                                      {a_grad, b_grad}, PushTag{"job", 0, 1}));
  STRATA_ASSERT_OK(client->PushTables({"a", "b"}, {a_ids, b_ids},
                                      {a_grad, b_grad}, PushTag{"job", 0, 1}));
  STRATA_ASSERT_OK(client->LookupRows("a", a_ids, false, absl::MakeSpan(a_one)));
  STRATA_ASSERT_OK(client->LookupRows("b", b_ids, false, absl::MakeSpan(b_one)));
  for (int k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(a_one[k], a_rows[k] - 0.5f);
  for (int k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(b_one[k], b_rows[k] - 1.0f);
  absl::StatusOr<v1::TableStatsResponse> stats = client->TableStats("a");
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->tables(0).pushes_duplicate(), 1);
}

}  // namespace
}  // namespace strata
