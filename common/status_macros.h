// Small local replacements for the status macros that Abseil 20220623 lacks.
#ifndef STRATA_COMMON_STATUS_MACROS_H_
#define STRATA_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STRATA_STATUS_CONCAT_INNER_(a, b) a##b
#define STRATA_STATUS_CONCAT_(a, b) STRATA_STATUS_CONCAT_INNER_(a, b)

// Returns `expr` from the current function if it is not OK.
#define STRATA_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status strata_status_ = (expr);          \
    if (!strata_status_.ok()) return strata_status_; \
  } while (0)

// Evaluates `rexpr` (a StatusOr<T>); on error returns its status, otherwise
// assigns the value to `lhs` (which may be a declaration).
#define STRATA_ASSIGN_OR_RETURN(lhs, rexpr)                                   \
  STRATA_ASSIGN_OR_RETURN_IMPL_(                                              \
      STRATA_STATUS_CONCAT_(strata_statusor_, __LINE__), lhs, rexpr)

#define STRATA_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return statusor.status();             \
  lhs = std::move(statusor).value()

#endif  // STRATA_COMMON_STATUS_MACROS_H_
