// The worker's build and the agent's measurement, without the network: a
// real candidate built by worker::Build is measured by the agent's
// MeasureHandler against the reference the server would send (the
// interpreter's output, or the default schedule's build); bad requests come
// back as results naming the problem; the artifact cache builds a candidate
// once.
#include "tests/testing/skip.h"
#include "worker/builder.h"

#include "absl/strings/match.h"
#include "common/sha256.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/codegen/nvrtc_info.h"
#include "search/space/random_schedule.h"
#include "compiler/ir/reference.h"
#include "compiler/schedule/schedule.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "device_agent/measure_handler.h"
#include "gtest/gtest.h"
#include "worker/artifact_cache.h"

namespace tunefarm {
namespace {

v1::BuildRequest Request(const std::string& spec, uint64_t seed) {
  v1::BuildRequest req;
  *req.mutable_workload() = ir::Canonicalize(*ir::ParseWorkloadSpec(spec))->workload;
  ir::Target t = codegen::HostTarget();
  req.mutable_target()->set_spec(t.ToString());
  auto dag = ir::BuildComputeDAG(req.workload());
  std::mt19937_64 rng(seed);
  *req.mutable_schedule() = schedule::ToProto(seed == 0 ? schedule::DefaultSchedule(*dag, t)
                                                  : search::space::RandomSchedule(*dag, t, rng));
  req.set_kind(v1::ARTIFACT_KIND_SHARED_OBJECT);
  return req;
}

// The float64 interpreter's output for the inputs of `seed`, as float32 bytes.
std::string InterpretedOutput(const v1::Workload& w, uint64_t seed) {
  auto dag = ir::BuildComputeDAG(w);
  auto out = ir::EvaluateReference(*dag, ir::RandomInputs(*dag, seed));
  std::vector<float> f(out->begin(), out->end());
  return std::string(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
}

v1::MeasureRequest ToMeasure(const v1::BuildRequest& b, const v1::BuildResult& r) {
  v1::MeasureRequest m;
  *m.mutable_workload() = b.workload();
  *m.mutable_target() = b.target();
  *m.mutable_schedule() = b.schedule();
  m.set_kind(r.kind());
  m.set_artifact(r.artifact());
  *m.mutable_signature() = r.signature();
  m.set_input_seed(42);
  m.set_reference_output(InterpretedOutput(b.workload(), 42));
  return m;
}

TEST(Worker, BuildsWhatTheAgentMeasuresCorrectly) {
  agent::MeasureHandlerOptions o;
  o.fingerprint.set_cpu_model("test-cpu");
  agent::MeasureHandler agent(o);
  int ok = 0;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    v1::BuildRequest b =
        Request("conv2d_nchw(N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1)+bias+relu", seed);
    v1::BuildResult r = worker::Build(b);
    ASSERT_TRUE(r.error().empty()) << r.error();
    EXPECT_EQ(r.artifact_sha256(), Sha256Hex(r.artifact()));
    EXPECT_TRUE(absl::StrContains(r.fingerprint().compiler(), "LLVM"));
    v1::MeasureResult m = agent.Measure(ToMeasure(b, r));
    EXPECT_EQ(m.status(), v1::MEASURE_STATUS_OK) << m.error();
    EXPECT_EQ(m.fingerprint().cpu_model(), "test-cpu");
    ok += m.status() == v1::MEASURE_STATUS_OK && m.costs_sec_size() > 0;
  }
  EXPECT_EQ(ok, 6);
  v1::BuildRequest small = Request("matmul(M=16,N=16,K=16)", 0);
  v1::BuildResult built = worker::Build(small);
  v1::MeasureRequest m = ToMeasure(small, built);
  // Same shapes, but the kernel of a transposed product: the reference catches it.
  v1::BuildRequest t = Request("matmul(M=16,N=16,K=16,transpose_b=1)", 0);
  v1::BuildResult transposed = worker::Build(t);
  ASSERT_TRUE(transposed.error().empty()) << transposed.error();
  m.set_artifact(transposed.artifact());
  EXPECT_EQ(agent.Measure(m).status(), v1::MEASURE_STATUS_WRONG_RESULT);
}

// Above the interpreter's limit the reference is the default schedule's
// build, run once by the agent and kept per reference_key: a wrong kernel is
// caught against it, and a later request of the key needs no reference.
TEST(Worker, AgentChecksAgainstAReferenceBuildAndKeepsIt) {
  agent::MeasureHandler agent({});
  v1::BuildRequest def = Request("matmul(M=32,N=24,K=40)", 0);
  v1::BuildResult def_built = worker::Build(def);
  ASSERT_TRUE(def_built.error().empty()) << def_built.error();
  v1::BuildRequest cand = Request("matmul(M=32,N=24,K=40)", 5);
  v1::BuildResult built = worker::Build(cand);
  ASSERT_TRUE(built.error().empty()) << built.error();
  v1::MeasureRequest m = ToMeasure(cand, built);
  m.clear_reference_output();
  m.set_reference_artifact(def_built.artifact());
  *m.mutable_reference_signature() = def_built.signature();
  m.set_reference_key("matmul-32x24x40|42");
  v1::MeasureResult got = agent.Measure(m);
  EXPECT_EQ(got.status(), v1::MEASURE_STATUS_OK) << got.error();
  v1::BuildResult wrong = worker::Build(Request("matmul(M=32,N=24,K=40,transpose_b=1)", 0));
  ASSERT_TRUE(wrong.error().empty()) << wrong.error();
  m.clear_reference_artifact();
  m.clear_reference_signature();
  m.set_artifact(wrong.artifact());
  EXPECT_EQ(agent.Measure(m).status(), v1::MEASURE_STATUS_WRONG_RESULT);
  m.set_reference_key("never-seen");
  got = agent.Measure(m);
  EXPECT_EQ(got.status(), v1::MEASURE_STATUS_RUNTIME_ERROR);
  EXPECT_TRUE(absl::StrContains(got.error(), "no reference")) << got.error();
}

// What the agent is handed is checked before it makes a buffer: a kernel
// whose arguments would not fit its memory limit, a missing signature and a
// reference of the wrong size are results naming the problem.
TEST(Worker, AgentRefusesOversizedOrInconsistentRequests) {
  agent::MeasureHandlerOptions o;
  o.memory_limit_bytes = int64_t{1} << 30;
  agent::MeasureHandler agent(o);
  v1::BuildRequest b = Request("matmul(M=16,N=16,K=16)", 0);
  v1::BuildResult built = worker::Build(b);
  ASSERT_TRUE(built.error().empty()) << built.error();
  v1::MeasureRequest m = ToMeasure(b, built);
  ASSERT_EQ(m.signature().args_size(), 3) << m.signature().DebugString();
  v1::MeasureRequest huge = m;
  // dense(M=1, K=2^20, N=2^19): a 2 TiB weight.
  huge.mutable_signature()->mutable_args(1)->set_shape(0, int64_t{1} << 20);
  huge.mutable_signature()->mutable_args(1)->set_shape(1, int64_t{1} << 19);
  v1::MeasureResult got = agent.Measure(huge);
  EXPECT_EQ(got.status(), v1::MEASURE_STATUS_RUNTIME_ERROR);
  EXPECT_TRUE(absl::StrContains(got.error(), "too large")) << got.error();
  v1::MeasureRequest unsigned_req = m;
  unsigned_req.clear_signature();
  got = agent.Measure(unsigned_req);
  EXPECT_EQ(got.status(), v1::MEASURE_STATUS_RUNTIME_ERROR);
  EXPECT_TRUE(absl::StrContains(got.error(), "signature")) << got.error();
  v1::MeasureRequest short_ref = m;
  short_ref.set_reference_output(m.reference_output().substr(4));
  got = agent.Measure(short_ref);
  EXPECT_EQ(got.status(), v1::MEASURE_STATUS_RUNTIME_ERROR);
  EXPECT_TRUE(absl::StrContains(got.error(), "reference output")) << got.error();
  EXPECT_EQ(agent.Measure(m).status(), v1::MEASURE_STATUS_OK);
}

TEST(Worker, BadRequestsAreResultsNotCrashes) {
  v1::BuildRequest b = Request("matmul(M=8,N=8,K=8)", 0);
  b.mutable_target()->set_spec("banana");
  EXPECT_TRUE(absl::StartsWith(worker::Build(b).error(), "target:")) << worker::Build(b).error();
  b = Request("matmul(M=8,N=8,K=8)", 0);
  v1::Step* step = b.mutable_schedule()->add_steps();
  step->mutable_split()->set_stage(999);
  v1::BuildResult r = worker::Build(b);
  EXPECT_TRUE(absl::StartsWith(r.error(), "schedule:")) << r.error();
  EXPECT_TRUE(r.artifact().empty());
}

// A CUDA target: the worker builds a cubin through NVRTC (no GPU needed) and
// sends it as a GpuModule with every kernel's launch and resources; PTX on
// request; an arch its toolkit cannot build is a result naming those it can.
TEST(Worker, BuildsCudaModulesWithTheirLaunches) {
  if (codegen::NvrtcSupportedArchs().empty()) TF_SKIP("no-cuda-toolkit") << "no CUDA toolkit in this build";
  v1::BuildRequest req;
  *req.mutable_workload() =
      ir::Canonicalize(*ir::ParseWorkloadSpec("dense(M=64,N=96,K=128)+bias+relu"))->workload;
  req.mutable_target()->set_spec("cuda -arch=sm_87");
  auto t = ir::Target::Parse(req.target().spec());
  ASSERT_TRUE(t.ok());
  auto dag = ir::BuildComputeDAG(req.workload());
  ASSERT_TRUE(dag.ok());
  *req.mutable_schedule() = schedule::ToProto(schedule::DefaultSchedule(*dag, *t));
  req.set_kind(v1::ARTIFACT_KIND_CUBIN);
  v1::BuildResult r = worker::Build(req);
  ASSERT_TRUE(r.error().empty()) << r.error();
  EXPECT_EQ(r.kind(), v1::ARTIFACT_KIND_CUBIN);
  EXPECT_EQ(r.artifact_sha256(), Sha256Hex(r.artifact()));
  v1::GpuModule m;
  ASSERT_TRUE(m.ParseFromString(r.artifact()));
  EXPECT_EQ(m.arch(), "sm_87");
  EXPECT_EQ(m.image().substr(0, 4), "\x7f" "ELF");
  ASSERT_GE(m.kernels_size(), 1);
  int max_registers = 0;
  for (const v1::GpuModule::Kernel& k : m.kernels()) {
    EXPECT_EQ(k.grid_size(), 3);
    EXPECT_EQ(k.block_size(), 3);
    EXPECT_GT(k.block(0) * k.block(1) * k.block(2), 1);
    EXPECT_GT(k.registers(), 0);
    EXPECT_EQ(k.spill_store_bytes(), 0);
    EXPECT_FALSE(k.params().empty());
    EXPECT_TRUE(absl::StrContains(m.image(), k.name())) << k.name();  // in the ELF's symbols
    max_registers = std::max(max_registers, k.registers());
  }
  EXPECT_EQ(r.registers_per_thread(), max_registers);
  EXPECT_EQ(r.spill_bytes(), 0);
  EXPECT_FALSE(r.fingerprint().cuda_toolkit().empty());

  req.set_kind(v1::ARTIFACT_KIND_PTX);
  r = worker::Build(req);
  ASSERT_TRUE(r.error().empty()) << r.error();
  EXPECT_EQ(r.kind(), v1::ARTIFACT_KIND_PTX);
  ASSERT_TRUE(m.ParseFromString(r.artifact()));
  EXPECT_TRUE(absl::StrContains(m.image(), ".target sm_87")) << m.image().substr(0, 400);

  // Xavier: NVRTC 13 does not build sm_72; LLVM's NVPTX back end builds
  // its PTX, whatever kind was asked for.
  req.mutable_target()->set_spec("cuda -arch=sm_72");
  req.set_kind(v1::ARTIFACT_KIND_CUBIN);
  r = worker::Build(req);
  ASSERT_TRUE(r.error().empty()) << r.error();
  EXPECT_EQ(r.kind(), v1::ARTIFACT_KIND_PTX);
  ASSERT_TRUE(m.ParseFromString(r.artifact()));
  EXPECT_TRUE(absl::StrContains(m.image(), ".target sm_72")) << m.image().substr(0, 400);
  EXPECT_EQ(m.arch(), "sm_72");
  EXPECT_GT(m.kernels_size(), 0);

  // Orin for a JetPack board (llvm_ptx: its driver predates NVRTC 13):
  // PTX 7.4 through LLVM, which CUDA 11.4's driver compiles.
  req.mutable_target()->set_spec("cuda -arch=sm_87");
  req.set_kind(v1::ARTIFACT_KIND_PTX);
  req.set_llvm_ptx(true);
  r = worker::Build(req);
  ASSERT_TRUE(r.error().empty()) << r.error();
  EXPECT_EQ(r.kind(), v1::ARTIFACT_KIND_PTX);
  ASSERT_TRUE(m.ParseFromString(r.artifact()));
  EXPECT_TRUE(absl::StrContains(m.image(), ".version 7.4\n.target sm_87"))
      << m.image().substr(0, 400);
  req.set_llvm_ptx(false);

  // Kepler: no route.
  req.mutable_target()->set_spec("cuda -arch=sm_35");
  r = worker::Build(req);
  EXPECT_TRUE(absl::StrContains(r.error(), "cannot build sm_35")) << r.error();
  EXPECT_TRUE(r.artifact().empty());
}

TEST(Worker, ArtifactCacheBuildsOnceAndEvictsLeastRecent) {
  v1::BuildRequest a = Request("matmul(M=8,N=8,K=8)", 0);
  v1::BuildRequest b = Request("matmul(M=8,N=8,K=8)", 3);
  EXPECT_EQ(worker::ArtifactCache::Key(a), worker::ArtifactCache::Key(a));
  EXPECT_NE(worker::ArtifactCache::Key(a), worker::ArtifactCache::Key(b));
  v1::BuildResult ra = worker::Build(a), rb = worker::Build(b);
  ASSERT_TRUE(ra.error().empty() && rb.error().empty());
  int64_t one = int64_t(std::max(ra.artifact().size(), rb.artifact().size()));
  worker::ArtifactCache cache(one + one / 2);  // room for one artifact
  cache.Insert(worker::ArtifactCache::Key(a), ra);
  auto hit = cache.Find(worker::ArtifactCache::Key(a));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->artifact(), ra.artifact());
  cache.Insert(worker::ArtifactCache::Key(b), rb);  // evicts a
  EXPECT_FALSE(cache.Find(worker::ArtifactCache::Key(a)).has_value());
  EXPECT_TRUE(cache.Find(worker::ArtifactCache::Key(b)).has_value());
  EXPECT_EQ(cache.hits(), 2);
  v1::BuildResult failed;
  failed.set_error("build: boom");
  cache.Insert("k", failed);
  EXPECT_FALSE(cache.Find("k").has_value());
}

}  // namespace
}  // namespace tunefarm
