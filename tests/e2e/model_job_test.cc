// A tuning job from an ONNX model through the farm: the server imports the
// model and makes its tasks (weights = occurrences), the worker and agent
// tune them; a model with an unsupported operator is refused with a message
// naming it. A built package runs on an agent through the server and gives
// the outputs a local run gives. Models are written by Debian's python3-onnx.
#include <signal.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "device_agent/runtime/cuda_driver.h"
#include "device_agent/runtime/model_run.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"
#include "tunefarm/v1/package.pb.h"
#include "tunefarm/v1/records.pb.h"
#include "tunefarm/v1/tuning.pb.h"

namespace tunefarm {
namespace {

using testing::BinPath;
using testing::RunCommand;

// The generated models in a scratch directory, a server on port 0 and the
// CLI pointed at it; farm processes log to procs.log.
class ModelJob : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::CommandResult gen = RunCommand(
        {"/usr/bin/python3", std::string(TF_SOURCE_DIR) + "/tests/deploy/make_models.py",
         dir.path()},
        dir.path());
    if (gen.exit_code != 0) TF_SKIP("no-package") << "python3-onnx is not installed: " << gen.err;
  }
  void StartServer() {
    auto s = testing::ServerProcess::Start(dir.File("farm.db"), dir.path(),
                                           {"--heartbeat_interval_ms=200"});
    ASSERT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
  }
  testing::CommandResult cli(std::vector<std::string> args) {
    return server->Cli(std::move(args), dir.path());
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> StartFarmProcess(std::vector<std::string> argv) {
    Subprocess::Options quiet;
    quiet.capture_stdout = false;
    quiet.stderr_path = dir.File("procs.log");
    argv.insert(argv.begin() + 1, "--server=" + server->address());
    if (absl::EndsWith(argv[0], "tunefarm-agent")) argv.push_back(server->server_key_flag());
    return Subprocess::Start(argv, quiet);
  }

  testing::TempDir dir;
  std::unique_ptr<testing::ServerProcess> server;
};

TEST_F(ModelJob, SubmitAnOnnxModelAndTuneItsTasks) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // Refused before anything is sent (the CLI imports the model first, exit
  // 2): an operator the importer does not know; a dynamic input without a
  // shape.
  testing::CommandResult r =
      cli({"submit", dir.File("unsupported.onnx"), "--target=llvm", "--device_key=x86-test"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "unsupported operator 'Unique' (node 'the_unique'"))
      << r.err;
  r = cli({"submit", dir.File("tiny_dynamic.onnx"), "--target=llvm", "--device_key=x86-test"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "give its shape with --shape x=")) << r.err;
  // An If on an input whose branches give different shapes: resolved only
  // with the input fixed (a non-integer rate is refused).
  r = cli({"submit", dir.File("control_flow.onnx"), "--target=llvm", "--device_key=x86-test"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "fix the inputs the condition depends on with --value"))
      << r.err;
  r = cli({"submit", dir.File("rate_branch.onnx"), "--value=rate=0.5", "--target=llvm",
           "--device_key=x86-test"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "--value for input 'rate': 0.5 is not an integer")) << r.err;
  r = cli({"jobs"});
  EXPECT_FALSE(absl::StrContains(r.out, "tiny")) << r.out;

  auto agent = StartFarmProcess({BinPath("tunefarm-agent"), "--key=x86-test", "--device_id=a1"});
  auto worker = StartFarmProcess({BinPath("tunefarm-worker"), "--device_id=w1"});
  ASSERT_TRUE(agent.ok() && worker.ok());
  r = cli({"submit", dir.File("tiny_dynamic.onnx"), "--shape=x=1x3x16x16", "--target=llvm",
           "--device_key=x86-test", "--trials=12"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(cli({"job", "1"}).out, "succeeded");
      },
      absl::Seconds(180)))
      << cli({"job", "1"}).out << testing::ReadFileOrEmpty(dir.File("procs.log"));
  r = cli({"job", "1", "--json"});
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &job).ok()) << r.out;
  EXPECT_EQ(job.spec().name(), "tiny_dynamic");
  EXPECT_TRUE(job.spec().onnx_model().empty());  // the job keeps its tasks, not the weights
  ASSERT_EQ(job.tasks_size(), 6);                // with the max pooling
  EXPECT_EQ(job.tasks(1).weight(), 2);  // the conv that occurs twice
  EXPECT_EQ(job.trials_done(), 12);
  int measured = 0;
  for (const v1::Task& t : job.tasks()) measured += t.best_cost_sec() > 0;
  EXPECT_EQ(measured, 6);  // every task's default schedule at least

  // The best records per task of the model, found by importing it again.
  r = cli({"best", "--model=" + dir.File("tiny_dynamic.onnx"), "--shape=x=1x3x16x16",
           "--target=llvm", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::QueryBestResponse best;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &best).ok()) << r.out;
  ASSERT_EQ(best.entries_size(), 6);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(best.entries(i).workload_key(), job.tasks(i).workload_key());
    ASSERT_GT(best.entries(i).records_size(), 0);
    EXPECT_EQ(best.entries(i).records(0).status(), v1::MEASURE_STATUS_OK);
  }
  r = cli({"best", "--model=" + dir.File("tiny_dynamic.onnx"), "--target=llvm"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "give its shape with --shape")) << r.err;
  for (auto* p : {&*agent, &*worker}) (*p)->Kill(SIGTERM);
  for (auto* p : {&*agent, &*worker}) ASSERT_TRUE((*p)->Wait(absl::Seconds(20)).ok());
}

// A model job in float16 (`submit --precision=fp16`): the server makes the
// float16 tasks `build --precision fp16` builds, for a cuda target (queued
// for a board that has not registered yet); for a CPU target the CLI and,
// for a JSON spec that asks anyway, the server refuse it by name.
TEST_F(ModelJob, Float16ModelJobsGetFloat16Tasks) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  testing::CommandResult r = cli({"submit", dir.File("tiny.onnx"), "--target=llvm",
                                  "--device_key=x86-test", "--precision=fp16"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(
      absl::StrContains(r.err, "--precision fp16: float16 models build for cuda targets only"))
      << r.err;
  v1::JobSpec spec;
  spec.set_onnx_model(testing::ReadFileOrEmpty(dir.File("tiny.onnx")));
  spec.set_precision(v1::DTYPE_FLOAT16);
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json).ok());
  testing::WriteFile(dir.File("spec.json"), json);
  r = cli({"submit", dir.File("spec.json"), "--target=llvm", "--device_key=x86-test",
           "--wait-for-device"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "precision: float16 models build for cuda targets only"))
      << r.err;

  r = cli({"submit", dir.File("tiny.onnx"), "--target=cuda -arch=sm_87", "--device_key=orin",
           "--precision=fp16", "--wait-for-device"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = cli({"job", "1", "--json"});
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &job).ok()) << r.out;
  ASSERT_EQ(job.tasks_size(), 7);
  for (const v1::Task& t : job.tasks()) {
    EXPECT_EQ(t.workload().out_dtype(), v1::DTYPE_FLOAT16) << t.workload_key();
    for (const v1::TensorSpec& in : t.workload().inputs())
      EXPECT_EQ(in.dtype(), v1::DTYPE_FLOAT16) << t.workload_key();
  }
  // The keys `tunefarm tasks --precision fp16` and `build` use.
  r = RunCommand({BinPath("tunefarm"), "tasks", dir.File("tiny.onnx"), "--target",
                  "cuda -arch=sm_87", "--precision", "fp16", "--json"},
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const v1::Task& t : job.tasks())
    EXPECT_TRUE(absl::StrContains(r.out, t.workload_key())) << t.workload_key();
  // --precision elsewhere is a usage error, not ignored.
  r = cli({"best", "--job=1", "--precision=fp16"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "--precision goes with --model")) << r.err;
  EXPECT_EQ(cli({"cancel", "1"}).exit_code, 0);

  // tf32: float32 tasks whose products (tiny's convolutions and dense layer)
  // are tf32 workloads, the keys `tasks --precision tf32` lists; sm_80 and
  // newer only.
  r = cli({"submit", dir.File("tiny.onnx"), "--target=cuda -arch=sm_75", "--device_key=t4",
           "--precision=tf32", "--wait-for-device"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "--precision tf32: tf32 models need sm_80 or newer"))
      << r.err;
  r = cli({"submit", dir.File("tiny.onnx"), "--target=cuda -arch=sm_87", "--device_key=orin",
           "--precision=tf32", "--wait-for-device"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = cli({"job", "2", "--json"});
  v1::Job tf32_job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &tf32_job).ok()) << r.out;
  ASSERT_EQ(tf32_job.tasks_size(), 7);
  int products = 0;
  for (const v1::Task& t : tf32_job.tasks()) {
    EXPECT_EQ(t.workload().out_dtype(), v1::DTYPE_FLOAT32) << t.workload_key();
    const v1::OpKind op = t.workload().op();
    const bool product = op == v1::OP_KIND_CONV2D || op == v1::OP_KIND_DENSE ||
                         op == v1::OP_KIND_MATMUL || op == v1::OP_KIND_BATCH_MATMUL;
    EXPECT_EQ(t.workload().tf32(), product) << t.workload_key();
    products += t.workload().tf32();
  }
  EXPECT_GE(products, 3);
  r = RunCommand({BinPath("tunefarm"), "tasks", dir.File("tiny.onnx"), "--target",
                  "cuda -arch=sm_87", "--precision", "tf32", "--json"},
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const v1::Task& t : tf32_job.tasks())
    EXPECT_TRUE(absl::StrContains(r.out, t.workload_key())) << t.workload_key();
  EXPECT_EQ(cli({"cancel", "2"}).exit_code, 0);

  // --layout nhwc: channels-last tasks for a cuda target (NCHW is its
  // default), those `tasks --layout nhwc` lists.
  r = cli({"submit", dir.File("tiny.onnx"), "--target=cuda -arch=sm_87", "--device_key=orin",
           "--precision=fp16", "--layout=nhwc", "--wait-for-device"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = cli({"job", "3", "--json"});
  v1::Job nhwc_job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &nhwc_job).ok()) << r.out;
  int convs = 0;
  for (const v1::Task& t : nhwc_job.tasks()) {
    if (t.workload().op() != v1::OP_KIND_CONV2D) continue;
    EXPECT_EQ(t.workload().conv2d().layout(), v1::DATA_LAYOUT_NHWC) << t.workload_key();
    ++convs;
  }
  EXPECT_GE(convs, 2);
  r = RunCommand({BinPath("tunefarm"), "tasks", dir.File("tiny.onnx"), "--target",
                  "cuda -arch=sm_87", "--precision", "fp16", "--layout", "nhwc", "--json"},
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const v1::Task& t : nhwc_job.tasks())
    EXPECT_TRUE(absl::StrContains(r.out, t.workload_key())) << t.workload_key();
  EXPECT_EQ(cli({"cancel", "3"}).exit_code, 0);
  r = cli({"best", "--job=1", "--layout=nhwc"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "--layout goes with --model")) << r.err;
}

// `tunefarm run PKG --device-key K`: the package travels through the server
// to an agent, runs in the agent's model-runner process and comes back with
// the latencies there and the outputs, which equal a local run's on the same
// seeded inputs. A package that does not load there, or a run past its time
// limit, is an error naming the board, and the agent carries on.
TEST_F(ModelJob, BuiltPackageRunsOnAnAgent) {
  const std::string pkg = dir.File("tiny.tfpkg");
  testing::CommandResult r = RunCommand(
      {BinPath("tunefarm"), "build", dir.File("tiny.onnx"), "--untuned", "-o", pkg}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCommand({BinPath("tunefarm"), "run", pkg, "--seed=7", "--output-dir", dir.File("local")},
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string local_y = testing::ReadFileOrEmpty(dir.File("local/y.npy"));
  ASSERT_FALSE(local_y.empty());

  ASSERT_NO_FATAL_FAILURE(StartServer());
  r = cli({"run", pkg, "--device-key=x86-test"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "no agent is connected under device key 'x86-test'"))
      << r.err;

  // Installed with the server's public key: it runs only what the server signed.
  auto agent = StartFarmProcess({BinPath("tunefarm-agent"), "--key=x86-test", "--device_id=a1",
                                 "--server_key=" + dir.File("farm.db.signing-key.pub")});
  ASSERT_TRUE(agent.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] { return absl::StrContains(cli({"devices"}).out, "online"); }, absl::Seconds(30)));
  // The package's kernels are built again by a worker before a board runs them.
  r = cli({"run", pkg, "--device-key=x86-test"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "no connected compile worker builds x86_64-linux-gnu"))
      << r.err;
  auto worker = StartFarmProcess({BinPath("tunefarm-worker"), "--device_id=w1", "--threads=1"});
  ASSERT_TRUE(worker.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        const std::string d = cli({"devices"}).out;
        return absl::StrContains(d, "w1") && absl::StrContains(d, "a1");
      },
      absl::Seconds(30)));

  r = cli({"run", pkg, "--device-key=x86-test", "--seed=7", "--repeat=5", "--output-dir",
           dir.File("farm"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << testing::ReadFileOrEmpty(dir.File("procs.log"));
  EXPECT_TRUE(absl::StrContains(r.out, "\"device\": \"a1 (x86-test)\"")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\"runs\": 5")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "\"latency_ms\": 0.0000")) << r.out;
  EXPECT_EQ(testing::ReadFileOrEmpty(dir.File("farm/y.npy")), local_y);
  // Another seed, other inputs: other outputs.
  r = cli({"run", pkg, "--device-key=x86-test", "--seed=8", "--output-dir", dir.File("farm8")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "on a1 (x86-test)")) << r.out;
  EXPECT_NE(testing::ReadFileOrEmpty(dir.File("farm8/y.npy")), local_y);

  // A package whose kernel bytes are not a library, and one whose kernel
  // was written by hand to reach out from the board (its constructor runs
  // at the load): neither reaches the board as sent. The worker's builds of
  // their schedules run, and give the right outputs; nothing is written.
  v1::ModelPackage p;
  ASSERT_TRUE(p.ParseFromString(testing::ReadFileOrEmpty(pkg)));
  ASSERT_GT(p.kernels_size(), 0);
  p.mutable_kernels(0)->set_shared_object("\x7f" "ELF but not really");
  testing::WriteFile(dir.File("broken.tfpkg"), p.SerializeAsString());
  r = cli({"run", dir.File("broken.tfpkg"), "--device-key=x86-test", "--seed=7", "--output-dir",
           dir.File("broken")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(testing::ReadFileOrEmpty(dir.File("broken/y.npy")), local_y);
  const std::string c = dir.File("evil.c"), so = dir.File("evil.so"), dropped = dir.File("dropped");
  testing::WriteFile(
      c, absl::StrCat("#include <fcntl.h>\n#include <stdio.h>\n#include <sys/socket.h>\n"
                      "#include <unistd.h>\n"
                      "__attribute__((constructor)) static void evil(void) {\n"
                      "  int fd = open(\"",
                      dropped,
                      "\", O_WRONLY | O_CREAT, 0644);\n"
                      "  if (fd >= 0) write(fd, \"pwned\", 5);\n"
                      "  socket(AF_INET, SOCK_STREAM, 0); fork();\n}\n"
                      "int tf_main(void* const* b, const void* rt) { return 0; }\n"));
  r = RunCommand({"/usr/bin/cc", "-shared", "-fPIC", "-o", so, c}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  p.mutable_kernels(0)->set_shared_object(testing::ReadFileOrEmpty(so));
  testing::WriteFile(dir.File("evil.tfpkg"), p.SerializeAsString());
  r = cli({"run", dir.File("evil.tfpkg"), "--device-key=x86-test", "--seed=7", "--output-dir",
           dir.File("evil")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(testing::ReadFileOrEmpty(dir.File("evil/y.npy")), local_y);
  EXPECT_NE(access(dropped.c_str(), F_OK), 0) << "the package's code wrote a file";
  // A kernel whose schedule does not build to the kernel the package
  // describes (its signature) is refused before any board sees it.
  v1::ModelPackage lying;
  ASSERT_TRUE(lying.ParseFromString(testing::ReadFileOrEmpty(pkg)));
  lying.mutable_kernels(0)->mutable_signature()->mutable_args(0)->add_shape(2);
  testing::WriteFile(dir.File("lying.tfpkg"), lying.SerializeAsString());
  r = cli({"run", dir.File("lying.tfpkg"), "--device-key=x86-test"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "signature is not what its schedule builds to")) << r.err;
  // The model runner's own sandbox, for code that gets past the workers:
  // the hand-made package run directly in a confined model runner is
  // killed there and writes nothing.
  v1::ModelRunRequest direct;
  direct.set_package(p.SerializeAsString());
  direct.set_time_limit_s(60);
  runtime::ModelRunOptions mo;
  mo.runner_path = BinPath("tunefarm-model-runner");
  v1::ModelRunResult confined = runtime::MeasureModel(direct, mo);
  EXPECT_EQ(confined.status(), v1::MEASURE_STATUS_SANDBOX_VIOLATION) << confined.error();
  EXPECT_NE(access(dropped.c_str(), F_OK), 0) << "the package's code wrote a file";
  // A run that cannot finish in its time limit is killed there.
  r = cli({"run", pkg, "--device-key=x86-test", "--repeat=1000", "--time-limit=0.001"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "on a1: timeout: the model did not finish within"))
      << r.err;
  // Not a package at all: refused before anything is sent.
  testing::WriteFile(dir.File("junk.tfpkg"), "junk");
  r = cli({"run", dir.File("junk.tfpkg"), "--device-key=x86-test"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "is not a tunefarm model package")) << r.err;
  // A CUDA package: refused before any build, since no board of the key has
  // the package's arch.
  const std::string gpu_pkg = dir.File("upsample.cuda.tfpkg");
  r = RunCommand({BinPath("tunefarm"), "build", dir.File("upsample.onnx"), "--target",
                  "cuda -arch=sm_90", "--untuned", "-o", gpu_pkg},
                 dir.path());
  if (r.exit_code != 0) {
    TF_SKIP_NOTE("no-cuda-toolkit") << "no CUDA package to send: " << r.err;
  } else if (runtime::CudaDriver::Get().ok()) {
    // (This board would have the GPU: GpuFarm.CudaModelPackageRuns... runs it.)
    TF_SKIP_NOTE("has-gpu") << "the board here has a CUDA driver";
  } else {
    r = cli({"run", gpu_pkg, "--device-key=x86-test"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(absl::StrContains(
        r.err,
        "RunModel: no connected agent with device key 'x86-test' has a sm_90 GPU (a1: no GPU)"))
        << r.err;
  }
  // The agent is still there and serves the next run.
  r = cli({"run", pkg, "--device-key=x86-test", "--seed=7", "--output-dir", dir.File("again")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(testing::ReadFileOrEmpty(dir.File("again/y.npy")), local_y);
  for (auto* proc : {&*agent, &*worker}) {
    (*proc)->Kill(SIGTERM);
    ASSERT_TRUE((*proc)->Wait(absl::Seconds(20)).ok());
  }
}

}  // namespace
}  // namespace tunefarm
