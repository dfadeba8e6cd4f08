// A job's tuning curves from its records: what `tunefarm plot` draws and
// the server's dashboard shows. The model's estimated time (sum of weight x
// best over the tasks with a best) and each task's best GFLOP/s so far, a
// point per trial, in record order. Failed trials count as trials and do
// not move a curve.
#pragma once

#include <vector>

#include "tunefarm/v1/records.pb.h"

namespace tunefarm {

struct TuningCurves {
  struct Point {
    double x, y;
  };
  std::vector<Point> model_ms;                // x: minutes since the first record
  std::vector<std::vector<Point>> by_trial;   // per task (job order): x the task's trial
  std::vector<std::vector<Point>> by_minute;  // per task: x minutes since the first record
};

TuningCurves CurvesOf(const v1::Job& job, std::vector<v1::Record> records);

}  // namespace tunefarm
