#include "cli/flags.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/edit_distance.h"

namespace tunefarm::cli {

namespace {

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  for (const std::string& n : names) {
    if (FlagName(n) == name) return true;
  }
  return false;
}

std::string UnknownFlag(const std::string& name, const FlagSpec& spec, const std::string& cmd) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto* list : {&spec.values, &spec.switches}) {
    for (const std::string& n : *list) {
      const size_t d = EditDistance(name, FlagName(n));
      if (d < best_d) best_d = d, best = FlagName(n);
    }
  }
  std::string msg = absl::StrCat(cmd, ": unknown flag --", name);
  if (!best.empty() && best_d <= std::max<size_t>(2, name.size() / 3)) {
    absl::StrAppend(&msg, "; did you mean --", best, "?");
  }
  absl::StrAppend(&msg, " (see --help)");
  return msg;
}

}  // namespace

std::string FlagName(std::string_view name) {
  std::string n(name);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

bool Flags::Has(std::string_view name) const { return values_.count(FlagName(name)) > 0; }

std::string Flags::Get(std::string_view name, const std::string& fallback) const {
  auto it = values_.find(FlagName(name));
  return it == values_.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> Flags::All(std::string_view name) const {
  auto it = values_.find(FlagName(name));
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args, const FlagSpec& spec,
                                 const std::string& cmd) {
  Flags f;
  // --help wins: a command asked for its usage prints it, whatever else is wrong.
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      f.values_["help"].push_back("true");
      return f;
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string name, value;
    bool has_value = false;
    if (a == "-h") {
      name = "help";
    } else if (a == "-o") {
      name = Contains(spec.values, "output") ? "output" : "o";
    } else if (a.size() > 2 && a.rfind("--", 0) == 0) {
      name = a.substr(2);
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      name = FlagName(name);
    } else {
      f.positional_.push_back(a);
      continue;
    }
    if (name == "help" || Contains(spec.switches, name)) {
      if (has_value) {
        return absl::InvalidArgumentError(absl::StrCat(cmd, ": --", name, " takes no value"));
      }
      f.values_[name].push_back("true");
      continue;
    }
    if (!Contains(spec.values, name)) {
      return absl::InvalidArgumentError(UnknownFlag(name, spec, cmd));
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(a == "-o" ? "-o" : "--" + name, " needs a value"));
      }
      value = args[++i];
    }
    f.values_[name].push_back(value);
  }
  return f;
}

}  // namespace tunefarm::cli
