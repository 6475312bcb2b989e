// Transport security and access on the parameter server: TLS and mutual TLS
// (in-process servers on 127.0.0.1:0 with the certificates of
// tests/data/tls), bearer-token credentials with roles, and job isolation.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "client/coordinator_client.h"
#include "client/ps_client.h"
#include "collective/worker_service.h"
#include "coordinator/coordinator_server.h"
#include "gtest/gtest.h"
#include "rpc/auth.h"
#include "rpc/tls.h"
#include "server/ps_server.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

std::string TlsDir() {
  return std::string(STRATA_SOURCE_DIR) + "/tests/data/tls";
}

TlsOptions LoadOrDie(const TlsFiles& files) {
  auto tls = LoadTlsOptions(files);
  EXPECT_TRUE(tls.ok()) << tls.status();
  return tls.ok() ? *tls : TlsOptions{};
}

TlsOptions ServerTls(bool client_auth) {
  const std::string d = TlsDir();
  return LoadOrDie({d + "/server.pem", d + "/server.key", d + "/ca.pem",
                    client_auth});
}

// A client of the test CA; `cert_dir` holds client.pem/.key to present
// (empty: none).
TlsOptions ClientTls(const std::string& cert_dir = "") {
  const std::string d = TlsDir();
  TlsFiles files;
  files.ca_file = d + "/ca.pem";
  if (!cert_dir.empty()) {
    files.cert_file = cert_dir + "/client.pem";
    files.key_file = cert_dir + "/client.key";
  }
  return LoadOrDie(files);
}

v1::VariableSpec Spec(const std::string& name) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(4);
  spec.mutable_initializer()->set_type("ones");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.5);
  return spec;
}

class TlsTest : public ::testing::Test {
 protected:
  void Start(bool client_auth) {
    PsServerOptions options;
    options.tls = ServerTls(client_auth);
    auto s = PsServer::Start(options, &logger_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }

  std::unique_ptr<PsClient> Client(ClientSecurity security) {
    PsClientOptions options;
    options.deadline = absl::Seconds(5);
    options.max_attempts = 1;
    options.security = std::move(security);
    return PsClient::Connect(server_->address(), options);
  }

  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::unique_ptr<PsServer> server_;
};

TEST_F(TlsTest, TlsClientReachesTlsServer) {
  Start(/*client_auth=*/false);
  auto client = Client({ClientTls(), ""});
  STRATA_ASSERT_OK(client->CreateVariable(Spec("w")));
  std::vector<float> w(4);
  STRATA_ASSERT_OK(client->Pull("w", w.data(), sizeof(float) * 4));
  EXPECT_EQ(w[0], 1.0f);
}

TEST_F(TlsTest, PlaintextClientIsRefusedByTlsServer) {
  Start(/*client_auth=*/false);
  auto client = Client({});
  EXPECT_THAT(client->CreateVariable(Spec("w")),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(client->ListVariables(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(server_->store()->List().size(), 0u);
}

TEST_F(TlsTest, ClientRefusesServerOfAnotherCa) {
  Start(/*client_auth=*/false);
  ClientSecurity security;
  security.tls = LoadOrDie({"", "", TlsDir() + "/other/ca.pem", false});
  auto client = Client(security);
  EXPECT_THAT(client->CreateVariable(Spec("w")),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(server_->store()->List().size(), 0u);
}

TEST_F(TlsTest, MutualTlsAcceptsClientCertificateOfTheCa) {
  Start(/*client_auth=*/true);
  auto client = Client({ClientTls(TlsDir()), ""});
  STRATA_ASSERT_OK(client->CreateVariable(Spec("w")));
  // The daemons' own certificate is also a client certificate.
  TlsOptions as_server = ClientTls();
  as_server.cert_pem = ServerTls(false).cert_pem;
  as_server.key_pem = ServerTls(false).key_pem;
  STRATA_ASSERT_OK(Client({as_server, ""})->ListVariables());
}

TEST_F(TlsTest, MutualTlsRefusesCertificateOfAnotherCa) {
  Start(/*client_auth=*/true);
  // Trusts the server, but presents a certificate of an unrelated CA.
  auto client = Client({ClientTls(TlsDir() + "/other"), ""});
  EXPECT_THAT(client->CreateVariable(Spec("w")),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(server_->store()->List().size(), 0u);
}

TEST_F(TlsTest, MutualTlsRefusesClientWithoutCertificate) {
  Start(/*client_auth=*/true);
  auto client = Client({ClientTls(), ""});
  EXPECT_THAT(client->CreateVariable(Spec("w")),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(server_->store()->List().size(), 0u);
}

TEST(TlsOptionsTest, ErrorsNameTheFileAndFlag) {
  const std::string d = TlsDir();
  EXPECT_THAT(LoadTlsOptions({d + "/missing.pem", d + "/server.key", "",
                              false}),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "--tls-cert: cannot read '" + d +
                                      "/missing.pem'"));
  EXPECT_THAT(LoadTlsOptions({d + "/server.key", d + "/server.key", "",
                              false}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "server.key' holds no PEM CERTIFICATE"));
  EXPECT_THAT(LoadTlsOptions({d + "/server.pem", d + "/server.pem", "",
                              false}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "--tls-key: '" + d + "/server.pem'"));
  EXPECT_THAT(LoadTlsOptions({d + "/server.pem", "", "", false}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "without --tls-key"));
  EXPECT_THAT(LoadTlsOptions({d + "/server.pem", d + "/server.key", "",
                              true}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "--tls-client-auth needs --tls-ca"));
  auto plain = LoadTlsOptions({});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->enabled);
  // A server needs its certificate.
  TlsOptions no_cert = ClientTls();
  EXPECT_THAT(MakeServerCredentials(no_cert),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CredentialStoreTest, ParsesAndRefusesBadEntries) {
  auto store = CredentialStore::Parse(
      R"({"credentials":[{"token":"t1","job":"a","role":"worker"},)"
      R"({"token":"t2","job":"a","role":"admin"}]})");
  ASSERT_TRUE(store.ok()) << store.status();
  auto caller = store->AuthenticateToken("t1");
  ASSERT_TRUE(caller.ok());
  EXPECT_EQ(caller->job, "a");
  EXPECT_EQ(caller->role, Role::kWorker);
  EXPECT_THAT(store->AuthenticateToken("t3"),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(CredentialStore::Parse(
                  R"({"credentials":[{"token":"t","job":"a","role":"root"}]})"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "credentials[0].role"));
  EXPECT_THAT(CredentialStore::Parse(
                  R"({"credentials":[{"token":"t","job":"../a","role":"worker"}]})"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "credentials[0].job"));
  EXPECT_THAT(CredentialStore::Parse(
                  R"({"credentials":[{"token":"t","job":"a","role":"worker"},)"
                  R"({"token":"t","job":"b","role":"worker"}]})"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "credentials[1].token"));
  EXPECT_THAT(CredentialStore::Parse(R"({"credentials":[{"job":"a"}]})"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "credentials[0].token"));
  EXPECT_THAT(CredentialStore::Load("/nonexistent/auth.json"),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "/nonexistent/auth.json"));
}

constexpr char kCredentials[] = R"({"credentials": [
  {"token": "worker-a", "job": "a", "role": "worker"},
  {"token": "coord-a", "job": "a", "role": "coordinator"},
  {"token": "worker-b", "job": "b", "role": "worker"},
  {"token": "coord-b", "job": "b", "role": "coordinator"},
  {"token": "admin", "job": "ops", "role": "admin"}]})";

// A PS with credentials (over TLS: tokens and TLS together), job a's
// variable "w" created by its coordinator.
class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    checkpoint_dir_ = std::filesystem::path(::testing::TempDir()) /
                      ("security_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(checkpoint_dir_);
    PsServerOptions options;
    options.checkpoint_dir = checkpoint_dir_;
    options.tls = ServerTls(false);
    auto creds = CredentialStore::Parse(kCredentials);
    ASSERT_TRUE(creds.ok()) << creds.status();
    options.service.credentials =
        std::make_shared<CredentialStore>(*std::move(creds));
    auto s = PsServer::Start(options, &logger_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    STRATA_ASSERT_OK(Client("coord-a")->CreateVariable(Spec("w")));
    std::vector<float> g = {1, 1, 1, 1};
    STRATA_ASSERT_OK(Client("worker-a")->Push("w", DType::kFloat32, {4},
                                              g.data(), PushTag{"a", 0, 0}));
  }
  void TearDown() override { std::filesystem::remove_all(checkpoint_dir_); }

  std::unique_ptr<PsClient> Client(const std::string& token) {
    PsClientOptions options;
    options.deadline = absl::Seconds(10);
    options.max_attempts = 1;
    options.security.tls = ClientTls();
    options.security.auth_token = token;
    return PsClient::Connect(server_->address(), options);
  }

  // Every call a client can make, each with `code` expected. The gradient
  // and values are valid, so only the credential decides.
  void ExpectEveryCallFails(PsClient* client, absl::StatusCode code) {
    std::vector<float> buf = {2, 2, 2, 2};
    EXPECT_THAT(client->CreateVariable(Spec("w")), StatusIs(code));
    EXPECT_THAT(client->CreateVariable(Spec("fresh")), StatusIs(code));
    EXPECT_THAT(client->Pull("w", buf.data(), 16), StatusIs(code));
    EXPECT_THAT(client->PullVariables({"w"}, {buf.data()}, {16}),
                StatusIs(code));
    EXPECT_THAT(client->Push("w", DType::kFloat32, {4}, buf.data(),
                             PushTag{"a", 9, 9}),
                StatusIs(code));
    EXPECT_THAT(client->PushVariables({"w"}, DType::kFloat32, {{4}},
                                      {buf.data()}, PushTag{"a", 9, 10}),
                StatusIs(code));
    EXPECT_THAT(client->Assign("w", DType::kFloat32, {4}, buf.data()),
                StatusIs(code));
    EXPECT_THAT(client->Save("ckpt"), StatusIs(code));
    EXPECT_THAT(client->Restore("ckpt"), StatusIs(code));
    EXPECT_THAT(client->ListVariables(), StatusIs(code));
    EXPECT_THAT(client->Stats(), StatusIs(code));
  }

  // "w" still holds its value after the setup's one push (1 - 0.5 * 1),
  // version 1, and is the only variable.
  void ExpectUnchanged() {
    std::vector<float> w(4);
    auto r = Client("admin")->Pull("w", w.data(), 16);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->version, 1);
    for (float x : w) EXPECT_FLOAT_EQ(x, 0.5f);
    EXPECT_EQ(server_->store()->List().size(), 1u);
    EXPECT_FALSE(std::filesystem::exists(checkpoint_dir_ + "/ckpt"));
  }

  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::string checkpoint_dir_;
  std::unique_ptr<PsServer> server_;
};

TEST_F(AuthTest, MissingCredentialIsUnauthenticatedAndChangesNothing) {
  ExpectEveryCallFails(Client("").get(), absl::StatusCode::kUnauthenticated);
  ExpectUnchanged();
}

TEST_F(AuthTest, WrongCredentialIsUnauthenticatedAndChangesNothing) {
  ExpectEveryCallFails(Client("worker-c").get(),
                       absl::StatusCode::kUnauthenticated);
  ExpectUnchanged();
  EXPECT_THAT(Client("admin")->Stats(), StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(log_.str(), ::testing::Not(HasSubstr("worker-c")));
}

TEST_F(AuthTest, WorkerPullsAndPushesButCannotAdminister) {
  auto worker = Client("worker-a");
  std::vector<float> buf = {2, 2, 2, 2};
  EXPECT_THAT(worker->CreateVariable(Spec("fresh")),
              StatusIsWithMessage(absl::StatusCode::kPermissionDenied,
                                  "CreateVariable needs the coordinator role"));
  EXPECT_THAT(worker->CreateVariable(Spec("w")),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(worker->Assign("w", DType::kFloat32, {4}, buf.data()),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(worker->Save("ckpt"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(worker->Restore("ckpt"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(worker->DeleteCheckpoints({"ckpt"}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  ExpectUnchanged();
  // What a worker may do.
  STRATA_ASSERT_OK(worker->Pull("w", buf.data(), 16));
  STRATA_ASSERT_OK(worker->PullVariables({"w"}, {buf.data()}, {16}));
  auto list = worker->ListVariables();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->variables_size(), 1);
  STRATA_ASSERT_OK(worker->Stats());
  auto pushed = worker->Push("w", DType::kFloat32, {4}, buf.data(),
                             PushTag{"a", 1, 1});
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->version, 2);
  STRATA_ASSERT_OK(worker->PushVariables({"w"}, DType::kFloat32, {{4}},
                                         {buf.data()}, PushTag{"a", 1, 2}));
}

TEST_F(AuthTest, OneJobCannotReachAnotherJobsVariables) {
  std::vector<float> buf = {2, 2, 2, 2};
  for (const char* token : {"worker-b", "coord-b"}) {
    SCOPED_TRACE(token);
    auto other = Client(token);
    EXPECT_THAT(other->Pull("w", buf.data(), 16),
                StatusIsWithMessage(absl::StatusCode::kPermissionDenied,
                                    "variable 'w' belongs to another job"));
    EXPECT_THAT(other->PullVariables({"w"}, {buf.data()}, {16}),
                StatusIs(absl::StatusCode::kPermissionDenied));
    EXPECT_THAT(other->Push("w", DType::kFloat32, {4}, buf.data(),
                            PushTag{"b", 0, 0}),
                StatusIs(absl::StatusCode::kPermissionDenied));
    EXPECT_THAT(other->PushVariables({"w"}, DType::kFloat32, {{4}},
                                     {buf.data()}, PushTag{"b", 0, 1}),
                StatusIs(absl::StatusCode::kPermissionDenied));
    auto list = other->ListVariables();
    ASSERT_TRUE(list.ok()) << list.status();
    EXPECT_EQ(list->variables_size(), 0);
  }
  auto coord_b = Client("coord-b");
  EXPECT_THAT(coord_b->CreateVariable(Spec("w")),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(coord_b->Assign("w", DType::kFloat32, {4}, buf.data()),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // Checkpoints cover the whole server, which holds job a's variable.
  EXPECT_THAT(coord_b->Save("ckpt"),
              StatusIsWithMessage(absl::StatusCode::kPermissionDenied,
                                  "only an admin credential may save"));
  EXPECT_THAT(coord_b->Restore("ckpt"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(coord_b->DeleteCheckpoints({"ckpt"}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  ExpectUnchanged();

  // Job b's own variables work alongside, and job a cannot see them.
  STRATA_ASSERT_OK(coord_b->CreateVariable(Spec("b/w")));
  STRATA_ASSERT_OK(Client("worker-b")->Pull("b/w", buf.data(), 16));
  EXPECT_THAT(Client("worker-a")->Pull("b/w", buf.data(), 16),
              StatusIs(absl::StatusCode::kPermissionDenied));
  auto list_a = Client("coord-a")->ListVariables();
  ASSERT_TRUE(list_a.ok());
  ASSERT_EQ(list_a->variables_size(), 1);
  EXPECT_EQ(list_a->variables(0).spec().name(), "w");
  // An admin sees both.
  auto list_admin = Client("admin")->ListVariables();
  ASSERT_TRUE(list_admin.ok());
  EXPECT_EQ(list_admin->variables_size(), 2);
}

// Dynamic tables belong to the job whose coordinator created them, as
// variables do: another job can neither read, push, list, re-create nor
// (through a checkpoint) take them; the owner's job and an admin can.
TEST_F(AuthTest, OneJobCannotReachAnotherJobsTables) {
  v1::TableSpec spec;
  spec.set_name("clicks");
  spec.set_dim(2);
  EXPECT_THAT(Client("worker-a")->CreateTable(spec),
              StatusIsWithMessage(absl::StatusCode::kPermissionDenied,
                                  "CreateTable needs the coordinator role"));
  auto created = Client("coord-a")->CreateTable(spec);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(*created);
  const std::vector<int64_t> ids = {1, 2};
  std::vector<float> rows(4);
  const std::vector<float> grads = {1, 1, 1, 1};
  STRATA_ASSERT_OK(Client("worker-a")->LookupRows("clicks", ids, true,
                                                  absl::MakeSpan(rows)));
  const std::vector<float> before = rows;
  for (const char* token : {"worker-b", "coord-b"}) {
    SCOPED_TRACE(token);
    auto other = Client(token);
    EXPECT_THAT(other->LookupRows("clicks", ids, true, absl::MakeSpan(rows)),
                StatusIsWithMessage(absl::StatusCode::kPermissionDenied,
                                    "table 'clicks' belongs to another job "
                                    "than 'b'"));
    EXPECT_THAT(other->PushTableRows("clicks", ids, grads, PushTag{"b", 0, 0})
                    .status(),
                StatusIs(absl::StatusCode::kPermissionDenied));
    EXPECT_THAT(other->TableStats("clicks").status(),
                StatusIs(absl::StatusCode::kPermissionDenied));
    auto all = other->TableStats("");
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(all->tables_size(), 0);
  }
  EXPECT_THAT(Client("coord-b")->CreateTable(spec).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // Checkpoints cover the whole server, which holds job a's table.
  EXPECT_THAT(Client("coord-b")->RestoreTables({"ckpt"}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // Nothing changed: job a reads the same rows, never pushed.
  STRATA_ASSERT_OK(Client("worker-a")->LookupRows("clicks", ids, false,
                                                  absl::MakeSpan(rows)));
  EXPECT_EQ(rows, before);
  auto stats = Client("admin")->TableStats("clicks");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->tables(0).updates(), 0);
  // Job b's own table works alongside; job a does not see it; an admin
  // sees both.
  v1::TableSpec other = spec;
  other.set_name("b.clicks");
  STRATA_ASSERT_OK(Client("coord-b")->CreateTable(other).status());
  STRATA_ASSERT_OK(Client("worker-b")->PushTableRows("b.clicks", ids, grads,
                                                     PushTag{"b", 0, 0})
                       .status());
  EXPECT_THAT(Client("worker-a")->LookupRows("b.clicks", ids, true,
                                             absl::MakeSpan(rows)),
              StatusIs(absl::StatusCode::kPermissionDenied));
  auto list_a = Client("worker-a")->TableStats("");
  ASSERT_TRUE(list_a.ok());
  ASSERT_EQ(list_a->tables_size(), 1);
  EXPECT_EQ(list_a->tables(0).spec().name(), "clicks");
  auto list_admin = Client("admin")->TableStats("");
  ASSERT_TRUE(list_admin.ok());
  EXPECT_EQ(list_admin->tables_size(), 2);
  STRATA_ASSERT_OK(Client("worker-a")->PushTableRows("clicks", ids, grads,
                                                     PushTag{"a", 0, 5})
                       .status());
}

// A job's coordinator saves and restores its tables with its variables;
// they stay its job's.
TEST_F(AuthTest, RestoredTablesStayTheirJobs) {
  v1::TableSpec spec;
  spec.set_name("clicks");
  spec.set_dim(2);
  auto coord_a = Client("coord-a");
  STRATA_ASSERT_OK(coord_a->CreateTable(spec).status());
  const std::vector<int64_t> ids = {1, 2};
  const std::vector<float> grads = {1, 1, 1, 1};
  STRATA_ASSERT_OK(Client("worker-a")->PushTableRows("clicks", ids, grads,
                                                     PushTag{"a", 0, 1})
                       .status());
  std::vector<float> saved(4);
  STRATA_ASSERT_OK(Client("worker-a")->LookupRows("clicks", ids, false,
                                                  absl::MakeSpan(saved)));
  STRATA_ASSERT_OK(coord_a->Save("ckpt-tables").status());
  STRATA_ASSERT_OK(Client("worker-a")->PushTableRows("clicks", ids, grads,
                                                     PushTag{"a", 0, 2})
                       .status());
  STRATA_ASSERT_OK(coord_a->Restore("ckpt-tables").status());
  std::vector<float> rows(4);
  STRATA_ASSERT_OK(Client("worker-a")->LookupRows("clicks", ids, false,
                                                  absl::MakeSpan(rows)));
  EXPECT_EQ(rows, saved);
  EXPECT_THAT(Client("worker-b")->LookupRows("clicks", ids, false,
                                             absl::MakeSpan(rows)),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

// The PS keeps the highest elected-coordinator epoch per job: one job's
// high epoch does not fence another job's coordinator, while a lower epoch
// of the same job is refused.
TEST_F(AuthTest, CoordinatorEpochsAreFencedPerJob) {
  STRATA_ASSERT_OK(Client("coord-a")->Save("a-ckpt", 1000).status());
  // Job ops (the admin's) counts its own epochs.
  STRATA_ASSERT_OK(Client("admin")->Save("ops-ckpt", 5).status());
  EXPECT_THAT(Client("coord-a")->Save("a-ckpt-2", 999).status(),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "coordinator epoch 999, and the coordinator "
                                  "of epoch 1000 has led since"));
  EXPECT_THAT(Client("admin")->Save("ops-ckpt-2", 4).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  STRATA_ASSERT_OK(Client("admin")->Save("ops-ckpt-3", 6).status());
}

TEST_F(AuthTest, CoordinatorCheckpointsUnderItsJobDirectory) {
  auto coord = Client("coord-a");
  auto saved = coord->Save("ckpt");
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->path(), checkpoint_dir_ + "/a/ckpt");
  std::vector<float> buf = {2, 2, 2, 2};
  STRATA_ASSERT_OK(coord->Assign("w", DType::kFloat32, {4}, buf.data()));
  STRATA_ASSERT_OK(coord->Restore("ckpt"));
  std::vector<float> w(4);
  STRATA_ASSERT_OK(Client("worker-a")->Pull("w", w.data(), 16));
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_THAT(coord->Save(checkpoint_dir_ + "/abs"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // Deleting resolves under the job's directory too.
  EXPECT_THAT(coord->DeleteCheckpoints({checkpoint_dir_ + "/a/ckpt"}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  STRATA_ASSERT_OK(coord->Save("ckpt-old").status());
  absl::StatusOr<int64_t> deleted = coord->DeleteCheckpoints({"ckpt-old"});
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 1);
  EXPECT_FALSE(std::filesystem::exists(checkpoint_dir_ + "/a/ckpt-old"));
  EXPECT_TRUE(std::filesystem::exists(checkpoint_dir_ + "/a/ckpt"));
  // Job b's coordinator cannot restore job a's checkpoint onto an empty
  // server: its name resolves under b/.
  PsServerOptions options;
  options.checkpoint_dir = checkpoint_dir_;
  auto creds = CredentialStore::Parse(kCredentials);
  ASSERT_TRUE(creds.ok());
  options.service.credentials =
      std::make_shared<CredentialStore>(*std::move(creds));
  auto fresh = PsServer::Start(options, &logger_);
  ASSERT_TRUE(fresh.ok());
  PsClientOptions copts;
  copts.max_attempts = 1;
  copts.security.auth_token = "coord-b";
  auto coord_b = PsClient::Connect((*fresh)->address(), copts);
  EXPECT_THAT(coord_b->Restore("ckpt"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ((*fresh)->store()->List().size(), 0u);
  // Job a's coordinator restores its own checkpoint there, and job a owns
  // what it restored.
  copts.security.auth_token = "coord-a";
  STRATA_ASSERT_OK(
      PsClient::Connect((*fresh)->address(), copts)->Restore("ckpt"));
  copts.security.auth_token = "worker-b";
  EXPECT_THAT(PsClient::Connect((*fresh)->address(), copts)
                  ->Pull("w", w.data(), 16),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

// The coordinator over mutual TLS with credentials: tokens are required,
// SubmitJob needs the coordinator role.
class CoordinatorAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ = ::testing::TempDir() + "/security_test_coordinator_" +
                 std::to_string(::getpid());
    std::filesystem::remove_all(state_dir_);
    CoordinatorServerOptions options;
    options.coordinator.state_dir = state_dir_;
    options.tls = ServerTls(/*client_auth=*/true);
    auto creds = CredentialStore::Parse(kCredentials);
    ASSERT_TRUE(creds.ok());
    options.service.credentials =
        std::make_shared<CredentialStore>(*std::move(creds));
    auto server = CoordinatorServer::Start(options, &logger_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(state_dir_);
  }

  std::unique_ptr<CoordinatorClient> Client(const std::string& token,
                                            const std::string& cert_dir) {
    ClientSecurity security{ClientTls(cert_dir), token};
    return CoordinatorClient::Connect(server_->address(),
                                      absl::Milliseconds(500), security);
  }

  static v1::RegisterRequest Worker() {
    v1::RegisterRequest r;
    r.mutable_task()->set_role("worker");
    r.mutable_task()->set_index(0);
    r.set_incarnation("w0");
    return r;
  }
  static v1::SubmitJobRequest Job() {
    v1::SubmitJobRequest r;
    r.set_job_json(R"({"epochs": 1, "batch_size": 2})");
    r.set_train_examples(4);
    return r;
  }

  std::ostringstream log_;
  Logger logger_{"coordinator:test", &log_};
  std::string state_dir_;
  std::unique_ptr<CoordinatorServer> server_;
};

TEST_F(CoordinatorAuthTest, RefusesCallsWithoutAValidTokenOrCertificate) {
  EXPECT_THAT(Client("", TlsDir())->Register(Worker()),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(Client("", TlsDir())->SubmitJob(Job()),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(Client("worker-c", TlsDir())->GetJob(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  // A valid token does not help without a certificate of the CA.
  EXPECT_THAT(Client("coord-a", TlsDir() + "/other")->SubmitJob(Job()),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(CoordinatorClient::Connect(server_->address(),
                                         absl::Milliseconds(500))
                  ->Register(Worker()),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(server_->state()->GetJob().job_id(), "");
}

TEST_F(CoordinatorAuthTest, SubmitJobNeedsTheCoordinatorRole) {
  STRATA_ASSERT_OK(Client("worker-a", TlsDir())->Register(Worker()));
  EXPECT_THAT(Client("worker-a", TlsDir())->SubmitJob(Job()),
              StatusIsWithMessage(absl::StatusCode::kPermissionDenied,
                                  "SubmitJob needs the coordinator role"));
  EXPECT_EQ(server_->state()->GetJob().job_id(), "");
  auto submitted = Client("coord-a", TlsDir())->SubmitJob(Job());
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(server_->state()->GetJob().job_id(), submitted->job_id());
}

// The WorkerService (ring all-reduce, state copies) under mutual TLS.
TEST(WorkerServiceTlsTest, OnlyPeersWithACertificateOfTheCaGetIn) {
  std::ostringstream log;
  Logger logger("worker:test", &log);
  collective::WorkerServerOptions options;
  options.tls = ServerTls(/*client_auth=*/true);
  auto server = collective::WorkerServer::Start(options, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetStateProvider([](const v1::GetStateRequest&) {
    v1::WorkerState state;
    state.set_step(7);
    return absl::StatusOr<v1::WorkerState>(state);
  });
  const std::string address = (*server)->address();
  auto fetched = collective::FetchState(address, {}, absl::Seconds(5),
                                        {ClientTls(TlsDir()), ""});
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(fetched->step(), 7);
  EXPECT_FALSE(collective::FetchState(address, {}, absl::Seconds(2)).ok());
  EXPECT_FALSE(collective::FetchState(address, {}, absl::Seconds(2),
                                      {ClientTls(TlsDir() + "/other"), ""})
                   .ok());
}

}  // namespace
}  // namespace strata
