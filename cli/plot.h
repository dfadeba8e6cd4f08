// `tunefarm plot JOB -o curves.svg`: a job's tuning curves as one SVG
// (proto/svg_chart.h draws each panel). A first panel shows the model's
// estimated time (sum of weight x best over its tasks) over the job's
// minutes, from when every task has a time; then a row per task: its best
// GFLOP/s so far over its trials, and over the job's minutes.
#pragma once

#include <string>
#include <vector>

#include "tunefarm/v1/records.pb.h"

namespace tunefarm::cli {

// `records`: the job's records, any order. Failed trials count as trials
// and do not move a curve.
std::string TuningCurvesSvg(const v1::Job& job, const std::vector<v1::Record>& records);

}  // namespace tunefarm::cli
