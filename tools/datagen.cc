// Synthetic Criteo-format data from a seed (tools/datagen.h).
#include "tools/datagen.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/auc.h"
#include "worker/criteo_data.h"

namespace strata {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int64_t kMaxCardinality = int64_t{1} << 32;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // SplitMix64's step
// Domains of the keyed streams, so that no two uses share draws.
constexpr uint64_t kExampleDomain = 0x6578616d706c6573ULL;      // "examples"
constexpr uint64_t kCalibrationDomain = 0x63616c6962726174ULL;  // "calibrat"
constexpr uint64_t kWeightDomain = 0x7765696768747321ULL;       // "weights!"
constexpr uint64_t kIdDomain = 0x6964656e74697479ULL;           // "identity"
constexpr uint64_t kLatentDomain = 0x6c6174656e747321ULL;       // "latents!"
// Examples drawn to solve for the scale of w and the bias.
constexpr int kCalibrationExamples = 8192;
// Criteo-like means of the 13 integer columns.
constexpr std::array<double, kCriteoDenseColumns> kIntegerMeans = {
    3.5, 105, 20, 7, 18000, 115, 16, 12, 105, 0.6, 2.7, 1.0, 8};
// How many integer columns carry part of the signal.
constexpr int kCorrelatedIntegers = 4;
// Output is flushed in chunks of about this size.
constexpr size_t kFlushBytes = size_t{1} << 20;

uint64_t Key(uint64_t seed, uint64_t domain, uint64_t index) {
  return SplitMix64::Mix(SplitMix64::Mix(seed ^ domain) + index * kGolden);
}

// A bijection of 32 bits (Wellons' lowbias32: each step is invertible).
uint32_t Scramble32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// The id of rank r (1-based, <= 2^32) under a column's key: a bijection.
uint32_t IdOf(uint64_t key, uint64_t rank) {
  uint32_t x = static_cast<uint32_t>(rank - 1) ^ static_cast<uint32_t>(key);
  x = Scramble32(x) + static_cast<uint32_t>(key >> 32);
  return Scramble32(x);
}

double ToUnit(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

double Gaussian(SplitMix64* rng) {
  const double u1 = 1.0 - rng->NextDouble();  // (0, 1]
  const double u2 = rng->NextDouble();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

absl::Status WriteError(const std::string& path, int err) {
  const std::string what =
      absl::StrCat("cannot write ", path, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(what);
  if (err == EACCES || err == EROFS) return absl::PermissionDeniedError(what);
  return absl::InternalError(what);
}

// A file written sequentially, plain or gzip. Thread-compatible.
class OutputFile {
 public:
  ~OutputFile() {
    if (file_ != nullptr) std::fclose(file_);
    if (gz_ != nullptr) gzclose(gz_);
  }

  absl::Status Open(const std::string& path, bool gzip) {
    path_ = path;
    errno = 0;
    if (gzip) {
      gz_ = gzopen(path.c_str(), "wb");
      if (gz_ == nullptr) return WriteError(path, errno == 0 ? EIO : errno);
    } else {
      file_ = std::fopen(path.c_str(), "wb");
      if (file_ == nullptr) return WriteError(path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status Write(absl::string_view bytes) {
    if (bytes.empty()) return absl::OkStatus();
    if (file_ != nullptr) {
      if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
        return WriteError(path_, errno);
      }
      return absl::OkStatus();
    }
    if (gzwrite(gz_, bytes.data(), static_cast<unsigned>(bytes.size())) !=
        static_cast<int>(bytes.size())) {
      return WriteError(path_, errno == 0 ? EIO : errno);
    }
    return absl::OkStatus();
  }

  absl::Status Close() {
    int failed = 0;
    errno = 0;
    if (file_ != nullptr) failed = std::fclose(file_) != 0;
    if (gz_ != nullptr) failed = gzclose(gz_) != Z_OK;
    file_ = nullptr;
    gz_ = nullptr;
    if (failed) return WriteError(path_, errno == 0 ? EIO : errno);
    return absl::OkStatus();
  }

 private:
  std::string path_;
  FILE* file_ = nullptr;
  gzFile gz_ = nullptr;
};

absl::Status WriteWhole(const std::string& path, absl::string_view bytes) {
  OutputFile out;
  STRATA_RETURN_IF_ERROR(out.Open(path, /*gzip=*/false));
  STRATA_RETURN_IF_ERROR(out.Write(bytes));
  return out.Close();
}

absl::Status Validate(const DatagenOptions& o) {
  if (o.path.empty()) return absl::InvalidArgumentError("path is required");
  if (o.split < 0 || (o.split > 0 && o.split >= o.examples)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split must be in [0, examples) (0: none), got ", o.split));
  }
  if (o.cardinalities.size() != kCriteoCategoricalColumns) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cardinalities must hold ", kCriteoCategoricalColumns,
        " values, got ", o.cardinalities.size()));
  }
  for (size_t c = 0; c < o.cardinalities.size(); ++c) {
    if (o.cardinalities[c] < 1 || o.cardinalities[c] > kMaxCardinality) {
      return absl::InvalidArgumentError(
          absl::StrCat("cardinalities[", c, "] must be in [1, 2^32], got ",
                       o.cardinalities[c]));
    }
  }
  struct Check {
    bool ok;  // written so that NaN fails
    const char* field;
    const char* range;
    double value;
  };
  const Check checks[] = {
      {o.examples >= 1, "examples", ">= 1", static_cast<double>(o.examples)},
      {o.zipf_exponent > 0 && std::isfinite(o.zipf_exponent), "zipf_exponent",
       "finite and > 0", o.zipf_exponent},
      {o.latent_dim >= 1 && o.latent_dim <= 1024, "latent_dim",
       "in [1, 1024]", static_cast<double>(o.latent_dim)},
      {o.noise >= 0 && std::isfinite(o.noise), "noise", "finite and >= 0",
       o.noise},
      {o.missing_rate >= 0 && o.missing_rate < 1, "missing_rate",
       "in [0, 1)", o.missing_rate},
      {o.positive_rate > 0 && o.positive_rate < 1, "positive_rate",
       "in (0, 1)", o.positive_rate},
      {o.signal_std > 0 && std::isfinite(o.signal_std), "signal_std",
       "finite and > 0", o.signal_std},
  };
  for (const Check& check : checks) {
    if (!check.ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          check.field, " must be ", check.range, ", got ", check.value));
    }
  }
  std::array<bool, kCriteoCategoricalColumns> seen{};
  for (int c : o.multi_hot_columns) {
    if (c < 0 || c >= kCriteoCategoricalColumns || seen[c]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "multi_hot_columns: ", c,
          c < 0 || c >= kCriteoCategoricalColumns
              ? " is not a categorical column (0 to 25)"
              : " is listed twice"));
    }
    seen[c] = true;
  }
  if (o.max_hot < 1 || o.max_hot > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_hot must be in [1, 1024], got ", o.max_hot));
  }
  return absl::OkStatus();
}

// The hidden model: the Zipf samplers, the column keys and w.
class Model {
 public:
  static absl::StatusOr<Model> Create(const DatagenOptions& options) {
    Model model(options);
    for (int c = 0; c < kCriteoCategoricalColumns; ++c) {
      STRATA_ASSIGN_OR_RETURN(
          ZipfSampler sampler,
          ZipfSampler::Create(static_cast<uint64_t>(options.cardinalities[c]),
                              options.zipf_exponent));
      model.samplers_.push_back(sampler);
      model.id_keys_[c] = Key(options.seed, kIdDomain, c);
      model.latent_keys_[c] = Key(options.seed, kLatentDomain, c);
    }
    SplitMix64 rng(Key(options.seed, kWeightDomain, 0));
    for (double& w : model.w_) w = Gaussian(&rng);
    return model;
  }

  // Draws the 26 ids of one example into ids (missing: present[c] false;
  // a multi-hot column's into lists[c], ids[c] unused) and returns w . sum
  // of their latent vectors (a multi-hot column's mean), unscaled.
  // `drawn` (when not null) gets each id's (column, rank, weight in the
  // signal).
  struct Drawn {
    int column;
    uint64_t rank;
    double scale;
  };
  double DrawCategorical(
      SplitMix64* rng, std::array<uint32_t, kCriteoCategoricalColumns>* ids,
      std::array<bool, kCriteoCategoricalColumns>* present,
      std::array<std::vector<uint32_t>, kCriteoCategoricalColumns>* lists,
      std::vector<Drawn>* drawn = nullptr) const {
    if (drawn != nullptr) drawn->clear();
    double signal = 0;
    for (int c = 0; c < kCriteoCategoricalColumns; ++c) {
      (*present)[c] = rng->NextDouble() >= missing_rate_;
      if (!(*present)[c]) continue;
      if (!multi_hot_[c]) {
        const uint64_t rank = samplers_[c].Sample(rng);
        (*ids)[c] = IdOf(id_keys_[c], rank);
        AddLatent(c, rank, 1.0, &signal);
        if (drawn != nullptr) drawn->push_back({c, rank, 1.0});
        continue;
      }
      std::vector<uint32_t>& list = (*lists)[c];
      list.clear();
      const int k = std::min(
          max_hot_, 1 + static_cast<int>(rng->NextDouble() *
                                         static_cast<double>(max_hot_)));
      for (int i = 0; i < k; ++i) {
        const uint64_t rank = samplers_[c].Sample(rng);
        list.push_back(IdOf(id_keys_[c], rank));
        AddLatent(c, rank, 1.0 / k, &signal);
        if (drawn != nullptr) drawn->push_back({c, rank, 1.0 / k});
      }
    }
    return signal;
  }

  // scale * w . v(c, rank), as DrawCategorical adds it.
  double Latent(int c, uint64_t rank, double scale) const {
    double signal = 0;
    AddLatent(c, rank, scale, &signal);
    return signal;
  }

 private:
  explicit Model(const DatagenOptions& options)
      : missing_rate_(options.missing_rate),
        max_hot_(options.max_hot),
        w_(static_cast<size_t>(options.latent_dim)) {
    for (int c : options.multi_hot_columns) multi_hot_[c] = true;
  }

  // Adds scale * w . v(c, rank) to *signal, term by term (scale 1 adds
  // exactly what it always did): v is latent_dim values uniform in
  // [-sqrt 3, sqrt 3) (unit variance), each a hash of (seed, c, rank, j).
  void AddLatent(int c, uint64_t rank, double scale, double* signal) const {
    const uint64_t base = SplitMix64::Mix(latent_keys_[c] ^ rank);
    for (size_t j = 0; j < w_.size(); ++j) {
      const double v =
          (2.0 * ToUnit(SplitMix64::Mix(base + (j + 1) * kGolden)) - 1.0) *
          std::sqrt(3.0);
      *signal += scale * w_[j] * v;
    }
  }

  double missing_rate_;
  int max_hot_;
  std::array<bool, kCriteoCategoricalColumns> multi_hot_{};
  std::vector<ZipfSampler> samplers_;
  std::array<uint64_t, kCriteoCategoricalColumns> id_keys_{};
  std::array<uint64_t, kCriteoCategoricalColumns> latent_keys_{};
  std::vector<double> w_;
};

// The scale of w, the mean of s and the bias b, from a calibration sample.
struct Calibration {
  double scale = 1;
  double mean = 0;
  double bias = 0;
};

Calibration Calibrate(const Model& model, const DatagenOptions& options,
                      double probit_scale) {
  std::vector<double> raw(kCalibrationExamples);
  std::array<uint32_t, kCriteoCategoricalColumns> ids;
  std::array<bool, kCriteoCategoricalColumns> present;
  std::array<std::vector<uint32_t>, kCriteoCategoricalColumns> lists;
  double sum = 0;
  for (int i = 0; i < kCalibrationExamples; ++i) {
    SplitMix64 rng(Key(options.seed, kCalibrationDomain, i));
    raw[i] = model.DrawCategorical(&rng, &ids, &present, &lists);
    sum += raw[i];
  }
  const double mean = sum / kCalibrationExamples;
  double squares = 0;
  for (double r : raw) squares += (r - mean) * (r - mean);
  const double stddev = std::sqrt(squares / kCalibrationExamples);
  Calibration cal;
  // A constant signal (every cardinality 1, nothing missing) stays as is.
  cal.scale = stddev > 0 ? options.signal_std / stddev : 1.0;
  cal.mean = mean * cal.scale;
  // The mean of E[sigmoid(s + b + noise * N(0,1))] ~ sigmoid((s + b) / k)
  // grows with b: bisect for the target positive rate.
  double lo = -60, hi = 60;
  for (int iter = 0; iter < 100; ++iter) {
    const double b = 0.5 * (lo + hi);
    double rate = 0;
    for (double r : raw) rate += Sigmoid((r * cal.scale + b) / probit_scale);
    rate /= kCalibrationExamples;
    (rate < options.positive_rate ? lo : hi) = b;
  }
  cal.bias = 0.5 * (lo + hi);
  return cal;
}

// A geometric count (failures before a success) with the given mean.
int64_t Geometric(double mean, SplitMix64* rng) {
  const double u = 1.0 - rng->NextDouble();  // (0, 1]
  const double p = 1.0 / (1.0 + mean);
  const double x = std::floor(std::log(u) / std::log1p(-p));
  return static_cast<int64_t>(std::min(x, 0x1.0p40));
}

void AppendHex8(uint32_t id, std::string* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char hex[8];
  for (int i = 7; i >= 0; --i) {
    hex[i] = kDigits[id & 0xf];
    id >>= 4;
  }
  out->append(hex, 8);
}

}  // namespace

std::vector<int64_t> DefaultCardinalities(int64_t max_cardinality) {
  // Exponents i / 25 of [1/3, 1], in a fixed shuffled order.
  static constexpr std::array<int, kCriteoCategoricalColumns> kOrder = {
      7, 19, 2, 23, 11, 0, 15, 21, 5, 13, 25, 9, 1,
      17, 24, 4, 12, 20, 8, 3, 22, 16, 10, 18, 6, 14};
  const double log_max =
      std::log(static_cast<double>(std::max<int64_t>(max_cardinality, 1)));
  std::vector<int64_t> cardinalities;
  for (int i : kOrder) {
    const double f = 1.0 / 3.0 + (2.0 / 3.0) * i / 25.0;
    cardinalities.push_back(std::max<int64_t>(
        1, static_cast<int64_t>(std::llround(std::exp(f * log_max)))));
  }
  return cardinalities;
}

absl::StatusOr<std::vector<int64_t>> ParseCardinalities(
    absl::string_view text) {
  std::vector<int64_t> cardinalities;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    int64_t c = 0;
    if (!absl::SimpleAtoi(piece, &c) || c < 1 || c > kMaxCardinality) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cardinalities: '", piece, "' is not an integer in [1, 2^32]"));
    }
    cardinalities.push_back(c);
  }
  if (cardinalities.size() != kCriteoCategoricalColumns) {
    return absl::InvalidArgumentError(
        absl::StrCat("cardinalities: expected ", kCriteoCategoricalColumns,
                     " comma-separated values, got ", cardinalities.size()));
  }
  return cardinalities;
}

absl::StatusOr<DatagenSummary> GenerateCriteoData(
    const DatagenOptions& given) {
  DatagenOptions options = given;
  if (options.cardinalities.empty()) {
    options.cardinalities = DefaultCardinalities();
  }
  STRATA_RETURN_IF_ERROR(Validate(options));
  STRATA_ASSIGN_OR_RETURN(const Model model, Model::Create(options));
  // E[sigmoid(z + noise * N(0,1))] ~ sigmoid(z / probit_scale).
  const double probit_scale =
      std::sqrt(1.0 + kPi * options.noise * options.noise / 8.0);
  const Calibration cal = Calibrate(model, options, probit_scale);

  if (!options.test_path.empty() && options.split <= 0) {
    return absl::InvalidArgumentError(
        "test_out needs split > 0 (the examples from split on are the test "
        "set)");
  }
  // The files' directories, as `mkdir -p` makes them.
  for (const std::string& p : {options.path, options.test_path}) {
    const std::filesystem::path dir = std::filesystem::path(p).parent_path();
    std::error_code ec;
    if (!p.empty() && !dir.empty()) {
      std::filesystem::create_directories(dir, ec);
      if (ec) return WriteError(dir.string(), ec.value());
    }
  }
  const std::string temp_path = absl::StrCat(options.path, ".tmp");
  OutputFile out;
  STRATA_RETURN_IF_ERROR(out.Open(temp_path, options.gzip));
  const bool separate_test = !options.test_path.empty();
  const std::string test_temp_path = absl::StrCat(options.test_path, ".tmp");
  OutputFile test_out;
  if (separate_test) {
    STRATA_RETURN_IF_ERROR(test_out.Open(test_temp_path, options.gzip));
  }
  std::string test_text;
  BinaryMetrics bayes;
  DatagenSummary summary;
  summary.bias = cal.bias;
  std::string text;
  text.reserve(kFlushBytes + 1024);
  std::array<uint32_t, kCriteoCategoricalColumns> ids;
  std::array<bool, kCriteoCategoricalColumns> present;
  std::array<std::vector<uint32_t>, kCriteoCategoricalColumns> lists;
  std::array<bool, kCriteoCategoricalColumns> multi_hot{};
  for (int c : options.multi_hot_columns) multi_hot[c] = true;
  std::vector<float> scores, labels;
  auto flush_metrics = [&]() -> absl::Status {
    STRATA_RETURN_IF_ERROR(bayes.Add(scores, labels));
    scores.clear();
    labels.clear();
    return absl::OkStatus();
  };
  // The learner's ceilings (options.split): training ids' counts, and the
  // test set's scores by what an oracle knows.
  constexpr int kSeenAtLeast[3] = {1, 2, 5};
  absl::flat_hash_map<uint64_t, uint32_t> seen_counts;
  BinaryMetrics test_bayes;
  BinaryMetrics seen_metrics[3];
  std::vector<float> test_scores, seen_scores[3], test_labels;
  std::vector<Model::Drawn> drawn;
  int64_t test_ids = 0, test_unseen = 0;
  auto flush_ceilings = [&]() -> absl::Status {
    STRATA_RETURN_IF_ERROR(test_bayes.Add(test_scores, test_labels));
    for (int k = 0; k < 3; ++k) {
      STRATA_RETURN_IF_ERROR(seen_metrics[k].Add(seen_scores[k], test_labels));
      seen_scores[k].clear();
    }
    test_scores.clear();
    test_labels.clear();
    return absl::OkStatus();
  };
  absl::Status status;
  for (int64_t i = 0; i < options.examples && status.ok(); ++i) {
    SplitMix64 rng(Key(options.seed, kExampleDomain,
                       static_cast<uint64_t>(i)));
    const double s =
        model.DrawCategorical(&rng, &ids, &present, &lists,
                              options.split > 0 ? &drawn : nullptr) *
        cal.scale;
    const bool in_test = options.split > 0 && i >= options.split;
    double seen_signal[3] = {0, 0, 0};
    for (const Model::Drawn& d : drawn) {
      const uint64_t key = (static_cast<uint64_t>(d.column) << 40) | d.rank;
      if (!in_test) {
        if (options.split > 0) ++seen_counts[key];
        continue;
      }
      auto it = seen_counts.find(key);
      const uint32_t count = it == seen_counts.end() ? 0 : it->second;
      ++test_ids;
      test_unseen += count == 0;
      const double v = model.Latent(d.column, d.rank, d.scale) * cal.scale;
      for (int k = 0; k < 3; ++k) {
        if (count >= static_cast<uint32_t>(kSeenAtLeast[k])) {
          seen_signal[k] += v;
        }
      }
    }
    const double logit = s + cal.bias;
    const double noisy = logit + options.noise * Gaussian(&rng);
    const bool label = rng.NextDouble() < Sigmoid(noisy);
    summary.positives += label;
    scores.push_back(static_cast<float>(Sigmoid(logit / probit_scale)));
    labels.push_back(label ? 1.0f : 0.0f);
    if (in_test) {
      // AUC depends on the order only: the logits will do.
      test_scores.push_back(static_cast<float>(Sigmoid(logit / probit_scale)));
      for (int k = 0; k < 3; ++k) {
        seen_scores[k].push_back(static_cast<float>(
            Sigmoid((seen_signal[k] + cal.bias) / probit_scale)));
      }
      test_labels.push_back(label ? 1.0f : 0.0f);
    }

    // Test examples go to their own file when there is one.
    std::string& text_ref = separate_test && in_test ? test_text : text;
    text_ref.push_back(label ? '1' : '0');
    const double z = (s - cal.mean) / options.signal_std;
    for (int j = 0; j < kCriteoDenseColumns; ++j) {
      text_ref.push_back('\t');
      if (rng.NextDouble() < options.missing_rate) continue;
      if (j == 1 && rng.NextDouble() < 0.05) {  // Criteo's I2 goes negative
        absl::StrAppend(&text_ref, -1 - static_cast<int>(rng.NextDouble() * 3));
        continue;
      }
      double mean = kIntegerMeans[j];
      if (j < kCorrelatedIntegers) mean *= std::exp(0.5 * z);
      absl::StrAppend(&text_ref, Geometric(mean, &rng));
    }
    for (int c = 0; c < kCriteoCategoricalColumns; ++c) {
      text_ref.push_back('\t');
      if (!present[c]) continue;
      if (!multi_hot[c]) {
        AppendHex8(ids[c], &text_ref);
        continue;
      }
      for (size_t k = 0; k < lists[c].size(); ++k) {
        if (k > 0) text_ref.push_back(',');
        AppendHex8(lists[c][k], &text_ref);
      }
    }
    text_ref.push_back('\n');
    if (test_text.size() >= kFlushBytes) {
      status = test_out.Write(test_text);
      test_text.clear();
    }
    if (status.ok() && text.size() >= kFlushBytes) {
      status = out.Write(text);
      text.clear();
      if (status.ok()) status = flush_metrics();
      if (status.ok()) status = flush_ceilings();
    }
  }
  if (status.ok()) status = out.Write(text);
  if (status.ok() && separate_test) status = test_out.Write(test_text);
  if (status.ok()) status = flush_metrics();
  if (status.ok()) status = flush_ceilings();
  const absl::Status closed = out.Close();
  if (status.ok()) status = closed;
  if (separate_test) {
    const absl::Status test_closed = test_out.Close();
    if (status.ok()) status = test_closed;
  }
  if (status.ok() && std::rename(temp_path.c_str(), options.path.c_str()) != 0) {
    status = WriteError(options.path, errno);
  }
  if (status.ok() && separate_test &&
      std::rename(test_temp_path.c_str(), options.test_path.c_str()) != 0) {
    status = WriteError(options.test_path, errno);
  }
  if (!status.ok()) {
    std::remove(temp_path.c_str());
    if (separate_test) std::remove(test_temp_path.c_str());
    return status;
  }
  summary.examples = options.examples;
  summary.bayes_auc = bayes.Auc();
  summary.bayes_logloss = bayes.LogLoss();
  if (options.split > 0) {
    summary.test_bayes_auc = test_bayes.Auc();
    for (int k = 0; k < 3; ++k) summary.seen_ids_auc[k] = seen_metrics[k].Auc();
    summary.test_ids_unseen =
        test_ids > 0 ? static_cast<double>(test_unseen) / test_ids : 0.0;
  }
  STRATA_RETURN_IF_ERROR(WriteWhole(absl::StrCat(options.path, ".summary.json"),
                                    DatagenSummaryJson(options, summary)));
  return summary;
}

std::string DatagenSummaryJson(const DatagenOptions& options,
                               const DatagenSummary& summary) {
  nlohmann::json j;
  j["path"] = options.path;
  j["examples"] = summary.examples;
  j["positives"] = summary.positives;
  j["positive_rate"] =
      summary.examples > 0
          ? static_cast<double>(summary.positives) / summary.examples
          : 0.0;
  // NaN (a single class) is not JSON: null.
  auto number = [](double x) {
    return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json();
  };
  j["bayes_auc"] = number(summary.bayes_auc);
  j["bayes_logloss"] = number(summary.bayes_logloss);
  j["bias"] = summary.bias;
  if (options.split > 0) {
    j["split"] = options.split;
    if (!options.test_path.empty()) j["test_path"] = options.test_path;
    j["test_bayes_auc"] = number(summary.test_bayes_auc);
    j["seen_ids_auc"] = {{"1", number(summary.seen_ids_auc[0])},
                         {"2", number(summary.seen_ids_auc[1])},
                         {"5", number(summary.seen_ids_auc[2])}};
    j["test_ids_unseen"] = summary.test_ids_unseen;
  }
  j["seed"] = options.seed;
  j["cardinalities"] = options.cardinalities.empty()
                           ? DefaultCardinalities()
                           : options.cardinalities;
  j["zipf_exponent"] = options.zipf_exponent;
  j["latent_dim"] = options.latent_dim;
  j["noise"] = options.noise;
  j["gzip"] = options.gzip;
  j["missing_rate"] = options.missing_rate;
  j["positive_rate_target"] = options.positive_rate;
  j["signal_std"] = options.signal_std;
  if (!options.multi_hot_columns.empty()) {
    j["multi_hot_columns"] = options.multi_hot_columns;
    j["max_hot"] = options.max_hot;
  }
  return j.dump(2) + "\n";
}

}  // namespace strata
