// The PS's --device option where no usable CUDA device is asked for: these
// tests run on every machine and every build (with or without CUDA). A
// device index no machine has (cuda:9999) is refused with
// FAILED_PRECONDITION and a clear message, by the library and by the
// strata-ps process; the default device keeps serving from host memory;
// malformed values are refused naming the flag.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/device_state.h"
#include "server/ps_server.h"
#include "server/variable_store.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

// No machine has this many GPUs: refused with or without a device.
constexpr int kMissingIndex = 9999;

v1::VariableSpec Spec(const std::string& name) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(4);
  spec.add_shape(3);
  spec.mutable_initializer()->set_type("ones");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.5);
  return spec;
}

PsDevice Missing() {
  PsDevice d;
  d.cuda_index = kMissingIndex;
  return d;
}

// What the refusal of a CUDA device says in this build.
std::string ExpectedReason() {
  return PsBuiltWithCuda() ? "CUDA device" : "built without CUDA";
}

TEST(PsDeviceTest, ParsesCpuCudaAndIndexedCuda) {
  absl::StatusOr<PsDevice> cpu = ParsePsDevice("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_FALSE(cpu->is_cuda());
  EXPECT_EQ(cpu->Name(), "cpu");
  absl::StatusOr<PsDevice> cuda = ParsePsDevice("cuda");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(cuda->cuda_index, 0);
  EXPECT_EQ(cuda->Name(), "cuda:0");
  absl::StatusOr<PsDevice> three = ParsePsDevice("cuda:3");
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->cuda_index, 3);
  EXPECT_EQ(PsDevice().Name(), "cpu");
}

TEST(PsDeviceTest, RefusesOtherValuesNamingTheFlag) {
  for (const char* bad : {"gpu", "cuda:x", "cuda:", "cuda:-1", "cuda:12345",
                          "CUDA", "", "cuda0", "cpu:0", "cuda:1 "}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<PsDevice> d = ParsePsDevice(bad, "--device");
    EXPECT_THAT(d, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                       "--device"));
    EXPECT_THAT(d, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                       "cpu, cuda, cuda:N"));
  }
}

TEST(PsDeviceTest, CpuIsAlwaysUsable) {
  absl::StatusOr<std::string> d = CheckPsDevice(PsDevice());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "cpu");
}

TEST(PsDeviceTest, MissingCudaDeviceIsFailedPrecondition) {
  absl::StatusOr<std::string> d = CheckPsDevice(Missing());
  EXPECT_THAT(d, StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                     ExpectedReason()));
  if (!PsBuiltWithCuda()) {
    EXPECT_THAT(d, StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                       "-DSTRATA_WITH_CUDA=ON"));
  }
}

// cuda:0 is usable exactly where a device is; where it is not, the refusal
// says why (the CUDA error, or the build).
TEST(PsDeviceTest, CudaZeroIsUsableOrRefusedWithTheReason) {
  PsDevice zero;
  zero.cuda_index = 0;
  absl::StatusOr<std::string> d = CheckPsDevice(zero);
  if (d.ok()) {
    EXPECT_TRUE(PsBuiltWithCuda());
    EXPECT_THAT(*d, HasSubstr("cuda:0"));
  } else {
    EXPECT_THAT(d, StatusIsWithMessage(
                       absl::StatusCode::kFailedPrecondition,
                       PsBuiltWithCuda() ? "no usable CUDA device"
                                         : "built without CUDA"));
  }
}

TEST(PsDeviceTest, StoreOnAMissingDeviceRefusesVariablesAndKeepsNone) {
  VariableStoreOptions options;
  options.device = Missing();
  VariableStore store(options);
  absl::StatusOr<bool> created = store.Create(Spec("w"));
  EXPECT_THAT(created, StatusIsWithMessage(
                           absl::StatusCode::kFailedPrecondition, "'w'"));
  EXPECT_THAT(created, StatusIsWithMessage(
                           absl::StatusCode::kFailedPrecondition, "cuda:9999"));
  EXPECT_THAT(store.Get("w"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(PsDeviceTest, DefaultStoreServesFromHostMemory) {
  VariableStore store({});
  STRATA_ASSERT_OK(store.Create(Spec("w")));
  absl::StatusOr<std::shared_ptr<Variable>> v = store.Get("w");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE((*v)->device().is_cuda());
  std::vector<float> grad(12, 1.0f);
  PushMeta meta;
  meta.job = "j";
  STRATA_ASSERT_OK((*v)->PushDense(
      meta, reinterpret_cast<const char*>(grad.data()), 48));
  VariableSnapshot snap = (*v)->Snapshot();
  EXPECT_EQ(snap.version, 1);
  EXPECT_FLOAT_EQ(snap.value->span<float>()[0], 0.5f);
  EXPECT_FLOAT_EQ(snap.value->span<float>()[11], 0.5f);
}

// Duplicate row ids of an integer variable are summed with wrap-around (as
// assign_add itself), on the host as the device path's reference.
TEST(PsDeviceTest, HostIntegerDuplicateRowSumsWrap) {
  v1::VariableSpec spec;
  spec.set_name("i");
  spec.set_dtype(v1::DT_INT64);
  spec.add_shape(3);
  spec.add_shape(1);
  spec.mutable_optimizer()->set_type("assign_add");
  VariableStore store({});
  STRATA_ASSERT_OK(store.Create(spec));
  absl::StatusOr<std::shared_ptr<Variable>> v = store.Get("i");
  ASSERT_TRUE(v.ok()) << v.status();
  const std::vector<int64_t> ids = {1, 1};
  const std::vector<int64_t> rows = {INT64_MAX, 2};
  STRATA_ASSERT_OK((*v)->PushRows(
      PushMeta{}, ids, reinterpret_cast<const char*>(rows.data()), 16));
  EXPECT_EQ((*v)->Snapshot().value->span<int64_t>()[1], INT64_MIN + 1);
}

TEST(PsDeviceTest, RestoreOntoAMissingDeviceFailsAndChangesNothing) {
  const std::string dir =
      (std::filesystem::path(::testing::TempDir()) /
       ("ps_device_test_" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(dir);
  VariableStore cpu({});
  STRATA_ASSERT_OK(cpu.Create(Spec("w")));
  STRATA_ASSERT_OK(cpu.Save(dir));
  VariableStoreOptions options;
  options.device = Missing();
  VariableStore gpu(options);
  EXPECT_THAT(gpu.Restore(dir),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(gpu.List().empty());
  std::filesystem::remove_all(dir);
}

TEST(PsDeviceTest, ServerStartOnAMissingDeviceIsFailedPrecondition) {
  Logger logger("ps_device_test");
  PsServerOptions options;
  options.device = Missing();
  absl::StatusOr<std::unique_ptr<PsServer>> server =
      PsServer::Start(options, &logger);
  EXPECT_THAT(server, StatusIsWithMessage(
                          absl::StatusCode::kFailedPrecondition,
                          "device cuda:9999"));
  EXPECT_THAT(server, StatusIsWithMessage(
                          absl::StatusCode::kFailedPrecondition,
                          ExpectedReason()));

  options.device = PsDevice();
  server = PsServer::Start(options, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->device_description(), "cpu");
  (*server)->Shutdown(absl::ZeroDuration());
}

// --- strata-ps as a process. ------------------------------------------------

// SIGCHLD is blocked so that the waits below can take it (bounded).
class BlockSigchld : public ::testing::Environment {
 public:
  void SetUp() override {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
};
const auto* const kBlockSigchld =
    ::testing::AddGlobalTestEnvironment(new BlockSigchld);

// Runs strata-ps with `args` until it exits, at most `limit`.
testing_util::ChildResult RunPs(const std::vector<std::string>& args,
                                std::chrono::seconds limit) {
  std::vector<std::string> full = {STRATA_PS_BINARY, "--port=0"};
  full.insert(full.end(), args.begin(), args.end());
  return testing_util::RunChild(std::move(full), limit);
}

TEST(PsDeviceProcessTest, MissingCudaDeviceExitsNonZeroWithTheReason) {
  testing_util::ChildResult e =
      RunPs({"--device=cuda:9999"}, std::chrono::seconds(60));
  EXPECT_EQ(e.exit_code, 1) << e.output;
  EXPECT_THAT(e.output, HasSubstr("strata-ps: --device cuda:9999: "));
  EXPECT_THAT(e.output, HasSubstr(ExpectedReason()));
  EXPECT_THAT(e.output, ::testing::Not(HasSubstr("listening on")));
}

TEST(PsDeviceProcessTest, MalformedDeviceExitsWithUsageError) {
  for (const char* bad : {"--device=gpu", "--device=cuda:x"}) {
    SCOPED_TRACE(bad);
    testing_util::ChildResult e = RunPs({bad}, std::chrono::seconds(60));
    EXPECT_EQ(e.exit_code, 2) << e.output;
    EXPECT_THAT(e.output, HasSubstr("strata-ps: --device: '"));
    EXPECT_THAT(e.output, HasSubstr("is not one of cpu, cuda, cuda:N"));
  }
}

}  // namespace
}  // namespace strata
