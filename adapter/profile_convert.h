// Planner reports -> proto for the node profiler's answers (ProfileOps,
// GetNodeInfo).
#ifndef ECHO_ADAPTER_PROFILE_CONVERT_H_
#define ECHO_ADAPTER_PROFILE_CONVERT_H_

#include "echo/v1/planner.pb.h"
#include "planner/node_report.h"

namespace echo::adapter {

void ProfileReportToProto(const planner::ProfileReport& report,
                          v1::ProfileOpsResponse* response);

// Everything but server_version, which is the server's.
void NodeReportToProto(const planner::NodeReport& report,
                       v1::GetNodeInfoResponse* response);

}  // namespace echo::adapter

#endif  // ECHO_ADAPTER_PROFILE_CONVERT_H_
