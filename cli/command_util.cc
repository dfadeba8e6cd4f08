#include "cli/command_util.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/frontend/tasks.h"
#include "proto/client.h"
#include "store/tuning_log.h"

namespace tunefarm::cli {

int Fail(std::ostream& err, int code, const std::string& msg) {
  std::string one_line = msg;
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  err << "tunefarm: error: " << one_line << "\n";
  return code;
}

std::vector<int64_t> ApportionShares(const std::vector<double>& parts, int64_t total) {
  double sum = 0;
  for (double p : parts) sum += std::max(p, 0.0);
  std::vector<int64_t> out(parts.size(), 0);
  if (!(sum > 0)) {
    for (size_t i = 0; i < parts.size(); ++i) out[i] = parts[i] < 0 ? -1 : 0;
    return out;
  }
  std::vector<std::pair<double, size_t>> remainders;  // (remainder, index)
  int64_t given = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] < 0) {
      out[i] = -1;
      continue;
    }
    const double exact = parts[i] / sum * double(total);
    out[i] = int64_t(std::floor(exact));
    given += out[i];
    remainders.emplace_back(exact - double(out[i]), i);
  }
  // Largest remainders first; ties to the earlier part.
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < total && k < remainders.size(); ++k, ++given)
    ++out[remainders[k].second];
  return out;
}

namespace {
std::string HintSuffix(const std::string& message) {
  const std::string hint = ConnectionHint(message);
  return hint.empty() ? "" : "; " + hint;
}
}  // namespace

RpcError DescribeRpcError(const grpc::Status& s, const std::string& server) {
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return {kExitUnreachable, absl::StrCat("cannot reach the server at ", server, ": ",
                                           s.error_message(), HintSuffix(s.error_message()))};
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return {kExitUnreachable,
            absl::StrCat("no answer from the server at ", server,
                         " in time; the request may or may not have taken effect")};
  }
  return {kExitFailed, s.error_message()};
}

absl::StatusOr<ir::Target> ParseTargetFlag(const std::string& value) {
  if (value == "host") return codegen::HostTarget();
  return ir::Target::Parse(value);
}

absl::StatusOr<ir::Target> TargetForThreads(const std::string& value, int threads) {
  absl::StatusOr<ir::Target> t = ParseTargetFlag(value);
  if (!t.ok() || t->is_gpu()) return t;
  if (value == "host" || t->num_cores == 0) {
    t->num_cores = threads;
  } else if (t->num_cores != threads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--target says -num-cores=", t->num_cores, " but --threads is ", threads,
        " (a target's -num-cores is the thread count its kernels are tuned and run at)"));
  }
  return t;
}

absl::StatusOr<frontend::ImportOptions> ImportOverrides(const std::vector<std::string>& shapes,
                                                        const std::vector<std::string>& values) {
  frontend::ImportOptions o;
  for (const std::string& shape : shapes) {
    absl::StatusOr<std::pair<std::string, std::vector<int64_t>>> s =
        frontend::ParseShapeOverride(shape);
    if (!s.ok()) return s.status();
    o.input_shapes[s->first] = s->second;
  }
  for (const std::string& value : values) {
    absl::StatusOr<std::pair<std::string, std::vector<double>>> v =
        frontend::ParseValueOverride(value);
    if (!v.ok()) return v.status();
    if (o.input_values.count(v->first))
      return absl::InvalidArgumentError(absl::StrCat("--value names '", v->first, "' twice"));
    o.input_values[v->first] = v->second;
  }
  return o;
}

absl::StatusOr<std::optional<bool>> ParseLayoutFlag(const std::string& value) {
  if (value.empty()) return std::nullopt;
  if (value == "nchw") return false;
  if (value == "nhwc") return true;
  return absl::InvalidArgumentError(absl::StrCat("--layout is nchw or nhwc, not '", value, "'"));
}

absl::StatusOr<v1::DType> ParsePrecisionFlag(const std::string& value, const ir::Target& target) {
  if (value.empty()) return v1::DTYPE_FLOAT32;
  const std::optional<v1::DType> precision = frontend::PrecisionNamed(value);
  if (!precision) {
    return absl::InvalidArgumentError(
        absl::StrCat("--precision is fp32, fp16, bf16 or tf32, not '", value, "'"));
  }
  if (absl::Status s = frontend::CheckPrecision(*precision, target); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("--precision ", value, ": ", s.message()));
  return *precision;
}

std::string Printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    } else {
      out += c;
    }
  }
  return out;
}

absl::StatusOr<std::optional<bool>> TunedLayout(const frontend::Model& model,
                                                const ir::Target& target, store::TuningLog* log,
                                                v1::DType precision) {
  std::set<std::string> keys[2];  // [channels_last]
  for (bool cl : {false, true}) {
    TF_ASSIGN_OR_RETURN(
        frontend::TaskExtraction ex,
        frontend::ExtractTasks(model, frontend::ExtractOptionsFor(target, cl, precision)));
    for (const frontend::ModelTask& t : ex.tasks) keys[cl].insert(t.key);
  }
  bool tuned[2] = {false, false};
  for (bool cl : {false, true}) {
    for (const std::string& key : keys[cl]) {
      if (keys[!cl].count(key) || tuned[cl]) continue;
      store::TuningLog::RecordQuery q;
      q.workload_key = key;
      q.target_spec = target.ToString();
      q.limit = 1;
      TF_ASSIGN_OR_RETURN(std::vector<v1::Record> some, log->ListRecords(q));
      tuned[cl] = !some.empty();
    }
  }
  if (tuned[0] == tuned[1]) return std::nullopt;
  return tuned[1];
}

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace tunefarm::cli
