#include "coordinator/coordinator_driver.h"

#include <optional>
#include <utility>

namespace strata {

CoordinatorDriver::CoordinatorDriver(CoordinatorState* state,
                                     PsCheckpointer* checkpointer,
                                     Logger* logger,
                                     CoordinatorDriverOptions options)
    : state_(state),
      checkpointer_(checkpointer),
      logger_(logger),
      options_(options) {
  lease_thread_ = std::thread([this] { LeaseLoop(); });
  ps_thread_ = std::thread([this] { PsActionLoop(); });
  persist_thread_ = std::thread([this] { PersistLoop(); });
}

CoordinatorDriver::~CoordinatorDriver() { Stop(); }

void CoordinatorDriver::Stop() {
  if (stopped_.exchange(true)) return;
  {
    absl::MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  lease_thread_.join();
  ps_thread_.join();
  {
    absl::MutexLock lock(&persist_mu_);
    persist_stop_ = true;
  }
  persist_thread_.join();
  absl::Status s = state_->Flush();
  if (!s.ok()) logger_->Error("state_write_failed", {{"error", s.ToString()}});
}

bool CoordinatorDriver::WaitForStop(absl::Duration timeout) {
  absl::MutexLock lock(&stop_mu_);
  stop_mu_.AwaitWithTimeout(absl::Condition(&stop_), timeout);
  return stop_;
}

void CoordinatorDriver::LeaseLoop() {
  do {
    state_->CheckLeases();
  } while (!WaitForStop(options_.tick));
}

void CoordinatorDriver::PsActionLoop() {
  do {
    while (std::optional<PsAction> action = state_->NextPsAction()) {
      const bool save = action->kind == PsAction::Kind::kSave;
      const absl::Time start = absl::Now();
      absl::Status status =
          checkpointer_ == nullptr
              ? absl::FailedPreconditionError("no PS checkpointer configured")
          : save ? checkpointer_->SaveAll(action->checkpoint)
                 : checkpointer_->RestoreAll(action->checkpoint);
      logger_->Info(save ? "ps_save_done" : "ps_restore_done",
                    {{"checkpoint", action->checkpoint},
                     {"ok", status.ok()},
                     {"error", status.ok() ? "" : status.ToString()},
                     {"seconds", absl::ToDoubleSeconds(absl::Now() - start)}});
      // What a recorded save no longer keeps, once state.json has it.
      const std::vector<std::string> prune =
          state_->FinishPsAction(*action, status);
      if (!prune.empty()) {
        absl::Status deleted = checkpointer_->DeleteAll(prune);
        if (deleted.ok()) {
          logger_->Info("checkpoints_pruned", {{"checkpoints", prune}});
        } else {
          logger_->Warning("checkpoint_prune_failed",
                           {{"checkpoints", prune},
                            {"error", deleted.ToString()},
                            {"retry", "with the next save"}});
          state_->PruneLater(prune);
        }
      }
    }
  } while (!WaitForStop(options_.tick));
}

void CoordinatorDriver::PersistLoop() {
  for (;;) {
    std::vector<DurableDone> batch;
    {
      absl::MutexLock lock(&persist_mu_);
      auto ready = [this] {
        persist_mu_.AssertHeld();
        return persist_stop_ || !persist_queue_.empty();
      };
      persist_mu_.Await(absl::Condition(&ready));
      if (persist_queue_.empty()) return;  // stopping, nothing left
      batch.swap(persist_queue_);
    }
    // One write covers every change applied before it started.
    const absl::Status status = state_->Flush();
    for (DurableDone& done : batch) done(status);
    // Let changes gather for a while (each write serializes the whole state
    // and fsyncs twice); stop ends the pause.
    absl::MutexLock lock(&persist_mu_);
    auto stopping = [this] {
      persist_mu_.AssertHeld();
      return persist_stop_;
    };
    persist_mu_.AwaitWithTimeout(absl::Condition(&stopping),
                                 options_.persist_interval);
  }
}

void CoordinatorDriver::EnqueueDurable(DurableDone done) {
  {
    absl::MutexLock lock(&persist_mu_);
    if (!persist_stop_) {
      persist_queue_.push_back(std::move(done));
      return;
    }
  }
  done(state_->Flush());
}

}  // namespace strata
