// Reads a whole (small) file: tokens, TLS keys, cgroup limits. One reader
// for every file echod reads whole, so that each says the same when it
// cannot.
#ifndef ECHO_SERVER_READ_FILE_H_
#define ECHO_SERVER_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace echo::server {

// The file's bytes, or NOT_FOUND "<what>: cannot read <path>: <errno text>".
absl::StatusOr<std::string> ReadWholeFile(absl::string_view what,
                                          const std::string& path);

}  // namespace echo::server

#endif  // ECHO_SERVER_READ_FILE_H_
