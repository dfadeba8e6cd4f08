// The measurement sandbox against kernels that misbehave on purpose: wrong
// output, a segfault, a hang, a runaway allocation, an error code, bytes that
// are not a library; and against kernels that attack the process measuring
// them or forge what it is told. Each becomes an outcome; the test process
// carries on. The kernels are small C (or C++) files built with the system
// compiler.
#include "device_agent/runtime/sandbox.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/model_run.h"
#include "gtest/gtest.h"
#include "proto/kernel_signature.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm::runtime {
namespace {

using Status = SandboxOutcome::Status;

constexpr int64_t kN = 4096;

// A kernel with body `body` (over float* in, float* out, n = kN), as .so bytes.
// `prelude`: C code before the kernel's function (a constructor, say).
std::string BuildKernel(const testing::TempDir& dir, const std::string& name,
                        const std::string& body, const std::string& prelude = "") {
  std::string c = dir.File(name + ".c"), so = dir.File(name + ".so");
  std::ofstream(c) << "#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
                   << "#include <string.h>\n#include <time.h>\n#include <math.h>\n"
                   << "#include <fcntl.h>\n#include <unistd.h>\n#include <signal.h>\n"
                   << "#include <sys/socket.h>\n#include <netinet/in.h>\n"
                   << prelude << "\n"
                   << "int32_t tf_main(void* const* b, const void* rt) {\n"
                   << "  const float* in = (const float*)b[0]; float* out = (float*)b[1];\n"
                   << "  long n = " << kN << ";\n"
                   << body << "\n  return 0;\n}\n";
  testing::CommandResult r =
      testing::RunCommand({"/usr/bin/cc", "-O2", "-D_GNU_SOURCE", "-shared", "-fPIC", "-o", so, c},
                          dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream f(so, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

struct Data {
  std::vector<float> in, twice;
  Data() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t i = 0; i < kN; ++i) {
      in.push_back(u(rng));
      twice.push_back(2 * in.back());
    }
  }
};

SandboxOutcome Measure(const std::string& so, const Data& d, SandboxOptions o = {}) {
  return MeasureInSandbox(so, {&d.in}, kN, d.twice, o);
}

TEST(Sandbox, CorrectKernelIsCheckedAndTimed) {
  testing::TempDir dir;
  Data d;
  std::string so = BuildKernel(dir, "ok", "for (long i = 0; i < n; ++i) out[i] = 2 * in[i];");
  SandboxOptions o;
  o.repeats = 7;
  std::vector<float> out;
  SandboxOutcome r = MeasureInSandbox(so, {&d.in}, kN, d.twice, o, &out);
  ASSERT_EQ(r.status, Status::kOk) << r.error;
  EXPECT_EQ(r.costs.size(), 7u);
  EXPECT_GT(r.seconds, 0);
  // The wall time covers the warm-up and at least one run per timed repeat,
  // inside the limit.
  double timed = 0;
  for (double c : r.costs) timed += c;
  EXPECT_GE(r.run_s, o.warmup_ms / 1000 + timed) << r.run_s;
  EXPECT_LT(r.run_s, o.time_limit_s);
  EXPECT_EQ(out, d.twice);

  // Cold-cache timing: a fixed number of runs per repeat, the last-level
  // cache flushed before each (not timed).
  o.number = 2;
  o.flush_cache = true;
  o.repeats = 3;
  SandboxOutcome cold = MeasureInSandbox(so, {&d.in}, kN, d.twice, o);
  ASSERT_EQ(cold.status, Status::kOk) << cold.error;
  EXPECT_EQ(cold.costs.size(), 3u);
  for (double c : cold.costs) EXPECT_GT(c, 0);
}

// The timed runs start only after warmup_ms of untimed runs. The kernel
// (which may not write files) is slow, a 50 ms busy wait per call, for the
// first 400 ms after its first call: without a warm-up the timed runs fall
// inside that window, after a 500 ms warm-up none does.
TEST(Sandbox, TimingStartsAfterTheWarmUp) {
  testing::TempDir dir;
  Data d;
  std::string so = BuildKernel(
      dir, "slow_start",
      "static double first = -1; struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);\n"
      "double now = t.tv_sec + 1e-9 * t.tv_nsec; if (first < 0) first = now;\n"
      "if (now - first < 0.4) { double e; do { clock_gettime(CLOCK_MONOTONIC, &t);\n"
      "  e = t.tv_sec + 1e-9 * t.tv_nsec; } while (e - now < 0.05); }\n"
      "for (long i = 0; i < n; ++i) out[i] = 2 * in[i];");
  for (double warmup_ms : {0.0, 500.0}) {
    SandboxOptions o;
    o.warmup_ms = warmup_ms;
    o.number = 2;
    o.repeats = 3;
    SandboxOutcome r = Measure(so, d, o);
    ASSERT_EQ(r.status, Status::kOk) << r.error;
    if (warmup_ms == 0) {
      EXPECT_GE(r.seconds, 0.05) << "timed inside the kernel's slow start";
    } else {
      EXPECT_GE(r.run_s, 0.5);
      // Two of the three repeats would have to stall 50 ms per run.
      EXPECT_LT(r.seconds, 0.05) << "the timing began inside the 500 ms warm-up";
    }
  }
}

// A process with only stdin/stdout/stderr open gets fd 3 for the request
// memfd: the measurement must still reach the runner.
TEST(Sandbox, MeasuresWhenTheLowDescriptorsAreFree) {
  testing::TempDir dir;
  Data d;
  std::string so = BuildKernel(dir, "low", "for (long i = 0; i < n; ++i) out[i] = 2 * in[i];");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    SandboxOutcome r = Measure(so, d);
    _exit(r.status == Status::kOk ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the measurement failed with fds 3 and up free";
}

// NaN where the reference is NaN (a square root of a negative random
// input) and an infinity equal to the reference's are right; NaN or an
// infinity anywhere else is a wrong result.
TEST(Sandbox, NanAndInfinityMatchWhereTheReferenceHasThem) {
  testing::TempDir dir;
  Data d;
  std::vector<float> want = d.twice;
  want[3] = std::nanf("");
  want[5] = INFINITY;
  const std::string so = BuildKernel(dir, "special",
                                     "for (long i = 0; i < n; ++i) out[i] = 2 * in[i];\n"
                                     "out[3] = sqrtf(-in[0] * in[0] - 1.0f);\n"
                                     "out[5] = (in[0] * in[0] + 1.0f) / (in[0] - in[0]);");
  SandboxOutcome same = MeasureInSandbox(so, {&d.in}, kN, want, {});
  EXPECT_EQ(same.status, Status::kOk) << same.error;
  want[3] = 1.0f;  // NaN where the reference has a number
  SandboxOutcome nan = MeasureInSandbox(so, {&d.in}, kN, want, {});
  EXPECT_EQ(nan.status, Status::kWrongResult);
  EXPECT_TRUE(absl::StrContains(nan.error, "output 3 off by")) << nan.error;
  want[3] = std::nanf("");
  want[5] = -INFINITY;  // an infinity of the other sign
  SandboxOutcome inf = MeasureInSandbox(so, {&d.in}, kN, want, {});
  EXPECT_EQ(inf.status, Status::kWrongResult);
  EXPECT_TRUE(absl::StrContains(inf.error, "output 5 off by")) << inf.error;
}

TEST(Sandbox, MisbehavingKernelsBecomeOutcomes) {
  testing::TempDir dir;
  Data d;
  SandboxOutcome wrong = Measure(
      BuildKernel(dir, "wrong", "for (long i = 0; i < n; ++i) out[i] = 2 * in[i] + (i == 9);"), d);
  EXPECT_EQ(wrong.status, Status::kWrongResult);
  EXPECT_TRUE(absl::StrContains(wrong.error, "output 9 off by")) << wrong.error;

  SandboxOutcome segv = Measure(BuildKernel(dir, "segv", "*(volatile int*)0 = 1;"), d);
  EXPECT_EQ(segv.status, Status::kRuntimeError);
  EXPECT_TRUE(absl::StrContains(segv.error, "signal 11")) << segv.error;
  // A signal it sends itself acts as anywhere (it is not its PID
  // namespace's init, which such signals would pass by).
  SandboxOutcome aborted = Measure(BuildKernel(dir, "abort", "abort();"), d);
  EXPECT_EQ(aborted.status, Status::kRuntimeError);
  EXPECT_TRUE(absl::StrContains(aborted.error, "signal 6")) << aborted.error;

  SandboxOptions quick;
  quick.time_limit_s = 0.5;
  SandboxOutcome hang =
      Measure(BuildKernel(dir, "hang", "for (volatile int x = 0;;) ++x;"), d, quick);
  EXPECT_EQ(hang.status, Status::kTimeout);
  EXPECT_TRUE(absl::StrContains(hang.error, "no result within 0.50 s")) << hang.error;

  // 8 GiB against a 256 MiB allowance: the allocation fails inside the kernel.
  SandboxOptions small;
  small.memory_limit_bytes = int64_t{256} << 20;
  SandboxOutcome hog = Measure(BuildKernel(dir, "hog",
                                           "char* p = malloc(1ul << 33); if (!p) return 7;\n"
                                           "memset(p, 1, 1ul << 33); out[0] = p[99];"),
                               d, small);
  EXPECT_EQ(hog.status, Status::kRuntimeError);
  EXPECT_TRUE(absl::StrContains(hog.error, "kernel returned 7")) << hog.error;

  SandboxOutcome garbage = Measure("this is not an ELF file", d);
  EXPECT_EQ(garbage.status, Status::kLoadError);
  EXPECT_TRUE(absl::StrContains(garbage.error, "did not load")) << garbage.error;

  // Without its runner the sandbox says so instead of measuring in-process.
  SandboxOptions nowhere;
  nowhere.runner_path = dir.File("no-such-runner");
  SandboxOutcome lost = Measure(
      BuildKernel(dir, "ok1", "for (long i = 0; i < n; ++i) out[i] = 2 * in[i];"), d, nowhere);
  EXPECT_EQ(lost.status, Status::kRuntimeError);
  EXPECT_TRUE(absl::StrContains(lost.error, "tunefarm-runner not found")) << lost.error;

  // And the process that ran all of them still measures.
  SandboxOutcome ok =
      Measure(BuildKernel(dir, "ok2", "for (long i = 0; i < n; ++i) out[i] = in[i] + in[i];"), d);
  EXPECT_EQ(ok.status, Status::kOk) << ok.error;
}

// The pool's threads, started before the filter, run the kernel's parallel
// loop: three threads each fill their part.
TEST(Sandbox, KernelsRunOnThePoolStartedBeforeTheFilter) {
  testing::TempDir dir;
  Data d;
  const std::string prelude =
      "#include \"common/kernel_abi.h\"\n"
      "struct Job { const float* in; float* out; };\n"
      "static void part(void* c, int64_t b, int64_t e) {\n"
      "  struct Job* j = (struct Job*)c;\n"
      "  for (int64_t i = b; i < e; ++i) j->out[i] = 2 * j->in[i];\n}\n";
  const std::string body =
      "const TFRuntime* r = (const TFRuntime*)rt; struct Job j = {in, out};\n"
      "if (r->num_threads != 3) return 5;\n"
      "return r->parallel_for(r->ctx, n, &j, part);";
  std::string c = dir.File("pool.c"), so = dir.File("pool.so");
  std::ofstream(c) << "#include <stdint.h>\n"
                   << prelude << "int32_t tf_main(void* const* b, const void* rt) {\n"
                   << "  const float* in = (const float*)b[0]; float* out = (float*)b[1];\n"
                   << "  long n = " << kN << ";\n"
                   << body << "\n}\n";
  testing::CommandResult built = testing::RunCommand(
      {"/usr/bin/cc", "-O2", "-shared", "-fPIC", "-I", TF_SOURCE_DIR, "-o", so, c}, dir.path());
  ASSERT_EQ(built.exit_code, 0) << built.err;
  SandboxOptions three;
  three.threads = 3;
  SandboxOutcome r = Measure(testing::ReadFileOrEmpty(so), d, three);
  EXPECT_EQ(r.status, Status::kOk) << r.error;
}

// With the inputs made by the runner (what an agent asks for), a kernel
// gets RandomInputs(seed) of its signature, and inputs too large for the
// runner's memory limit fail there: the measuring process never holds them.
TEST(Sandbox, TheRunnerMakesTheInputsFromTheSignature) {
  testing::TempDir dir;
  auto signature = [](int64_t n) {
    v1::KernelSignature s;
    for (int i = 0; i < 2; ++i) {
      v1::KernelArgument* a = s.add_args();
      a->set_tensor(i);
      a->add_shape(n);
      a->set_dtype(v1::DTYPE_FLOAT32);
    }
    return s;
  };
  const v1::KernelSignature small = signature(kN);
  std::vector<float> twice = RandomInput(small, 0, 41);
  for (float& v : twice) v *= 2;
  const std::string so =
      BuildKernel(dir, "seeded", "for (long i = 0; i < n; ++i) out[i] = 2 * in[i];");
  SandboxOutcome ok = MeasureInSandboxFromSeed(so, small.SerializeAsString(), 41, kN, twice, {});
  EXPECT_EQ(ok.status, Status::kOk) << ok.error;
  SandboxOutcome other_seed =
      MeasureInSandboxFromSeed(so, small.SerializeAsString(), 42, kN, twice, {});
  EXPECT_EQ(other_seed.status, Status::kWrongResult) << other_seed.error;

  // 960 MB of input against a 1 GiB allowance: within the signature check
  // (which counts the arguments, not the copies the runner makes), beyond
  // what the runner may map. The kernel never runs (it would read out of
  // bounds: n is 4096, the output 4096 too).
  SandboxOptions limited;
  limited.memory_limit_bytes = int64_t{1} << 30;
  v1::KernelSignature big = signature(kN);
  big.mutable_args(0)->set_shape(0, int64_t{240} << 20);
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  SandboxOutcome hog = MeasureInSandboxFromSeed(so, big.SerializeAsString(), 41, kN, {}, limited);
  EXPECT_EQ(hog.status, Status::kRuntimeError);
  EXPECT_TRUE(absl::StrContains(hog.error, "do not fit the runner's memory limit")) << hog.error;
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 100 * 1024) << "KiB: the inputs were made here";

  SandboxOutcome garbage = MeasureInSandboxFromSeed(so, "not a signature", 41, kN, {}, {});
  EXPECT_EQ(garbage.status, Status::kRuntimeError);
  EXPECT_TRUE(absl::StrContains(garbage.error, "does not parse")) << garbage.error;
}

// Kernels that try what an attacker's would: each is killed (SIGSYS:
// sandbox_violation; which call is not known) or finds nothing there,
// nothing is written, and the process that measured them carries on. Each
// returns 0 only when its attempt failed quietly.
TEST(Sandbox, HostileKernelsAreKilledOrFindNothing) {
  testing::TempDir dir;
  Data d;
  const std::string copy = "for (long i = 0; i < n; ++i) out[i] = 2 * in[i];\n";
  const std::string dropped = dir.File("dropped");
  struct Attack {
    const char* name;
    std::string body;
    std::string prelude = "";
  };
  const std::vector<Attack> killed = {
      {"write_file", absl::StrCat("FILE* f = fopen(\"", dropped, "\", \"w\"); if (f) return 9;")},
      {"constructor", copy,
       absl::StrCat("__attribute__((constructor)) static void evil(void) { int fd = open(\"",
                    dropped, "\", O_WRONLY | O_CREAT, 0644); if (fd >= 0) write(fd, \"x\", 1); }")},
      {"connect",
       "int s = socket(AF_INET, SOCK_STREAM, 0); struct sockaddr_in a = {0};\n"
       "a.sin_family = AF_INET; a.sin_port = htons(22); a.sin_addr.s_addr = htonl(0x7f000001);\n"
       "if (s >= 0 && connect(s, (struct sockaddr*)&a, sizeof a) == 0) return 9;"},
      {"fork", "pid_t p = fork(); if (p == 0) { for (;;) pause(); } if (p > 0) return 9;"},
      {"exec",
       "char* argv[] = {\"/bin/sh\", \"-c\", \"true\", 0}; execv(argv[0], argv); return 9;"},
      {"kill_parent", "kill(getppid(), SIGKILL); return 9;"},
      // Its own threads: the runner's pool is all there is.
      {"thread", "pthread_t t; if (pthread_create(&t, 0, spin, 0) == 0) return 9;",
       "#include <pthread.h>\nstatic void* spin(void* a) { for (;;) pause(); return a; }"},
  };
  for (const Attack& a : killed) {
    SandboxOutcome r = Measure(BuildKernel(dir, a.name, a.body + copy, a.prelude), d);
    EXPECT_EQ(r.status, Status::kSandboxViolation) << a.name << ": " << r.error;
    EXPECT_TRUE(absl::StrContains(r.error, "system call the sandbox does not allow"))
        << a.name << ": " << r.error;
  }
  EXPECT_TRUE(testing::ReadFileOrEmpty(dropped).empty()) << "a kernel wrote a file";
  EXPECT_NE(access(dropped.c_str(), F_OK), 0) << "a kernel created a file";

  // Reading: in its own empty root there is nothing to read, not this
  // machine's files, nor the measuring process's environment or command
  // line (the bearer token's neighbourhood).
  const std::vector<Attack> find_nothing = {
      {"passwd", "FILE* f = fopen(\"/etc/passwd\", \"r\"); if (f) return 9;"},
      {"parent_environ",
       "char p[64]; snprintf(p, sizeof p, \"/proc/%d/environ\", (int)getppid());\n"
       "FILE* f = fopen(p, \"r\"); if (f) return 9;"},
      {"own_files",
       absl::StrCat("FILE* f = fopen(\"", dir.File("passwd.c"), "\", \"r\"); if (f) return 9;")},
  };
  for (const Attack& a : find_nothing) {
    SandboxOutcome r = Measure(BuildKernel(dir, a.name, a.body + copy, a.prelude), d);
    ASSERT_TRUE(r.namespaces)
        << "the runner could not get its own root here (user namespaces refused?): " << r.error;
    EXPECT_EQ(r.status, Status::kOk) << a.name << ": " << r.error;
  }

  // The measuring process carries on.
  SandboxOutcome ok = Measure(BuildKernel(dir, "after", copy), d);
  EXPECT_EQ(ok.status, Status::kOk) << ok.error;
  EXPECT_TRUE(ok.namespaces);
  EXPECT_TRUE(ok.pid_namespace);
}

// How work done by a child of this process (the agent a kernel attacks)
// ended: what it said, or that the child did not survive it.
struct AgentView {
  bool survived = false;
  std::string how;  // the wait status when it did not survive
  int status = -1;  // the first word it said: a status
  std::string error;  // the rest
};

// Runs `work` in a child of this process and returns what it said (its
// status, a space, its error).
AgentView AsAgent(const std::function<std::string()>& work) {
  int p[2];
  if (pipe(p) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    const std::string line = work();
    (void)!write(p[1], line.data(), line.size());
    _exit(0);
  }
  close(p[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = read(p[0], buf, sizeof(buf))) > 0;) got.append(buf, size_t(n));
  close(p[0]);
  int w = 0;
  waitpid(pid, &w, 0);
  AgentView v;
  v.survived = WIFEXITED(w) && WEXITSTATUS(w) == 0 && !got.empty();
  v.how = WIFSIGNALED(w) ? absl::StrCat("killed by signal ", WTERMSIG(w))
                         : absl::StrCat("exited with ", WEXITSTATUS(w));
  if (v.survived) {
    v.status = std::stoi(got.substr(0, got.find(' ')));
    v.error = got.substr(got.find(' ') + 1);
  }
  return v;
}

// Measures `so` from a child of this process; in[0] is the child's pid,
// so the kernel knows whom to attack.
AgentView MeasureFromAChild(const std::string& so, const Data& d) {
  return AsAgent([&] {
    Data mine = d;
    mine.in[0] = float(getpid());
    mine.twice[0] = 2 * mine.in[0];
    SandboxOutcome r = Measure(so, mine);
    return absl::StrCat(int(r.status), " ", r.error);
  });
}

// A kernel cannot have the kernel signal the agent (issue 67, finding 2):
// F_SETOWN of its report pipe to the agent's pid, F_SETSIG SIGKILL,
// O_ASYNC and a write would kill the agent when it reads. Each of those
// fcntl commands is refused (the runner is killed), and in its own PID
// namespace no pid names the agent or anything else outside.
TEST(Sandbox, KernelsCannotSignalTheAgent) {
  testing::TempDir dir;
  Data d;
  const std::string copy = "for (long i = 0; i < n; ++i) out[i] = 2 * in[i];\n";
  // in[0]: the agent's pid (MeasureFromAChild).
  const std::string attack =
      "int fd = 4; pid_t agent = (pid_t)in[0];\n"
      "fcntl(fd, F_SETOWN, agent); fcntl(fd, F_SETSIG, SIGKILL);\n"
      "fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC);\n"
      "write(fd, \"x\", 1); struct timespec t = {0, 200000000}; nanosleep(&t, 0);\n";
  for (const auto& [name, body] : std::vector<std::pair<std::string, std::string>>{
           {"async_kill_agent", attack},
           {"async_kill_parent", absl::StrCat(
                "int fd = 4; fcntl(fd, F_SETOWN, getppid()); fcntl(fd, F_SETSIG, SIGKILL);\n"
                "fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC); write(fd, \"x\", 1);\n")}}) {
    AgentView v = MeasureFromAChild(BuildKernel(dir, name, body + copy), d);
    ASSERT_TRUE(v.survived) << name << ": the measuring process was " << v.how;
    EXPECT_EQ(v.status, int(Status::kSandboxViolation)) << name << ": " << v.error;
    EXPECT_TRUE(absl::StrContains(v.error, "system call the sandbox does not allow"))
        << name << ": " << v.error;
  }
  // Each command alone, on the report pipe and on the request file.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"setown", "fcntl(4, F_SETOWN, getpid());"},
      {"setown_ex", "struct f_owner_ex o = {F_OWNER_PID, getpid()}; fcntl(4, F_SETOWN_EX, &o);"},
      {"setsig", "fcntl(4, F_SETSIG, SIGKILL);"},
      {"o_async", "fcntl(3, F_SETFL, fcntl(3, F_GETFL) | O_ASYNC);"},
      {"setlease", "fcntl(3, F_SETLEASE, F_RDLCK);"},
      {"notify", "fcntl(3, F_NOTIFY, DN_MODIFY);"},
      {"kill_pid1", "kill(1, SIGKILL);"},
      {"kill_group", "kill(0, SIGKILL);"},
  };
  for (const auto& [name, body] : refused) {
    SandboxOutcome r =
        Measure(BuildKernel(dir, name, body + std::string(" return 9;")), d);
    EXPECT_EQ(r.status, Status::kSandboxViolation) << name << ": " << r.error;
  }
  // What the C library needs of fcntl still works: descriptor flags,
  // status flags (O_NONBLOCK), duplicates.
  SandboxOutcome flags = Measure(
      BuildKernel(dir, "fcntl_flags",
                  "int fl = fcntl(3, F_GETFL); if (fl < 0) return 9;\n"
                  "if (fcntl(3, F_SETFL, fl | O_NONBLOCK) != 0) return 9;\n"
                  "if (fcntl(3, F_SETFD, FD_CLOEXEC) != 0 || fcntl(3, F_GETFD) != FD_CLOEXEC)"
                  " return 9;\n"
                  "int dup = fcntl(3, F_DUPFD_CLOEXEC, 10); if (dup < 10) return 9; close(dup);\n" +
                      copy),
      d);
  EXPECT_EQ(flags.status, Status::kOk) << flags.error;
  // No agent in sight: the runner's parent is its namespace's init.
  SandboxOutcome alone = Measure(
      BuildKernel(dir, "alone", "if (getppid() != 1 || getpid() < 2) return 9;\n" + copy), d);
  EXPECT_EQ(alone.status, Status::kOk) << alone.error;
  EXPECT_TRUE(alone.pid_namespace);
}

// A kernel's writes to fds 0-2 reach /dev/null, not the agent's terminal,
// log or journal; its request (fd 3) cannot be written.
TEST(Sandbox, KernelsWriteNowhereButTheirReport) {
  testing::TempDir dir;
  Data d;
  const std::string copy = "for (long i = 0; i < n; ++i) out[i] = 2 * in[i];\n";
  const std::string so = BuildKernel(
      dir, "loud",
      "struct stat st; for (int fd = 0; fd <= 2; ++fd) {\n"
      "  if (fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) || st.st_rdev != makedev(1, 3))"
      " return 9;\n"
      "  (void)!write(fd, \"TF-INJECTED-LINE\\n\", 17); }\n"
      "char c; if (read(0, &c, 1) != 0) return 9;\n" +
          copy,
      "#include <sys/stat.h>\n#include <sys/sysmacros.h>");
  std::fflush(stdout);
  std::fflush(stderr);
  const std::string captured = dir.File("captured");
  const int saved_out = dup(1), saved_err = dup(2);
  const int capture = open(captured.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(saved_out >= 0 && saved_err >= 0 && capture >= 0);
  dup2(capture, 1);
  dup2(capture, 2);
  SandboxOutcome r = Measure(so, d);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  for (int fd : {saved_out, saved_err, capture}) close(fd);
  EXPECT_EQ(r.status, Status::kOk) << r.error;
  EXPECT_FALSE(absl::StrContains(testing::ReadFileOrEmpty(captured), "TF-INJECTED-LINE"))
      << "the kernel wrote to the measuring process's stdout or stderr";

  SandboxOutcome request = Measure(
      BuildKernel(dir, "rewrite_request",
                  "if (write(3, \"x\", 1) >= 0) return 9;\n"
                  "if ((fcntl(3, F_GETFL) & O_ACCMODE) != O_RDONLY) return 9;\n"
                  "void* m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, 3, 0);\n"
                  "if (m != MAP_FAILED) return 9;\n" +
                      copy,
                  "#include <sys/mman.h>"),
      d);
  EXPECT_EQ(request.status, Status::kOk) << request.error;
}

// A kernel in C++ that speaks the runner's wire (sandbox_wire.h) itself:
// Forge(out, cost, repeats, show, wait) writes the checking run's message
// with `out` (when `show`), waits for the agent's go (when `wait`), writes
// an OK report of `repeats` costs of `cost` seconds, one run each; Exit()
// ends the process as the runner would.
std::string BuildForger(const testing::TempDir& dir, const std::string& name,
                        const std::string& body) {
  std::string cc = dir.File(name + ".cc"), so = dir.File(name + ".so");
  std::ofstream(cc)
      << "#include <signal.h>\n#include <sys/socket.h>\n#include <unistd.h>\n"
      << "#include \"device_agent/runtime/sandbox_wire.h\"\n"
      << "namespace wire = tunefarm::runtime::wire;\n"
      << "static void Forge(const float* out, double cost, int repeats, bool show, bool wait) {\n"
      << "  if (show) {\n"
      << "    wire::Checked c{}; c.magic = wire::kMagic; c.kind = wire::MessageKind::kChecked;\n"
      << "    wire::WriteAll(4, &c, sizeof c); wire::WriteAll(4, out, " << kN << " * 4);\n"
      << "  }\n"
      << "  if (wait) { char g; if (read(5, &g, 1) != 1) _exit(0); }\n"
      << "  wire::RunReport r{}; r.magic = wire::kMagic; r.kind = wire::MessageKind::kReport;\n"
      << "  r.status = wire::RunStatus::kOk; r.repeats = repeats; r.inner = 1;\n"
      << "  for (int i = 0; i < repeats; ++i) r.costs[i] = cost;\n"
      << "  wire::WriteAll(4, &r, sizeof r);\n"
      << "}\n"
      << "static void on_sys(int, siginfo_t*, void*) {}\n"
      << "extern \"C\" int32_t tf_main(void* const* b, const void*) {\n"
      << "  const float* in = (const float*)b[0]; float* out = (float*)b[1];\n"
      << "  long n = " << kN << ";\n"
      << "  for (long i = 0; i < n; ++i) out[i] = 2 * in[i];\n"
      << body << "\n  return 0;\n}\n";
  testing::CommandResult r = testing::RunCommand(
      {"/usr/bin/c++", "-O2", "-std=c++17", "-shared", "-fPIC", "-I", TF_SOURCE_DIR, "-o", so, cc},
      dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return testing::ReadFileOrEmpty(so);
}

// The report of a run comes from the agent's side, not from the kernel
// (issue 67, finding 3): a kernel that writes the runner's messages itself
// cannot make a refused call look survived, a wrong output look right, or
// claim timings it was not seen to take.
TEST(Sandbox, KernelsCannotSpeakForTheRunner) {
  testing::TempDir dir;
  Data d;
  struct Forgery {
    const char* name;
    std::string body;
    Status want;
    const char* error;  // what the outcome's error says
  };
  const std::vector<Forgery> forgeries = {
      // Its own SIGSYS handler, 18 refused calls, then "OK, 1.234 ms": the
      // first refused call kills it.
      {"own_sigsys_handler",
       "struct sigaction sa = {}; sa.sa_sigaction = on_sys; sa.sa_flags = SA_SIGINFO;\n"
       "sigaction(SIGSYS, &sa, 0);\n"
       "for (int k = 0; k < 18; ++k) socket(AF_INET, SOCK_STREAM, 0);\n"
       "Forge(out, 1.234e-3, 5, true, false); _exit(0);",
       Status::kSandboxViolation, "system call the sandbox does not allow"},
      // A whole OK exchange first, then a refused call.
      {"report_then_refused",
       "Forge(out, 1.234e-3, 5, true, true); socket(AF_INET, SOCK_STREAM, 0); _exit(0);",
       Status::kSandboxViolation, "system call the sandbox does not allow"},
      // "OK" with an output that is not the kernel's right one.
      {"wrong_output_said_ok", "out[5] += 1; Forge(out, 1.234e-3, 5, true, true); _exit(0);",
       Status::kWrongResult, "output 5 off by"},
      // A report with no output shown.
      {"report_without_output", "Forge(out, 1.234e-3, 5, false, false); _exit(0);",
       Status::kRuntimeError, "without showing the kernel's output"},
      // Five repeats of a second each, reported at once after the go.
      {"timings_longer_than_the_run", "Forge(out, 1.0, 5, true, true); _exit(0);",
       Status::kRuntimeError, "more than the"},
      // More repeats than were asked for.
      {"more_repeats", "Forge(out, 1e-6, 64, true, true); _exit(0);", Status::kRuntimeError,
       "64 repeats"},
  };
  for (const Forgery& f : forgeries) {
    SandboxOutcome r = Measure(BuildForger(dir, f.name, f.body), d);
    EXPECT_EQ(r.status, f.want) << f.name << ": " << r.error;
    EXPECT_TRUE(absl::StrContains(r.error, f.error)) << f.name << ": " << r.error;
  }
}

// The model runner (RunModel) is confined the same way: a package whose
// kernel's constructor attacks the agent that runs it (its pid baked in),
// or survives refused calls in its own SIGSYS handler and writes an OK
// result, is a sandbox violation, and the agent lives on.
TEST(Sandbox, ModelRunnersAreConfinedTheSameWay) {
  testing::TempDir dir;
  const std::vector<std::pair<std::string, std::string>> constructors = {
      {"model_async_kill",
       "int fd = 4; fcntl(fd, F_SETOWN, AGENT); fcntl(fd, F_SETSIG, SIGKILL);\n"
       "fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC); write(fd, \"x\", 1);\n"
       "struct timespec t = {0, 200000000}; nanosleep(&t, 0);"},
      {"model_forged_ok",
       "struct sigaction sa = {0}; sa.sa_sigaction = on_sys; sa.sa_flags = SA_SIGINFO;\n"
       "sigaction(SIGSYS, &sa, 0);\n"
       "for (int k = 0; k < 18; ++k) socket(AF_INET, SOCK_STREAM, 0);\n"
       "write(4, \"\\x08\\x01\", 2); _exit(0);"},
  };
  for (const auto& [name, body] : constructors) {
    AgentView v = AsAgent([&, name = name, body = body] {
      const std::string c = dir.File(name + ".c"), so = dir.File(name + ".so");
      std::ofstream(c) << "#include <fcntl.h>\n#include <signal.h>\n#include <stdint.h>\n"
                       << "#include <sys/socket.h>\n#include <time.h>\n#include <unistd.h>\n"
                       << "#define AGENT " << getpid() << "\n"
                       << "static void on_sys(int s, siginfo_t* i, void* c) {}\n"
                       << "__attribute__((constructor)) static void attack(void) {\n"
                       << body << "\n}\n"
                       << "int32_t tf_main(void* const* b, const void* rt) { return 0; }\n";
      testing::CommandResult built = testing::RunCommand(
          {"/usr/bin/cc", "-D_GNU_SOURCE", "-shared", "-fPIC", "-o", so, c}, dir.path());
      if (built.exit_code != 0) return "-1 " + built.err;
      v1::ModelPackage pkg;
      pkg.set_format_version(kPackageFormatVersion);
      pkg.set_target("llvm");
      v1::PackageKernel* k = pkg.add_kernels();
      k->set_workload_key("attack");
      k->set_shared_object(testing::ReadFileOrEmpty(so));
      for (int i = 0; i < 2; ++i) {
        v1::KernelArgument* a = k->mutable_signature()->add_args();
        a->set_tensor(i);
        a->add_shape(4);
        a->set_dtype(v1::DTYPE_FLOAT32);
      }
      v1::ModelRunRequest req;
      req.set_package(pkg.SerializeAsString());
      req.set_time_limit_s(20);
      v1::ModelRunResult r = MeasureModel(req, {});
      return absl::StrCat(int(r.status()), " ", r.error());
    });
    ASSERT_TRUE(v.survived) << name << ": the agent was " << v.how;
    EXPECT_EQ(v.status, int(v1::MEASURE_STATUS_SANDBOX_VIOLATION)) << name << ": " << v.error;
    EXPECT_TRUE(absl::StrContains(v.error, "system call the sandbox does not allow"))
        << name << ": " << v.error;
  }
}

}  // namespace
}  // namespace tunefarm::runtime
