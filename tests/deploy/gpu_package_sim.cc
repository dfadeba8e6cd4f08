#include "tests/deploy/gpu_package_sim.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/float16.h"
#include "common/status_macros.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/workload.h"
#include "compiler/schedule/schedule.h"
#include "compiler/schedule/trace.h"
#include "device_agent/runtime/graph_runtime.h"
#include "proto/kernel_signature.h"
#include "tests/compiler/gpu_sim.h"

namespace tunefarm::testing {

using absl::StrCat;

absl::StatusOr<SimulatedPackage> SimulatePackage(
    const v1::ModelPackage& pkg, const std::map<std::string, std::vector<float>>& inputs) {
  TF_ASSIGN_OR_RETURN(ir::Target target, ir::Target::Parse(pkg.target()));
  if (!target.is_gpu()) return absl::InvalidArgumentError("not a cuda package: " + pkg.target());
  const int64_t bytes = runtime::ValueBytes(pkg);
  const std::optional<HalfKind> half = HalfKindOf(pkg.precision());
  auto held = [&](std::vector<float> v) {  // as the device holds it
    if (half)
      for (float& x : v) x = RoundToHalf(x, *half);
    return v;
  };
  std::vector<float> arena(size_t(pkg.arena_bytes() / bytes), std::nanf(""));
  struct Place {
    float* data = nullptr;
    int64_t n = 0;
  };
  std::map<std::string, Place> values;
  for (const v1::PackageValue& v : pkg.values()) {
    int64_t n = 1;
    for (int64_t d : v.shape()) n *= d;
    if (v.offset() % bytes != 0 || v.offset() / bytes + n > int64_t(arena.size()))
      return absl::InvalidArgumentError(StrCat("value '", v.name(), "' lies outside the arena"));
    values[v.name()] = {arena.data() + v.offset() / bytes, n};
  }
  std::map<std::string, std::vector<float>> constants;
  for (const v1::PackageTensor& t : pkg.constants()) {
    TF_ASSIGN_OR_RETURN(graph::Constant c, runtime::FromPackage(t, half));
    std::vector<float> f = c.floats;
    if (c.is_int) f.assign(c.ints.begin(), c.ints.end());
    constants[t.name()] = held(std::move(f));
  }
  for (const auto& [name, data] : inputs) {
    auto it = values.find(name);
    if (it == values.end() || it->second.n != int64_t(data.size()))
      return absl::InvalidArgumentError(StrCat("input '", name, "' does not fit the package"));
    const std::vector<float> h = held(data);
    std::copy(h.begin(), h.end(), it->second.data);
  }
  struct Lowered {
    schedule::ScheduleState state;
    ir::Stmt program;
  };
  std::map<int, Lowered> lowered;
  SimulatedPackage out;
  for (int s = 0; s < pkg.steps_size(); ++s) {
    const v1::PackageStep& st = pkg.steps(s);
    if (st.has_node()) {
      if (!st.node().view())
        return absl::FailedPreconditionError(StrCat("step ", s, " runs natively"));
      continue;
    }
    const v1::KernelStep& ks = st.kernel();
    if (ks.kernel() < 0 || ks.kernel() >= pkg.kernels_size() || ks.args_size() < 1)
      return absl::InvalidArgumentError(StrCat("step ", s, " is malformed"));
    auto l = lowered.find(ks.kernel());
    if (l == lowered.end()) {
      const v1::PackageKernel& k = pkg.kernels(ks.kernel());
      TF_ASSIGN_OR_RETURN(ir::CanonicalWorkload cw, ir::Canonicalize(k.workload()));
      TF_ASSIGN_OR_RETURN(ir::ComputeDAG dag, ir::BuildComputeDAG(cw.workload));
      TF_ASSIGN_OR_RETURN(schedule::Trace trace, schedule::TraceFromProto(k.schedule()));
      TF_ASSIGN_OR_RETURN(schedule::ScheduleState state, schedule::ScheduleState::Replay(dag, trace, target));
      ir::Stmt program = schedule::Lower(state);
      l = lowered.emplace(ks.kernel(), Lowered{std::move(state), std::move(program)}).first;
    }
    std::vector<std::vector<float>> args;
    for (int a = 0; a < ks.args_size(); ++a) {
      const std::string& name = ks.args(a);
      if (auto c = constants.find(name); c != constants.end() && a + 1 < ks.args_size()) {
        args.push_back(c->second);
        continue;
      }
      auto v = values.find(name);
      if (v == values.end())
        return absl::InvalidArgumentError(StrCat("step ", s, ": no '", name, "'"));
      args.emplace_back(v->second.data, v->second.data + v->second.n);
    }
    const Place dst = values.at(ks.args(ks.args_size() - 1));
    absl::StatusOr<std::vector<float>> ran =
        SimulateGpu(l->second.state.dag(), l->second.program, target, std::move(args));
    if (!ran.ok()) {
      return absl::Status(ran.status().code(),
                          StrCat("step ", s, " (", ks.nodes_size() > 0 ? ks.nodes(0) : "",
                                 "): ", ran.status().message()));
    }
    const std::vector<float>& got = *ran;
    if (int64_t(got.size()) != dst.n)
      return absl::InternalError(StrCat("step ", s, " wrote ", got.size(), " elements of ", dst.n));
    std::copy(got.begin(), got.end(), dst.data);
    ++out.kernel_steps;
  }
  for (const std::string& o : pkg.outputs()) {
    if (auto c = constants.find(o); c != constants.end()) {
      out.outputs[o] = c->second;
      continue;
    }
    const Place p = values.at(o);
    out.outputs[o].assign(p.data, p.data + p.n);
  }
  return out;
}

}  // namespace tunefarm::testing
