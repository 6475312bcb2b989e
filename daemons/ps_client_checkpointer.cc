#include "daemons/ps_client_checkpointer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "rpc/tls.h"

namespace strata {

PsClientCheckpointer::PsClientCheckpointer(TargetsFn targets,
                                           PsClientCheckpointerOptions options)
    : targets_(std::move(targets)), options_(options) {}

PsClientCheckpointer::~PsClientCheckpointer() = default;

std::shared_ptr<PsClient> PsClientCheckpointer::ClientFor(
    const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<PsClient>& client = clients_[address];
  // A replicated task whose names did not resolve when its client was made
  // has a channel that never connects: make it again until they do.
  if (client == nullptr || !client_resolved_[address]) {
    client_resolved_[address] = TargetResolves(address);
    PsClientOptions options;
    options.deadline = options_.deadline;
    options.max_attempts = options_.max_attempts;
    options.security = options_.security;
    client = PsClient::Connect(address, options);
  }
  return client;
}

absl::Status PsClientCheckpointer::ForEach(
    const char* what,
    const std::function<absl::Status(PsClient*, const PsTarget&)>& call,
    bool keep_going) {
  std::vector<PsTarget> targets = targets_();
  if (targets.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": no ps task is known"));
  }
  absl::Status first;
  for (const PsTarget& target : targets) {
    if (options_.leading && !options_.leading()) {
      return absl::UnavailableError(absl::StrCat(
          what, ": this coordinator (epoch ", options_.coordinator_epoch,
          ") no longer leads"));
    }
    // Held for the call: a client made again meanwhile leaves it alive.
    const std::shared_ptr<PsClient> client = ClientFor(target.address);
    absl::Status status = call(client.get(), target);
    if (!status.ok() && first.ok()) {
      first = absl::Status(
          status.code(), absl::StrCat(what, " on ", target.task, " (",
                                      target.address, "): ", status.message()));
      if (!keep_going) break;
    }
  }
  return first;
}

absl::Status PsClientCheckpointer::SaveAll(const std::string& name) {
  return ForEach("Save", [this, &name](PsClient* client,
                                        const PsTarget& target) {
    // Only the registered incarnation saves: a restarted process not yet
    // registered (an empty store) refuses.
    return client->Save(name, options_.coordinator_epoch, target.incarnation)
        .status();
  });
}

absl::Status PsClientCheckpointer::RestoreAll(const std::string& name) {
  return ForEach("Restore", [this, &name](PsClient* client,
                                           const PsTarget&) {
    return client->Restore(name, options_.coordinator_epoch).status();
  });
}

absl::Status PsClientCheckpointer::DeleteAll(
    const std::vector<std::string>& names) {
  return ForEach(
      "DeleteCheckpoints",
      [this, &names](PsClient* client, const PsTarget&) {
        return client->DeleteCheckpoints(names, options_.coordinator_epoch)
            .status();
      },
      /*keep_going=*/true);
}

CoordinatorServerOptions::CheckpointerFactory PsClientCheckpointerFactory(
    const ClientSecurity& security) {
  return [security](const CoordinatorServerOptions::CheckpointerContext& c) {
    PsClientCheckpointerOptions options;
    options.security = security;
    options.coordinator_epoch = c.coordinator_epoch;
    options.leading = c.leading;
    return std::make_shared<PsClientCheckpointer>(c.targets, options);
  };
}

}  // namespace strata
