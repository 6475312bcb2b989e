#include "tables/table_store.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"

namespace strata {

struct TableStore::Shard {
  v1::TableSpec spec;  // normalized
  std::unique_ptr<RowOptimizer> optimizer;
  std::unique_ptr<DynamicTable> table;
  // Pushes are serialized: the window's check, the update and the record
  // are one step, and the dropped-gradient count of a push is exact.
  absl::Mutex push_mu;
  ExactlyOnceWindow window ABSL_GUARDED_BY(push_mu);
  std::atomic<int64_t> duplicates{0};
};

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 16;
constexpr char kPrefix[] = "table/";

absl::Status Field(const char* field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("TableSpec.", field, ": ", what));
}

absl::StatusOr<RowOptimizerConfig> RowConfig(const v1::RowOptimizerSpec& o) {
  RowOptimizerConfig c;
  STRATA_ASSIGN_OR_RETURN(
      c.type, ParseRowOptimizerType(o.type().empty() ? "sgd" : o.type()));
  if (o.learning_rate() != 0) c.learning_rate = o.learning_rate();
  if (o.epsilon() != 0) c.epsilon = o.epsilon();
  if (o.initial_accumulator_value() != 0) {
    c.initial_accumulator_value = o.initial_accumulator_value();
  }
  if (o.beta_1() != 0) c.beta_1 = o.beta_1();
  if (o.beta_2() != 0) c.beta_2 = o.beta_2();
  if (o.learning_rate_power() != 0) {
    c.learning_rate_power = o.learning_rate_power();
  }
  c.l1_regularization_strength = o.l1_regularization_strength();
  c.l2_regularization_strength = o.l2_regularization_strength();
  c.l2_shrinkage_regularization_strength =
      o.l2_shrinkage_regularization_strength();
  c.beta = o.beta();
  return c;
}

std::string SpecJson(const v1::TableSpec& spec) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(spec, &out, opts);
  return out;
}

nlohmann::json WindowJson(const ExactlyOnceWindow& window) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, w] : window.windows()) {
    out.push_back({{"job", key.first},
                   {"worker", key.second},
                   {"floor", w.floor},
                   {"steps", w.steps}});
  }
  return out;
}

// Adds the windows of `json` (as WindowJson writes them) to *window: steps
// unioned, the higher floor kept. Errors: DATA_LOSS naming `where`.
absl::Status MergeWindow(const nlohmann::json& json, const std::string& where,
                         ExactlyOnceWindow* window) {
  if (!json.is_array()) {
    return absl::DataLossError(absl::StrCat(where, ": window is not an array"));
  }
  for (const nlohmann::json& d : json) {
    if (!d.is_object() || !d.value("job", nlohmann::json()).is_string() ||
        !d.value("worker", nlohmann::json()).is_number_integer() ||
        !d.value("floor", nlohmann::json()).is_number_integer() ||
        !d.value("steps", nlohmann::json()).is_array()) {
      return absl::DataLossError(
          absl::StrCat(where, ": a window entry is malformed"));
    }
    ExactlyOnceWindow::Key key{d["job"].get<std::string>(),
                               d["worker"].get<int64_t>()};
    ExactlyOnceWindow::Steps steps;
    auto known = window->windows().find(key);
    if (known != window->windows().end()) steps = known->second;
    steps.floor = std::max(steps.floor, d["floor"].get<int64_t>());
    for (const nlohmann::json& s : d["steps"]) {
      if (!s.is_number_integer()) {
        return absl::DataLossError(
            absl::StrCat(where, ": a window step is not an integer"));
      }
      steps.steps.insert(s.get<int64_t>());
    }
    window->Restore(std::move(key), std::move(steps));
  }
  return absl::OkStatus();
}

// One table's three entries in a checkpoint, found by name.
struct SavedTable {
  const CheckpointVariable* ids = nullptr;
  const CheckpointVariable* rows = nullptr;
  const CheckpointVariable* steps = nullptr;
};

// The tables of `checkpoint` by name, each checked for consistent shapes.
// Errors: DATA_LOSS naming the entry.
absl::StatusOr<std::map<std::string, SavedTable>> SavedTables(
    const Checkpoint& checkpoint) {
  std::map<std::string, SavedTable> out;
  for (const CheckpointVariable& e : checkpoint.variables) {
    if (!TableStore::IsTableEntry(e)) continue;
    const std::string rest = e.name.substr(sizeof(kPrefix) - 1);
    const size_t slash = rest.rfind('/');
    if (slash == std::string::npos) {
      return absl::DataLossError(
          absl::StrCat("checkpoint entry '", e.name, "' names no table part"));
    }
    SavedTable& t = out[rest.substr(0, slash)];
    const std::string part = rest.substr(slash + 1);
    if (part == "ids") {
      t.ids = &e;
    } else if (part == "rows") {
      t.rows = &e;
    } else if (part == "steps") {
      t.steps = &e;
    } else {
      return absl::DataLossError(
          absl::StrCat("checkpoint entry '", e.name, "': unknown table part"));
    }
  }
  for (const auto& [name, t] : out) {
    if (t.ids == nullptr || t.rows == nullptr || t.steps == nullptr) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint table '", name, "' lacks its ids, rows or steps"));
    }
    const int64_t n = t.ids->shape.empty() ? -1 : t.ids->shape[0];
    if (t.ids->dtype != DType::kInt64 || t.ids->shape.size() != 1 ||
        t.steps->dtype != DType::kInt64 || t.steps->shape != t.ids->shape ||
        t.rows->dtype != DType::kFloat32 || t.rows->shape.size() != 2 ||
        t.rows->shape[0] != n || t.ids->value == nullptr ||
        t.rows->value == nullptr || t.steps->value == nullptr) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint table '", name, "': ids, rows and steps disagree"));
    }
    for (const auto& [slot, buffer] : t.rows->slots) {
      if (buffer == nullptr || buffer->size() != t.rows->value->size()) {
        return absl::DataLossError(absl::StrCat(
            "checkpoint table '", name, "': slot '", slot, "' has ",
            buffer == nullptr ? 0 : buffer->size(), " bytes, rows have ",
            t.rows->value->size()));
      }
    }
  }
  return out;
}

// The spec saved with a table. Errors: DATA_LOSS.
absl::StatusOr<v1::TableSpec> SavedSpec(const std::string& name,
                                        const SavedTable& t) {
  v1::TableSpec spec;
  const nlohmann::json& meta = t.ids->meta;
  if (!meta.is_object() || !meta.value("spec", nlohmann::json()).is_string() ||
      !google::protobuf::util::JsonStringToMessage(
           meta["spec"].get<std::string>(), &spec)
           .ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint table '", name, "': unreadable spec"));
  }
  return spec;
}

// Imports the rows of `t` for which keep(id) into `shard`'s table; returns
// how many. Errors: DATA_LOSS for rows whose width or slots do not fit
// the table.
absl::StatusOr<int64_t> ImportRows(const std::string& name,
                                   const SavedTable& t, DynamicTable& table,
                                   const RowOptimizer& optimizer,
                                   const std::function<bool(int64_t)>& keep) {
  const int64_t dim = table.options().dim;
  if (t.rows->shape[1] != dim) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint table '", name, "' has rows of ", t.rows->shape[1],
        " floats; the table's are ", dim));
  }
  const int k = optimizer.num_slots();
  if (static_cast<int>(t.rows->slots.size()) != k) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint table '", name, "' has ", t.rows->slots.size(),
        " optimizer slots; the table's optimizer has ", k));
  }
  const auto ids = t.ids->value->span<int64_t>();
  const auto steps = t.steps->value->span<int64_t>();
  const auto rows = t.rows->value->span<float>();
  std::vector<float> slots(static_cast<size_t>(k * dim));
  int64_t n = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!keep(ids[i])) continue;
    for (int s = 0; s < k; ++s) {
      std::memcpy(slots.data() + s * dim,
                  t.rows->slots[static_cast<size_t>(s)].second->data() +
                      i * dim * sizeof(float),
                  static_cast<size_t>(dim) * sizeof(float));
    }
    absl::Status imported =
        table.Import(ids[i], rows.subspan(i * dim, static_cast<size_t>(dim)),
                     slots, steps[i]);
    if (!imported.ok()) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint table '", name, "', row ", ids[i], ": ",
          imported.message()));
    }
    ++n;
  }
  return n;
}

}  // namespace

TableStore::TableStore(TableStoreOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<v1::TableSpec> TableStore::Normalize(const v1::TableSpec& in) {
  v1::TableSpec spec = in;
  if (spec.name().empty() || spec.name().size() > 128) {
    return Field("name", "must be 1 to 128 characters");
  }
  if (spec.dim() < 1 || spec.dim() > kMaxDim) {
    return Field("dim", absl::StrCat("must be in [1, ", kMaxDim, "], got ",
                                     spec.dim()));
  }
  if (spec.initializer().empty()) spec.set_initializer("random_uniform");
  if (spec.initializer() != "random_uniform" && spec.initializer() != "zeros") {
    return Field("initializer", absl::StrCat("'", spec.initializer(),
                                             "' is not random_uniform or zeros"));
  }
  if (spec.init_scale() == 0) spec.set_init_scale(0.05);
  if (!std::isfinite(spec.init_scale()) || spec.init_scale() < 0) {
    return Field("init_scale", "must be finite and >= 0");
  }
  if (spec.min_count() == 0) spec.set_min_count(1);
  if (spec.min_count() < 1) return Field("min_count", "must be >= 1");
  if (spec.max_rows() < 0) return Field("max_rows", "must be >= 0");
  if (spec.eviction().empty()) spec.set_eviction("lru");
  if (spec.eviction() != "lru" && spec.eviction() != "lfu") {
    return Field("eviction",
                 absl::StrCat("'", spec.eviction(), "' is not lru or lfu"));
  }
  if (spec.ttl_steps() < 0) return Field("ttl_steps", "must be >= 0");
  if (!std::isfinite(spec.ttl_seconds()) || spec.ttl_seconds() < 0) {
    return Field("ttl_seconds", "must be finite and >= 0");
  }
  if (spec.num_shards() == 0) spec.set_num_shards(1);
  if (spec.num_shards() < 1) return Field("num_shards", "must be >= 1");
  if (spec.shard() < 0 || spec.shard() >= spec.num_shards()) {
    return Field("shard", absl::StrCat("must be in [0, ", spec.num_shards(),
                                       "), got ", spec.shard()));
  }
  absl::StatusOr<RowOptimizerConfig> config = RowConfig(spec.optimizer());
  if (!config.ok()) return Field("optimizer", config.status().ToString());
  absl::StatusOr<std::unique_ptr<RowOptimizer>> optimizer =
      RowOptimizer::Create(*config);
  if (!optimizer.ok()) {
    return Field("optimizer", std::string(optimizer.status().message()));
  }
  const RowOptimizerConfig& c = (*optimizer)->config();
  v1::RowOptimizerSpec* o = spec.mutable_optimizer();
  o->set_type(RowOptimizerTypeName(c.type));
  o->set_learning_rate(c.learning_rate);
  o->set_epsilon(c.epsilon);
  o->set_initial_accumulator_value(c.initial_accumulator_value);
  o->set_beta_1(c.beta_1);
  o->set_beta_2(c.beta_2);
  o->set_learning_rate_power(c.learning_rate_power);
  return spec;
}

absl::StatusOr<std::shared_ptr<TableStore::Shard>> TableStore::NewShard(
    const v1::TableSpec& spec) const {
  auto shard = std::make_shared<Shard>();
  shard->spec = spec;
  STRATA_ASSIGN_OR_RETURN(RowOptimizerConfig config, RowConfig(spec.optimizer()));
  STRATA_ASSIGN_OR_RETURN(shard->optimizer, RowOptimizer::Create(config));
  DynamicTableOptions o;
  o.name = spec.name();
  o.dim = spec.dim();
  o.seed = spec.seed();
  o.initializer = spec.initializer() == "zeros"
                      ? DynamicInitializer::kZeros
                      : DynamicInitializer::kRandomUniform;
  o.init_scale = spec.init_scale();
  o.min_count = spec.min_count();
  o.zeros_until_admitted = spec.zeros_until_admitted();
  o.max_rows = spec.max_rows();
  o.eviction = spec.eviction() == "lfu" ? EvictionPolicy::kLfu
                                        : EvictionPolicy::kLru;
  o.ttl_steps = spec.ttl_steps();
  o.ttl = absl::Seconds(spec.ttl_seconds());
  o.clock = options_.clock ? options_.clock : [] { return absl::Now(); };
  STRATA_ASSIGN_OR_RETURN(shard->table, DynamicTable::Create(std::move(o)));
  return shard;
}

absl::StatusOr<bool> TableStore::Create(const v1::TableSpec& in) {
  STRATA_ASSIGN_OR_RETURN(v1::TableSpec spec, Normalize(in));
  {
    absl::MutexLock lock(&mu_);
    auto it = tables_.find(spec.name());
    if (it != tables_.end()) {
      if (google::protobuf::util::MessageDifferencer::Equals(it->second->spec,
                                                             spec)) {
        return false;
      }
      return absl::AlreadyExistsError(absl::StrCat(
          "table '", spec.name(), "' exists with another spec: ",
          SpecJson(it->second->spec), "; asked for ", SpecJson(spec)));
    }
  }
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Shard> shard, NewShard(spec));
  absl::MutexLock lock(&mu_);
  // A concurrent Create of the same name: the first one wins.
  auto [it, inserted] = tables_.emplace(spec.name(), std::move(shard));
  if (inserted) return true;
  if (google::protobuf::util::MessageDifferencer::Equals(it->second->spec,
                                                         spec)) {
    return false;
  }
  return absl::AlreadyExistsError(
      absl::StrCat("table '", spec.name(), "' exists with another spec"));
}

absl::StatusOr<std::shared_ptr<TableStore::Shard>> TableStore::Get(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = tables_.find(name);
  if (it == tables_.end()) {
    return absl::NotFoundError(
        absl::StrCat("table '", name, "' does not exist on this server"));
  }
  return it->second;
}

int64_t TableStore::num_tables() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(tables_.size());
}

absl::Status TableStore::CheckIds(const Shard& shard,
                                  absl::Span<const int64_t> ids) {
  const int n = shard.spec.num_shards();
  if (n <= 1) return absl::OkStatus();
  for (int64_t id : ids) {
    const int s = DynamicTable::ShardOf(id, n);
    if (s != shard.spec.shard()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", shard.spec.name(), "': id ", id, " belongs to shard ", s,
          " of ", n, "; this server holds shard ", shard.spec.shard()));
    }
  }
  return absl::OkStatus();
}

absl::Status TableStore::Lookup(const std::string& name,
                                absl::Span<const int64_t> ids, bool train,
                                std::vector<float>* out) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Shard> shard, Get(name));
  const uint64_t dim = static_cast<uint64_t>(shard->spec.dim());
  if (ids.size() * dim * sizeof(float) > options_.max_request_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "table '", name, "': a lookup of ", ids.size(), " rows of ", dim,
        " floats exceeds the server's ", options_.max_request_bytes,
        " bytes"));
  }
  STRATA_RETURN_IF_ERROR(CheckIds(*shard, ids));
  out->resize(ids.size() * dim);
  return shard->table->Lookup(ids, absl::MakeSpan(*out), train);
}

absl::Status TableStore::CheckPush(const std::string& name,
                                   const PushMeta& meta,
                                   absl::Span<const int64_t> ids,
                                   absl::Span<const float> gradients) const {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Shard> shard, Get(name));
  const size_t dim = static_cast<size_t>(shard->spec.dim());
  if (gradients.size() != ids.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", name, "': ", ids.size(), " ids need ", ids.size() * dim,
        " gradient values (dim ", dim, "), got ", gradients.size()));
  }
  if (gradients.size() * sizeof(float) > options_.max_request_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "table '", name, "': a push of ", gradients.size() * sizeof(float),
        " bytes exceeds the server's ", options_.max_request_bytes));
  }
  if (meta.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", name, "': PushTag.step must be >= 0, got ", meta.step));
  }
  STRATA_RETURN_IF_ERROR(CheckIds(*shard, ids));
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (!std::isfinite(gradients[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", name, "': the gradient of id ", ids[i / dim],
          " holds a NaN or infinite value; nothing was applied"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TablePushOutcome> TableStore::Push(
    const std::string& name, const PushMeta& meta,
    absl::Span<const int64_t> ids, absl::Span<const float> gradients) {
  STRATA_RETURN_IF_ERROR(CheckPush(name, meta, ids, gradients));
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Shard> shard, Get(name));
  const size_t dim = static_cast<size_t>(shard->spec.dim());
  // Duplicate ids summed, in first-seen order.
  std::vector<int64_t> unique;
  std::vector<float> summed;
  absl::flat_hash_map<int64_t, size_t> index;
  index.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, inserted] = index.emplace(ids[i], unique.size());
    if (inserted) {
      unique.push_back(ids[i]);
      summed.insert(summed.end(), gradients.begin() + i * dim,
                    gradients.begin() + (i + 1) * dim);
    } else {
      float* dst = summed.data() + it->second * dim;
      for (size_t k = 0; k < dim; ++k) dst[k] += gradients[i * dim + k];
    }
  }
  for (float g : summed) {
    if (!std::isfinite(g)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", name, "': summing the gradients of a repeated id "
          "overflows; nothing was applied"));
    }
  }
  TablePushOutcome outcome;
  absl::MutexLock lock(&shard->push_mu);
  STRATA_ASSIGN_OR_RETURN(bool seen, shard->window.SeenBefore(meta, name));
  if (seen) {
    ++shard->duplicates;
    outcome.duplicate = true;
    return outcome;
  }
  const int64_t dropped_before = shard->table->Stats().gradients_dropped;
  STRATA_RETURN_IF_ERROR(shard->table->ApplyGradients(
      unique, summed, *shard->optimizer, meta.step));
  shard->window.Record(meta);
  outcome.rows_dropped =
      shard->table->Stats().gradients_dropped - dropped_before;
  outcome.rows_applied =
      static_cast<int64_t>(unique.size()) - outcome.rows_dropped;
  return outcome;
}

absl::StatusOr<std::vector<v1::TableInfo>> TableStore::Stats(
    const std::string& name) const {
  std::vector<std::shared_ptr<Shard>> shards;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [n, s] : tables_) {
      if (name.empty() || n == name) shards.push_back(s);
    }
  }
  if (!name.empty() && shards.empty()) {
    return absl::NotFoundError(
        absl::StrCat("table '", name, "' does not exist on this server"));
  }
  std::vector<v1::TableInfo> out;
  for (const auto& s : shards) {
    const DynamicTableStats st = s->table->Stats();
    v1::TableInfo info;
    *info.mutable_spec() = s->spec;
    info.set_rows(st.rows);
    info.set_bytes(st.bytes);
    info.set_lookups(st.lookups);
    info.set_admissions(st.admissions);
    info.set_evictions(st.evictions);
    info.set_expirations(st.expirations);
    info.set_updates(st.updates);
    info.set_gradients_dropped(st.gradients_dropped);
    info.set_pushes_duplicate(s->duplicates.load());
    out.push_back(std::move(info));
  }
  return out;
}

bool TableStore::IsTableEntry(const CheckpointVariable& entry) {
  return entry.name.rfind(kPrefix, 0) == 0;
}

std::vector<CheckpointVariable> TableStore::CheckpointEntries() const {
  std::vector<std::shared_ptr<Shard>> shards;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [n, s] : tables_) shards.push_back(s);
  }
  std::vector<CheckpointVariable> out;
  for (const auto& s : shards) {
    const int64_t dim = s->spec.dim();
    const int k = s->optimizer->num_slots();
    std::vector<int64_t> ids, steps;
    std::vector<float> rows;
    std::vector<std::vector<float>> slots(static_cast<size_t>(k));
    std::vector<float> fresh(static_cast<size_t>(k * dim));
    s->optimizer->InitSlots(absl::MakeSpan(fresh), dim);
    nlohmann::json window;
    {
      // No push between the rows and the window they reflect.
      absl::MutexLock lock(&s->push_mu);
      s->table->Export([&](int64_t id, absl::Span<const float> row,
                           absl::Span<const float> row_slots,
                           int64_t row_step) {
        ids.push_back(id);
        steps.push_back(row_step);
        rows.insert(rows.end(), row.begin(), row.end());
        const absl::Span<const float> src =
            row_slots.empty() ? absl::MakeConstSpan(fresh) : row_slots;
        for (int j = 0; j < k; ++j) {
          slots[static_cast<size_t>(j)].insert(
              slots[static_cast<size_t>(j)].end(), src.begin() + j * dim,
              src.begin() + (j + 1) * dim);
        }
      });
      window = WindowJson(s->window);
    }
    const int64_t n = static_cast<int64_t>(ids.size());
    auto buffer = [](const void* data, size_t bytes) {
      std::shared_ptr<Buffer> b = Buffer::Allocate(bytes, false);
      if (bytes > 0) std::memcpy(b->data(), data, bytes);
      return std::shared_ptr<const Buffer>(std::move(b));
    };
    const std::string base = absl::StrCat(kPrefix, s->spec.name(), "/");
    CheckpointVariable e_ids;
    e_ids.name = base + "ids";
    e_ids.dtype = DType::kInt64;
    e_ids.shape = {n};
    e_ids.value = buffer(ids.data(), ids.size() * sizeof(int64_t));
    e_ids.meta = {{"spec", SpecJson(s->spec)}, {"window", window}};
    CheckpointVariable e_rows;
    e_rows.name = base + "rows";
    e_rows.dtype = DType::kFloat32;
    e_rows.shape = {n, dim};
    e_rows.value = buffer(rows.data(), rows.size() * sizeof(float));
    const std::vector<std::string> names = s->optimizer->SlotNames();
    for (int j = 0; j < k; ++j) {
      const auto& v = slots[static_cast<size_t>(j)];
      e_rows.slots.emplace_back(names[static_cast<size_t>(j)],
                                buffer(v.data(), v.size() * sizeof(float)));
    }
    e_rows.meta = nlohmann::json::object();
    CheckpointVariable e_steps;
    e_steps.name = base + "steps";
    e_steps.dtype = DType::kInt64;
    e_steps.shape = {n};
    e_steps.value = buffer(steps.data(), steps.size() * sizeof(int64_t));
    e_steps.meta = nlohmann::json::object();
    out.push_back(std::move(e_ids));
    out.push_back(std::move(e_rows));
    out.push_back(std::move(e_steps));
  }
  return out;
}

absl::Status TableStore::Restore(const Checkpoint& checkpoint) {
  STRATA_ASSIGN_OR_RETURN(Prepared prepared, PrepareRestore(checkpoint));
  CommitRestore(std::move(prepared));
  return absl::OkStatus();
}

std::vector<std::string> TableStore::Prepared::names() const {
  std::vector<std::string> out;
  for (const auto& [name, shard] : tables_) out.push_back(name);
  return out;
}

void TableStore::CommitRestore(Prepared prepared) {
  absl::MutexLock lock(&mu_);
  tables_.swap(prepared.tables_);
}

absl::StatusOr<TableStore::Prepared> TableStore::PrepareRestore(
    const Checkpoint& checkpoint) const {
  STRATA_ASSIGN_OR_RETURN(auto saved, SavedTables(checkpoint));
  Prepared prepared;
  std::map<std::string, std::shared_ptr<Shard>>& fresh = prepared.tables_;
  for (const auto& [name, t] : saved) {
    STRATA_ASSIGN_OR_RETURN(v1::TableSpec spec, SavedSpec(name, t));
    absl::StatusOr<v1::TableSpec> normalized = Normalize(spec);
    if (!normalized.ok() || normalized->name() != name) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint table '", name, "': its spec does not hold: ",
          normalized.ok() ? "another name" : normalized.status().message()));
    }
    absl::StatusOr<std::shared_ptr<Shard>> shard = NewShard(*normalized);
    if (!shard.ok()) {
      return absl::DataLossError(absl::StrCat("checkpoint table '", name,
                                              "': ", shard.status().message()));
    }
    Shard& s = **shard;
    STRATA_RETURN_IF_ERROR(ImportRows(name, t, *s.table, *s.optimizer,
                                      [](int64_t) { return true; })
                               .status());
    absl::MutexLock lock(&s.push_mu);
    STRATA_RETURN_IF_ERROR(MergeWindow(t.ids->meta.value("window",
                                                         nlohmann::json()),
                                       "checkpoint table '" + name + "'",
                                       &s.window));
    fresh.emplace(name, *std::move(shard));
  }
  return prepared;
}

absl::StatusOr<int64_t> TableStore::Reshard(
    const std::vector<Checkpoint>& checkpoints) {
  std::vector<std::map<std::string, SavedTable>> saved;
  for (const Checkpoint& c : checkpoints) {
    STRATA_ASSIGN_OR_RETURN(auto tables, SavedTables(c));
    saved.push_back(std::move(tables));
  }
  std::map<std::string, std::shared_ptr<Shard>> current;
  {
    absl::MutexLock lock(&mu_);
    current = tables_;
  }
  // New shards built aside, swapped in together: nothing changes on error.
  std::map<std::string, std::shared_ptr<Shard>> fresh;
  int64_t loaded = 0;
  for (const auto& [name, old] : current) {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Shard> shard, NewShard(old->spec));
    const int n = shard->spec.num_shards();
    const int mine = shard->spec.shard();
    for (const auto& tables : saved) {
      auto it = tables.find(name);
      if (it == tables.end()) continue;
      STRATA_ASSIGN_OR_RETURN(v1::TableSpec spec, SavedSpec(name, it->second));
      if (spec.dim() != shard->spec.dim() ||
          spec.optimizer().type() != shard->spec.optimizer().type()) {
        return absl::DataLossError(absl::StrCat(
            "checkpoint table '", name, "' has dim ", spec.dim(), " and ",
            spec.optimizer().type(), "; the table has ", shard->spec.dim(),
            " and ", shard->spec.optimizer().type()));
      }
      STRATA_ASSIGN_OR_RETURN(
          int64_t rows,
          ImportRows(name, it->second, *shard->table, *shard->optimizer,
                     [n, mine](int64_t id) {
                       return n <= 1 || DynamicTable::ShardOf(id, n) == mine;
                     }));
      loaded += rows;
      absl::MutexLock lock(&shard->push_mu);
      STRATA_RETURN_IF_ERROR(
          MergeWindow(it->second.ids->meta.value("window", nlohmann::json()),
                      "checkpoint table '" + name + "'", &shard->window));
    }
    fresh.emplace(name, std::move(shard));
  }
  absl::MutexLock lock(&mu_);
  for (auto& [name, shard] : fresh) tables_[name] = std::move(shard);
  return loaded;
}

}  // namespace strata
