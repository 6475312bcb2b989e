// Helpers shared by the files that implement Variable (server/variable*.cc,
// exactly_once.cc, sync_accumulator.cc, variable_mirrors.cc); not part of
// any public interface. Stateless functions, safe from any thread.
#ifndef STRATA_SERVER_VARIABLE_INTERNAL_H_
#define STRATA_SERVER_VARIABLE_INTERNAL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tensor.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace variable_internal {

// `name` in single quotes, as error messages name variables.
inline std::string Quote(const std::string& name) {
  return absl::StrCat("'", name, "'");
}

// dst[i] += src[i] for n elements of `dtype` (integers wrap on overflow, as
// assign_add does).
void AddInto(DType dtype, char* dst, const char* src, int64_t n);

// buf[i] /= divisor for n elements of `dtype`.
void DivideBy(DType dtype, char* buf, int64_t n, int64_t divisor);

// Reads the non-negative integer `json[key]` (or `json` itself when `key`
// is null) of a checkpoint's metadata into `out`; an absent key leaves
// `out` as it is. Errors: DATA_LOSS naming `where` and the key.
absl::Status MetaInt(const nlohmann::json& json, const char* key,
                     const std::string& where, int64_t* out);

}  // namespace variable_internal
}  // namespace strata

#endif  // STRATA_SERVER_VARIABLE_INTERNAL_H_
