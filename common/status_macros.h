// Status propagation macros for absl::Status / absl::StatusOr (Debian's Abseil
// 20220623 has none of its own).
//
//   TF_RETURN_IF_ERROR(db.Commit(batch));
//   TF_ASSIGN_OR_RETURN(auto target, Target::Parse(spec));
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TF_STATUS_CONCAT_INNER_(a, b) a##b
#define TF_STATUS_CONCAT_(a, b) TF_STATUS_CONCAT_INNER_(a, b)

#define TF_RETURN_IF_ERROR(expr)                        \
  do {                                                  \
    ::absl::Status tf_status_ = (expr);                 \
    if (!tf_status_.ok()) return tf_status_;            \
  } while (0)

#define TF_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(*tmp)

#define TF_ASSIGN_OR_RETURN(lhs, expr) \
  TF_ASSIGN_OR_RETURN_IMPL_(TF_STATUS_CONCAT_(tf_statusor_, __LINE__), lhs, expr)

// Invariant check for programmer errors: logs and aborts. Not for bad input.
#define TF_CHECK(cond)                                                        \
  do {                                                                        \
    if (!(cond)) ::tunefarm::internal::CheckFailed(__FILE__, __LINE__, #cond); \
  } while (0)

namespace tunefarm::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond);
}  // namespace tunefarm::internal
