// ScheduleState: the loop structure of every stage of a ComputeDAG as a
// schedule (a Trace, trace.h) shapes it, and the lowering of that
// state to the loop IR.
//
//   TF_ASSIGN_OR_RETURN(ComputeDAG dag, BuildComputeDAG(workload));
//   TF_ASSIGN_OR_RETURN(ScheduleState st, ScheduleState::Replay(dag, trace, target));
//   Stmt program = Lower(st);
//
// Replay applies the steps in order; a step that does not apply is an
// InvalidArgument "step N (kind): reason" (Unimplemented for primitives not
// built yet), never a crash or a silently different program.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/stmt.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/trace.h"

namespace tunefarm::schedule {

struct LoopIter {
  ir::Expr var;
  int64_t extent = 0;
  bool reduce = false;
  ir::ForKind kind = ir::ForKind::kSerial;
  // GPU: the shared fetches computed at this loop are double-buffered
  // (v1::ANNOTATION_DOUBLE_BUFFER).
  bool double_buffer = false;
};

struct StageState {
  // kAt: computed inside loop `attach_var` of stage `attach_stage`, over the
  // region of its output that the loops inside that one read, into a buffer
  // of that region's size (on the stack when small).
  enum class Location { kRoot, kInline, kAt };
  std::vector<LoopIter> iters;    // leaf loops, outermost first
  std::vector<ir::Expr> axis_values;  // spatial then reduce axes, as functions of the leaf vars
  // Guards from splits whose factors do not divide the extent; `reduce` when
  // the guarded axis is a reduction axis.
  struct Guard {
    ir::Expr cond;
    bool reduce;
  };
  std::vector<Guard> guards;
  Location location = Location::kRoot;
  int attach_stage = -1;
  ir::Expr attach_var;
  int64_t auto_unroll_max_step = 0;
  // storage_align: the stride of buffer dimension `align_dim` is padded to
  // factor*k + offset elements (GPU shared memory, against bank conflicts).
  int align_dim = -1;
  int align_factor = 0;
  int align_offset = 0;
};

class ScheduleState {
 public:
  static ScheduleState Initial(const ir::ComputeDAG& dag);
  static absl::StatusOr<ScheduleState> Replay(const ir::ComputeDAG& dag, const Trace& trace,
                                              const ir::Target& target);

  // Applies step number `index` of a trace (the number its errors name).
  absl::Status Apply(const Step& step, int index, const ir::Target& target);

  // The program being scheduled: the workload's DAG plus the stages and
  // tensors that cache_write and layout_pack steps added. Compile this one.
  const ir::ComputeDAG& dag() const { return dag_; }
  const std::vector<StageState>& stages() const { return stages_; }
  // Scheduled for a CUDA target: loops may be bound to the grid.
  bool is_gpu() const { return gpu_; }
  // A tensor-core schedule's decisions (gpu_tensor_core.h); empty for a
  // schedule of steps. The DAG then holds the schedule's buffers too.
  const std::vector<int64_t>& tensor_core() const { return tensor_core_; }

 private:
  explicit ScheduleState(const ir::ComputeDAG& dag) : dag_(dag) {}
  absl::Status Split(const SplitStep& s);
  absl::Status Reorder(const ReorderStep& s);
  absl::Status Fuse(const FuseStep& s);
  absl::Status Annotate(const AnnotateStep& s, const ir::Target& target);
  absl::Status Pragma(const PragmaStep& s);
  absl::Status Inline(int stage);
  absl::Status ComputeRoot(int stage);
  absl::Status ComputeAt(const ComputeAtStep& s);
  absl::Status CacheWrite(const CacheWriteStep& s, const ir::Target& target);
  absl::Status LayoutPack(const LayoutPackStep& s);
  absl::Status CacheRead(const CacheReadStep& s, const ir::Target& target);
  bool ReadsTensor(int stage, int tensor) const;
  // The tensor of operand `input` of `stage` (StageInputs order).
  absl::StatusOr<int> Operand(int stage, int input) const;
  // Inserts `stage` (with untransformed loops) at index `at`, renumbering attachments.
  void InsertStage(int at, ir::Stage stage);
  void MoveAttachments(const ir::ExprNode* from, const ir::Expr& to);
  absl::Status CheckStage(int stage) const;
  absl::Status CheckIter(int stage, int iter) const;
  void SubstituteLeaf(StageState& st, const ir::ExprNode* var, const ir::Expr& value);

  absl::Status StorageAlign(const StorageAlignStep& s, const ir::Target& target);

  ir::ComputeDAG dag_;
  std::vector<StageState> stages_;
  bool gpu_ = false;
  std::vector<int64_t> tensor_core_;
};

// The most copies of a loop body unrolling makes: an unroll annotation on a
// longer loop is refused, and lowering honours unrolling only up to it.
constexpr int64_t kMaxUnrolledCopies = 512;

// The schedule an untuned build uses. NCHW convolutions: the hand-written
// register-tiled schedule (handwritten.h). Everything else: padding kept as a
// pass of its own, other cheap stages inlined, outer spatial loops fused and
// parallel, then the reduction loops, then the innermost spatial loop, whole
// and vectorized.
Trace DefaultSchedule(const ir::ComputeDAG& dag, const ir::Target& target);

// The loop program of a scheduled state (LowerTensorCore's for a
// tensor-core schedule).
//
// On a GPU target every nest at the root of the program is one kernel: its
// loops bound to blockIdx/threadIdx make the grid, vthread loops and the
// rest run inside each thread. A stage computed at another lives in each
// thread's registers, except a shared-memory copy (cache_read into shared):
// its buffer holds the box the whole block reads inside the attach loop
// (thread-bound loops count as inner there), and all the block's threads
// fetch it together, element e of the box by thread e mod (block size),
// between two barriers; its own loops do not shape the fetch. A vectorized
// loop there (only the tensor-core lowering makes one: schedules cannot
// vectorize on a GPU) is one 16-byte access: 8 16-bit elements or 4 floats
// stored, copied from a load or zero, both starting at a multiple of 8 (4)
// elements.
ir::Stmt Lower(const ScheduleState& state);

}  // namespace tunefarm::schedule
