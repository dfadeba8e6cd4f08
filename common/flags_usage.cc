#include "common/flags_usage.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "common/edit_distance.h"

namespace tunefarm {
namespace {

// The program's own flags (defined in a *_main.cc), by name.
std::map<std::string, absl::CommandLineFlag*> OwnFlags() {
  std::map<std::string, absl::CommandLineFlag*> own;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!flag->IsRetired() && absl::EndsWith(flag->Filename(), "_main.cc")) {
      own.emplace(std::string(name), flag);
    }
  }
  return own;
}

std::string Help(absl::string_view program,
                 const std::map<std::string, absl::CommandLineFlag*>& own) {
  std::string out = absl::StrCat(program, ": ", absl::ProgramUsageMessage(),
                                 "\n\nFlags (also read from --flagfile=FILE, one --name=value a "
                                 "line, # comments):\n");
  for (const auto& [name, flag] : own) {
    absl::StrAppend(&out, "  --", name, " (default: ",
                    flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue(), ")\n      ",
                    flag->Help(), "\n");
  }
  return out;
}

}  // namespace

void SetDaemonUsage(absl::string_view usage) { absl::SetProgramUsageMessage(usage); }

namespace {

// An argument and where it came from ("" for the command line, else
// "FILE:LINE: ").
struct Arg {
  std::string text;
  std::string origin;
};

// `args` with every --flagfile=FILE (or --flagfile FILE) replaced by the
// file's lines: one --name=value each; blank lines and lines starting with
// '#' skipped. A file that cannot be read, or one that names another
// --flagfile, is the error.
absl::StatusOr<std::vector<Arg>> ExpandFlagFiles(const std::vector<std::string>& args) {
  std::vector<Arg> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string file;
    if (absl::StartsWith(args[i], "--flagfile=")) {
      file = args[i].substr(11);
    } else if (args[i] == "--flagfile" && i + 1 < args.size()) {
      file = args[++i];
    } else {
      out.push_back({args[i], ""});
      continue;
    }
    std::ifstream in(file);
    if (!in) return absl::NotFoundError(absl::StrCat("--flagfile=", file, ": cannot read it"));
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      const std::string text(absl::StripAsciiWhitespace(line));
      if (text.empty() || text[0] == '#') continue;
      const std::string origin = absl::StrCat(file, ":", line_no, ": ");
      if (absl::StartsWith(text, "--flagfile")) {
        return absl::InvalidArgumentError(absl::StrCat(origin, "a flag file cannot name another"));
      }
      out.push_back({text, origin});
    }
  }
  return out;
}

}  // namespace

DaemonFlagsOutcome ParseDaemonFlagsOrExplain(const std::vector<std::string>& given,
                                             absl::string_view program) {
  const std::map<std::string, absl::CommandLineFlag*> own = OwnFlags();
  std::string origin;
  auto fail = [&](const std::string& why) {
    return DaemonFlagsOutcome{2, absl::StrCat(program, ": ", origin, why, "\n")};
  };
  absl::StatusOr<std::vector<Arg>> expanded = ExpandFlagFiles(given);
  if (!expanded.ok()) return fail(std::string(expanded.status().message()));
  std::vector<std::string> args;
  for (const Arg& a : *expanded) args.push_back(a.text);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    origin = (*expanded)[i].origin;
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') {
      return fail(absl::StrCat("unexpected argument '", arg,
                               "': every setting is a flag, --name=value (--help lists them)"));
    }
    const std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    std::string name = body.substr(0, eq);
    if (name == "help" || name == "helpfull" || name == "helpshort" || name == "h") {
      return DaemonFlagsOutcome{0, Help(program, own)};
    }
    auto it = own.find(name);
    bool negated = false;
    if (it == own.end() && absl::StartsWith(name, "no") && eq == std::string::npos) {
      auto positive = own.find(name.substr(2));
      if (positive != own.end() && positive->second->IsOfType<bool>()) {
        it = positive;
        negated = true;
      }
    }
    if (it == own.end()) {
      // The known name fewest edits away (at most 3), else one that holds
      // the name given ("--tls" for --tls_ca).
      std::string nearest;
      size_t best = 4;
      for (const auto& [known, flag] : own) {
        const size_t d = EditDistance(name, known);
        if (d < best) best = d, nearest = known;
      }
      for (const auto& [known, flag] : own) {
        if (nearest.empty() && name.size() >= 3 && absl::StrContains(known, name)) nearest = known;
      }
      return fail(absl::StrCat("unknown flag --", name,
                               nearest.empty() ? "" : absl::StrCat("; did you mean --", nearest, "?"),
                               " (--help lists the flags)"));
    }
    absl::CommandLineFlag* flag = it->second;
    std::string value;
    if (eq != std::string::npos) {
      value = body.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      value = negated ? "false" : "true";
    } else if (i + 1 < args.size() && (*expanded)[i + 1].origin == origin) {
      value = args[++i];
    } else {
      return fail(absl::StrCat("--", name, " needs a value (--", name, "=VALUE)"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return fail(absl::StrCat("--", name, "=", value, ": ", error));
    }
  }
  return {};
}

void ParseDaemonFlags(int argc, char** argv) {
  std::string program = argc > 0 ? argv[0] : "tunefarm";
  program = program.substr(program.rfind('/') + 1);
  DaemonFlagsOutcome o = ParseDaemonFlagsOrExplain(std::vector<std::string>(argv + 1, argv + argc),
                                                   program);
  if (o.exit_code < 0) return;
  std::fputs(o.text.c_str(), o.exit_code == 0 ? stdout : stderr);
  std::exit(o.exit_code);
}

}  // namespace tunefarm
