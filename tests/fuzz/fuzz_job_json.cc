// Fuzzes the job file loader: the input is the text of a job file
// (ParseJobString, what LoadJobFile and the coordinator's SubmitJob run).
// Invariant: a job that parses parses again, to the same job, from the
// JSON text it keeps.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "tests/fuzz/fuzz_util.h"
#include "job/job.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<JobSpec> job = ParseJobString(text);
  FUZZ_TRACE("job: %s", job.status().ToString().c_str());
  if (!job.ok()) return 0;
  absl::StatusOr<JobSpec> again = ParseJobString(job->json);
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->name == job->name && again->epochs == job->epochs &&
                 again->batch_size == job->batch_size &&
                 again->model.layers.size() == job->model.layers.size(),
             "re-parsed job differs");
  (void)ResolveLayerNames(job->model);
  return 0;
}
