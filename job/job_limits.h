// The limits of a job file: its size, nesting, strings and the model a
// worker may be asked to hold. Pure functions, thread-safe.
#ifndef STRATA_JOB_JOB_LIMITS_H_
#define STRATA_JOB_JOB_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace strata {

// ---------------------------------------------------------------------------
// Limits. The reference job is 1 KB and one with a thousand layers some
// 100 KB: anything far beyond is a mistake, refused at once (before it is
// read whole, parsed, echoed or allocated for) with the field and the
// limit. ParseJob and ParseJobControl apply them, so every tool and the
// coordinator's SubmitJob refuse the same jobs.

// The text of a job: at most 1 MiB (under gRPC's default 4 MiB message, so
// a job accepted here also reaches the coordinator).
inline constexpr size_t kMaxJobBytes = size_t{1} << 20;
// Arrays and objects nested in one another: at most 32 (the reference job
// nests 5: job, model, layers, a layer, an initializer).
inline constexpr int kMaxJobDepth = 32;
// job.name and job.model.layers[i].name, in characters: at most 128 (they
// become variable, credential and file names; NAME_MAX is 255).
inline constexpr size_t kMaxJobNameChars = 128;
// Every other string and every key, in characters: at most 4096 (PATH_MAX
// on Linux, for the data paths).
inline constexpr size_t kMaxJobStringChars = 4096;
// What one worker may need for the model (ModelFootprint::bytes): at most
// 256 GiB, some 1.7e10 parameters with Adam. Every worker holds a whole
// float32 replica and trains it on a CPU or one GPU (an H200 holds 141 GB):
// a model beyond this is a mistake here, refused wherever the job is
// parsed, whatever the machine. CheckJobFitsMemory checks a machine.
inline constexpr int64_t kMaxJobModelBytes = int64_t{256} << 30;

// Refuses job text longer than kMaxJobBytes or nested deeper than
// kMaxJobDepth, by a scan that respects strings and escapes and allocates
// nothing; for before a JSON parser sees the text. Errors: INVALID_ARGUMENT
// ("job: 52428800 bytes, at most 1048576 (1 MiB)", "job: more than 32
// nested arrays or objects (at byte 32)").
absl::Status CheckJobTextLimits(absl::string_view text);

// Refuses a parsed job holding a string or key longer than its limit
// (kMaxJobNameChars for job.name and job.model.layers[i].name,
// kMaxJobStringChars for every other) or nested deeper than kMaxJobDepth.
// Errors: INVALID_ARGUMENT naming the path and the limit ("job.name:
// 52428800 characters, at most 128"); long keys are shortened in paths.
absl::Status CheckJobValueLimits(const nlohmann::json& job);

}  // namespace strata

#endif  // STRATA_JOB_JOB_LIMITS_H_
