// The graph runtime: loads a ModelPackage (its kernels through the kernel
// runtime of device_agent/runner.h, its weights, its memory plan) and runs
// it: compiled kernels for the tasks, native operators for the rest.
//
//   TF_ASSIGN_OR_RETURN(auto rt, runtime::GraphRuntime::Load(pkg, {.threads = 2}));
//   TF_RETURN_IF_ERROR(rt->Run(inputs, &outputs));
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/float16.h"
#include "proto/model_graph.h"
#include "device_agent/runtime/runner.h"
#include "tunefarm/v1/package.pb.h"

namespace tunefarm::runtime {

// The package format's graph (proto/model_graph.h), as the runtime runs it.
using graph::Constant;
using graph::Node;
using graph::Numel;

// The ModelPackage formats (2: kernels carry their KernelSignature; 3: view
// steps, value offsets on any float; 4: a precision, 16-bit values): the
// newest this build writes (for 16-bit packages; float32 ones are written
// as 3, which older runtimes read) and the oldest it reads.
inline constexpr int kPackageFormatVersion = 4;
inline constexpr int kFloat32PackageFormatVersion = 3;
inline constexpr int kOldestPackageFormatVersion = 2;

// The bytes of one arena value element of `pkg` (its precision): 4, or 2
// for float16 and bfloat16.
int64_t ValueBytes(const ::tunefarm::v1::ModelPackage& pkg);

// A package's native node as the runtime reads it.
Node FromPackage(const ::tunefarm::v1::PackageNode& p);
// A package's constant; InvalidArgument when its data does not fill its
// shape. A 16-bit constant (PackageTensor.f16) is read in format `half`, the
// package's; one where `half` is unset is refused.
absl::StatusOr<Constant> FromPackage(const ::tunefarm::v1::PackageTensor& t,
                                     std::optional<HalfKind> half = std::nullopt);

class GraphRuntime {
 public:
  struct Options {
    int threads = 1;
    // Every value gets its own buffer (no arena sharing), so Value() can
    // read any of them after Run (for checking against a reference).
    bool keep_values = false;
    // Time every step (StepSeconds after Run).
    bool profile = false;
    // Where the package's kernel libraries already lie, one path per kernel
    // (a confined runner placed them, confine.h); empty: written from the
    // package's bytes to private files.
    std::vector<std::string> library_paths;
    // Runs the kernels when given (it outlives the runtime; `threads` is
    // then its size): a confined runner starts it before its filter.
    runtime::ThreadPool* pool = nullptr;
  };
  static absl::StatusOr<std::unique_ptr<GraphRuntime>> Load(const v1::ModelPackage& package,
                                                            const Options& options);
  // Reads and parses a package file; a file that is not one is an error that says so.
  static absl::StatusOr<v1::ModelPackage> ReadPackage(const std::string& path);
  // Parses package bytes; `what` names them in the error ("model.tfpkg").
  static absl::StatusOr<v1::ModelPackage> ParsePackage(const std::string& bytes,
                                                       const std::string& what);
  ~GraphRuntime();

  const v1::ModelPackage& package() const;
  std::vector<int64_t> Shape(const std::string& value) const;  // empty if unknown

  // One tensor per package input (row-major float32, the input's shape).
  absl::Status Run(const std::map<std::string, std::vector<float>>& inputs,
                   std::map<std::string, std::vector<float>>* outputs);
  // One tensor per package input, uniform in [-1, 1) from `seed`: the inputs
  // `tunefarm run --seed` makes here and an agent makes for a farm run.
  std::map<std::string, std::vector<float>> SeededInputs(uint64_t seed) const;
  // A value of the last run (keep_values, or an input/output).
  absl::StatusOr<std::vector<float>> Value(const std::string& name) const;
  // Seconds per step of the last run (profile), and a label per step.
  const std::vector<double>& StepSeconds() const;
  std::string StepLabel(int step) const;

 private:
  struct Impl;
  explicit GraphRuntime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The shape of `value` in `package` (its PackageValue; empty if unknown),
// and a label for step `step` ("tuned conv2d ...", "Resize /up/Resize"):
// what GraphRuntime::Shape and StepLabel say once it is loaded.
std::vector<int64_t> ValueShape(const v1::ModelPackage& package, const std::string& value);
std::string StepLabel(const v1::ModelPackage& package, int step);

// Where a profiled run's time went (seconds): kernel steps whose kernel is
// tuned, kernel steps on default schedules, native operator steps.
struct TimeShares {
  // `native`: native operator steps other than layout flips; `layout`: the
  // Transpose steps a build adds where NCHW and channels-last values meet.
  double tuned = 0, default_kernels = 0, native = 0, layout = 0;
  double total() const { return tuned + default_kernels + native + layout; }
};
// Whether `n` is a layout flip a build added: a Transpose between a value's
// NCHW form and its channels-last one (NAME@nhwc).
bool IsLayoutFlip(const v1::PackageNode& n);
// `step_seconds`: GraphRuntime::StepSeconds of a run of `package` (summed
// over runs, or not).
TimeShares SharesOf(const v1::ModelPackage& package, const std::vector<double>& step_seconds);

}  // namespace tunefarm::runtime
