// Authentication and per-method authorization of echo.v1.MemoryPlanner
// calls: optional bearer tokens (--auth_token_file) and identities allowed
// to profile (--profile_allowed_identities). Client certificates are
// verified by TLS itself (--tls_client_ca_file); their identities (CN and
// SANs) arrive here through the call's auth context.
//
// The health and reflection services are not checked: the kubelet's probes
// carry no credentials, and reflection only describes the API.
#ifndef ECHO_SERVER_CALL_AUTHORIZER_H_
#define ECHO_SERVER_CALL_AUTHORIZER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace echo::server {

struct AuthOptions {
  // One token per line, or "identity token"; blank lines and lines starting
  // with '#' are skipped. Empty: no token needed.
  std::string token_file;
  // Identities (token identities, client certificate CNs or SANs) that may
  // call ProfileOps. Empty: every caller that authenticated may.
  std::vector<std::string> profile_allowed_identities;
};

// What a call presents: its "authorization" metadata and the identities of
// its verified client certificate (none on plaintext or the Unix socket).
struct CallerCredentials {
  std::optional<std::string> authorization;
  std::vector<std::string> certificate_identities;
};

class CallAuthorizer {
 public:
  struct Token {
    std::string identity;  // empty for a bare token
    std::string secret;
  };

  // Reads options.token_file. INVALID_ARGUMENT (naming the file and line)
  // for a malformed file, NOT_FOUND when it cannot be read.
  static absl::StatusOr<std::unique_ptr<CallAuthorizer>> Create(
      const AuthOptions& options);
  // The tokens in a token file's text; `source` names it in errors.
  static absl::StatusOr<std::vector<Token>> ParseTokens(
      absl::string_view text, absl::string_view source);
  static CallerCredentials CredentialsOf(
      const grpc::CallbackServerContext& context);

  CallAuthorizer(std::vector<Token> tokens,
                 std::vector<std::string> profile_allowed_identities);

  // OK, UNAUTHENTICATED (missing or unknown token) or PERMISSION_DENIED
  // (the method is restricted and no identity of the caller is allowed),
  // each naming `method`.
  absl::Status Authorize(absl::string_view method,
                         const CallerCredentials& caller) const;

  bool requires_token() const { return !tokens_.empty(); }
  bool restricts_profiling() const { return !profile_allowed_.empty(); }

 private:
  // The token's entry, or nullptr; compares every token in constant time
  // per byte so that timing does not reveal a prefix.
  const Token* FindToken(absl::string_view secret) const;

  std::vector<Token> tokens_;
  std::vector<std::string> profile_allowed_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_CALL_AUTHORIZER_H_
