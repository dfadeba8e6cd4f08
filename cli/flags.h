// The one command-line parser of the `tunefarm` command and its subcommands.
//
// A flag is --name=value or --name value (a value flag, may be repeated) or
// --name (a switch). '-' and '_' in a name are the same: --early-stop and
// --early_stop are one flag, stored as "early_stop". -o is the flag "o" or
// "output", whichever the command has. --help and -h are switches every
// command accepts. Anything else is positional.
//
// Errors are InvalidArgument with one line: an unknown flag (naming the
// nearest known one), a value flag without its value, a value given to a
// switch. --help anywhere wins: the result then holds only "help".
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tunefarm::cli {

struct FlagSpec {
  std::vector<std::string> values;    // flags that take a value
  std::vector<std::string> switches;  // flags that take none
};

class Flags {
 public:
  bool Has(std::string_view name) const;
  // The last value given for `name`, or `fallback` when it was not given.
  std::string Get(std::string_view name, const std::string& fallback = "") const;
  // Every value given for `name`, in order.
  std::vector<std::string> All(std::string_view name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  bool help() const { return Has("help"); }
  // The flags given, by normalized name (for commands that forward them).
  const std::map<std::string, std::vector<std::string>>& given() const { return values_; }

 private:
  friend absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args,
                                          const FlagSpec& spec, const std::string& cmd);
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

// "early-stop" -> "early_stop".
std::string FlagName(std::string_view name);

// `cmd` names the command in messages ("tune: unknown flag --x").
absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args, const FlagSpec& spec,
                                 const std::string& cmd);

}  // namespace tunefarm::cli
