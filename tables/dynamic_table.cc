#include "tables/dynamic_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/hash.h"

namespace strata {
namespace {

constexpr int64_t kMaxSketchWidth = int64_t{1} << 28;
constexpr int kMaxSketchDepth = 16;
// Rows copied per lock hold by Export.
constexpr size_t kExportChunk = 256;
// Approximate bytes of index per row beyond its floats: the hash map node,
// the row's vectors and bookkeeping, and an LRU or LFU node.
constexpr int64_t kRowOverheadBytes =
    static_cast<int64_t>(sizeof(int64_t) + 160);
// Salts that keep the shard hash independent of the initializer's.
constexpr uint64_t kShardSalt = 0x5d588b656c078965ULL;
constexpr uint64_t kIdSalt = 0x2545f4914f6cdd1dULL;

absl::Status CheckOptions(const DynamicTableOptions& o) {
  auto bad = [&o](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic table '", o.name, "': ", parts...));
  };
  if (o.name.empty()) return bad("name must not be empty");
  if (o.dim <= 0) return bad("dim must be > 0, got ", o.dim);
  if (!(o.init_scale >= 0) || !std::isfinite(o.init_scale)) {
    return bad("init_scale must be finite and >= 0, got ", o.init_scale);
  }
  if (o.min_count < 1) return bad("min_count must be >= 1, got ", o.min_count);
  if (o.min_count > 1) {
    if (o.sketch_width < 1 || o.sketch_width > kMaxSketchWidth) {
      return bad("sketch_width must be in [1, ", kMaxSketchWidth, "], got ",
                 o.sketch_width);
    }
    if (o.sketch_depth < 1 || o.sketch_depth > kMaxSketchDepth) {
      return bad("sketch_depth must be in [1, ", kMaxSketchDepth, "], got ",
                 o.sketch_depth);
    }
  }
  if (o.max_rows < 0) return bad("max_rows must be >= 0, got ", o.max_rows);
  if (o.ttl_steps < 0) {
    return bad("ttl_steps must be >= 0, got ", o.ttl_steps);
  }
  if (o.ttl < absl::ZeroDuration()) {
    return bad("ttl must be >= 0, got ", absl::FormatDuration(o.ttl));
  }
  if (o.ttl > absl::ZeroDuration() && !o.clock) {
    return bad("ttl needs a clock");
  }
  return absl::OkStatus();
}

bool AllFinite(absl::Span<const float> values, size_t* bad_index) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      *bad_index = i;
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DynamicTable>> DynamicTable::Create(
    DynamicTableOptions options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  return std::unique_ptr<DynamicTable>(new DynamicTable(std::move(options)));
}

DynamicTable::DynamicTable(DynamicTableOptions options)
    : options_(std::move(options)),
      init_key_(Mix64(Mix64(options_.seed) ^ HashName(options_.name))),
      bounded_(options_.max_rows > 0) {
  if (options_.min_count > 1) {
    sketch_.emplace(options_.sketch_width, options_.sketch_depth,
                    Mix64(options_.seed ^ HashName(options_.name) ^ kIdSalt));
  }
}

int DynamicTable::ShardOf(int64_t id, int num_shards) {
  if (num_shards <= 1) return 0;
  const uint64_t h = Mix64(static_cast<uint64_t>(id) ^ kShardSalt);
  return static_cast<int>(h % static_cast<uint64_t>(num_shards));
}

void DynamicTable::InitialRow(int64_t id, absl::Span<float> out) const {
  const size_t dim = static_cast<size_t>(options_.dim);
  const size_t n = std::min(out.size(), dim);
  if (options_.initializer == DynamicInitializer::kZeros) {
    std::fill(out.begin(), out.begin() + n, 0.0f);
    return;
  }
  // Counter-based: element j of row `id` from (key, id, j) alone.
  const uint64_t row_key = Mix64(init_key_ ^ Mix64(static_cast<uint64_t>(id)));
  const double scale = options_.init_scale;
  for (size_t j = 0; j < n; ++j) {
    const uint64_t bits = Mix64(row_key + j * 0x9e3779b97f4a7c15ULL);
    const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
    out[j] = static_cast<float>(scale * (2.0 * u - 1.0));
  }
}

absl::Time DynamicTable::Now() const {
  return options_.clock ? options_.clock() : absl::InfinitePast();
}

bool DynamicTable::Expired(const Row& row, absl::Time now) const {
  if (options_.ttl_steps > 0 &&
      current_step_ - row.last_update_step >= options_.ttl_steps) {
    return true;
  }
  return options_.ttl > absl::ZeroDuration() &&
         now - row.last_update_time >= options_.ttl;
}

bool DynamicTable::Admitted(int64_t id) const {
  return !sketch_.has_value() ||
         sketch_->Estimate(id) >= static_cast<uint64_t>(options_.min_count);
}

DynamicTable::Row* DynamicTable::FindLive(int64_t id, absl::Time now) {
  auto it = rows_.find(id);
  if (it == rows_.end()) return nullptr;
  if (Expired(it->second, now)) {
    Erase(id, /*expired=*/true);
    return nullptr;
  }
  return &it->second;
}

DynamicTable::Row* DynamicTable::Insert(int64_t id, std::vector<float> values,
                                        absl::Time now) {
  if (bounded_ && static_cast<int64_t>(rows_.size()) >= options_.max_rows) {
    int64_t victim = 0;
    if (options_.eviction == EvictionPolicy::kLru) {
      victim = lru_.back();
    } else {
      victim = std::get<2>(lfu_.empty() ? *pinned_.begin() : *lfu_.begin());
    }
    Erase(victim, /*expired=*/false);
  }
  auto [it, inserted] = rows_.try_emplace(id);
  Row& row = it->second;
  row.values = std::move(values);
  row.last_update_step = current_step_;
  row.last_update_time = now;
  if (bounded_) {
    row.last_use = ++use_clock_;
    row.frequency = 1;
    if (options_.eviction == EvictionPolicy::kLru) {
      lru_.push_front(id);
      row.lru_pos = lru_.begin();
    } else {
      pinned_.emplace(row.frequency, row.last_use, id);
    }
  }
  return &row;
}

void DynamicTable::Erase(int64_t id, bool expired) {
  auto it = rows_.find(id);
  if (it == rows_.end()) return;
  Row& row = it->second;
  if (bounded_) {
    if (options_.eviction == EvictionPolicy::kLru) {
      lru_.erase(row.lru_pos);
    } else {
      const LfuKey key(row.frequency, row.last_use, id);
      if (lfu_.erase(key) == 0) pinned_.erase(key);
    }
  }
  slot_floats_ -= static_cast<int64_t>(row.slots.size());
  rows_.erase(it);
  ++stats_.evictions;
  if (expired) ++stats_.expirations;
}

void DynamicTable::Touch(int64_t id, Row& row) {
  if (!bounded_) return;
  if (options_.eviction == EvictionPolicy::kLru) {
    lru_.splice(lru_.begin(), lru_, row.lru_pos);
    return;
  }
  const LfuKey key(row.frequency, row.last_use, id);
  if (lfu_.erase(key) == 0) pinned_.erase(key);
  ++row.frequency;
  row.last_use = ++use_clock_;
  pinned_.emplace(row.frequency, row.last_use, id);
}

void DynamicTable::ReleasePinned() {
  lfu_.insert(pinned_.begin(), pinned_.end());
  pinned_.clear();
}

void DynamicTable::UnreadValue(int64_t id, absl::Span<float> out) const {
  if (options_.zeros_until_admitted && !Admitted(id)) {
    std::fill(out.begin(), out.end(), 0.0f);
  } else {
    InitialRow(id, out);
  }
}

absl::Status DynamicTable::Lookup(absl::Span<const int64_t> ids,
                                  absl::Span<float> out,
                                  bool count_for_admission) {
  const size_t dim = static_cast<size_t>(options_.dim);
  if (out.size() != ids.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic table '", options_.name, "': lookup of ", ids.size(),
        " ids needs ", ids.size() * dim, " output floats, got ", out.size()));
  }
  const absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  stats_.lookups += static_cast<int64_t>(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    const absl::Span<float> dst = out.subspan(i * dim, dim);
    Row* row = FindLive(id, now);
    if (row == nullptr && count_for_admission) {
      const bool admitted =
          !sketch_.has_value() ||
          sketch_->Add(id) >= static_cast<uint64_t>(options_.min_count);
      if (admitted) {
        std::vector<float> values(dim);
        InitialRow(id, absl::MakeSpan(values));
        row = Insert(id, std::move(values), now);
        ++stats_.admissions;
        std::copy(row->values.begin(), row->values.end(), dst.begin());
        continue;
      }
    }
    if (row == nullptr) {
      UnreadValue(id, dst);
      continue;
    }
    if (count_for_admission) Touch(id, *row);
    std::copy(row->values.begin(), row->values.end(), dst.begin());
  }
  ReleasePinned();
  return absl::OkStatus();
}

absl::Status DynamicTable::ApplyGradients(absl::Span<const int64_t> ids,
                                          absl::Span<const float> grads,
                                          const RowOptimizer& optimizer,
                                          int64_t step) {
  const size_t dim = static_cast<size_t>(options_.dim);
  auto bad = [this](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic table '", options_.name, "': ", parts...));
  };
  if (grads.size() != ids.size() * dim) {
    return bad("gradients of ", ids.size(), " ids need ", ids.size() * dim,
               " floats, got ", grads.size());
  }
  if (step < 0) return bad("step must be >= 0, got ", step);
  size_t bad_index = 0;
  if (!AllFinite(grads, &bad_index)) {
    return bad("gradient of id ", ids[bad_index / dim], " (element ",
               bad_index % dim, ") is not finite: ", grads[bad_index]);
  }
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.size());
  for (int64_t id : ids) {
    if (!seen.insert(id).second) {
      return bad("id ", id, " appears more than once (sum its gradients)");
    }
  }
  const size_t slot_floats = static_cast<size_t>(optimizer.num_slots()) * dim;
  const absl::Time now = Now();

  absl::MutexLock lock(&mu_);
  // Validate against the rows before changing any (expiry is judged at the
  // new step, as below).
  const int64_t step_before = current_step_;
  current_step_ = std::max(current_step_, step);
  for (int64_t id : ids) {
    auto it = rows_.find(id);
    if (it == rows_.end() || Expired(it->second, now)) continue;
    const size_t have = it->second.slots.size();
    if (have != 0 && have != slot_floats) {
      current_step_ = step_before;
      return absl::FailedPreconditionError(absl::StrCat(
          "dynamic table '", options_.name, "': row ", id, " has ", have,
          " slot floats, optimizer ",
          RowOptimizerTypeName(optimizer.config().type), " needs ",
          slot_floats));
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    Row* row = FindLive(id, now);
    if (row == nullptr) {
      if (!Admitted(id)) {
        ++stats_.gradients_dropped;
        continue;
      }
      std::vector<float> values(dim);
      InitialRow(id, absl::MakeSpan(values));
      row = Insert(id, std::move(values), now);
      ++stats_.admissions;
    } else {
      Touch(id, *row);
    }
    if (row->slots.empty() && slot_floats > 0) {
      row->slots.resize(slot_floats);
      optimizer.InitSlots(absl::MakeSpan(row->slots), options_.dim);
      slot_floats_ += static_cast<int64_t>(slot_floats);
    }
    const absl::Status s =
        optimizer.ApplyRow(absl::MakeSpan(row->values),
                           absl::MakeSpan(row->slots), &row->row_step,
                           grads.subspan(i * dim, dim));
    if (!s.ok()) {
      // Unreachable: the arguments were validated above.
      ReleasePinned();
      return absl::InternalError(absl::StrCat(
          "dynamic table '", options_.name, "': update of row ", id,
          " failed after validation: ", s.ToString()));
    }
    row->last_update_step = step;
    row->last_update_time = now;
    ++stats_.updates;
  }
  ReleasePinned();
  return absl::OkStatus();
}

int64_t DynamicTable::EvictExpired(int64_t step) {
  if (options_.ttl_steps == 0 && options_.ttl == absl::ZeroDuration()) {
    return 0;
  }
  const absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  current_step_ = std::max(current_step_, step);
  std::vector<int64_t> expired;
  for (const auto& [id, row] : rows_) {
    if (Expired(row, now)) expired.push_back(id);
  }
  for (int64_t id : expired) Erase(id, /*expired=*/true);
  return static_cast<int64_t>(expired.size());
}

DynamicTableStats DynamicTable::Stats() const {
  absl::MutexLock lock(&mu_);
  DynamicTableStats stats = stats_;
  stats.rows = static_cast<int64_t>(rows_.size());
  stats.bytes =
      stats.rows * (options_.dim * static_cast<int64_t>(sizeof(float)) +
                    static_cast<int64_t>(sizeof(Row)) + kRowOverheadBytes) +
      slot_floats_ * static_cast<int64_t>(sizeof(float)) +
      (sketch_.has_value() ? static_cast<int64_t>(sketch_->bytes()) : 0);
  return stats;
}

void DynamicTable::Export(const ExportFn& fn) const {
  const absl::Time now = Now();
  std::vector<int64_t> ids;
  {
    absl::MutexLock lock(&mu_);
    ids.reserve(rows_.size());
    for (const auto& [id, row] : rows_) {
      if (!Expired(row, now)) ids.push_back(id);
    }
  }
  std::sort(ids.begin(), ids.end());
  struct Copy {
    int64_t id;
    std::vector<float> values;
    std::vector<float> slots;
    int64_t row_step;
  };
  std::vector<Copy> chunk;
  for (size_t begin = 0; begin < ids.size(); begin += kExportChunk) {
    const size_t end = std::min(ids.size(), begin + kExportChunk);
    chunk.clear();
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = begin; i < end; ++i) {
        auto it = rows_.find(ids[i]);
        if (it == rows_.end()) continue;  // evicted since
        const Row& row = it->second;
        chunk.push_back(Copy{ids[i], row.values, row.slots, row.row_step});
      }
    }
    for (const Copy& c : chunk) fn(c.id, c.values, c.slots, c.row_step);
  }
}

absl::Status DynamicTable::Import(int64_t id, absl::Span<const float> row,
                                  absl::Span<const float> slots,
                                  int64_t row_step) {
  const size_t dim = static_cast<size_t>(options_.dim);
  auto bad = [this, id](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic table '", options_.name, "': import of row ", id, ": ",
        parts...));
  };
  if (row.size() != dim) {
    return bad("row has ", row.size(), " floats, dim is ", dim);
  }
  if (slots.size() % dim != 0) {
    return bad(slots.size(), " slot floats are not a multiple of dim ", dim);
  }
  if (row_step < 0) return bad("row_step must be >= 0, got ", row_step);
  size_t bad_index = 0;
  if (!AllFinite(row, &bad_index)) {
    return bad("row element ", bad_index, " is not finite");
  }
  if (!AllFinite(slots, &bad_index)) {
    return bad("slot float ", bad_index, " is not finite");
  }
  const absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  Row* target = nullptr;
  if (auto it = rows_.find(id); it != rows_.end()) {
    target = &it->second;
    target->values.assign(row.begin(), row.end());
    target->last_update_step = current_step_;
    target->last_update_time = now;
    Touch(id, *target);
  } else {
    target = Insert(id, std::vector<float>(row.begin(), row.end()), now);
  }
  slot_floats_ += static_cast<int64_t>(slots.size()) -
                  static_cast<int64_t>(target->slots.size());
  target->slots.assign(slots.begin(), slots.end());
  target->row_step = row_step;
  ReleasePinned();
  return absl::OkStatus();
}

}  // namespace strata
