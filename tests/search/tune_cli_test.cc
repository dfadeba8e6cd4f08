// `tunefarm tune` end to end: the real binary tunes on this machine, stores
// every trial in the log database, and a second run resumes from those
// records without measuring any schedule twice.
#include <algorithm>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/match.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/schedule_hash.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "compiler/schedule/tiling.h"
#include "device_agent/runtime/capabilities.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "search/gpu_local_measurer.h"
#include "search/space/cpu_sketch.h"
#include "search/store_canon.h"
#include "store/tuning_log.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

// Writes the generated test models (tests/deploy/make_models.py) into
// `dir`; the reason when it cannot (no python3-onnx), else empty.
std::string MakeModels(const testing::TempDir& dir) {
  testing::CommandResult made = testing::RunCommand(
      {"/usr/bin/python3", std::string(TF_SOURCE_DIR) + "/tests/deploy/make_models.py", dir.path()},
      dir.path());
  return made.exit_code == 0 ? "" : "python3-onnx is not installed (/usr/bin/python3): " + made.err;
}

std::vector<v1::Record> AllRecords(const std::string& db) {
  store::TuningLog::Options o;
  o.canon = search::CompilerCanon();
  o.path = db;
  auto log = store::TuningLog::Open(o);
  EXPECT_TRUE(log.ok()) << log.status();
  store::TuningLog::RecordQuery q;
  q.limit = 10000;
  auto r = (*log)->ListRecords(q);
  EXPECT_TRUE(r.ok());
  return *r;
}

TEST(TuneCli, StoresEveryTrialAndNeverRemeasures) {
  testing::TempDir dir;
  std::string db = dir.File("t.db");
  std::vector<std::string> cmd = {testing::BinPath("tunefarm"),
                                  "tune",
                                  "--workload",
                                  "matmul(M=32,N=48,K=16)",
                                  "--trials",
                                  "12",
                                  "--batch",
                                  "4",
                                  "--db",
                                  db};
  testing::CommandResult r = testing::RunCommand(cmd, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "default schedule")) << r.out;
  std::vector<v1::Record> first = AllRecords(db);
  ASSERT_EQ(first.size(), 12u);
  EXPECT_TRUE(first[0].schedule().is_default());
  r = testing::RunCommand(cmd, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "12 earlier records of this workload")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "cost model:")) << r.out;  // 12 < 32: none trained
  std::vector<v1::Record> all = AllRecords(db);
  ASSERT_EQ(all.size(), 24u);
  std::set<std::string> hashes;
  for (const v1::Record& rec : all) {
    EXPECT_TRUE(hashes.insert(rec.schedule_hash()).second)
        << "measured twice: " << rec.schedule_hash();
    EXPECT_NE(rec.status(), v1::MEASURE_STATUS_WRONG_RESULT) << rec.error();
    EXPECT_FALSE(rec.fingerprint().compiler().empty());
  }
}

// --flush-cache reaches the measurer: the header says so, and its cut-off
// for slow candidates leaves room for the flushes (every record is a timing).
TEST(TuneCli, FlushCacheTimesEveryCandidateCold) {
  testing::TempDir dir;
  std::string db = dir.File("t.db");
  testing::CommandResult r =
      testing::RunCommand({testing::BinPath("tunefarm"), "tune", "--workload",
                           "matmul(M=16,N=16,K=16)", "--trials", "3", "--flush-cache", "--db", db},
                          dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "timing: the cache is flushed before every run")) << r.out;
  std::vector<v1::Record> all = AllRecords(db);
  ASSERT_EQ(all.size(), 3u);
  for (const v1::Record& rec : all) {
    EXPECT_EQ(rec.status(), v1::MEASURE_STATUS_OK) << rec.error();
    EXPECT_GT(rec.costs_sec_size(), 0);
  }
  r = testing::RunCommand({testing::BinPath("tunefarm"), "tune", "--help"}, dir.path());
  EXPECT_TRUE(absl::StrContains(r.out, "--flush-cache")) << r.out;
}

// `tune MODEL.onnx`: every task of the model is tuned on this machine with
// no daemon, every trial stored; -o builds the package from the database;
// a second run continues from the records and the stored defaults.
TEST(TuneCli, ModelTunesEveryTaskAndWritesItsPackage) {
  testing::TempDir dir;
  if (std::string why = MakeModels(dir); !why.empty()) TF_SKIP("no-package") << why;
  const std::string db = dir.File("m.db"), pkg = dir.File("tiny.tfpkg");
  std::vector<std::string> cmd = {testing::BinPath("tunefarm"),
                                  "tune",
                                  dir.File("tiny.onnx"),
                                  "--trials",
                                  "12",
                                  "--batch",
                                  "4",
                                  "--db",
                                  db,
                                  "-o",
                                  pkg};
  testing::CommandResult r = testing::RunCommand(cmd, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "(6 tasks)")) << r.out;  // with the max pooling
  EXPECT_TRUE(absl::StrContains(r.out, "tasks' time (weight x best)")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "tiny.tfpkg: 6 task kernels")) << r.out;
  std::vector<v1::Record> first = AllRecords(db);
  ASSERT_EQ(first.size(), 12u);
  // Each task's default schedule was measured before any candidate.
  std::set<std::string> keys;
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_TRUE(first[i].schedule().is_default()) << i;
    keys.insert(first[i].workload_key());
  }
  EXPECT_EQ(keys.size(), 6u);
  for (const v1::Record& rec : first) EXPECT_TRUE(keys.count(rec.workload_key()));
  testing::CommandResult run =
      testing::RunCommand({testing::BinPath("tunefarm"), "run", pkg, "--profile"}, dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "latency")) << run.out;
  // The profile ends with where the time went; the shares add up.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.out, m,
                                std::regex("time: tuned kernels [0-9.]+ ms \\((\\d+)%\\), default "
                                           "kernels [0-9.]+ ms \\((\\d+)%\\), native steps "
                                           "[0-9.]+ ms \\((\\d+)%\\), layout flips "
                                           "[0-9.]+ ms \\((\\d+)%\\)")))
      << run.out;
  EXPECT_EQ(std::stoi(m[1]) + std::stoi(m[2]) + std::stoi(m[3]) + std::stoi(m[4]), 100)
      << run.out;
  // The profile is of warm runs after a warm-up, as many as the latency's
  // median (up to 20 by default), and says how many.
  ASSERT_TRUE(std::regex_search(
      run.out, m, std::regex("profile: each step's median over (\\d+) runs after a warm-up run")))
      << run.out;
  EXPECT_GE(std::stoi(m[1]), 3) << run.out;
  EXPECT_LE(std::stoi(m[1]), 20) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "(median of " + std::string(m[1]) + ", ")) << run.out;
  run = testing::RunCommand({testing::BinPath("tunefarm"), "run", pkg, "--profile", "--repeat=7"},
                            dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "each step's median over 7 runs after a warm-up run"))
      << run.out;
  run = testing::RunCommand({testing::BinPath("tunefarm"), "run", pkg, "--profile", "--repeat=0"},
                            dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "profile: the first run alone (cold")) << run.out;

  // The second run: history from the first, defaults known, nothing twice.
  cmd[4] = "6";
  r = testing::RunCommand(cmd, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "12 earlier records of its tasks")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "with default schedules")) << r.out;
  std::vector<v1::Record> all = AllRecords(db);
  EXPECT_EQ(all.size(), 18u);
  std::set<std::pair<std::string, std::string>> measured;
  for (const v1::Record& rec : all) {
    EXPECT_TRUE(measured.insert({rec.workload_key(), rec.schedule_hash()}).second)
        << "measured twice: " << rec.schedule_hash();
    EXPECT_NE(rec.status(), v1::MEASURE_STATUS_WRONG_RESULT) << rec.error();
  }

  // Threads are part of the target: the records are the 1-thread target's,
  // a build for 2 threads finds none of them, and a target whose -num-cores
  // contradicts --threads is refused.
  for (const v1::Record& rec : all)
    EXPECT_TRUE(absl::EndsWith(rec.target().spec(), " -num-cores=1")) << rec.target().spec();
  r = testing::RunCommand({testing::BinPath("tunefarm"), "build", dir.File("tiny.onnx"), "--db", db,
                           "-o", dir.File("two.tfpkg"), "--threads", "2"},
                          dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "(0 tuned, 6 default)")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "no records for this target")) << r.out;
  r = testing::RunCommand({testing::BinPath("tunefarm"), "build", dir.File("tiny.onnx"), "--db", db,
                           "-o", dir.File("one.tfpkg"), "--threads", "1", "--no-model-check"},
                          dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  // Not timed here: the layout the tune chose (by timing), from the records.
  EXPECT_TRUE(absl::StrContains(r.out, "the one this database has records of")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "no records for this target")) << r.out;
  r = testing::RunCommand({testing::BinPath("tunefarm"), "tune", dir.File("tiny.onnx"), "--db", db,
                           "--threads", "1", "--target", "llvm -num-cores=2"},
                          dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "-num-cores=2 but --threads is 1")) << r.err;

  // Refusals name the problem.
  r = testing::RunCommand(
      {testing::BinPath("tunefarm"), "tune", dir.File("unsupported.onnx"), "--db", db}, dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "unsupported operator 'Unique'")) << r.err;
  r = testing::RunCommand({testing::BinPath("tunefarm"), "tune", dir.File("tiny.onnx"),
                           "--workload", "matmul(M=8,N=8,K=8)"},
                          dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "not both")) << r.err;
}

// The cost model of a run lands in the database and steers the next run on
// the target; a model file works the same way, and a bad one is refused.
// With no --layout, `build` and `tune` for this machine take the activation
// layout that runs the model faster here: `build` times both builds against
// each other and says so; `tune` keeps the layout an earlier run tuned.
TEST(TuneCli, LayoutIsTheFasterOneHereOrTheTunedOne) {
  testing::TempDir dir;
  if (std::string why = MakeModels(dir); !why.empty()) TF_SKIP("no-package") << why;
  const std::string model = dir.File("nhwc_native.onnx"), pkg = dir.File("n.tfpkg");
  testing::CommandResult r = testing::RunCommand(
      {testing::BinPath("tunefarm"), "build", model, "--untuned", "-o", pkg}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m,
                                std::regex("layout (nhwc|nchw): nhwc ([0-9.]+) ms, nchw ([0-9.]+) "
                                           "ms, nhwc/nchw ([0-9.]+)")))
      << r.out;
  EXPECT_GT(std::stod(m[2]), 0);
  EXPECT_GT(std::stod(m[3]), 0);
  // NCHW only where it is at least 2% faster (the ratio is printed to two
  // decimals: at 1.02 either choice can be right).
  const double ratio = std::stod(m[4]);
  if ((ratio - 0.005) * 0.98 > 1) EXPECT_EQ(m[1], "nchw") << r.out;
  if ((ratio + 0.005) * 0.98 <= 1) EXPECT_EQ(m[1], "nhwc") << r.out;
  testing::CommandResult run =
      testing::RunCommand({testing::BinPath("tunefarm"), "run", pkg}, dir.path());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  // A layout given, or a build not checked here: no timing.
  for (const char* flag : {"--layout=nchw", "--no-model-check"}) {
    r = testing::RunCommand(
        {testing::BinPath("tunefarm"), "build", model, "--untuned", "-o", pkg, flag}, dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    EXPECT_FALSE(absl::StrContains(r.out, "layout ")) << flag << ": " << r.out;
  }
  // A model tuned in one layout continues in it.
  const std::string db = dir.File("n.db");
  r = testing::RunCommand({testing::BinPath("tunefarm"), "tune", model, "--layout", "nchw",
                           "--trials", "4", "--db", db},
                          dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  r = testing::RunCommand(
      {testing::BinPath("tunefarm"), "tune", model, "--trials", "6", "--db", db}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "layout nchw: the one this database has records of"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "4 earlier records of its tasks")) << r.out;
}

TEST(TuneCli, CostModelIsStoredAndLoaded) {
  testing::TempDir dir;
  std::string db = dir.File("t.db"), model = dir.File("m.bin");
  auto tune = [&](const std::string& spec, std::vector<std::string> extra,
                  const std::string& trials = "36") {
    std::vector<std::string> cmd = {testing::BinPath("tunefarm"),
                                    "tune",
                                    "--workload",
                                    spec,
                                    "--trials",
                                    trials,
                                    "--batch",
                                    "12",
                                    "--db",
                                    db};
    cmd.insert(cmd.end(), extra.begin(), extra.end());
    return testing::RunCommand(cmd, dir.path());
  };
  testing::CommandResult r = tune("matmul(M=32,N=48,K=16)", {"--save-model", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  store::TuningLog::Options o;
  o.canon = search::CompilerCanon();
  o.path = db;
  std::string target;
  {
    auto log = store::TuningLog::Open(o);
    ASSERT_TRUE(log.ok());
    target = AllRecords(db).front().target().spec();
    auto m = (*log)->LatestCostModel(target);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->objective, "regression");
    EXPECT_GE(m->trained_on, 32);
  }
  EXPECT_FALSE(absl::StrContains(r.out, "similar workloads")) << r.out;  // an empty database
  r = tune("matmul(M=24,N=40,K=8)", {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "cost model: stored model #1")) << r.out;
  // The first workload's best two tiling schedules, fitted, start the search.
  EXPECT_TRUE(absl::StrContains(r.out, "(2 schedules of similar workloads to start from)"))
      << r.out;
  r = tune("matmul(M=16,N=40,K=8)", {"--load-model", model, "--db", dir.File("fresh.db")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "cost model: " + model)) << r.out;
  // Too few trials to retrain: the loaded model is not stored again as if
  // this run had trained it; --save-model still writes the model it used.
  const std::string few = dir.File("few.db"), copy = dir.File("copy.bin");
  r = tune("matmul(M=16,N=40,K=8)", {"--load-model", model, "--db", few, "--save-model", copy},
           "6");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  {
    store::TuningLog::Options fo;
    fo.canon = search::CompilerCanon();
    fo.path = few;
    auto log = store::TuningLog::Open(fo);
    ASSERT_TRUE(log.ok());
    EXPECT_EQ(AllRecords(few).size(), 6u);
    EXPECT_EQ((*log)->LatestCostModel(target).status().code(), absl::StatusCode::kNotFound);
  }
  std::ifstream saved(copy, std::ios::binary);
  EXPECT_TRUE(saved.good() && saved.peek() != EOF) << "--save-model wrote nothing";
  { std::ofstream(dir.File("bad.bin")) << "not a model"; }
  r = tune("matmul(M=16,N=40,K=8)", {"--load-model", dir.File("bad.bin")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "bad.bin: not a tunefarm cost model")) << r.err;
  r = tune("matmul(M=16,N=40,K=8)", {"--load-model", dir.File("missing.bin")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "cannot read")) << r.err;
}

// A cuda target tunes on this machine's GPU (NVRTC builds, the agent's
// sandboxed measurement); without one the answer is one line saying why.
TEST(TuneCli, CudaTargetTunesOnThisMachinesGpuOrSaysWhyNot) {
  testing::TempDir dir;
  v1::Capabilities caps = runtime::DetectCapabilities();
  const std::string arch = caps.has_gpu() ? caps.cuda_archs(0) : "sm_87";
  auto target = ir::Target::Parse("cuda -arch=" + arch);
  ASSERT_TRUE(target.ok());
  const absl::Status usable = search::GpuLocalMeasurer::Check(*target);
  std::string db = dir.File("gpu.db");
  testing::CommandResult r =
      testing::RunCommand({testing::BinPath("tunefarm"), "tune", "--workload",
                           "conv2d_nchw(N=1,C=32,H=28,W=28,K=32,R=3,S=3,pad=1)", "--target",
                           "cuda -arch=" + arch, "--trials", "32", "--db", db},
                          dir.path());
  if (!usable.ok()) {
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(absl::StrContains(r.err, std::string(usable.message()))) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "tunefarm submit")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    if (!caps.has_gpu()) TF_SKIP("no-gpu") << "no GPU to tune on here: " << usable;
    TF_SKIP("gpu-unusable") << usable;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::vector<v1::Record> all = AllRecords(db);
  ASSERT_EQ(all.size(), 32u);
  int ok = 0;
  double def = 0, best = 1e30;
  for (const v1::Record& rec : all) {
    EXPECT_NE(rec.status(), v1::MEASURE_STATUS_WRONG_RESULT) << rec.error();
    EXPECT_FALSE(rec.fingerprint().gpu_name().empty());
    EXPECT_FALSE(rec.fingerprint().cuda_toolkit().empty());
    if (rec.status() != v1::MEASURE_STATUS_OK) continue;
    ++ok;
    if (rec.schedule().is_default()) def = rec.costs_sec(0);
    best = std::min(best, rec.costs_sec(0));
  }
  EXPECT_GT(ok, 16);
  ASSERT_GT(def, 0) << "the default schedule was not measured";
  EXPECT_LT(best, def) << "32 GPU trials found nothing faster than the default";
}

TEST(TuneCli, BadInputIsOneLineAndExitCode2) {
  testing::TempDir dir;
  for (std::vector<std::string> args : {
           std::vector<std::string>{"tune"},
           {"tune", "--workload", "matmul(M=4,N=4,K=4)", "--trials", "0"},
           {"tune", "--workload", "matmul(M=4,N=4,K=4)", "--strategy", "anneal"},
           {"tune", "--workload", "conv3d(N=1)"},
           {"tune", "--workload", "matmul(M=4,N=4,K=4)", "--frobnicate", "1"},
       }) {
    args.insert(args.begin(), testing::BinPath("tunefarm"));
    testing::CommandResult r = testing::RunCommand(args, dir.path());
    EXPECT_EQ(r.exit_code, 2) << args[2];
    EXPECT_TRUE(absl::StartsWith(r.err, "tunefarm: error: ")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // Every command takes --a-b and --a_b alike and names the flag meant.
  for (std::vector<std::string> args : {
           std::vector<std::string>{"tune", "--early-stp", "4"},
           {"compile", "--workload", "matmul(M=4,N=4,K=4)", "--emitt", "ir"},
           {"tasks", "m.onnx", "--shapes", "x=1"},
           {"build", "m.onnx", "--untunned"},
       }) {
    args.insert(args.begin(), testing::BinPath("tunefarm"));
    testing::CommandResult r = testing::RunCommand(args, dir.path());
    EXPECT_EQ(r.exit_code, 2) << args[1];
    EXPECT_TRUE(absl::StrContains(r.err, "; did you mean --")) << r.err;
  }
  testing::CommandResult r = testing::RunCommand(
      {testing::BinPath("tunefarm"), "tune", "--workload", "matmul(M=8,N=8,K=8)", "--trials", "4",
       "--early_stop", "2", "--db", dir.File("t.db")},
      dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = testing::RunCommand({testing::BinPath("tunefarm"), "submit", "--help"}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "submit (SPEC.json")) << r.out;
}

// `tunefarm compile --schedule FILE` with only a sketch id and decisions
// (what `tunefarm-bench search --trace` prints) builds that sketch's
// schedule; decisions that do not fit, or another target's sketch, are one
// line and exit code 2.
TEST(CompileCli, DecisionsAloneBuildTheSketchSchedule) {
  testing::TempDir dir;
  const std::string spec = "matmul(M=64,N=48,K=32)";
  ir::Target host = codegen::HostTarget();
  auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
  ASSERT_TRUE(dag.ok()) << dag.status();
  std::mt19937_64 rng(3);
  auto write = [&](const std::string& name, int sketch, const std::vector<int64_t>& d) {
    v1::Schedule s;
    s.set_sketch_id(sketch);
    for (int64_t x : d) s.add_decisions(x);
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(s, &json).ok());
    std::ofstream(dir.File(name)) << json;
    return dir.File(name);
  };
  for (int i = 0; i < 3; ++i) {
    schedule::CpuTiling d = search::space::CpuSketch(*dag, host).SampleTiling(rng);
    auto want = schedule::BuildTiledSchedule(*dag, host, d);
    ASSERT_TRUE(want.ok()) << want.status();
    testing::CommandResult r = testing::RunCommand(
        {testing::BinPath("tunefarm"), "compile", "--workload", spec, "--target", "host",
         "--schedule", write("d.json", schedule::kTilingSketchId, d.Encode()), "--emit", "schedule"},
        dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    v1::Schedule got;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &got).ok()) << r.out;
    EXPECT_GT(got.steps_size(), 0);
    EXPECT_EQ(ir::ScheduleHash(got), schedule::TraceHash(*want)) << r.out;
  }
  schedule::CpuTiling good = search::space::CpuSketch(*dag, host).SampleTiling(rng);
  const std::vector<int64_t> good_d = good.Encode();
  std::vector<int64_t> short_d(good_d.begin(), good_d.end() - 1);
  for (auto [file, target] : std::vector<std::pair<std::string, std::string>>{
           {write("short.json", schedule::kTilingSketchId, short_d), "host"},
           {write("cpu.json", schedule::kTilingSketchId, good_d), "cuda -arch=sm_87"}}) {
    testing::CommandResult r =
        testing::RunCommand({testing::BinPath("tunefarm"), "compile", "--workload", spec,
                             "--target", target, "--schedule", file, "--emit", "ir"},
                            dir.path());
    EXPECT_EQ(r.exit_code, 2) << file << ": " << r.out;
    EXPECT_TRUE(absl::StartsWith(r.err, "tunefarm: error: ")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, file)) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// Float16 workloads from the command line: tensor-core decisions build CUDA
// C with mma.sync and float16 arguments; a CPU target, or decisions of
// another length, are one error line naming the problem.
TEST(CompileCli, Float16AndTensorCoreDecisions) {
  testing::TempDir dir;
  const std::string spec = "matmul(M=64,N=64,K=64,dtype=float16)+bias";
  auto write = [&](const std::string& name, const std::vector<int64_t>& d) {
    v1::Schedule s;
    s.set_sketch_id(ir::kGpuTensorCoreSketchId);
    for (int64_t x : d) s.add_decisions(x);
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(s, &json).ok());
    std::ofstream(dir.File(name)) << json;
    return dir.File(name);
  };
  testing::CommandResult r = testing::RunCommand(
      {testing::BinPath("tunefarm"), "compile", "--workload", spec, "--target", "cuda -arch=sm_90",
       "--schedule", write("tc.json", schedule::TensorCoreTiling{}.Encode()), "--emit", "cuda"},
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "tf_ldmatrix_x4(")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "const unsigned short* __restrict__")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "tf_cp_async16(")) << r.out;
  r = testing::RunCommand(
      {testing::BinPath("tunefarm"), "compile", "--workload", spec, "--target", "cuda -arch=sm_90",
       "--schedule", write("short.json", {2, 2, 2}), "--emit", "cuda"},
      dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "9 decisions (one more with wgmma), not 3")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = testing::RunCommand({testing::BinPath("tunefarm"), "compile", "--workload", spec, "--target",
                           "host", "--emit", "so", "-o", dir.File("x.so")},
                          dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(absl::StartsWith(r.err, "tunefarm: error: ")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "float16 and bfloat16 kernels build for cuda targets only"))
      << r.err;
  // --precision is for a model; a workload's spec says its dtype.
  r = testing::RunCommand({testing::BinPath("tunefarm"), "tune", "--workload", spec, "--target",
                           "cuda -arch=sm_90", "--precision", "bf16", "--db", dir.File("t.db")},
                          dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "--precision are for a model")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // A 16-bit or tf32 workload tuned for a CPU target: one line before
  // anything runs.
  for (const auto& [w, target, why] : std::vector<std::array<std::string, 3>>{
           {spec, "host", "float16 kernels build for cuda targets only"},
           {"matmul(M=64,N=64,K=64,dtype=tf32)", "host",
            "tf32 products build for cuda targets only"}}) {
    r = testing::RunCommand({testing::BinPath("tunefarm"), "tune", "--workload", w, "--target",
                             target, "--trials", "4", "--db", dir.File("t.db")},
                            dir.path());
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, why)) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// `tunefarm tasks`: each task's share of the tasks' FLOPs, in tenths of a
// percent that add up to 100.0% whatever the model (a fused epilogue counts
// as its kernel computes it, so the tasks' FLOPs are not the nodes').
TEST(TasksCli, SharesAddUpTo100Percent) {
  testing::TempDir dir;
  if (std::string why = MakeModels(dir); !why.empty()) TF_SKIP("no-package") << why;
  for (const char* model : {"tiny", "dags", "norm", "upsample", "sig_residual"}) {
    SCOPED_TRACE(model);
    testing::CommandResult r = testing::RunCommand(
        {testing::BinPath("tunefarm"), "tasks", dir.File(std::string(model) + ".onnx")},
        dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::regex row("\\n +\\d+ +\\d+ +[0-9.]+ +(\\d+)\\.(\\d)%  ");
    int tenths = 0, rows = 0;
    for (std::sregex_iterator it(r.out.begin(), r.out.end(), row), end; it != end; ++it, ++rows)
      tenths += 10 * std::stoi((*it)[1]) + std::stoi((*it)[2]);
    EXPECT_GE(rows, 1) << r.out;
    EXPECT_EQ(tenths, 1000) << r.out;
  }
}

// `tunefarm tasks` prints each task as the spec `--workload` takes: every
// printed spec parses back to its task's key, the --specs list is what
// `tunefarm submit` reads, and `tunefarm tune --workload` runs one.
TEST(TasksCli, PrintedSpecsAreWhatTuneTakes) {
  testing::TempDir dir;
  if (std::string why = MakeModels(dir); !why.empty()) TF_SKIP("no-package") << why;
  int specs = 0;
  std::string first;
  for (const char* model : {"tiny", "pool_ceil", "opset9"}) {
    SCOPED_TRACE(model);
    const std::string path = dir.File(std::string(model) + ".onnx");
    testing::CommandResult json =
        testing::RunCommand({testing::BinPath("tunefarm"), "tasks", path, "--json"}, dir.path());
    ASSERT_EQ(json.exit_code, 0) << json.err;
    std::set<std::string> keys;
    for (size_t at = json.out.find("\"key\": \""); at != std::string::npos;
         at = json.out.find("\"key\": \"", at + 1)) {
      const size_t b = at + 8;
      keys.insert(json.out.substr(b, json.out.find('"', b) - b));
    }
    ASSERT_FALSE(keys.empty()) << json.out;
    testing::CommandResult list =
        testing::RunCommand({testing::BinPath("tunefarm"), "tasks", path, "--specs"}, dir.path());
    ASSERT_EQ(list.exit_code, 0) << list.err;
    std::set<std::string> listed;
    std::istringstream lines(list.out);
    for (std::string line; std::getline(lines, line);) {
      if (absl::StartsWith(line, "# ")) {  // a task the syntax cannot say, by key
        listed.insert(line.substr(2, line.find(' ', 2) - 2));
        continue;
      }
      const size_t x = line.rfind(" x");
      ASSERT_NE(x, std::string::npos) << line;
      absl::StatusOr<v1::Workload> w = ir::ParseWorkloadSpec(line.substr(0, x));
      ASSERT_TRUE(w.ok()) << line << ": " << w.status();
      listed.insert(ir::Canonicalize(*w)->key);
      ++specs;
      if (first.empty()) first = line.substr(0, x);
    }
    EXPECT_EQ(listed, keys) << list.out;
    testing::WriteFile(dir.File(std::string(model) + ".tasks"), list.out);
  }
  EXPECT_GE(specs, 5);
  testing::CommandResult tuned = testing::RunCommand(
      {testing::BinPath("tunefarm"), "tune", "--workload", first, "--trials", "2", "--db",
       dir.File("t.db")},
      dir.path());
  EXPECT_EQ(tuned.exit_code, 0) << first << ": " << tuned.err;
}

}  // namespace
}  // namespace tunefarm
