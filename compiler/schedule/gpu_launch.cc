#include "compiler/schedule/gpu_launch.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tunefarm::schedule {

using ir::BindingAxis;
using ir::BindingName;
using ir::ComputeDAG;
using ir::ElementBytes;
using ir::IsBlockBound;
using ir::IsThreadBound;
using ir::Stmt;
using ir::StmtKind;
using ir::Target;
namespace {

using absl::StrCat;

class Scanner {
 public:
  Scanner(const ComputeDAG& dag, GpuLaunch* launch, std::string name)
      : dag_(dag), k_(launch), name_(std::move(name)) {}

  absl::Status Scan(const Stmt& s) {
    switch (s->kind) {
      case StmtKind::kFor: {
        bool block = IsBlockBound(s->for_kind);
        if (block || IsThreadBound(s->for_kind)) {
          int axis = BindingAxis(s->for_kind);
          int64_t& seen = (block ? grid_seen_ : block_seen_)[axis];
          if (seen != 0 && seen != s->extent) {
            return absl::InvalidArgumentError(StrCat(
                name_, ": two loops bound to ", BindingName(s->for_kind), " with extents ", seen,
                " and ", s->extent, " (a kernel binds each index once)"));
          }
          static const int64_t kBlockLimit[] = {1024, 1024, 64};
          static const int64_t kGridLimit[] = {2147483647, 65535, 65535};
          int64_t limit = block ? kGridLimit[axis] : kBlockLimit[axis];
          if (s->extent > limit) {
            return absl::InvalidArgumentError(StrCat(name_, ": ", BindingName(s->for_kind),
                                                     " extent ", s->extent, " exceeds CUDA's ",
                                                     limit));
          }
          seen = s->extent;
          (block ? k_->grid : k_->block)[axis] = s->extent;
          k_->bound.push_back({s->var.get(), s->for_kind});
        }
        return Scan(s->body[0]);
      }
      case StmtKind::kAllocate:
        if (s->shared) {
          int64_t elements = 1;
          for (int64_t e : s->shape) elements *= e;
          bool fresh = true;
          for (const auto& [t, n] : k_->shared) fresh = fresh && t != s->tensor;
          if (fresh) {
            const int64_t bytes = elements * ElementBytes(dag_.tensors[size_t(s->tensor)]);
            k_->shared.push_back({s->tensor, elements});
            k_->shared_bytes += bytes;
            k_->shared_offsets.push_back((k_->shared_end + 15) / 16 * 16);
            k_->shared_end = k_->shared_offsets.back() + bytes;
          }
        }
        return Scan(s->body[0]);
      case StmtKind::kIf:
        return Scan(s->body[0]);
      case StmtKind::kSeq:
        for (const Stmt& b : s->body) TF_RETURN_IF_ERROR(Scan(b));
        return absl::OkStatus();
      case StmtKind::kStore:
      case StmtKind::kBarrier:
      case StmtKind::kMma:
      case StmtKind::kAsyncCommit:
      case StmtKind::kWgmmaSync:
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

 private:
  const ComputeDAG& dag_;
  GpuLaunch* k_;
  std::string name_;
  std::array<int64_t, 3> grid_seen_ = {0, 0, 0}, block_seen_ = {0, 0, 0};
};

}  // namespace

absl::StatusOr<GpuLaunchPlan> PlanGpuLaunches(const ComputeDAG& dag, const Stmt& program,
                                              const Target& target) {
  if (!target.is_gpu()) return absl::InvalidArgumentError("not a cuda target: " + target.ToString());
  GpuLaunchPlan plan;
  Stmt s = program;
  while (s->kind == StmtKind::kAllocate && !s->local && !s->shared) {
    plan.workspace.push_back({s->tensor, s->shape});
    s = s->body[0];
  }
  std::vector<Stmt> nests = s->kind == StmtKind::kSeq ? s->body : std::vector<Stmt>{s};
  for (const Stmt& nest : nests) {
    GpuLaunch k;
    k.nest = nest;
    std::string name = StrCat("tf_kernel_", plan.kernels.size());
    TF_RETURN_IF_ERROR(Scanner(dag, &k, name).Scan(nest));
    int64_t threads = k.block[0] * k.block[1] * k.block[2];
    if (threads > target.max_threads_per_block) {
      return absl::InvalidArgumentError(StrCat(name, ": ", threads,
                                               " threads per block exceed the target's ",
                                               target.max_threads_per_block,
                                               " (-max-threads-per-block)"));
    }
    if (k.shared_end > target.max_shared_memory_per_block) {
      return absl::InvalidArgumentError(
          StrCat(name, ": ", k.shared_end, " bytes of shared memory exceed the target's ",
                 target.max_shared_memory_per_block, " (-max-shared-memory-per-block)"));
    }
    plan.kernels.push_back(std::move(k));
  }
  return plan;
}

}  // namespace tunefarm::schedule
