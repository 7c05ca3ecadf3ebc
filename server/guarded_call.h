#ifndef ECHO_SERVER_GUARDED_CALL_H_
#define ECHO_SERVER_GUARDED_CALL_H_

#include <exception>
#include <functional>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace echo::server {

// Runs a request handler so that nothing escapes it: an exception (e.g.
// std::bad_alloc under the pod's memory limit) becomes INTERNAL with a
// message naming the method, so the caller always completes the call and
// releases its admission slot.
inline absl::Status RunGuarded(const char* method,
                               const std::function<absl::Status()>& handler) {
  try {
    return handler();
  } catch (const std::bad_alloc&) {
    return absl::InternalError(
        absl::StrCat(method, ": out of memory while serving the request"));
  } catch (const std::exception& error) {
    return absl::InternalError(
        absl::StrCat(method, ": unexpected error: ", error.what()));
  } catch (...) {
    return absl::InternalError(
        absl::StrCat(method, ": unexpected non-standard exception"));
  }
}

}  // namespace echo::server

#endif  // ECHO_SERVER_GUARDED_CALL_H_
