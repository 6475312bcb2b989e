// A checkpoint in progress does not stall the data plane: on a server with
// credentials (where every call checks the job owning its variables), pulls
// and pushes complete while a Save is writing its files or a Restore is
// reading them.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "rpc/auth.h"
#include "server/parameter_service_impl.h"
#include "server/ps_server.h"
#include "server/variable_store.h"
#include "tests/test_util.h"

namespace strata {
namespace {

constexpr char kCredentials[] = R"({"credentials": [
  {"token": "worker-a", "job": "a", "role": "worker"},
  {"token": "coord-a", "job": "a", "role": "coordinator"}]})";

// Each data-plane call must finish within this while the checkpoint waits
// (it waits until the test has made them all). Clients give up on a call
// after 3 s, the checkpointing one after a minute.
constexpr absl::Duration kBound = absl::Seconds(1);
constexpr absl::Duration kCheckpointDeadline = absl::Seconds(60);

std::shared_ptr<const CredentialStore> Credentials() {
  auto creds = CredentialStore::Parse(kCredentials);
  EXPECT_TRUE(creds.ok()) << creds.status();
  return std::make_shared<CredentialStore>(*std::move(creds));
}

v1::VariableSpec Spec(const std::string& name, int64_t size) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(size);
  spec.mutable_initializer()->set_type("ones");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.5);
  return spec;
}

// A client whose calls give up after `deadline`.
std::unique_ptr<PsClient> Client(const std::string& address,
                                 const std::string& token,
                                 absl::Duration deadline = absl::Seconds(3)) {
  PsClientOptions options;
  options.deadline = deadline;
  options.max_attempts = 1;
  options.security.auth_token = token;
  return PsClient::Connect(address, options);
}

// Runs `op` and expects it to succeed within kBound.
template <typename Op>
void ExpectQuick(const char* what, Op op) {
  const absl::Time start = absl::Now();
  const absl::Status status = StatusOf(op());
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(status.ok()) << what << ": " << status;
  EXPECT_LT(took, kBound) << what << " took " << took;
}

// Pulls, pushes and lists variable "w" (4 floats) of job a, as a worker
// does between steps; stops at the first failure.
void ExpectDataPlaneQuick(PsClient* worker, int64_t* step) {
  std::vector<float> buf(4);
  const std::vector<float> grad = {1, 1, 1, 1};
  for (int i = 0; i < 3 && !::testing::Test::HasFailure(); ++i) {
    ExpectQuick("Pull", [&] { return worker->Pull("w", buf.data(), 16); });
    ExpectQuick("Push", [&] {
      return worker->Push("w", DType::kFloat32, {4}, grad.data(),
                          PushTag{"a", 0, (*step)++});
    });
  }
  if (::testing::Test::HasFailure()) return;
  ExpectQuick("PullVariables", [&] {
    return worker->PullVariables({"w"}, {buf.data()}, {16});
  });
  ExpectQuick("PushVariables", [&] {
    return worker->PushVariables({"w"}, DType::kFloat32, {{4}}, {grad.data()},
                                 PushTag{"a", 0, (*step)++});
  });
  ExpectQuick("ListVariables", [&] { return worker->ListVariables(); });
  ExpectQuick("Stats", [&] { return worker->Stats(); });
}

std::string TestDir(const std::string& name) {
  const std::string dir = std::filesystem::path(::testing::TempDir()) /
                          (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// A store whose checkpoint writes wait (as slow storage would) until the
// test releases them.
class SlowSaveStore final : public VariableStore {
 public:
  using VariableStore::VariableStore;

  // Notified when a save starts writing its files.
  absl::Notification writing;

  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

 protected:
  absl::StatusOr<int64_t> WriteCheckpointFiles(
      const std::string& path, const Checkpoint& checkpoint) override {
    if (!writing.HasBeenNotified()) writing.Notify();
    release_.WaitForNotificationWithTimeout(absl::Seconds(30));
    return VariableStore::WriteCheckpointFiles(path, checkpoint);
  }

 private:
  absl::Notification release_;
};

// The service over a SlowSaveStore, with credentials, on 127.0.0.1:0.
class SaveDoesNotStallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir("save_does_not_stall");
    VariableStoreOptions store_options;
    store_options.checkpoint_dir = dir_;
    store_ = std::make_unique<SlowSaveStore>(store_options);
    ParameterServiceOptions options;
    options.credentials = Credentials();
    service_ = std::make_unique<ParameterServiceImpl>(store_.get(), &logger_,
                                                      &metrics_, options);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port_, 0);
    address_ = "127.0.0.1:" + std::to_string(port_);
  }

  void TearDown() override {
    store_->Release();
    if (saver_.joinable()) saver_.join();
    if (server_ != nullptr) {
      service_->PrepareShutdown();
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(5));
      server_->Wait();
    }
    std::filesystem::remove_all(dir_);
  }

  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  MetricsRegistry metrics_;
  std::string dir_;
  std::unique_ptr<SlowSaveStore> store_;
  std::unique_ptr<ParameterServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  std::thread saver_;
  absl::StatusOr<v1::SaveResponse> saved_;
  absl::Notification save_done_;
};

TEST_F(SaveDoesNotStallTest, PullsAndPushesCompleteWhileASaveWrites) {
  auto coord = Client(address_, "coord-a");
  auto worker = Client(address_, "worker-a");
  // A larger variable beside the one the worker trains.
  STRATA_ASSERT_OK(coord->CreateVariable(Spec("big", 1 << 20)));
  STRATA_ASSERT_OK(coord->CreateVariable(Spec("w", 4)));
  int64_t step = 0;
  ExpectDataPlaneQuick(worker.get(), &step);  // connects the channels
  ASSERT_FALSE(HasFailure());

  saver_ = std::thread([this] {
    saved_ = Client(address_, "coord-a", kCheckpointDeadline)->Save("ckpt");
    save_done_.Notify();
  });
  ASSERT_TRUE(store_->writing.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the save never started writing";

  ExpectDataPlaneQuick(worker.get(), &step);
  // The control plane too: a create of the same job.
  ExpectQuick("CreateVariable",
              [&] { return coord->CreateVariable(Spec("later", 4)); });
  EXPECT_FALSE(save_done_.HasBeenNotified()) << "the save did not wait";

  store_->Release();
  ASSERT_TRUE(save_done_.WaitForNotificationWithTimeout(absl::Seconds(30)));
  saver_.join();
  ASSERT_TRUE(saved_.ok()) << saved_.status();
  EXPECT_EQ(saved_->path(), dir_ + "/a/ckpt");
  // "later" came after the save chose its variables.
  EXPECT_EQ(saved_->num_variables(), 2);
}

// A PsServer with credentials whose job-a coordinator restores a checkpoint
// whose manifest is a FIFO: reading it blocks until the test writes to it.
class RestoreDoesNotStallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir("restore_does_not_stall");
    PsServerOptions options;
    options.checkpoint_dir = dir_;
    options.service.credentials = Credentials();
    auto server = PsServer::Start(options, &logger_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    std::filesystem::create_directories(dir_ + "/a/ckpt");
    fifo_ = dir_ + "/a/ckpt/manifest.json";
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0600), 0) << std::strerror(errno);
  }

  void TearDown() override {
    if (feeder_.joinable()) {
      // A feeder still waiting for the restore to open the FIFO: opening
      // it here lets its open() return.
      int fd = ::open(fifo_.c_str(), O_RDONLY | O_NONBLOCK);
      Release();
      feeder_.join();
      if (fd >= 0) ::close(fd);
    }
    if (restorer_.joinable()) restorer_.join();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::string dir_;
  std::string fifo_;
  std::unique_ptr<PsServer> server_;
  absl::Notification release_;
  std::thread feeder_;
  std::thread restorer_;
  // The restore opened the FIFO.
  absl::Notification reading_;
  absl::StatusOr<v1::RestoreResponse> restored_;
  absl::Notification restore_done_;
};

TEST_F(RestoreDoesNotStallTest, PullsAndPushesCompleteWhileARestoreReads) {
  auto coord = Client(server_->address(), "coord-a");
  auto worker = Client(server_->address(), "worker-a");
  STRATA_ASSERT_OK(coord->CreateVariable(Spec("w", 4)));
  int64_t step = 0;
  ExpectDataPlaneQuick(worker.get(), &step);  // connects the channels
  ASSERT_FALSE(HasFailure());

  // Opening the FIFO for writing returns once the restore opened it to read.
  feeder_ = std::thread([this] {
    int fd = ::open(fifo_.c_str(), O_WRONLY);
    reading_.Notify();
    release_.WaitForNotificationWithTimeout(absl::Seconds(30));
    if (fd >= 0) {
      const char kNotJson[] = "not a manifest";
      EXPECT_EQ(::write(fd, kNotJson, sizeof(kNotJson) - 1),
                static_cast<ssize_t>(sizeof(kNotJson) - 1));
      ::close(fd);
    }
  });
  restorer_ = std::thread([this] {
    restored_ = Client(server_->address(), "coord-a", kCheckpointDeadline)
                    ->Restore("ckpt");
    restore_done_.Notify();
  });
  ASSERT_TRUE(reading_.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the restore never opened the manifest";

  ExpectDataPlaneQuick(worker.get(), &step);
  EXPECT_FALSE(restore_done_.HasBeenNotified()) << "the restore did not wait";

  Release();
  feeder_.join();
  ASSERT_TRUE(restore_done_.WaitForNotificationWithTimeout(absl::Seconds(30)));
  restorer_.join();
  // The manifest was no checkpoint: nothing changed.
  EXPECT_THAT(restored_, StatusIs(absl::StatusCode::kDataLoss));
  std::vector<float> w(4);
  STRATA_ASSERT_OK(worker->Pull("w", w.data(), 16));
}

}  // namespace
}  // namespace strata
