// A small Prometheus metrics registry and the HTTP endpoint that serves it in
// the text exposition format 0.0.4. (prometheus-cpp is not packaged for
// Debian 12.)
//
//   MetricsRegistry registry;
//   Counter* pulls = registry.GetCounter(
//       "strata_pull_requests_total", "Pull RPCs served.", {{"ps", "0"}});
//   pulls->Increment();
//   auto server = MetricsHttpServer::Start("0.0.0.0", 9090, &registry);
#ifndef STRATA_COMMON_METRICS_H_
#define STRATA_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace strata {

// Label name -> value. Values may hold any UTF-8; they are escaped on output.
using MetricLabels = std::map<std::string, std::string>;

// A monotonically increasing value. Lock-free; thread-safe.
class Counter {
 public:
  // Adds `delta`; a negative or NaN delta is ignored (counters only grow).
  void Increment(double delta = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down. Lock-free; thread-safe.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double delta = 1.0);
  void Decrement(double delta = 1.0) { Increment(-delta); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into buckets with inclusive upper bounds ("le") plus an
// implicit +Inf bucket, and keeps their sum. Lock-free; thread-safe.
class Histogram {
 public:
  // `bounds` are sorted and de-duplicated; NaN and infinite bounds are
  // dropped (+Inf is always the last bucket).
  explicit Histogram(std::vector<double> bounds);

  void Observe(double value);

  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative count per bucket, bounds().size() + 1 entries (the last is
  // +Inf, which equals the total count).
  std::vector<uint64_t> CumulativeCounts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

  // Exponential bounds start, start*factor, ... (`count` of them).
  static std::vector<double> ExponentialBounds(double start, double factor,
                                               int count);
  // Linear bounds start, start+width, ... (`count` of them).
  static std::vector<double> LinearBounds(double start, double width,
                                          int count);

 private:
  std::vector<double> bounds_;
  // Non-cumulative counts; bounds_.size() + 1 entries.
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0.0};
};

// Owns metric families and serializes them. Metrics live as long as the
// registry; Get* return the same object for the same name and labels, so
// callers may look metrics up once and keep the pointer. Thread-safe.
//
// Naming a metric or label badly (not [a-zA-Z_:][a-zA-Z0-9_:]* for metrics,
// not [a-zA-Z_][a-zA-Z0-9_]* or starting with "__" for labels, "le" on a
// histogram) or reusing a name with another type is a programmer error: the
// process aborts with a message, like a failed CHECK. Label values are free.
class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // `help` is taken from the first call that creates the family.
  Counter* GetCounter(const std::string& name, const std::string& help,
                      const MetricLabels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help,
                  const MetricLabels& labels = {});
  // `bounds` applies when this call creates the series; later calls return
  // the existing histogram unchanged.
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const MetricLabels& labels,
                          std::vector<double> bounds);

  // A gauge series whose value `fn` computes at each Serialize() (queue
  // length, live members, ...), replacing any earlier function for the same
  // name and labels. `fn` runs without the registry's lock held, so it may
  // call Get*; it must be thread-safe and must not call
  // Set/RemoveGaugeFunction.
  void SetGaugeFunction(const std::string& name, const std::string& help,
                        const MetricLabels& labels, std::function<double()> fn);
  // The same for a counter series (a count kept elsewhere, read at each
  // Serialize()); removed with RemoveGaugeFunction.
  void SetCounterFunction(const std::string& name, const std::string& help,
                          const MetricLabels& labels,
                          std::function<double()> fn);
  // Removes a series added by SetGaugeFunction or SetCounterFunction. Once it returns, the function
  // is not running and will not run again, so its captures may be destroyed.
  // Do not call it while holding a lock that the function takes.
  void RemoveGaugeFunction(const std::string& name, const MetricLabels& labels);

  // All families in the text exposition format 0.0.4, sorted by name, each
  // with its # HELP and # TYPE line once, then its series sorted by labels.
  std::string Serialize() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::shared_ptr<std::function<double()>> fn;
  };
  struct Family {
    Type type;
    std::string help;
    std::map<MetricLabels, Series> series;
  };

  // Finds or creates the series; aborts on a programmer error (see above).
  Series& GetSeries(const std::string& name, const std::string& help,
                    const MetricLabels& labels, Type type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Held while gauge functions run and while they are removed, so a removed
  // function never runs afterwards. Acquired before mu_.
  mutable absl::Mutex collect_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
};

// Serves GET /metrics from a registry over HTTP on its own threads;
// every other path answers 404. Thread-safe.
class MetricsHttpServer {
 public:
  // Binds `host`:`port` (0 picks a free port; see port()) and starts
  // serving. `registry` is not owned and must outlive the server.
  // Errors: UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& host, int port, const MetricsRegistry* registry);

  // Stops and joins.
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port.
  int port() const { return port_; }

  // Stops accepting, finishes in-flight requests and joins the thread.
  // Idempotent.
  void Stop();

 private:
  MetricsHttpServer(std::unique_ptr<httplib::Server> server, int port);

  const std::unique_ptr<httplib::Server> server_;  // internally synchronized
  const int port_;
  absl::Mutex mu_;
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_COMMON_METRICS_H_
