#include "coordinator/ps_checkpointer.h"

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

absl::Status NoCheckpointer(const char* what) {
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot ", what, " the PS tasks' checkpoints: this coordinator was "
      "started without a PS checkpointer "
      "(CoordinatorServerOptions::checkpointer_factory)"));
}

}  // namespace

absl::Status NoPsCheckpointer::SaveAll(const std::string&) {
  return NoCheckpointer("save");
}
absl::Status NoPsCheckpointer::RestoreAll(const std::string&) {
  return NoCheckpointer("restore");
}
absl::Status NoPsCheckpointer::DeleteAll(const std::vector<std::string>&) {
  return NoCheckpointer("delete");
}

}  // namespace strata
