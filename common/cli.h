// Command-line parsing and help shared by the binaries' main() functions.
//
// Flags are ordinary Abseil flags (ABSL_FLAG); the parser and the help are
// ours, so that a binary lists its own flags, grouped, with no Abseil
// warnings and no source paths:
//
//   int main(int argc, char** argv) {
//     strata::CliSpec spec;
//     spec.program = "strata-ps";
//     spec.usage = "strata-ps [--port P] [--checkpoint-dir D] [flags]";
//     spec.description = "The parameter-server daemon.";
//     spec.groups = {{"Serving", {"host", "port"}},
//                    strata::SecurityFlagGroup()};
//     strata::ParseCli(argc, argv, spec);  // exits on --help, errors, ...
//
// Accepted: --name=value and --name value (not for booleans); --name,
// --noname (or --no-name) and --name=true|false for booleans; a single dash
// as well as two; dashes or underscores in names (--checkpoint-dir =
// --checkpoint_dir); a bare "--" ends the flags. --help (-h, --helpfull,
// --helpshort) prints the help on stdout and exits 0; --version prints
// "PROGRAM VERSION (commit SHA)" and exits 0; an unknown flag, a bad value,
// an unknown command or a stray argument prints one line on stderr and
// exits 2.
#ifndef STRATA_COMMON_CLI_H_
#define STRATA_COMMON_CLI_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace strata {

// A titled group of flags in the help ("Serving", "Checkpoints").
struct CliFlagGroup {
  std::string title;
  std::vector<std::string> flags;  // flag names, underscore form
};

// One command of a program of commands ("strata launch").
struct CliCommand {
  std::string name;     // "launch"
  std::string summary;  // one line for the command list
  std::string usage;    // "strata launch --job FILE [flags]"
  std::vector<CliFlagGroup> groups;  // the flags this command reads
};

// What a binary is and which flags it reads, for the help.
struct CliSpec {
  std::string program;      // the name in messages: "strata-ps"
  std::string usage;        // "strata-ps [flags]"
  std::string description;  // one sentence on what the binary does
  // Where `commands` is empty: every flag of the binary; a flag named in no
  // group is listed under "Other flags". With commands: the flags shared by
  // them, listed in the program's own help.
  std::vector<CliFlagGroup> groups;
  // A program of commands (its first argument names one); empty for the
  // others, which take no arguments but flags. A flag's help may start with
  // the commands it belongs to ("launch: ...", "launch, submit: ..."); that
  // prefix is left out of the help.
  std::vector<CliCommand> commands;
};

// What a command line asks for (ParseCliArgs).
struct CliParse {
  enum class Action { kRun, kHelp, kVersion, kError };
  Action action = Action::kRun;
  // With commands: the command named (kRun; kHelp where one was named,
  // "strata help launch", "strata launch --help"); otherwise empty.
  std::string command;
  // kError: the whole line, "strata-ps: unknown flag --x (see strata-ps
  // --help)".
  std::string error;
};

// Parses `args` (argv without the program) and sets the flags it names in
// Abseil's registry. Never exits, never prints: the testable core of
// ParseCli. Where --help is given, errors elsewhere on the line are ignored.
CliParse ParseCliArgs(const std::vector<std::string>& args,
                      const CliSpec& spec);

// Parses argv as ParseCliArgs does, then: on --help prints CliHelp to stdout
// and exits 0; on --version prints CliVersion to stdout and exits 0; on an
// error prints its line to stderr and exits 2. Returns the command named
// (empty for a program without commands).
std::string ParseCli(int argc, char** argv, const CliSpec& spec);

// The help text: usage line, description, then the flags group by group,
// each with its help and its default (where the help does not already say
// it). `command` empty: the program's help (with commands: their list and
// the shared flags); otherwise that command's usage and flags.
std::string CliHelp(const CliSpec& spec, absl::string_view command = "");

// "strata-ps 0.5.0 (commit 0123abcd4567)".
std::string CliVersion(const CliSpec& spec);

// The group of the transport-security flags (common/security_flags.h).
CliFlagGroup SecurityFlagGroup();

}  // namespace strata

#endif  // STRATA_COMMON_CLI_H_
