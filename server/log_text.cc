#include "server/log_text.h"

#include "absl/strings/str_format.h"

namespace echo::server {

std::string LogText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (byte < 0x20 || byte == 0x7f) {
          absl::StrAppendFormat(&out, "\\x%02x", byte);
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace echo::server
