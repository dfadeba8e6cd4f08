// The arena plan of a package's values (PlanMemory, package_build.h), and
// where each value lives in it (PlanValues; views inside their input).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "deploy/package_build.h"
#include "deploy/package_internal.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/ops.h"

namespace tunefarm::deploy {

int64_t PlanMemory(const std::vector<std::pair<int, int>>& lifetimes,
                   const std::vector<int64_t>& bytes, std::vector<int64_t>* offsets) {
  const size_t n = lifetimes.size();
  offsets->assign(n, 0);
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  // Largest first, then earliest: the classic greedy by size.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (bytes[a] != bytes[b]) return bytes[a] > bytes[b];
    return lifetimes[a].first < lifetimes[b].first;
  });
  auto round = [](int64_t v) { return (v + 63) / 64 * 64; };
  std::vector<size_t> placed;
  int64_t arena = 0;
  for (size_t i : order) {
    // Intervals taken by placed values alive at the same time, sorted.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t j : placed) {
      if (lifetimes[j].first <= lifetimes[i].second && lifetimes[i].first <= lifetimes[j].second)
        busy.push_back({(*offsets)[j], (*offsets)[j] + round(bytes[j])});
    }
    std::sort(busy.begin(), busy.end());
    int64_t at = 0, best = -1, best_gap = INT64_MAX;
    const int64_t need = round(bytes[i]);
    for (const auto& [b, e] : busy) {
      if (b - at >= need && b - at < best_gap) {
        best = at;
        best_gap = b - at;
      }
      at = std::max(at, e);
    }
    (*offsets)[i] = best >= 0 ? best : at;
    arena = std::max(arena, (*offsets)[i] + need);
    placed.push_back(i);
  }
  return arena;
}



// The ops ViewOffsets can place as views (where their shapes allow).
bool MayBeView(const std::string& op) {
  return runtime::IsViewOp(op) || op == "Split" || op == "Gather" || op == "Slice";
}

// Byte offsets of a native step's outputs inside its input 0 (shaped
// `in`) when the step only selects contiguous parts of it; empty when it
// computes anything else.
// `f` is the bytes of one element.
std::vector<int64_t> ViewOffsets(const Model& model, const v1::PackageNode& n, const Shape& in,
                                 const std::vector<const Shape*>& outs, int64_t opset, int64_t f) {
  auto attr = [&](const char* name, int64_t fallback) {
    auto it = n.ints().find(name);
    return it == n.ints().end() || it->second.v_size() == 0 ? fallback : it->second.v(0);
  };
  auto axis_of = [&](int64_t a) { return a < 0 ? a + int64_t(in.size()) : a; };
  auto span = [](const Shape& s, size_t b, size_t e) {
    int64_t p = 1;
    for (size_t d = b; d < e && d < s.size(); ++d) p *= s[d];
    return p;
  };
  // A constant input's values (empty when it is not a constant).
  auto values = [&](int i) {
    std::vector<int64_t> v;
    if (i >= n.inputs_size() || n.inputs(i).empty()) return v;
    auto c = model.constants.find(n.inputs(i));
    if (c == model.constants.end()) return v;
    for (int64_t k = 0; k < frontend::ValueCount(c->second); ++k)
      v.push_back(int64_t(frontend::ConstValue(c->second, k)));
    return v;
  };
  if (runtime::IsViewOp(n.op())) {
    if (outs.size() != 1 || Numel(*outs[0]) != Numel(in)) return {};
    return {0};
  }
  if (n.op() == "Split") {
    const int64_t axis = axis_of(attr("axis", 0));
    if (axis < 0 || axis >= int64_t(in.size()) || span(in, 0, size_t(axis)) != 1) return {};
    const int64_t inner = span(in, size_t(axis) + 1, in.size());
    std::vector<int64_t> at;
    int64_t cum = 0;
    for (const Shape* o : outs) {
      if (o->size() != in.size()) return {};
      at.push_back(cum * inner * f);
      cum += (*o)[size_t(axis)];
    }
    if (cum != in[size_t(axis)]) return {};
    return at;
  }
  if (n.op() == "Gather") {
    const int64_t axis = axis_of(attr("axis", 0));
    const std::vector<int64_t> idx = values(1);
    if (axis < 0 || axis >= int64_t(in.size()) || idx.size() != 1 || outs.size() != 1) return {};
    const int64_t dim = in[size_t(axis)], k = idx[0] < 0 ? idx[0] + dim : idx[0];
    if (dim == 1 && k == 0 && Numel(*outs[0]) == Numel(in)) return {0};  // the whole input
    if (span(in, 0, size_t(axis)) != 1) return {};
    const int64_t inner = span(in, size_t(axis) + 1, in.size());
    if (k < 0 || k >= dim || Numel(*outs[0]) != inner) return {};
    return {k * inner * f};
  }
  if (n.op() == "Slice" && outs.size() == 1 && outs[0]->size() == in.size()) {
    std::vector<int64_t> starts, axes, steps;
    if (opset < 10) {
      auto ints = [&](const char* name) {
        auto it = n.ints().find(name);
        return it == n.ints().end()
                   ? std::vector<int64_t>()
                   : std::vector<int64_t>(it->second.v().begin(), it->second.v().end());
      };
      starts = ints("starts"), axes = ints("axes");
    } else {
      starts = values(1), axes = values(3), steps = values(4);
      if (starts.empty() || (n.inputs_size() > 3 && !n.inputs(3).empty() && axes.empty()) ||
          (n.inputs_size() > 4 && !n.inputs(4).empty() && steps.empty()))
        return {};
    }
    for (int64_t s : steps)
      if (s != 1) return {};
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
    Shape begin(in.size(), 0);
    for (size_t i = 0; i < starts.size() && i < axes.size(); ++i) {
      const int64_t a = axis_of(axes[i]);
      if (a < 0 || a >= int64_t(in.size())) return {};
      const int64_t dim = in[size_t(a)];
      begin[size_t(a)] = std::clamp<int64_t>(starts[i] < 0 ? starts[i] + dim : starts[i], 0, dim);
    }
    // Contiguous: one extent above 1 at most before the dimensions taken
    // whole.
    const Shape& o = *outs[0];
    size_t p = 0;
    while (p < o.size() && o[p] == 1) ++p;
    for (size_t d = p + 1; d < o.size(); ++d)
      if (begin[d] != 0 || o[d] != in[d]) return {};
    int64_t at = 0;
    for (size_t d = 0; d < in.size(); ++d) at += begin[d] * span(in, d + 1, in.size());
    return {at * f};
  }
  return {};
}

// Where a value lies inside another: that value and the byte offset.
struct Place {
  std::string of;
  int64_t bytes = 0;
};

// Concats whose inputs are each a contiguous block of the output (every
// dimension before the axis is 1) are written in place, in families: a
// Concat and those whose input lists begin with its list (DenseNet's
// blocks concatenate every earlier feature at each layer) share the buffer
// of the longest, its root. Each input of the root is placed in its block
// there, so its producer writes it in place; each other member's output is
// the root's buffer from its start (its inputs are a prefix of the
// root's). Every member step is then a view (the runtime skips it where
// the inputs do lie in place). An input qualifies where it is a runtime
// value that only Concats of the family read among Concats, none a model
// input or output or already placed in another value. `aligned16`: a block
// must start on a 16-byte boundary (wide GPU moves).
void PlaceConcatInputs(const Model& model, const PackageConstants& consts,
                       const std::function<const Shape*(const std::string&)>& shape_of,
                       bool aligned16, v1::ModelPackage* pkg, std::map<std::string, Place>* views) {
  struct Candidate {
    int step;
    std::vector<std::string> inputs;
    std::string out;
  };
  auto listed = [](const std::vector<std::string>& names, const std::string& v) {
    return std::find(names.begin(), names.end(), v) != names.end();
  };
  std::map<std::string, std::set<int>> readers;  // value -> the Concat steps that read it
  std::vector<Candidate> cands;
  for (int s = 0; s < pkg->steps_size(); ++s) {
    const v1::PackageStep& st = pkg->steps(s);
    if (!st.has_node() || st.node().op() != "Concat") continue;
    const v1::PackageNode& n = st.node();
    for (const std::string& in : n.inputs()) readers[in].insert(s);
    if (n.outputs_size() != 1 || n.inputs_size() == 0) continue;
    const std::string& out = n.outputs(0);
    const Shape* so = shape_of(out);
    if (so == nullptr || so->empty() || listed(model.outputs, out)) continue;
    auto it = n.ints().find("axis");
    int64_t axis = it == n.ints().end() || it->second.v_size() == 0 ? 0 : it->second.v(0);
    if (axis < 0) axis += int64_t(so->size());
    if (axis < 0 || axis >= int64_t(so->size())) continue;
    bool ok = true;
    for (int64_t d = 0; d < axis; ++d) ok &= (*so)[size_t(d)] == 1;
    if (ok) cands.push_back({s, {n.inputs().begin(), n.inputs().end()}, out});
  }
  auto extends = [](const std::vector<std::string>& a, const std::vector<std::string>& b) {
    return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
  };
  // Each candidate's root: the longest list that begins with its own (the
  // first of equal ones); none where two longer lists part ways.
  std::map<size_t, std::vector<size_t>> families;
  for (size_t i = 0; i < cands.size(); ++i) {
    size_t root = i;
    for (size_t j = 0; j < cands.size(); ++j) {
      if (extends(cands[i].inputs, cands[j].inputs) &&
          cands[j].inputs.size() > cands[root].inputs.size())
        root = j;
    }
    bool parts = false;
    for (size_t j = 0; j < cands.size(); ++j)
      parts |= extends(cands[i].inputs, cands[j].inputs) &&
               !extends(cands[j].inputs, cands[root].inputs);
    if (!parts) families[root].push_back(i);
  }
  const int64_t f = runtime::ValueBytes(*pkg);
  for (const auto& [root, members] : families) {
    const Candidate& r = cands[root];
    std::set<int> steps;
    std::set<std::string> outs;
    for (size_t m : members) {
      steps.insert(cands[m].step);
      outs.insert(cands[m].out);
    }
    bool ok = std::find(members.begin(), members.end(), root) != members.end();
    for (size_t m : members) ok &= m == root || !views->count(cands[m].out);
    std::vector<int64_t> at;
    int64_t offset = 0;
    for (size_t k = 0; ok && k < r.inputs.size(); ++k) {
      const std::string& in = r.inputs[k];
      const Shape* si = shape_of(in);
      ok = !in.empty() && si != nullptr && !consts.Has(in) && !outs.count(in) &&
           !views->count(in) && std::count(r.inputs.begin(), r.inputs.end(), in) == 1 &&
           !listed(model.inputs, in) && !listed(model.outputs, in) &&
           std::includes(steps.begin(), steps.end(), readers[in].begin(), readers[in].end()) &&
           (!aligned16 || offset % 16 == 0);
      if (!ok) break;
      at.push_back(offset);
      offset += Numel(*si) * f;
    }
    const Shape* so = shape_of(r.out);
    if (!ok || so == nullptr || offset != Numel(*so) * f) continue;
    for (size_t k = 0; k < r.inputs.size(); ++k) (*views)[r.inputs[k]] = {r.out, at[k]};
    for (size_t m : members) {
      if (m != root) (*views)[cands[m].out] = {r.out, 0};
      pkg->mutable_steps(cands[m].step)->mutable_node()->set_view(true);
    }
  }
}

// The package's runtime values and their places in one arena. Inputs are
// defined before step 0, outputs live past the last step.
absl::Status PlanValues(const Model& model, const PackageConstants& consts,
                        const std::map<std::string, Shape>& extra_shapes, v1::ModelPackage* pkg) {
  auto shape_of = [&](const std::string& v) -> const Shape* {
    auto sh = model.shapes.find(v);
    if (sh != model.shapes.end()) return &sh->second;
    auto ex = extra_shapes.find(v);
    return ex == extra_shapes.end() ? nullptr : &ex->second;
  };
  // A step that only selects a contiguous part of its input 0 (a copy
  // node, a Split or Gather along the outermost non-unit dimension or of a
  // unit one, a contiguous Slice) writes nothing: its outputs are views into the
  // input's allocation (one allocation over all their lifetimes; values
  // are written once; kernels load and store at element alignment), and
  // the runtime skips the step.
  std::map<std::string, Place> views;  // value -> where it lies in another
  const bool gpu = absl::StartsWith(pkg->target(), "cuda");
  const bool wide_moves =
      runtime::ValueBytes(*pkg) == 2 ||
      std::any_of(pkg->kernels().begin(), pkg->kernels().end(),
                  [](const v1::PackageKernel& k) { return k.workload().tf32(); });
  auto owner = [&](std::string v) {
    Place at{v, 0};
    for (auto it = views.find(at.of); it != views.end(); it = views.find(at.of))
      at = {it->second.of, at.bytes + it->second.bytes};
    return at;
  };
  for (v1::PackageStep& st : *pkg->mutable_steps()) {
    if (!st.has_node() || st.node().inputs_size() < 1) continue;
    const v1::PackageNode& n = st.node();
    const std::string& in = n.inputs(0);
    const Shape* si = shape_of(in);
    if (in.empty() || consts.Has(in) || si == nullptr) continue;
    std::vector<const Shape*> outs;
    bool ok = n.outputs_size() > 0;
    for (const std::string& o : n.outputs()) {
      outs.push_back(o.empty() ? nullptr : shape_of(o));
      ok &= outs.back() != nullptr && !views.count(o) && o != in;
    }
    if (!ok) continue;
    std::vector<int64_t> at =
        ViewOffsets(model, n, *si, outs, pkg->opset(), runtime::ValueBytes(*pkg));
    if (at.size() != outs.size()) continue;
    // 16-bit and tf32 GPU kernels may move 16 bytes at a time (tensor-core
    // tiles): a view there starts on a 16-byte boundary of its input, or
    // the node is a copy.
    if (gpu && wide_moves &&
        std::any_of(at.begin(), at.end(), [](int64_t b) { return b % 16 != 0; }))
      continue;
    for (int k = 0; k < n.outputs_size(); ++k) views[n.outputs(k)] = {in, at[size_t(k)]};
    st.mutable_node()->set_view(true);
  }
  PlaceConcatInputs(model, consts, shape_of, gpu && wide_moves, pkg, &views);
  std::map<std::string, std::pair<int, int>> life;
  auto touch = [&](const std::string& name, int step) {
    if (name.empty() || consts.Has(name)) return;
    const std::string v = owner(name).of;
    auto [it, fresh] = life.try_emplace(v, step, step);
    it->second.first = std::min(it->second.first, step);
    it->second.second = std::max(it->second.second, step);
  };
  for (const std::string& in : model.inputs) touch(in, -1);
  const int nsteps = pkg->steps_size();
  for (int s = 0; s < nsteps; ++s) {
    const v1::PackageStep& st = pkg->steps(s);
    if (st.has_kernel()) {
      for (const std::string& v : st.kernel().args()) touch(v, s);
    } else {
      for (const std::string& v : st.node().inputs()) touch(v, s);
      for (const std::string& v : st.node().outputs()) touch(v, s);
    }
  }
  for (const std::string& o : model.outputs) touch(o, nsteps);
  std::vector<std::string> names;
  std::vector<std::pair<int, int>> lifetimes;
  std::vector<int64_t> bytes;
  for (const auto& [v, l] : life) {
    const Shape* sh = shape_of(v);
    if (sh == nullptr) return absl::InternalError(StrCat("value '", v, "' has no shape"));
    names.push_back(v);
    lifetimes.push_back(l);
    bytes.push_back(Numel(*sh) * runtime::ValueBytes(*pkg));
  }
  std::vector<int64_t> offsets;
  pkg->set_arena_bytes(PlanMemory(lifetimes, bytes, &offsets));
  std::map<std::string, int64_t> offset_of;
  for (size_t i = 0; i < names.size(); ++i) {
    v1::PackageValue* pv = pkg->add_values();
    pv->set_name(names[i]);
    for (int64_t d : *shape_of(names[i])) pv->add_shape(d);
    pv->set_offset(offsets[i]);
    offset_of[names[i]] = offsets[i];
  }
  for (const auto& [v, place] : views) {
    const Place root = owner(v);
    auto at = offset_of.find(root.of);
    if (at == offset_of.end()) continue;  // read by no step
    v1::PackageValue* pv = pkg->add_values();
    pv->set_name(v);
    for (int64_t d : *shape_of(v)) pv->add_shape(d);
    pv->set_offset(at->second + root.bytes);
  }
  return absl::OkStatus();
}

}  // namespace tunefarm::deploy
