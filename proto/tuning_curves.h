// A job's tuning curves from its records: what `tunefarm plot` draws and
// the server's dashboard shows. A point per trial, in record order; failed
// trials count as trials and do not move a curve. A task's best is the
// fastest mean of an OK record that ranks (not waiting for, or refused by,
// a second device's check: as the job's best).
#pragma once

#include <vector>

#include "tunefarm/v1/records.pb.h"

namespace tunefarm {

struct TuningCurves {
  struct Point {
    double x, y;
  };
  // The model's estimated time, sum of weight x best over the tasks, from
  // the first trial after which every task has a best: so it never rises.
  // x: minutes since the first record.
  std::vector<Point> model_ms;
  std::vector<std::vector<Point>> by_trial;   // per task (job order): x the task's trial
  std::vector<std::vector<Point>> by_minute;  // per task: x minutes since the first record
};

TuningCurves CurvesOf(const v1::Job& job, std::vector<v1::Record> records);

// Whether `r` can be a task's best: OK with timings, and ranking.
bool Ranks(const v1::Record& r);

// The mean of `r`'s timings (0 without any).
double MeanCostSec(const v1::Record& r);

}  // namespace tunefarm
