#include "common/cli.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/version.h"

namespace strata {
namespace {

constexpr size_t kWidth = 79;  // columns of the help text

// A flag of this binary, or null: Abseil's own (flagfile, fromenv, undefok,
// its help flags) and retired flags do not count.
absl::CommandLineFlag* OwnFlag(absl::string_view name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr || flag->IsRetired() ||
      absl::StrContains(flag->Filename(), "absl/flags/")) {
    return nullptr;
  }
  return flag;
}

// Every flag of this binary, by name.
std::vector<absl::CommandLineFlag*> AllOwnFlags() {
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (OwnFlag(name) != nullptr) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  return flags;
}

std::string Dashed(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"_", "-"}});
}

std::string Underscored(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"-", "_"}});
}

const CliCommand* FindCommand(const CliSpec& spec, absl::string_view name) {
  for (const CliCommand& c : spec.commands) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// Appends `words` wrapped at kWidth columns: the first line starts with
// `first` (`indent` spaces where empty), the others with `indent` spaces.
void AppendWords(const std::vector<std::string>& words, size_t indent,
                 std::string* out, absl::string_view first = "") {
  std::string line = first.empty() ? std::string(indent, ' ')
                                   : std::string(first);
  bool empty = true;  // no word on `line` yet
  for (const std::string& word : words) {
    if (!empty && line.size() + 1 + word.size() > kWidth) {
      absl::StrAppend(out, line, "\n");
      line.assign(indent, ' ');
      empty = true;
    }
    if (!empty) line.push_back(' ');
    absl::StrAppend(&line, word);
    empty = false;
  }
  if (!empty) absl::StrAppend(out, line, "\n");
}

// Appends `text` with its words wrapped at kWidth (see AppendWords).
void AppendWrapped(absl::string_view text, size_t indent, std::string* out,
                   absl::string_view first = "") {
  AppendWords(absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty()),
              indent, out, first);
}

// A usage line's words, each "[...]" one word: "[--ps N]" is not split.
std::vector<std::string> UsageWords(absl::string_view usage) {
  std::vector<std::string> words;
  int depth = 0;
  for (absl::string_view word :
       absl::StrSplit(usage, ' ', absl::SkipEmpty())) {
    if (depth > 0) {
      absl::StrAppend(&words.back(), " ", word);
    } else {
      words.emplace_back(word);
    }
    for (char c : word) {
      if (c == '[') ++depth;
      if (c == ']' && depth > 0) --depth;
    }
  }
  return words;
}

void AppendUsage(absl::string_view usage, std::string* out) {
  AppendWords(UsageWords(usage), 4, out, "Usage: ");
  absl::StrAppend(out, "\n");
}

// The flag's help without a leading "launch: " or "launch, submit: " that
// names commands of `spec`.
std::string HelpText(const absl::CommandLineFlag& flag, const CliSpec& spec) {
  std::string help = flag.Help();
  const size_t colon = help.find(": ");
  if (colon == std::string::npos || spec.commands.empty()) return help;
  for (absl::string_view name :
       absl::StrSplit(absl::string_view(help).substr(0, colon), ',')) {
    if (FindCommand(spec, absl::StripAsciiWhitespace(name)) == nullptr) {
      return help;
    }
  }
  return help.substr(colon + 2);
}

// "--port=INT" and its help with "(default: -1)", or for a boolean
// "--wait" and "(default: false)".
void AppendFlag(const absl::CommandLineFlag& flag, const CliSpec& spec,
                std::string* out) {
  const bool is_bool = flag.IsOfType<bool>();
  const bool is_string = flag.IsOfType<std::string>();
  std::string metavar;
  if (is_string) {
    metavar = "=STRING";
  } else if (flag.IsOfType<int>() || flag.IsOfType<int64_t>() ||
             flag.IsOfType<uint32_t>() || flag.IsOfType<uint64_t>()) {
    metavar = "=INT";
  } else if (flag.IsOfType<double>() || flag.IsOfType<float>()) {
    metavar = "=NUMBER";
  } else if (!is_bool) {
    metavar = "=VALUE";
  }
  absl::StrAppend(out, "  --", Dashed(flag.Name()), metavar, "\n");
  std::string help = HelpText(flag, spec);
  // Where the help says what not giving the flag means, that is the
  // default to show; the stored value is often a sentinel (-1, "").
  if (!absl::StrContains(absl::AsciiStrToLower(help), "default")) {
    const std::string value = flag.DefaultValue();
    absl::StrAppend(&help, help.empty() ? "" : " ", "(default: ",
                    is_string ? absl::StrCat("\"", value, "\"") : value, ")");
  }
  AppendWrapped(help, 6, out);
}

// Appends each group's title and flags (a group with none is left out).
void AppendGroups(const std::vector<CliFlagGroup>& groups, const CliSpec& spec,
                  std::string* out) {
  for (const CliFlagGroup& group : groups) {
    std::string body;
    for (const std::string& name : group.flags) {
      if (const absl::CommandLineFlag* flag = OwnFlag(name)) {
        AppendFlag(*flag, spec, &body);
      }
    }
    if (body.empty()) continue;
    absl::StrAppend(out, "\n", group.title, ":\n", body);
  }
}

void CollectNames(const std::vector<CliFlagGroup>& groups,
                  std::set<std::string>* names) {
  for (const CliFlagGroup& group : groups) {
    for (const std::string& name : group.flags) names->insert(name);
  }
}

void AppendFooter(std::string* out) {
  absl::StrAppend(out, "\n");
  AppendWrapped(
      "Flags take dashes or underscores (--flag-name = --flag_name), as "
      "--name=value or --name value; a boolean flag is set by --name and "
      "cleared by --noname or --name=false.",
      0, out);
  absl::StrAppend(out,
                  "  --help, -h   print this help and exit\n"
                  "  --version    print the version and the git commit and "
                  "exit\n");
}

std::string ErrorLine(const CliSpec& spec, const std::string& command,
                      absl::string_view what) {
  const std::string help = command.empty()
                               ? absl::StrCat(spec.program, " --help")
                               : absl::StrCat(spec.program, " ", command,
                                              " --help");
  return absl::StrCat(spec.program, ": ", what, " (see ", help, ")");
}

}  // namespace

CliFlagGroup SecurityFlagGroup() {
  return {"Transport security",
          {"tls_cert", "tls_key", "tls_ca", "tls_client_auth",
           "tls_server_name", "auth_file", "auth_token"}};
}

CliParse ParseCliArgs(const std::vector<std::string>& args,
                      const CliSpec& spec) {
  bool help = false;
  bool version = false;
  bool rest = false;
  std::string error;  // the first one
  std::vector<std::string> positional;
  auto fail = [&error](std::string what) {
    if (error.empty()) error = std::move(what);
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (rest || arg.size() < 2 || arg[0] != '-') {
      positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      rest = true;
      continue;
    }
    if (arg == "-h") {
      help = true;
      continue;
    }
    const absl::string_view body =
        absl::string_view(arg).substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const bool has_value = eq != absl::string_view::npos;
    const absl::string_view typed = body.substr(0, eq);  // as spelled
    const std::string name = Underscored(typed);
    const std::string shown = absl::StrCat("--", typed);
    if (name == "help" || name == "helpfull" || name == "helpshort") {
      help = true;
      continue;
    }
    if (name == "version") {
      version = true;
      continue;
    }
    absl::CommandLineFlag* flag = OwnFlag(name);
    std::string value = has_value ? std::string(body.substr(eq + 1)) : "";
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      // --noname, --no-name: a boolean cleared.
      absl::string_view base = absl::string_view(name).substr(2);
      absl::ConsumePrefix(&base, "_");
      absl::CommandLineFlag* negated = OwnFlag(base);
      if (negated != nullptr && negated->IsOfType<bool>()) {
        flag = negated;
        value = "false";
      } else {
        fail(absl::StrCat("unknown flag ", shown));
        continue;
      }
    } else if (flag == nullptr) {
      fail(absl::StrCat("unknown flag ", shown));
      continue;
    } else if (flag->IsOfType<bool>()) {
      if (!has_value) value = "true";
    } else if (!has_value) {
      if (i + 1 == args.size()) {
        fail(absl::StrCat("flag ", shown, " needs a value"));
        continue;
      }
      value = args[++i];
    }
    std::string parse_error;
    if (!flag->ParseFrom(value, &parse_error)) {
      fail(absl::StrCat("invalid value '", value, "' for ", shown));
    }
  }

  CliParse result;
  // With commands, the first argument names one ("help" names another).
  std::string command;
  bool help_command = false;
  if (!spec.commands.empty() && !positional.empty()) {
    command = positional.front();
    positional.erase(positional.begin());
    if (command == "help") {
      help_command = true;
      command.clear();
      if (!positional.empty()) {
        command = positional.front();
        positional.erase(positional.begin());
      }
    }
  }
  const bool known = command.empty() || FindCommand(spec, command) != nullptr;
  if (help || help_command) {
    if (!known) {
      result.action = CliParse::Action::kError;
      result.error = ErrorLine(
          spec, "", absl::StrCat("unknown command '", command, "'"));
      return result;
    }
    result.action = CliParse::Action::kHelp;
    result.command = command;
    return result;
  }
  if (version) {
    result.action = CliParse::Action::kVersion;
    return result;
  }
  result.action = CliParse::Action::kError;
  if (!known) {
    result.error =
        ErrorLine(spec, "", absl::StrCat("unknown command '", command, "'"));
  } else if (!error.empty()) {
    result.error = ErrorLine(spec, command, error);
  } else if (!spec.commands.empty() && command.empty()) {
    std::vector<std::string> names;
    for (const CliCommand& c : spec.commands) names.push_back(c.name);
    result.error = ErrorLine(
        spec, "",
        absl::StrCat("a command is required: ", absl::StrJoin(names, ", ")));
  } else if (!positional.empty()) {
    result.error = ErrorLine(
        spec, command,
        absl::StrCat("unexpected argument '", positional.front(), "'"));
  } else {
    result.action = CliParse::Action::kRun;
    result.command = command;
  }
  return result;
}

std::string ParseCli(int argc, char** argv, const CliSpec& spec) {
  int exit_code = 0;
  {
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
    CliParse parse = ParseCliArgs(args, spec);
    switch (parse.action) {
      case CliParse::Action::kRun:
        return std::move(parse.command);
      case CliParse::Action::kHelp:
        std::cout << CliHelp(spec, parse.command) << std::flush;
        break;
      case CliParse::Action::kVersion:
        std::cout << CliVersion(spec) << std::endl;
        break;
      case CliParse::Action::kError:
        std::cerr << parse.error << std::endl;
        exit_code = 2;
        break;
    }
  }  // nothing of ours left allocated at exit (LeakSanitizer)
  std::exit(exit_code);
}

std::string CliHelp(const CliSpec& spec, absl::string_view command) {
  std::string out;
  if (const CliCommand* c = FindCommand(spec, command)) {
    AppendUsage(c->usage, &out);
    AppendWrapped(c->summary, 0, &out);
    AppendGroups(c->groups, spec, &out);
    AppendFooter(&out);
    return out;
  }
  AppendUsage(spec.usage, &out);
  AppendWrapped(spec.description, 0, &out);
  if (!spec.commands.empty()) {
    size_t width = 4;  // "help"
    for (const CliCommand& c : spec.commands) {
      width = std::max(width, c.name.size());
    }
    absl::StrAppend(&out, "\nCommands:\n");
    auto append_command = [&](const std::string& name,
                              const std::string& summary) {
      AppendWrapped(summary, width + 4, &out,
                    absl::StrCat("  ", name,
                                 std::string(width - name.size() + 2, ' ')));
    };
    for (const CliCommand& c : spec.commands) append_command(c.name, c.summary);
    append_command("help", absl::StrCat("print the help of a command (",
                                        spec.program, " help COMMAND)"));
  }
  AppendGroups(spec.groups, spec, &out);
  // Every flag appears somewhere: what no group names is listed last.
  std::set<std::string> listed;
  CollectNames(spec.groups, &listed);
  for (const CliCommand& c : spec.commands) CollectNames(c.groups, &listed);
  std::string others;
  for (const absl::CommandLineFlag* flag : AllOwnFlags()) {
    if (listed.count(std::string(flag->Name())) == 0) {
      AppendFlag(*flag, spec, &others);
    }
  }
  if (!others.empty()) absl::StrAppend(&out, "\nOther flags:\n", others);
  if (!spec.commands.empty()) {
    absl::StrAppend(&out, "\n");
    AppendWrapped(absl::StrCat("Run '", spec.program, " help COMMAND' or '",
                               spec.program,
                               " COMMAND --help' for a command's flags."),
                  0, &out);
  }
  AppendFooter(&out);
  return out;
}

std::string CliVersion(const CliSpec& spec) {
  return absl::StrCat(spec.program, " ", StrataVersion(), " (commit ",
                      StrataGitCommit(), ")");
}

}  // namespace strata
