#include "common/metrics.h"

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

void AtomicAdd(std::atomic<double>& target, double delta) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + delta,
                                       std::memory_order_relaxed)) {
  }
}

// A programmer error in how metrics are declared; see MetricsRegistry.
[[noreturn]] void Fatal(const std::string& message) {
  std::fprintf(stderr, "strata metrics: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

bool IsValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// Shortest text that reads back as the same double; Prometheus spellings
// for the special values.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

void AppendEscaped(std::string* out, const std::string& s, bool quote) {
  for (char c : s) {
    switch (c) {
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '"':
        if (quote) {
          out->append("\\\"");
        } else {
          out->push_back(c);
        }
        break;
      default:
        out->push_back(c);
    }
  }
}

// {a="x",b="y"} plus an optional trailing le="..."; "" when empty.
std::string FormatLabels(const MetricLabels& labels,
                         const std::string* le = nullptr) {
  if (labels.empty() && le == nullptr) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::string& name, const std::string& value) {
    if (!first) out.push_back(',');
    first = false;
    out.append(name);
    out.append("=\"");
    AppendEscaped(&out, value, /*quote=*/true);
    out.push_back('"');
  };
  for (const auto& [name, value] : labels) add(name, value);
  if (le != nullptr) add("le", *le);
  out.push_back('}');
  return out;
}

}  // namespace

void Counter::Increment(double delta) {
  if (!(delta >= 0)) return;  // negative or NaN
  AtomicAdd(value_, delta);
}

void Gauge::Increment(double delta) { AtomicAdd(value_, delta); }

Histogram::Histogram(std::vector<double> bounds) {
  bounds.erase(std::remove_if(bounds.begin(), bounds.end(),
                              [](double b) { return !std::isfinite(b); }),
               bounds.end());
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  bounds_ = std::move(bounds);
  buckets_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> counts(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    counts[i] = total;
  }
  return counts;
}

std::vector<double> Histogram::ExponentialBounds(double start, double factor,
                                                 int count) {
  std::vector<double> bounds;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

std::vector<double> Histogram::LinearBounds(double start, double width,
                                            int count) {
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i) bounds.push_back(start + i * width);
  return bounds;
}

MetricsRegistry::Series& MetricsRegistry::GetSeries(const std::string& name,
                                                    const std::string& help,
                                                    const MetricLabels& labels,
                                                    Type type) {
  if (!IsValidMetricName(name)) {
    Fatal(absl::StrCat("invalid metric name \"", name, "\""));
  }
  for (const auto& label : labels) {
    if (!IsValidLabelName(label.first) ||
        (type == Type::kHistogram && label.first == "le")) {
      Fatal(absl::StrCat("invalid label name \"", label.first, "\" on metric ",
                         name));
    }
  }
  auto [it, created] = families_.try_emplace(name);
  Family& family = it->second;
  if (created) {
    family.type = type;
    family.help = help;
  } else if (family.type != type) {
    Fatal(absl::StrCat("metric ", name,
                       " is already registered with another type"));
  }
  return family.series[labels];
}

Counter* MetricsRegistry::GetCounter(const std::string& name,
                                     const std::string& help,
                                     const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Series& series = GetSeries(name, help, labels, Type::kCounter);
  if (series.counter == nullptr) series.counter = std::make_unique<Counter>();
  return series.counter.get();
}

Gauge* MetricsRegistry::GetGauge(const std::string& name,
                                 const std::string& help,
                                 const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Series& series = GetSeries(name, help, labels, Type::kGauge);
  if (series.fn != nullptr) {
    Fatal(absl::StrCat("gauge ", name, FormatLabels(labels),
                       " is already a gauge function"));
  }
  if (series.gauge == nullptr) series.gauge = std::make_unique<Gauge>();
  return series.gauge.get();
}

Histogram* MetricsRegistry::GetHistogram(const std::string& name,
                                         const std::string& help,
                                         const MetricLabels& labels,
                                         std::vector<double> bounds) {
  absl::MutexLock lock(&mu_);
  Series& series = GetSeries(name, help, labels, Type::kHistogram);
  if (series.histogram == nullptr) {
    series.histogram = std::make_unique<Histogram>(std::move(bounds));
  }
  return series.histogram.get();
}

void MetricsRegistry::SetGaugeFunction(const std::string& name,
                                       const std::string& help,
                                       const MetricLabels& labels,
                                       std::function<double()> fn) {
  absl::MutexLock collect(&collect_mu_);
  absl::MutexLock lock(&mu_);
  Series& series = GetSeries(name, help, labels, Type::kGauge);
  if (series.gauge != nullptr) {
    Fatal(absl::StrCat("gauge ", name, FormatLabels(labels),
                       " is already a plain gauge"));
  }
  series.fn = std::make_shared<std::function<double()>>(std::move(fn));
}

void MetricsRegistry::SetCounterFunction(const std::string& name,
                                         const std::string& help,
                                         const MetricLabels& labels,
                                         std::function<double()> fn) {
  absl::MutexLock collect(&collect_mu_);
  absl::MutexLock lock(&mu_);
  Series& series = GetSeries(name, help, labels, Type::kCounter);
  if (series.counter != nullptr) {
    Fatal(absl::StrCat("counter ", name, FormatLabels(labels),
                       " is already a plain counter"));
  }
  series.fn = std::make_shared<std::function<double()>>(std::move(fn));
}

void MetricsRegistry::RemoveGaugeFunction(const std::string& name,
                                          const MetricLabels& labels) {
  absl::MutexLock collect(&collect_mu_);
  absl::MutexLock lock(&mu_);
  auto family = families_.find(name);
  if (family == families_.end()) return;
  auto series = family->second.series.find(labels);
  if (series != family->second.series.end() && series->second.fn != nullptr) {
    family->second.series.erase(series);
  }
}

std::string MetricsRegistry::Serialize() const {
  // collect_mu_ keeps gauge functions from being replaced or removed while
  // they run; series are only ever erased under it, so the pointers taken
  // below stay valid until it is released.
  absl::MutexLock collect(&collect_mu_);
  struct SeriesView {
    const MetricLabels* labels;
    const Series* series;
  };
  struct FamilyView {
    const std::string* name;
    const Family* family;
    std::vector<SeriesView> series;
  };
  std::vector<FamilyView> families;
  {
    absl::MutexLock lock(&mu_);
    families.reserve(families_.size());
    for (const auto& [name, family] : families_) {
      if (family.series.empty()) continue;
      FamilyView view{&name, &family, {}};
      view.series.reserve(family.series.size());
      for (const auto& [labels, series] : family.series) {
        view.series.push_back({&labels, &series});
      }
      families.push_back(std::move(view));
    }
  }

  std::string out;
  for (const FamilyView& view : families) {
    const std::string& name = *view.name;
    out.append("# HELP ").append(name).push_back(' ');
    AppendEscaped(&out, view.family->help, /*quote=*/false);
    const char* type = view.family->type == Type::kCounter ? "counter"
                       : view.family->type == Type::kGauge ? "gauge"
                                                           : "histogram";
    absl::StrAppend(&out, "\n# TYPE ", name, " ", type, "\n");
    for (const SeriesView& s : view.series) {
      const Series& series = *s.series;
      if (series.counter != nullptr) {
        absl::StrAppend(&out, name, FormatLabels(*s.labels), " ",
                        FormatValue(series.counter->value()), "\n");
      } else if (series.gauge != nullptr) {
        absl::StrAppend(&out, name, FormatLabels(*s.labels), " ",
                        FormatValue(series.gauge->value()), "\n");
      } else if (series.fn != nullptr) {
        absl::StrAppend(&out, name, FormatLabels(*s.labels), " ",
                        FormatValue((*series.fn)()), "\n");
      } else if (series.histogram != nullptr) {
        const Histogram& h = *series.histogram;
        std::vector<uint64_t> counts = h.CumulativeCounts();
        for (size_t i = 0; i < counts.size(); ++i) {
          const std::string le =
              i < h.bounds().size() ? FormatValue(h.bounds()[i]) : "+Inf";
          absl::StrAppend(&out, name, "_bucket", FormatLabels(*s.labels, &le),
                          " ", counts[i], "\n");
        }
        absl::StrAppend(&out, name, "_sum", FormatLabels(*s.labels), " ",
                        FormatValue(h.sum()), "\n", name, "_count",
                        FormatLabels(*s.labels), " ", counts.back(), "\n");
      }
    }
  }
  return out;
}

namespace {

// Start-up handshake between Start() and the serving thread.
struct StartState {
  absl::Mutex mu;
  bool listening ABSL_GUARDED_BY(mu) = false;
  bool exited ABSL_GUARDED_BY(mu) = false;
};

}  // namespace

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<httplib::Server> server,
                                     int port)
    : server_(std::move(server)), port_(port) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, const MetricsRegistry* registry) {
  if (registry == nullptr) {
    return absl::InvalidArgumentError("metrics registry is null");
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", port, " is out of range [0, 65535]"));
  }
  auto server = std::make_unique<httplib::Server>();
  auto state = std::make_shared<StartState>();
  // httplib makes the task queue as its accept loop starts (after it marks
  // itself running), so creating it doubles as the "listening" signal that
  // makes a later stop() effective.
  server->new_task_queue = [state] {
    {
      absl::MutexLock lock(&state->mu);
      state->listening = true;
    }
    return new httplib::ThreadPool(2);
  };
  // SO_REUSEADDR (restart while old connections linger) but not httplib's
  // default SO_REUSEPORT, which would let two servers share a port silently.
  server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->Get("/metrics",
              [registry](const httplib::Request&, httplib::Response& res) {
                res.set_content(registry->Serialize(), kContentType);
              });

  int bound = -1;
  if (port == 0) {
    bound = server->bind_to_any_port(host);
  } else if (server->bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the metrics HTTP server to ", host, ":", port,
                     " (address in use, or host not local?)"));
  }

  std::unique_ptr<MetricsHttpServer> self(
      new MetricsHttpServer(std::move(server), bound));
  httplib::Server* raw = self->server_.get();
  {
    absl::MutexLock lock(&self->mu_);
    self->thread_ = std::thread([raw, state] {
      raw->listen_after_bind();
      absl::MutexLock state_lock(&state->mu);
      state->exited = true;
    });
  }
  bool listening;
  {
    absl::MutexLock state_lock(&state->mu);
    auto started = [&state]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->mu) {
      return state->listening || state->exited;
    };
    state->mu.Await(absl::Condition(&started));
    listening = state->listening && !state->exited;
  }
  if (!listening) {
    self->Stop();
    return absl::UnavailableError(absl::StrCat(
        "metrics HTTP server on ", host, ":", bound, " failed to listen"));
  }
  return self;
}

void MetricsHttpServer::Stop() {
  absl::MutexLock lock(&mu_);
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace strata
