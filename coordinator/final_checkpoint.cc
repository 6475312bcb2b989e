#include "coordinator/final_checkpoint.h"

#include "absl/time/clock.h"
#include "coordinator/coordinator_state.h"

namespace strata {
namespace {

class StateProgress final : public CheckpointProgress {
 public:
  explicit StateProgress(CoordinatorState* state) : state_(state) {}
  int64_t RequestCheckpoint() override { return state_->RequestCheckpoint(); }
  int64_t CheckpointAttempted() const override {
    return state_->CheckpointAttempted();
  }
  std::string LastCheckpoint() const override {
    return state_->LastCheckpoint();
  }

 private:
  CoordinatorState* const state_;
};

}  // namespace

std::unique_ptr<CheckpointProgress> StateCheckpointProgress(
    CoordinatorState* state) {
  return std::make_unique<StateProgress>(state);
}

FinalCheckpointResult TakeFinalCheckpoint(CheckpointProgress* progress,
                                          const FinalCheckpointOptions& options,
                                          Logger* logger, int signal) {
  FinalCheckpointResult result;
  if (options.timeout <= absl::ZeroDuration()) return result;
  result.target = progress->RequestCheckpoint();
  if (result.target < 0) return result;
  result.requested = true;
  const auto now = options.clock ? options.clock : [] { return absl::Now(); };
  const auto sleep =
      options.sleep ? options.sleep
                    : [](absl::Duration d) { absl::SleepFor(d); };
  logger->Log(LogLevel::kInfo, "final_checkpoint_started",
              {{"signal", signal}, {"steps_completed", result.target}});
  const absl::Time give_up = now() + options.timeout;
  while (progress->CheckpointAttempted() < result.target && now() < give_up) {
    sleep(options.poll);
  }
  result.steps_covered = progress->CheckpointAttempted();
  result.done = result.steps_covered >= result.target;
  result.checkpoint = progress->LastCheckpoint();
  logger->Log(result.done ? LogLevel::kInfo : LogLevel::kWarning,
              "final_checkpoint",
              {{"done", result.done},
               {"checkpoint", result.checkpoint},
               {"steps_covered", result.steps_covered}});
  return result;
}

}  // namespace strata
