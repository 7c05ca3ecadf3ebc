// Status plumbing for absl::Status / absl::StatusOr, used by the planner,
// the adapter and the server:
//
//   RETURN_IF_ERROR(status_expr);        returns the status when not OK
//   ASSIGN_OR_RETURN(lhs, statusor_expr); returns the status when not OK,
//                                        else moves the value into lhs
//
// lhs may declare a variable (`ASSIGN_OR_RETURN(Graph g, Parse(x));`).
// ASSIGN_OR_RETURN expands to several statements: not after a bare if/else.
#ifndef ECHO_PLANNER_STATUS_MACROS_H_
#define ECHO_PLANNER_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ECHO_STATUS_CONCAT_INNER_(a, b) a##b
#define ECHO_STATUS_CONCAT_(a, b) ECHO_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                     \
  do {                                                            \
    if (::absl::Status echo_status_ = (expr); !echo_status_.ok()) \
      return echo_status_;                                        \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr)                                          \
  ECHO_ASSIGN_OR_RETURN_IMPL_(ECHO_STATUS_CONCAT_(echo_statusor_, __LINE__), \
                              lhs, expr)

#define ECHO_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)   \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // ECHO_PLANNER_STATUS_MACROS_H_
