// Helpers shared by the service's handler files.
#ifndef ECHO_SERVER_CALL_CONTEXT_H_
#define ECHO_SERVER_CALL_CONTEXT_H_

#include "echo/v1/device.pb.h"

namespace echo::server {

// Whether a request's device field names a device at all.
inline bool NamesDevice(const v1::DeviceSpec& device) {
  return !device.name().empty() || device.memory_bytes() != 0 ||
         device.peak_flops_size() > 0 ||
         device.memory_bandwidth_bytes_per_second() != 0;
}

}  // namespace echo::server

#endif  // ECHO_SERVER_CALL_CONTEXT_H_
