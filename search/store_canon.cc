#include "search/store_canon.h"

#include "compiler/ir/schedule_hash.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload.h"

namespace tunefarm::search {

store::Canon CompilerCanon() {
  store::Canon c;
  c.workload = [](const v1::Workload& w) -> absl::StatusOr<store::Canon::Workload> {
    absl::StatusOr<ir::CanonicalWorkload> cw = ir::Canonicalize(w);
    if (!cw.ok()) return cw.status();
    store::Canon::Workload out;
    out.op = ir::OpName(cw->workload.op());
    out.workload = std::move(cw->workload);
    out.key = std::move(cw->key);
    out.canonical_json = std::move(cw->canonical_json);
    out.flops = cw->flops;
    return out;
  };
  c.target = [](const std::string& spec) -> absl::StatusOr<store::Canon::Target> {
    absl::StatusOr<ir::Target> t = ir::Target::Parse(spec);
    if (!t.ok()) return t.status();
    return store::Canon::Target{t->ToString(), t->is_gpu() ? "cuda" : "llvm", t->arch()};
  };
  c.schedule_hash = [](const v1::Schedule& s) { return ir::ScheduleHash(s); };
  return c;
}

}  // namespace tunefarm::search
