#include "common/logging.h"

#include <sstream>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

absl::Time Fixed() { return absl::FromUnixMillis(1714564800123); }

TEST(LoggerTest, WritesOneJsonLine) {
  std::ostringstream out;
  Logger log("ps:0", &out, Fixed);
  log.Info("variable_created",
           {{"name", "dense/kernel"}, {"bytes", 401408}, {"task", "x"},
            {"shape", {784, 128}}, {"bad", std::string("\xff")}});
  EXPECT_EQ(out.str(),
            "{\"ts\":\"2024-05-01T12:00:00.123Z\",\"level\":\"info\","
            "\"task\":\"ps:0\",\"event\":\"variable_created\","
            "\"name\":\"dense/kernel\",\"bytes\":401408,\"_task\":\"x\","
            "\"shape\":[784,128],\"bad\":\"\xef\xbf\xbd\"}\n");
}

TEST(LoggerTest, MinLevel) {
  std::ostringstream out;
  Logger log("w:1", &out, Fixed);
  log.Debug("hidden");
  log.set_min_level(LogLevel::kError);
  log.Warning("hidden");
  log.Error("shown");
  EXPECT_EQ(out.str(),
            "{\"ts\":\"2024-05-01T12:00:00.123Z\",\"level\":\"error\","
            "\"task\":\"w:1\",\"event\":\"shown\"}\n");
  EXPECT_EQ(ParseLogLevel("warn").value(), LogLevel::kWarning);
  EXPECT_FALSE(ParseLogLevel("loud").ok());
}

TEST(LoggerTest, ConcurrentLinesStayWhole) {
  std::ostringstream out;
  Logger log("ps:0", &out);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) log.Info("tick", {{"t", t}, {"i", i}});
    });
  }
  for (auto& th : threads) th.join();
  std::istringstream in(out.str());
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["event"], "tick");
    ++n;
  }
  EXPECT_EQ(n, 2000);
}

TEST(LoggerTest, FileOutput) {
  FILE* f = tmpfile();
  Logger log("c:0", f, Fixed);
  log.Warning("x");
  rewind(f);
  char buf[256] = {};
  ASSERT_NE(fgets(buf, sizeof buf, f), nullptr);
  EXPECT_STREQ(buf, "{\"ts\":\"2024-05-01T12:00:00.123Z\",\"level\":\"warning\",\"task\":\"c:0\",\"event\":\"x\"}\n");
  fclose(f);
}

}  // namespace
}  // namespace strata
