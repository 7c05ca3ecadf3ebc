// Caller text (ids in error messages, peers) as it goes into echod's log:
// control characters escaped, so that a caller cannot end a log line and
// forge the next one, or send terminal escape sequences to whoever reads it.
#ifndef ECHO_SERVER_LOG_TEXT_H_
#define ECHO_SERVER_LOG_TEXT_H_

#include <string>
#include <string_view>

namespace echo::server {

// \n, \r and \t as such, other bytes below 0x20 and 0x7f as \xNN, and the
// backslash doubled (so an escape in the log is always echod's).
std::string LogText(std::string_view text);

}  // namespace echo::server

#endif  // ECHO_SERVER_LOG_TEXT_H_
