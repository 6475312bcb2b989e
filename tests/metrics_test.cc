#include "common/metrics.h"

#include <httplib.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(MetricsRegistryTest, EmptyRegistrySerializesToNothing) {
  MetricsRegistry registry;
  EXPECT_EQ(registry.Serialize(), "");
}

TEST(MetricsRegistryTest, CounterText) {
  MetricsRegistry registry;
  Counter* pulls = registry.GetCounter("strata_pulls_total", "Pull RPCs.",
                                       {{"ps", "0"}, {"method", "Pull"}});
  pulls->Increment();
  pulls->Increment(2.5);
  pulls->Increment(-1);            // ignored
  pulls->Increment(std::nan(""));  // ignored
  EXPECT_EQ(registry.GetCounter("strata_pulls_total", "other help",
                                {{"method", "Pull"}, {"ps", "0"}}),
            pulls);
  registry
      .GetCounter("strata_pulls_total", "", {{"method", "Push"}, {"ps", "0"}})
      ->Increment(7);
  EXPECT_EQ(registry.Serialize(),
            "# HELP strata_pulls_total Pull RPCs.\n"
            "# TYPE strata_pulls_total counter\n"
            "strata_pulls_total{method=\"Pull\",ps=\"0\"} 3.5\n"
            "strata_pulls_total{method=\"Push\",ps=\"0\"} 7\n");
}

TEST(MetricsRegistryTest, GaugeTextAndSpecialValues) {
  MetricsRegistry registry;
  Gauge* g = registry.GetGauge("b_gauge", "A gauge.");
  g->Set(10);
  g->Decrement(0.25);
  g->Increment(1e-3);
  registry.GetGauge("a_gauge", "Specials.", {{"v", "inf"}})
      ->Set(std::numeric_limits<double>::infinity());
  registry.GetGauge("a_gauge", "", {{"v", "nan"}})->Set(std::nan(""));
  registry.GetGauge("a_gauge", "", {{"v", "neg"}})
      ->Set(-std::numeric_limits<double>::infinity());
  registry.GetGauge("a_gauge", "", {{"v", "big"}})->Set(1e21);
  EXPECT_EQ(registry.Serialize(),
            "# HELP a_gauge Specials.\n"
            "# TYPE a_gauge gauge\n"
            "a_gauge{v=\"big\"} 1e+21\n"
            "a_gauge{v=\"inf\"} +Inf\n"
            "a_gauge{v=\"nan\"} NaN\n"
            "a_gauge{v=\"neg\"} -Inf\n"
            "# HELP b_gauge A gauge.\n"
            "# TYPE b_gauge gauge\n"
            "b_gauge 9.751\n");
}

TEST(MetricsRegistryTest, CounterFunctionIsReadAtEachScrapeAndRemovable) {
  MetricsRegistry registry;
  int64_t count = 3;
  registry.SetCounterFunction("rows_seen_total", "Rows seen.",
                              {{"table", "t"}},
                              [&count] { return static_cast<double>(count); });
  EXPECT_EQ(registry.Serialize(),
            "# HELP rows_seen_total Rows seen.\n"
            "# TYPE rows_seen_total counter\n"
            "rows_seen_total{table=\"t\"} 3\n");
  count = 5;
  EXPECT_NE(registry.Serialize().find("rows_seen_total{table=\"t\"} 5\n"),
            std::string::npos);
  registry.RemoveGaugeFunction("rows_seen_total", {{"table", "t"}});
  EXPECT_EQ(registry.Serialize(), "");
}

TEST(MetricsRegistryTest, EscapesHelpAndLabelValues) {
  MetricsRegistry registry;
  registry
      .GetCounter("c_total", "Line one\nback\\slash \"quoted\"",
                  {{"path", "a\\b\"c\"\nd"}})
      ->Increment();
  EXPECT_EQ(registry.Serialize(),
            "# HELP c_total Line one\\nback\\\\slash \"quoted\"\n"
            "# TYPE c_total counter\n"
            "c_total{path=\"a\\\\b\\\"c\\\"\\nd\"} 1\n");
}

TEST(MetricsRegistryTest, HistogramText) {
  MetricsRegistry registry;
  Histogram* h =
      registry.GetHistogram("rpc_seconds", "RPC latency.", {{"method", "Pull"}},
                            {1.0, 0.1, 0.5, 0.5});
  EXPECT_EQ(h->bounds(), (std::vector<double>{0.1, 0.5, 1.0}));
  h->Observe(0.05);
  h->Observe(0.1);  // le is inclusive
  h->Observe(0.3);
  h->Observe(2);
  h->Observe(std::nan(""));  // ignored
  EXPECT_EQ(registry.Serialize(),
            "# HELP rpc_seconds RPC latency.\n"
            "# TYPE rpc_seconds histogram\n"
            "rpc_seconds_bucket{method=\"Pull\",le=\"0.1\"} 2\n"
            "rpc_seconds_bucket{method=\"Pull\",le=\"0.5\"} 3\n"
            "rpc_seconds_bucket{method=\"Pull\",le=\"1\"} 3\n"
            "rpc_seconds_bucket{method=\"Pull\",le=\"+Inf\"} 4\n"
            "rpc_seconds_sum{method=\"Pull\"} 2.45\n"
            "rpc_seconds_count{method=\"Pull\"} 4\n");
}

TEST(MetricsRegistryTest, HistogramWithoutLabelsOrBounds) {
  MetricsRegistry registry;
  Histogram* h = registry.GetHistogram(
      "h", "", {}, {std::numeric_limits<double>::infinity(), std::nan("")});
  EXPECT_TRUE(h->bounds().empty());
  h->Observe(-3);
  EXPECT_EQ(registry.Serialize(),
            "# HELP h \n"
            "# TYPE h histogram\n"
            "h_bucket{le=\"+Inf\"} 1\n"
            "h_sum -3\n"
            "h_count 1\n");
}

TEST(MetricsRegistryTest, BoundHelpers) {
  EXPECT_EQ(Histogram::ExponentialBounds(0.001, 10, 4),
            (std::vector<double>{0.001, 0.01, 0.1, 1.0}));
  EXPECT_EQ(Histogram::LinearBounds(1, 2, 3), (std::vector<double>{1, 3, 5}));
}

TEST(MetricsRegistryTest, GaugeFunctionComputedAtScrape) {
  MetricsRegistry registry;
  int calls = 0;
  registry.SetGaugeFunction("members", "Live members.", {{"job", "worker"}},
                            [&calls] { return ++calls * 2.0; });
  const std::string expected_head =
      "# HELP members Live members.\n"
      "# TYPE members gauge\n";
  EXPECT_EQ(registry.Serialize(),
            expected_head + "members{job=\"worker\"} 2\n");
  EXPECT_EQ(registry.Serialize(),
            expected_head + "members{job=\"worker\"} 4\n");
  registry.SetGaugeFunction("members", "", {{"job", "worker"}},
                            [] { return 42.0; });
  EXPECT_EQ(registry.Serialize(),
            expected_head + "members{job=\"worker\"} 42\n");
  registry.RemoveGaugeFunction("members", {{"job", "worker"}});
  EXPECT_EQ(registry.Serialize(), "");
  registry.RemoveGaugeFunction("absent", {});  // no-op
}

TEST(MetricsRegistryTest, GaugeFunctionMayUseRegistry) {
  MetricsRegistry registry;
  registry.SetGaugeFunction("derived", "", {}, [&registry] {
    return registry.GetCounter("base_total", "")->value() * 10;
  });
  registry.GetCounter("base_total", "")->Increment(3);
  EXPECT_EQ(registry.Serialize(),
            "# HELP base_total \n"
            "# TYPE base_total counter\n"
            "base_total 3\n"
            "# HELP derived \n"
            "# TYPE derived gauge\n"
            "derived 30\n");
}

TEST(MetricsRegistryTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry registry;
  Counter* c = registry.GetCounter("c_total", "");
  Gauge* g = registry.GetGauge("g", "");
  Histogram* h = registry.GetHistogram("h", "", {}, {0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Increment();
        g->Increment(2);
        h->Observe(i % 2);
        if (i % 1000 == 0) registry.Serialize();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(g->value(), 80000);
  EXPECT_EQ(h->CumulativeCounts(), (std::vector<uint64_t>{20000, 40000}));
  EXPECT_EQ(h->sum(), 20000);
}

TEST(MetricsRegistryDeathTest, MisuseAborts) {
  MetricsRegistry registry;
  registry.GetCounter("x_total", "");
  EXPECT_DEATH(registry.GetGauge("x_total", ""), "another type");
  EXPECT_DEATH(registry.GetCounter("bad-name", ""), "invalid metric name");
  EXPECT_DEATH(registry.GetCounter("ok", "", {{"__reserved", "v"}}),
               "invalid label name");
  EXPECT_DEATH(registry.GetHistogram("hist", "", {{"le", "1"}}, {1}),
               "invalid label name");
}

TEST(MetricsHttpServerTest, ServesMetricsAnd404) {
  MetricsRegistry registry;
  registry.GetCounter("strata_up_total", "Up.")->Increment();
  auto server = MetricsHttpServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  httplib::Client client("127.0.0.1", (*server)->port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"),
            "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, registry.Serialize());

  // Scrapes see later updates.
  registry.GetCounter("strata_up_total", "")->Increment();
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("strata_up_total 2\n"), std::string::npos);

  for (const char* path : {"/", "/metric", "/metrics/x", "/healthz"}) {
    res = client.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
  }

  (*server)->Stop();
  (*server)->Stop();  // idempotent
  httplib::Client after("127.0.0.1", (*server)->port());
  EXPECT_FALSE(after.Get("/metrics"));
}

TEST(MetricsHttpServerTest, StartStopRepeatedly) {
  MetricsRegistry registry;
  for (int i = 0; i < 20; ++i) {
    auto server = MetricsHttpServer::Start("127.0.0.1", 0, &registry);
    ASSERT_TRUE(server.ok()) << server.status();
  }  // destructor stops
}

TEST(MetricsHttpServerTest, PortInUseIsUnavailable) {
  MetricsRegistry registry;
  auto first = MetricsHttpServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second =
      MetricsHttpServer::Start("127.0.0.1", (*first)->port(), &registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

TEST(MetricsHttpServerTest, RejectsBadArguments) {
  MetricsRegistry registry;
  EXPECT_EQ(MetricsHttpServer::Start("127.0.0.1", 0, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      MetricsHttpServer::Start("127.0.0.1", 70000, &registry).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
