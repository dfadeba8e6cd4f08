#include "tests/server/test_records.h"

namespace tunefarm::testing {

v1::Workload Conv2d(int64_t c, int64_t k, int64_t hw) {
  v1::Workload w;
  w.set_op(v1::OP_KIND_CONV2D);
  auto* data = w.add_inputs();
  for (int64_t d : {int64_t{1}, c, hw, hw}) data->add_shape(d);
  data->set_dtype(v1::DTYPE_FLOAT32);
  auto* weight = w.add_inputs();
  for (int64_t d : {k, c, int64_t{3}, int64_t{3}}) weight->add_shape(d);
  weight->set_dtype(v1::DTYPE_FLOAT32);
  auto* a = w.mutable_conv2d();
  a->set_layout(v1::DATA_LAYOUT_NCHW);
  for (int i = 0; i < 4; ++i) a->add_pads(1);
  w.add_epilogue()->set_kind(v1::EPILOGUE_KIND_BIAS_ADD);
  w.add_epilogue()->set_kind(v1::EPILOGUE_KIND_RELU);
  return w;
}

v1::Workload Dense(int64_t m, int64_t n, int64_t k) {
  v1::Workload w;
  w.set_op(v1::OP_KIND_DENSE);
  auto* a = w.add_inputs();
  a->add_shape(m);
  a->add_shape(k);
  auto* b = w.add_inputs();
  b->add_shape(n);
  b->add_shape(k);
  return w;
}

v1::Record MakeRecord(const v1::Workload& w, const std::string& target, double mean_sec,
                      int64_t salt, int repeats) {
  v1::Record r;
  *r.mutable_workload() = w;
  r.mutable_target()->set_spec(target);
  auto* split = r.mutable_schedule()->add_steps()->mutable_split();
  split->set_stage(0);
  split->set_iter(1);
  split->add_lengths(salt);
  split->add_lengths(4);
  auto* par = r.mutable_schedule()->add_steps()->mutable_annotate();
  par->set_stage(0);
  par->set_iter(0);
  par->set_annotation(v1::ANNOTATION_PARALLEL);
  r.set_status(v1::MEASURE_STATUS_OK);
  for (int i = 0; i < repeats; ++i) r.add_costs_sec(mean_sec * (1.0 + 0.01 * (i - (repeats - 1) / 2.0)));
  r.set_build_sec(0.25);
  r.set_run_sec(0.5);
  r.set_device_key("x86-avx512");
  r.set_device_id("test-board");
  r.set_timestamp_unix_ms(1700000000000 + salt);
  r.mutable_fingerprint()->set_compiler("tunefarm test");
  return r;
}

}  // namespace tunefarm::testing
