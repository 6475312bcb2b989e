// Every binary explains itself: --help and -h print a usage line and the
// binary's own flags (no Abseil warnings, no source paths), --version the
// version and the commit, and an unknown flag or command exits 2 with one
// line on stderr; every flag README.md documents for a binary is in that
// binary's help. First the parser and the help text of common/cli.h in
// this process, then each built binary as a process.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/cli.h"
#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_util.h"

ABSL_FLAG(int, cli_test_port, 7, "Port to serve on");
ABSL_FLAG(bool, cli_test_verbose, false, "Say more");
ABSL_FLAG(std::string, cli_test_name, "", "launch: the run's name");
ABSL_FLAG(std::string, cli_test_dir, "", "Where to write (default: none)");
ABSL_FLAG(double, cli_test_rate, 0.5, "launch, submit: the rate");
ABSL_FLAG(int64_t, cli_test_unlisted, 3, "In no group");


namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Action = CliParse::Action;

// ---- In process: ParseCliArgs, CliHelp, CliVersion ----

CliSpec DaemonSpec() {
  CliSpec spec;
  spec.program = "testd";
  spec.usage = "testd [--cli-test-port P] [flags]";
  spec.description = "A daemon for the test.";
  spec.groups = {{"Serving", {"cli_test_port", "cli_test_verbose"}},
                 {"Files", {"cli_test_dir"}}};
  return spec;
}

CliSpec ToolSpec() {
  CliSpec spec;
  spec.program = "tool";
  spec.usage = "tool COMMAND [flags]";
  spec.description = "A tool of commands.";
  spec.groups = {{"Shared", {"cli_test_verbose"}}};
  spec.commands = {
      {"launch", "start a run", "tool launch --cli-test-name N [flags]",
       {{"Run", {"cli_test_name", "cli_test_rate"}}}},
      {"submit", "send a run", "tool submit [flags]",
       {{"Send", {"cli_test_rate", "cli_test_port"}}}}};
  return spec;
}

CliParse Parse(const std::vector<std::string>& args,
               const CliSpec& spec = DaemonSpec()) {
  return ParseCliArgs(args, spec);
}

TEST(ParseCliTest, TakesEveryValueSpelling) {
  absl::FlagSaver saver;
  EXPECT_EQ(Parse({"--cli-test-port=9"}).action, Action::kRun);
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_port), 9);
  EXPECT_EQ(Parse({"--cli_test_port", "11"}).action, Action::kRun);
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_port), 11);
  EXPECT_EQ(Parse({"-cli-test-port=12"}).action, Action::kRun);
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_port), 12);
  EXPECT_EQ(Parse({"--cli-test-dir="}).action, Action::kRun);
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_dir), "");
  EXPECT_EQ(Parse({"--cli-test-dir", "a b"}).action, Action::kRun);
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_dir), "a b");
}

TEST(ParseCliTest, SetsAndClearsBooleans) {
  absl::FlagSaver saver;
  EXPECT_EQ(Parse({"--cli-test-verbose"}).action, Action::kRun);
  EXPECT_TRUE(absl::GetFlag(FLAGS_cli_test_verbose));
  EXPECT_EQ(Parse({"--nocli_test_verbose"}).action, Action::kRun);
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_verbose));
  EXPECT_EQ(Parse({"--cli-test-verbose=true"}).action, Action::kRun);
  EXPECT_EQ(Parse({"--no-cli-test-verbose"}).action, Action::kRun);
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_verbose));
  // A boolean takes no separate value: "true" is a stray argument.
  const CliParse stray = Parse({"--cli-test-verbose", "true"});
  EXPECT_EQ(stray.action, Action::kError);
  EXPECT_EQ(stray.error,
            "testd: unexpected argument 'true' (see testd --help)");
}

TEST(ParseCliTest, UnknownFlagIsOneLineNamingIt) {
  absl::FlagSaver saver;
  const CliParse p = Parse({"--cli-test-port=1", "--no-such-flag"});
  EXPECT_EQ(p.action, Action::kError);
  EXPECT_EQ(p.error, "testd: unknown flag --no-such-flag (see testd --help)");
  // Only this program's flags count, not Abseil's own.
  EXPECT_EQ(Parse({"--flagfile=/dev/null"}).action, Action::kError);
  EXPECT_EQ(Parse({"--undefok=x"}).action, Action::kError);
}

TEST(ParseCliTest, BadOrMissingValueIsAnError) {
  absl::FlagSaver saver;
  CliParse p = Parse({"--cli-test-port=abc"});
  EXPECT_EQ(p.action, Action::kError);
  EXPECT_THAT(p.error, HasSubstr("invalid value 'abc' for --cli-test-port"));
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_port), 7);
  p = Parse({"--cli-test-port"});
  EXPECT_EQ(p.action, Action::kError);
  EXPECT_THAT(p.error, HasSubstr("--cli-test-port needs a value"));
  p = Parse({"--cli-test-verbose=maybe"});
  EXPECT_EQ(p.action, Action::kError);
}

TEST(ParseCliTest, HelpAndVersionWin) {
  absl::FlagSaver saver;
  EXPECT_EQ(Parse({"--help"}).action, Action::kHelp);
  EXPECT_EQ(Parse({"-h"}).action, Action::kHelp);
  EXPECT_EQ(Parse({"--helpfull"}).action, Action::kHelp);
  EXPECT_EQ(Parse({"--no-such-flag", "--help"}).action, Action::kHelp);
  EXPECT_EQ(Parse({"--version"}).action, Action::kVersion);
}

TEST(ParseCliTest, DoubleDashEndsTheFlags) {
  absl::FlagSaver saver;
  const CliParse p = Parse({"--", "--cli-test-port=3"});
  EXPECT_EQ(p.action, Action::kError);
  EXPECT_THAT(p.error, HasSubstr("unexpected argument '--cli-test-port=3'"));
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_port), 7);
}

TEST(ParseCliTest, CommandsAndHelpOnThem) {
  absl::FlagSaver saver;
  const CliSpec tool = ToolSpec();
  CliParse p = Parse({"launch", "--cli-test-name=x"}, tool);
  EXPECT_EQ(p.action, Action::kRun);
  EXPECT_EQ(p.command, "launch");
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_name), "x");
  // Flags may come before the command.
  p = Parse({"--cli-test-rate=2", "submit"}, tool);
  EXPECT_EQ(p.action, Action::kRun);
  EXPECT_EQ(p.command, "submit");

  p = Parse({"help", "launch"}, tool);
  EXPECT_EQ(p.action, Action::kHelp);
  EXPECT_EQ(p.command, "launch");
  p = Parse({"launch", "--help"}, tool);
  EXPECT_EQ(p.action, Action::kHelp);
  EXPECT_EQ(p.command, "launch");
  p = Parse({"help"}, tool);
  EXPECT_EQ(p.action, Action::kHelp);
  EXPECT_EQ(p.command, "");
  EXPECT_EQ(Parse({"--help"}, tool).command, "");

  p = Parse({"frobnicate"}, tool);
  EXPECT_EQ(p.action, Action::kError);
  EXPECT_EQ(p.error, "tool: unknown command 'frobnicate' (see tool --help)");
  EXPECT_EQ(Parse({"help", "frobnicate"}, tool).action, Action::kError);
  EXPECT_EQ(Parse({"frobnicate", "--help"}, tool).action, Action::kError);
  p = Parse({}, tool);
  EXPECT_EQ(p.action, Action::kError);
  EXPECT_EQ(p.error,
            "tool: a command is required: launch, submit (see tool --help)");
  p = Parse({"launch", "--no-such-flag"}, tool);
  EXPECT_EQ(p.error,
            "tool: unknown flag --no-such-flag (see tool launch --help)");
  p = Parse({"launch", "extra"}, tool);
  EXPECT_EQ(p.error,
            "tool: unexpected argument 'extra' (see tool launch --help)");
}

TEST(CliHelpTest, ListsGroupsDefaultsAndOtherFlags) {
  const std::string help = CliHelp(DaemonSpec());
  EXPECT_THAT(help, StartsWith("Usage: testd [--cli-test-port P] [flags]\n"
                               "\nA daemon for the test.\n"));
  EXPECT_THAT(help, HasSubstr("\nServing:\n  --cli-test-port=INT\n"
                              "      Port to serve on (default: 7)\n"
                              "  --cli-test-verbose\n"
                              "      Say more (default: false)\n"));
  // The help says the default itself: not said twice.
  EXPECT_THAT(help, HasSubstr("\nFiles:\n  --cli-test-dir=STRING\n"
                              "      Where to write (default: none)\n"));
  // Flags no group names still appear, with their defaults.
  EXPECT_THAT(help, HasSubstr("\nOther flags:\n"));
  EXPECT_THAT(help, HasSubstr("  --cli-test-unlisted=INT\n"
                              "      In no group (default: 3)\n"));
  EXPECT_THAT(help, HasSubstr("  --cli-test-rate=NUMBER\n"));
  EXPECT_THAT(help, HasSubstr("--help, -h"));
  EXPECT_THAT(help, HasSubstr("--version"));
  // Never where a flag was defined, never Abseil's own flags.
  EXPECT_THAT(help, Not(HasSubstr(".cc")));
  EXPECT_THAT(help, Not(HasSubstr("--flagfile")));
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    EXPECT_LE(line.size(), 79u) << line;
  }
}

TEST(CliHelpTest, ProgramOfCommands) {
  const CliSpec tool = ToolSpec();
  const std::string top = CliHelp(tool);
  EXPECT_THAT(top, StartsWith("Usage: tool COMMAND [flags]\n"));
  EXPECT_THAT(top, HasSubstr("\nCommands:\n  launch  start a run\n"
                             "  submit  send a run\n"));
  EXPECT_THAT(top, HasSubstr("  help    print the help of a command"));
  EXPECT_THAT(top, HasSubstr("\nShared:\n  --cli-test-verbose\n"));
  // A command's flags are in its own help, not in the program's.
  EXPECT_THAT(top, Not(HasSubstr("--cli-test-name")));
  EXPECT_THAT(top, HasSubstr("  --cli-test-unlisted=INT\n"));

  const std::string launch = CliHelp(tool, "launch");
  EXPECT_THAT(launch,
              StartsWith("Usage: tool launch --cli-test-name N [flags]\n"
                         "\nstart a run\n"));
  // The "launch: " and "launch, submit: " prefixes are left out.
  EXPECT_THAT(launch, HasSubstr("\nRun:\n  --cli-test-name=STRING\n"
                                "      the run's name (default: \"\")\n"
                                "  --cli-test-rate=NUMBER\n"
                                "      the rate (default: 0.5)\n"));
  EXPECT_THAT(launch, Not(HasSubstr("--cli-test-port")));
  EXPECT_THAT(launch, Not(HasSubstr("Other flags")));
  EXPECT_THAT(CliHelp(tool, "submit"), HasSubstr("--cli-test-port=INT"));
}

TEST(CliHelpTest, WrapsLongHelp) {
  CliSpec spec = DaemonSpec();
  spec.description = std::string(30, 'a') + " " + std::string(30, 'b') +
                     " " + std::string(30, 'c');
  const std::string help = CliHelp(spec);
  EXPECT_THAT(help, HasSubstr(std::string(30, 'a') + " " +
                              std::string(30, 'b') + "\n" +
                              std::string(30, 'c') + "\n"));
}

TEST(CliVersionTest, NamesVersionAndCommit) {
  EXPECT_EQ(CliVersion(DaemonSpec()),
            absl::StrCat("testd ", StrataVersion(), " (commit ",
                         StrataGitCommit(), ")"));
}

// ---- The binaries as processes ----

// The binaries a user runs; the first five are always built with this test.
const std::vector<std::string>& Binaries() {
  static const auto* const kBinaries = new std::vector<std::string>{
      "strata-ps",       "strata-coordinator",  "strata-worker",
      "strata",          "local_train",         "fashion_mnist_train",
      "ps_bench",        "load_gen",            "allreduce_bench",
      "gpu_nccl_bench",  "gpu_optimizer_bench", "gpu_dense_bench"};
  return *kBinaries;
}

// The daemons, strata and local_train always; the others where this build
// makes them (STRATA_BUILT_BINARIES, from CMake), so that none is skipped
// unnoticed.
bool Required(const std::string& binary) {
  if (binary == "strata-ps" || binary == "strata-coordinator" ||
      binary == "strata-worker" || binary == "strata" ||
      binary == "local_train") {
    return true;
  }
  return std::string(STRATA_BUILT_BINARIES).find("," + binary + ",") !=
         std::string::npos;
}

std::string BinPath(const std::string& binary) {
  return std::string(STRATA_BIN_DIR) + "/" + binary;
}

bool Built(const std::string& binary) {
  return access(BinPath(binary).c_str(), X_OK) == 0;
}

struct Output {
  int exit_code = -1;  // 128 + signal where killed
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `binary` with `args` (stdin /dev/null, no TF_CONFIG) to its end,
// stdout and stderr apart; kills it after 60 s (a test failure).
Output RunBinary(const std::string& binary,
                 const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinPath(binary)};
  argv.insert(argv.end(), args.begin(), args.end());
  testing_util::ChildOptions options;
  options.separate_stderr = true;
  options.null_stdin = true;
  testing_util::ChildResult r =
      testing_util::RunChild(std::move(argv), std::chrono::seconds(60),
                             options);
  return Output{r.exit_code, std::move(r.output), std::move(r.error)};
}

std::string Dashed(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"_", "-"}});
}

// Whether `help` lists --`flag` (dashed) as one of its flag lines.
bool ListsFlag(const std::string& help, const std::string& flag) {
  const std::string line = absl::StrCat("\n  --", Dashed(flag));
  for (size_t at = help.find(line); at != std::string::npos;
       at = help.find(line, at + 1)) {
    const size_t end = at + line.size();
    if (end == help.size() || help[end] == '=' || help[end] == '\n') {
      return true;
    }
  }
  return false;
}

// The checks every help text passes.
void ExpectCleanHelp(const std::string& what, const Output& r,
                     const std::string& usage_prefix) {
  SCOPED_TRACE(what);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, StartsWith("Usage: " + usage_prefix));
  EXPECT_THAT(r.out, HasSubstr("\n  --"));  // at least one flag
  for (const char* bad :
       {"Warning", "SetProgramUsageMessage", "Flags from", "No flags matched",
        ".cc", "/work/", STRATA_SOURCE_DIR, STRATA_BIN_DIR}) {
    EXPECT_THAT(r.out, Not(HasSubstr(bad)));
  }
}

bool GitAvailable() {
  if (!std::filesystem::exists(std::string(STRATA_SOURCE_DIR) + "/.git")) {
    return false;
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path == nullptr ? "" : path, ':')) {
    if (access(absl::StrCat(dir, "/git").c_str(), X_OK) == 0) return true;
  }
  return false;
}

class BinaryTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!Built(GetParam())) {
      if (Required(GetParam())) {
        FAIL() << BinPath(GetParam()) << " is missing";
      }
      GTEST_SKIP() << GetParam() << " is not built here";
    }
  }
};

TEST_P(BinaryTest, HelpListsItsFlagsCleanly) {
  const Output help = RunBinary(GetParam(), {"--help"});
  ExpectCleanHelp("--help", help, GetParam());
  const Output h = RunBinary(GetParam(), {"-h"});
  ExpectCleanHelp("-h", h, GetParam());
  EXPECT_EQ(h.out, help.out);
}

TEST_P(BinaryTest, VersionNamesVersionAndCommit) {
  const Output r = RunBinary(GetParam(), {"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, absl::StrCat(GetParam(), " ", StrataVersion(),
                                " (commit ", StrataGitCommit(), ")\n"));
  const std::vector<std::string> version = absl::StrSplit(StrataVersion(), '.');
  EXPECT_EQ(version.size(), 3u) << StrataVersion();
  const std::string commit = StrataGitCommit();
  if (GitAvailable()) {
    std::string hex(absl::StripSuffix(commit, "-dirty"));
    EXPECT_GE(hex.size(), 12u) << commit;
    EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos)
        << commit;
  } else {
    EXPECT_TRUE(commit == "unknown" || commit.size() >= 12) << commit;
  }
}

TEST_P(BinaryTest, UnknownFlagExitsTwoWithOneLine) {
  const Output r = RunBinary(GetParam(), {"--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--no-such-flag"));
  EXPECT_THAT(r.err, HasSubstr("--help"));
}

INSTANTIATE_TEST_SUITE_P(
    Binaries, BinaryTest, ::testing::ValuesIn(Binaries()),
    [](const ::testing::TestParamInfo<std::string>& info) {
      return absl::StrReplaceAll(info.param, {{"-", "_"}});
    });

TEST(StrataCliTest, HelpListsTheCommands) {
  const Output help = RunBinary("strata", {"--help"});
  ExpectCleanHelp("strata --help", help, "strata");
  for (const char* command :
       {"launch", "submit", "tfconfig", "certs", "datagen"}) {
    EXPECT_THAT(help.out, HasSubstr(absl::StrCat("\n  ", command, " ")));
  }
  EXPECT_THAT(help.out, HasSubstr("--tls-ca"));  // the shared flags
  const Output help_command = RunBinary("strata", {"help"});
  EXPECT_EQ(help_command.exit_code, 0);
  EXPECT_EQ(help_command.out, help.out);
}

TEST(StrataCliTest, EachCommandHasItsHelp) {
  const std::map<std::string, std::vector<std::string>> flags = {
      {"launch", {"job", "strategy", "ps", "workers", "run-dir", "tls"}},
      {"submit", {"job", "coordinator", "wait", "wait-ps", "tls-ca",
                  "auth-token"}},
      {"tfconfig", {"task-type", "task-index"}},
      {"certs", {"dir", "san", "days"}},
      {"datagen", {"out", "examples", "seed", "cardinalities",
                   "max-cardinality", "gzip", "zipf-exponent"}}};
  for (const auto& [command, names] : flags) {
    const Output help = RunBinary("strata", {"help", command});
    ExpectCleanHelp("strata help " + command, help, "strata " + command);
    for (const std::string& name : names) {
      EXPECT_TRUE(ListsFlag(help.out, name)) << command << ": --" << name;
    }
    // The "launch:" prefixes of the flags' help are left out.
    EXPECT_THAT(help.out, Not(HasSubstr(command + ": ")));
    const Output dashed = RunBinary("strata", {command, "--help"});
    EXPECT_EQ(dashed.exit_code, 0);
    EXPECT_EQ(dashed.out, help.out);
  }
}

TEST(StrataCliTest, UnknownCommandExitsTwoWithOneLine) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"frobnicate"}, {"help", "frobnicate"}, {}}) {
    const Output r = RunBinary("strata", args);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ");
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("(see strata --help)"));
  }
  EXPECT_EQ(RunBinary("strata", {"frobnicate"}).err,
            "strata: unknown command 'frobnicate' (see strata --help)\n");
  const Output flag = RunBinary("strata", {"launch", "--no-such-flag"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_EQ(flag.err,
            "strata: unknown flag --no-such-flag (see strata launch "
            "--help)\n");
}

// ---- The README's flags ----

// Flags README.md documents: "strata-ps" -> {"checkpoint-dir", ...};
// strata's per command ("strata launch").
using Documented = std::map<std::string, std::set<std::string>>;

bool IsCommand(absl::string_view word) {
  return word == "launch" || word == "submit" || word == "tfconfig" ||
         word == "certs" || word == "datagen";
}

// "build/bin/strata-ps," -> "strata-ps" where that is a binary, else "".
std::string BinaryName(absl::string_view word) {
  const size_t slash = word.find_last_of('/');
  if (slash != absl::string_view::npos) word.remove_prefix(slash + 1);
  while (!word.empty() && !absl::ascii_isalnum(word.back())) {
    word.remove_suffix(1);
  }
  for (const std::string& b : Binaries()) {
    if (word == b) return b;
  }
  return "";
}

// The dashed flag names in `text` ("[--ps_shared_memory=false]" ->
// "ps-shared-memory", "`--state-dir`" -> "state-dir").
std::vector<std::string> FlagsIn(absl::string_view text) {
  std::vector<std::string> flags;
  for (absl::string_view word :
       absl::StrSplit(text, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
    while (!word.empty() && (word.front() == '[' || word.front() == '(' ||
                             word.front() == '`')) {
      word.remove_prefix(1);
    }
    if (!absl::ConsumePrefix(&word, "--") || word.empty() ||
        !absl::ascii_islower(word.front())) {
      continue;
    }
    size_t n = 0;
    while (n < word.size() && (absl::ascii_isalnum(word[n]) ||
                               word[n] == '-' || word[n] == '_')) {
      ++n;
    }
    flags.push_back(Dashed(word.substr(0, n)));
  }
  return flags;
}

// A command line (a code span, a line of a code block): each --flag after a
// binary's name (and strata's command) belongs to that binary. Returns the
// binaries named.
std::vector<std::string> ScanCommandLine(absl::string_view code,
                                         Documented* documented) {
  std::vector<std::string> named;
  std::vector<absl::string_view> words =
      absl::StrSplit(code, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  std::string current;
  for (size_t i = 0; i < words.size(); ++i) {
    if (const std::string binary = BinaryName(words[i]); !binary.empty()) {
      current = binary;
      if (binary == "strata" && i + 1 < words.size() &&
          IsCommand(words[i + 1])) {
        current = absl::StrCat("strata ", words[++i]);
      }
      named.push_back(current);
      continue;
    }
    if (current.empty()) continue;
    for (const std::string& flag : FlagsIn(words[i])) {
      (*documented)[current].insert(flag);
    }
  }
  return named;
}

// Every `code span` of `text` scanned as a command line; returns the
// binaries named.
std::vector<std::string> ScanSpans(absl::string_view text,
                                   Documented* documented) {
  std::vector<std::string> named;
  std::vector<absl::string_view> pieces = absl::StrSplit(text, '`');
  for (size_t i = 1; i + 1 < pieces.size(); i += 2) {
    for (std::string& b : ScanCommandLine(pieces[i], documented)) {
      named.push_back(std::move(b));
    }
  }
  return named;
}

// Reads the README as its reader does: command lines in code blocks (with
// "\" continuations) and in code spans (a span may cross lines within a
// paragraph), and flag tables (a first column of `--flag`s) under a heading
// that names a binary in a code span. The Security section's table is
// every daemon's and `strata submit`'s, as its text says.
Documented ReadmeFlags(const std::string& readme) {
  Documented documented;
  std::vector<std::string> section;  // the binaries a flag table is for
  std::string paragraph;
  std::string code_line;
  bool in_code = false;
  auto end_paragraph = [&] {
    ScanSpans(paragraph, &documented);
    paragraph.clear();
  };
  for (absl::string_view line : absl::StrSplit(readme, '\n')) {
    const absl::string_view stripped = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(stripped, "```")) {
      end_paragraph();
      in_code = !in_code;
      code_line.clear();
      continue;
    }
    if (in_code) {
      absl::string_view text = absl::StripTrailingAsciiWhitespace(line);
      const bool continued = absl::ConsumeSuffix(&text, "\\");
      absl::StrAppend(&code_line, " ", text);
      if (!continued) {
        ScanCommandLine(code_line, &documented);
        code_line.clear();
      }
      continue;
    }
    if (absl::StartsWith(line, "#")) {
      end_paragraph();
      Documented ignored;
      section = ScanSpans(line, &ignored);
      absl::string_view title = line;
      while (absl::ConsumePrefix(&title, "#")) {
      }
      if (absl::StripAsciiWhitespace(title) == "Security") {
        section = {"strata-ps", "strata-coordinator", "strata-worker",
                   "strata submit"};
      }
      continue;
    }
    if (absl::StartsWith(stripped, "|")) {
      end_paragraph();
      ScanSpans(line, &documented);
      std::vector<absl::string_view> cells = absl::StrSplit(stripped, '|');
      if (cells.size() > 2 &&
          absl::StartsWith(absl::StripAsciiWhitespace(cells[1]), "`--")) {
        for (const std::string& flag : FlagsIn(cells[1])) {
          for (const std::string& binary : section) {
            documented[binary].insert(flag);
          }
        }
      }
      continue;
    }
    if (stripped.empty()) {
      end_paragraph();
      continue;
    }
    absl::StrAppend(&paragraph, " ", line);
  }
  end_paragraph();
  return documented;
}

TEST(ReadmeFlagsTest, ReadsCodeBlocksSpansAndFlagTables) {
  const std::string readme =
      "# Title\n"
      "\n"
      "```sh\n"
      "build/bin/strata launch --job F --ps 2 \\\n"
      "    [--epochs N] [--ps_shared_memory=false]\n"
      "build/bin/strata tfconfig   # (+ --task-type, --task-index)\n"
      "```\n"
      "\n"
      "Daemons: `strata-ps --port P\n"
      "--checkpoint-dir D` and `strata-worker --device cuda:0` / "
      "`--orphan`.\n"
      "\n"
      "## The server: `strata-coordinator`\n"
      "\n"
      "| flag | meaning |\n"
      "|---|---|\n"
      "| `--state-dir` | where |\n"
      "| `--lease-ms MS` (or `X`) | how long |\n"
      "\n"
      "## Security\n"
      "\n"
      "| `--tls-ca F` | the CA |\n";
  const Documented d = ReadmeFlags(readme);
  const Documented want = {
      {"strata launch", {"job", "ps", "epochs", "ps-shared-memory"}},
      {"strata tfconfig", {"task-type", "task-index"}},
      {"strata-ps", {"port", "checkpoint-dir", "tls-ca"}},
      {"strata-worker", {"device", "tls-ca"}},
      {"strata-coordinator", {"state-dir", "lease-ms", "tls-ca"}},
      {"strata submit", {"tls-ca"}}};
  EXPECT_EQ(d, want);
}

TEST(ReadmeFlagsTest, EveryDocumentedFlagIsInItsBinarysHelp) {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in) << "cannot read README.md";
  std::stringstream text;
  text << in.rdbuf();
  const Documented documented = ReadmeFlags(text.str());
  size_t total = 0;
  for (const auto& [binary, flags] : documented) total += flags.size();
  // Not vacuous: the README documents flags of each of these.
  ASSERT_GT(total, 0u) << "no flags found in README.md";
  for (const char* binary :
       {"strata-ps", "strata-coordinator", "strata-worker", "strata launch",
        "strata submit", "local_train"}) {
    EXPECT_TRUE(documented.count(binary) && !documented.at(binary).empty())
        << "README.md documents no flag of " << binary
        << " (has its format changed?)";
  }
  for (const auto& [key, flags] : documented) {
    const std::vector<std::string> words = absl::StrSplit(key, ' ');
    if (!Built(words[0])) {
      EXPECT_FALSE(Required(words[0])) << words[0] << " is missing";
      continue;
    }
    std::vector<std::string> args = {"--help"};
    if (words.size() == 2) args = {"help", words[1]};
    const Output help = RunBinary(words[0], args);
    ASSERT_EQ(help.exit_code, 0) << key << ": " << help.err;
    for (const std::string& flag : flags) {
      EXPECT_TRUE(ListsFlag(help.out, flag))
          << "README.md documents " << key << " --" << flag
          << " but its help does not list it:\n"
          << help.out;
    }
  }
}

}  // namespace
}  // namespace strata
