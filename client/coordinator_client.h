// Typed client of the coordinator, and the membership agent every task runs
// (register, heartbeat, re-register after a coordinator restart).
#ifndef STRATA_CLIENT_COORDINATOR_CLIENT_H_
#define STRATA_CLIENT_COORDINATOR_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/metadata_keys.h"
#include "rpc/tls.h"
#include "strata/v1/coordinator.grpc.pb.h"

namespace strata {

inline constexpr absl::Duration kReplicaCallDeadline = absl::Seconds(2);
// The longest pause between attempts while the coordinator does not
// answer (calls' retries, the membership agent's missed beats).
inline constexpr absl::Duration kMaxRetryPause = absl::Milliseconds(250);

// The coordinator's calls as its tasks make them: CoordinatorClient over
// gRPC, or a fake in tests (tests/ps_worker_recovery_test.cc). The worker
// (PsWorker, WorkFeed, the group trainer) and MembershipAgent take this.
// Implementations are thread-safe; the errors are the service's
// (docs/PROTOCOL.md), UNAVAILABLE when the coordinator cannot be reached.
class Coordinator {
 public:
  virtual ~Coordinator() = default;

  virtual absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& r) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& r) = 0;
  virtual absl::Status Deregister(const v1::DeregisterRequest& r) = 0;
  virtual absl::StatusOr<v1::GetClusterSpecResponse> GetClusterSpec() = 0;
  virtual absl::StatusOr<v1::SubmitJobResponse> SubmitJob(
      const v1::SubmitJobRequest& r) = 0;
  virtual absl::StatusOr<v1::JobStatus> GetJob() = 0;
  virtual absl::StatusOr<v1::WorkItem> GetWork(const v1::GetWorkRequest& r) = 0;
  virtual absl::StatusOr<v1::ReportWorkResponse> ReportWork(
      const v1::ReportWorkRequest& r) = 0;
  virtual absl::StatusOr<v1::ReportWorkBatchResponse> ReportWorkBatch(
      const v1::ReportWorkBatchRequest& r) = 0;
  virtual absl::StatusOr<v1::GroupAssignment> JoinGroup(
      const v1::JoinGroupRequest& r) = 0;
  // Where the coordinator is, for logs.
  virtual const std::string& target() const = 0;
};

// Thread-safe. Each call has a deadline; UNAVAILABLE is retried with
// backoff for up to `retry_for` (the coordinator may be restarting).
//
// `target` may list several coordinators, comma-separated (the replicas of
// strata-coordinator --etcd-endpoints): a call goes to the one that
// answered last, and on UNAVAILABLE (down, a standby, or one that no longer
// leads) the next attempt goes to the next. An answer whose epoch
// (kCoordinatorEpochHeader) is below the highest this client has seen
// comes from a deposed leader: it is discarded and counts as UNAVAILABLE.
// With several replicas each attempt's deadline is at most
// kReplicaCallDeadline, so that a leader that hangs (paused) is passed over
// soon (every coordinator call answers at once; none is a long wait).
class CoordinatorClient : public Coordinator {
 public:
  // `security`: TLS and the bearer token of every call (plaintext, none by
  // default); `call_deadline`: of each attempt.
  static std::unique_ptr<CoordinatorClient> Connect(
      const std::string& target, absl::Duration retry_for = absl::Seconds(30),
      const ClientSecurity& security = {},
      absl::Duration call_deadline = absl::Seconds(10));

  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& r) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& r) override;
  absl::Status Deregister(const v1::DeregisterRequest& r) override;
  absl::StatusOr<v1::GetClusterSpecResponse> GetClusterSpec() override;
  absl::StatusOr<v1::SubmitJobResponse> SubmitJob(
      const v1::SubmitJobRequest& r) override;
  absl::StatusOr<v1::JobStatus> GetJob() override;
  absl::StatusOr<v1::WorkItem> GetWork(const v1::GetWorkRequest& r) override;
  absl::StatusOr<v1::ReportWorkResponse> ReportWork(
      const v1::ReportWorkRequest& r) override;
  absl::StatusOr<v1::ReportWorkBatchResponse> ReportWorkBatch(
      const v1::ReportWorkBatchRequest& r) override;
  absl::StatusOr<v1::GroupAssignment> JoinGroup(
      const v1::JoinGroupRequest& r) override;

  const std::string& target() const override { return target_; }
  // The highest coordinator epoch seen in an answer (0: none elected).
  int64_t epoch() const { return epoch_.load(); }

 private:
  CoordinatorClient(std::string target, absl::Duration retry_for,
                    const ClientSecurity& security,
                    absl::Duration call_deadline);
  // One attempt of `fn(ctx, stub)` on the current coordinator: sets the
  // deadline, checks the answer's epoch, and moves on to the next
  // coordinator after UNAVAILABLE.
  template <typename Fn>
  absl::Status Once(Fn fn, bool repeatable = true);
  // Once, retried while UNAVAILABLE for up to retry_for_. `repeatable`:
  // the call may have taken effect when it timed out or was cancelled and
  // may still be made again (with replicas, those go on to the next); a
  // call that is not (SubmitJob) is retried only when refused.
  template <typename Fn>
  absl::Status Call(Fn fn, bool repeatable = true);

  const std::string target_;
  const absl::Duration retry_for_;
  // At most kReplicaCallDeadline with several replicas (set in the
  // constructor).
  absl::Duration call_deadline_;
  // One channel and stub per coordinator replica.
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::CoordinatorService::Stub>> stubs_;
  std::atomic<size_t> current_{0};
  std::atomic<int64_t> epoch_{0};
};

// A new random incarnation id for this process start.
std::string NewIncarnation();

// Keeps one task registered: registers, heartbeats every heartbeat_ms on its
// own thread, and re-registers when the coordinator answers NOT_FOUND (it
// restarted, or declared this task failed). Thread-safe.
class MembershipAgent {
 public:
  MembershipAgent(Coordinator* client, v1::TaskId task,
                  std::string address, std::string incarnation,
                  Logger* logger);
  ~MembershipAgent();

  // A replicated ps task's replica (RegisterRequest.exclusive): registers
  // exclusively, as the takeover of `replaces` when not empty; when a
  // heartbeat finds the task taken by another incarnation, `on_lost` runs
  // (on the heartbeat thread) and heartbeats stop. Call before Start.
  // `only_if_failed`: replace `replaces` only once its lease expired.
  void SetExclusive(std::string replaces, std::function<void()> on_lost,
                    bool only_if_failed = false);

  // Registers (retrying while the coordinator is unavailable) and starts
  // the heartbeat thread.
  absl::Status Start();

  // A heartbeat now that fences off `backup` (HeartbeatRequest
  // .fence_incarnation). Errors: the coordinator's; NOT_FOUND when this
  // incarnation no longer holds the task.
  absl::Status Fence(const std::string& backup);
  // Stops heartbeating and deregisters (best effort).
  void Stop();

  const v1::TaskId& task() const { return task_; }
  const std::string& incarnation() const { return incarnation_; }
  int64_t generation() const { return generation_.load(); }
  // The newest group the coordinator named in the last heartbeat.
  int64_t group() const { return group_.load(); }

 private:
  void Loop();
  absl::Status RegisterOnce();

  Coordinator* const client_;
  const v1::TaskId task_;
  const std::string address_;
  const std::string incarnation_;
  Logger* const logger_;
  bool exclusive_ = false;
  std::string replaces_;
  bool only_if_failed_ = false;
  std::function<void()> on_lost_;
  std::atomic<int64_t> generation_{0};
  std::atomic<int64_t> group_{0};
  std::atomic<int64_t> heartbeat_ms_{1000};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_CLIENT_COORDINATOR_CLIENT_H_
