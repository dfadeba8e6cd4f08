// The dashboard served at / of --http_listen: one static page (HTML, CSS
// and JS in the binary) that polls /api/state every 2 s and draws the farm:
// devices with their state, queues, and the newest jobs with their
// progress and tuning curves (proto/tuning_curves.h) as inline SVG.
// Read-only; the page passes on the ?token= it was opened with.
#pragma once

#include <string>

#include "server/metrics.h"

namespace tunefarm::server {

const std::string& DashboardHtml();

// The state the page draws, as JSON: devices, queues, leases in flight and
// the `max_jobs` newest jobs with their curves.
std::string DashboardState(const MetricsSources& sources, int max_jobs = 5);

}  // namespace tunefarm::server
