// Helpers shared by the service's handler files.
#ifndef ECHO_SERVER_CALL_CONTEXT_H_
#define ECHO_SERVER_CALL_CONTEXT_H_

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "echo/v1/device.pb.h"

namespace echo::server {

// CheckFit's device_names entry that stands for every catalog device, in
// any case (device names match in any case too).
inline bool NamesAllDevices(absl::string_view name) {
  return absl::EqualsIgnoreCase(name, "all");
}

}  // namespace echo::server

#endif  // ECHO_SERVER_CALL_CONTEXT_H_
