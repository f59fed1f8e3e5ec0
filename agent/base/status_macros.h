// Status propagation macros. Debian 12's abseil (20220623) has no
// absl/status/status_macros.h; these are named so they can be swapped later.
#ifndef FABRIC_AGENT_BASE_STATUS_MACROS_H_
#define FABRIC_AGENT_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FABRIC_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status fabric_status_ = (expr);          \
    if (!fabric_status_.ok()) return fabric_status_; \
  } while (0)

#define FABRIC_STATUS_CONCAT_INNER_(a, b) a##b
#define FABRIC_STATUS_CONCAT_(a, b) FABRIC_STATUS_CONCAT_INNER_(a, b)

#define FABRIC_ASSIGN_OR_RETURN(lhs, expr) \
  FABRIC_ASSIGN_OR_RETURN_IMPL_(FABRIC_STATUS_CONCAT_(fabric_statusor_, __LINE__), lhs, expr)

#define FABRIC_ASSIGN_OR_RETURN_IMPL_(var, lhs, expr) \
  auto var = (expr);                                  \
  if (!var.ok()) return std::move(var).status();      \
  lhs = std::move(var).value()

#endif  // FABRIC_AGENT_BASE_STATUS_MACROS_H_
