// Every skip in the suite starts with its cause in brackets, so the test
// report (scripts/test-report.py) can tell a skip the machine may have (no
// GPU) from one it must not (a toolkit, model or package the project's own
// scripts install). The causes:
//   no-gpu           no NVIDIA GPU or driver on this machine
//   has-gpu          the no-driver path, on a machine that has a driver
//   no-cuda-toolkit  this build found no CUDA toolkit (NVRTC)
//   no-models        scripts/fetch-models.sh has not been run (or node is missing)
//   no-package       a Debian package of scripts/install-deps.sh is missing
//   gpu-unusable     a GPU, but no toolkit for it or a driver older than the toolkit
#pragma once

#include "gtest/gtest.h"

#define TF_SKIP(cause) GTEST_SKIP() << "[" cause "] "

// The same skip, recorded without returning: for a helper that returns a
// value. The test goes on and is reported as skipped unless it fails.
#define TF_SKIP_NOTE(cause) \
  GTEST_MESSAGE_("", ::testing::TestPartResult::kSkip) << "[" cause "] "
