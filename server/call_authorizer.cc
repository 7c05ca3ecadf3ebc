#include "server/call_authorizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"
#include "planner/status_macros.h"
#include "server/read_file.h"
#include "spdlog/spdlog.h"

namespace echo::server {

namespace {

// Short tokens can be guessed; 16 characters of a random token is ~96 bits.
constexpr size_t kMinTokenLength = 16;
constexpr absl::string_view kBearerPrefix = "bearer ";

// Methods only listed identities may call: ProfileOps runs kernels on the
// node's GPUs, next to the training jobs.
bool IsIdentityRestricted(absl::string_view method) {
  return method == "ProfileOps";
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t length = std::max(a.size(), b.size());
  unsigned char difference = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < length; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    difference |= x ^ y;
  }
  return difference == 0;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile("--auth_token_file", path));
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && (info.st_mode & S_IROTH) != 0) {
    spdlog::warn("{} is readable by every user; chmod 0600 or 0640 it", path);
  }
  return text;
}

}  // namespace

absl::StatusOr<std::vector<CallAuthorizer::Token>> CallAuthorizer::ParseTokens(
    absl::string_view text, absl::string_view source) {
  std::vector<Token> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const auto where = [&] { return absl::StrCat(source, ":", line_number); };
    if (fields.size() > 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": expected 'TOKEN' or 'IDENTITY TOKEN', got ",
                       fields.size(), " fields"));
    }
    Token token;
    token.secret = std::string(fields.back());
    if (fields.size() == 2) token.identity = std::string(fields.front());
    if (token.secret.size() < kMinTokenLength) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": token shorter than ", kMinTokenLength,
                       " characters (e.g. `openssl rand -hex 32`)"));
    }
    for (const Token& other : tokens) {
      if (other.secret == token.secret) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": duplicate token"));
      }
    }
    tokens.push_back(std::move(token));
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no tokens"));
  }
  return tokens;
}

absl::StatusOr<std::unique_ptr<CallAuthorizer>> CallAuthorizer::Create(
    const AuthOptions& options) {
  std::vector<Token> tokens;
  if (!options.token_file.empty()) {
    ASSIGN_OR_RETURN(const std::string text, ReadTokenFile(options.token_file));
    ASSIGN_OR_RETURN(tokens, ParseTokens(text, options.token_file));
  }
  for (const std::string& identity : options.profile_allowed_identities) {
    if (identity.empty()) {
      return absl::InvalidArgumentError(
          "--profile_allowed_identities has an empty identity");
    }
  }
  return std::make_unique<CallAuthorizer>(std::move(tokens),
                                          options.profile_allowed_identities);
}

CallAuthorizer::CallAuthorizer(
    std::vector<Token> tokens,
    std::vector<std::string> profile_allowed_identities)
    : tokens_(std::move(tokens)),
      profile_allowed_(std::move(profile_allowed_identities)) {}

CallerCredentials CallAuthorizer::CredentialsOf(
    const grpc::CallbackServerContext& context) {
  CallerCredentials caller;
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    caller.authorization = std::string(it->second.data(), it->second.size());
  }
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  // Only a certificate that TLS verified (the peer is authenticated) counts.
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const char* property :
         {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
      for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
        caller.certificate_identities.emplace_back(value.data(), value.size());
      }
    }
  }
  return caller;
}

const CallAuthorizer::Token* CallAuthorizer::FindToken(
    absl::string_view secret) const {
  const Token* found = nullptr;
  for (const Token& token : tokens_) {
    if (ConstantTimeEquals(token.secret, secret)) found = &token;
  }
  return found;
}

absl::Status CallAuthorizer::Authorize(absl::string_view method,
                                       const CallerCredentials& caller) const {
  std::vector<absl::string_view> identities(
      caller.certificate_identities.begin(),
      caller.certificate_identities.end());
  if (requires_token()) {
    const std::string header = caller.authorization.value_or("");
    if (header.size() <= kBearerPrefix.size() ||
        !absl::StartsWithIgnoreCase(header, kBearerPrefix)) {
      return absl::UnauthenticatedError(absl::StrCat(
          method,
          ": no bearer token; send metadata 'authorization: Bearer <token>' "
          "(echoctl: --auth_token_file or ECHOCTL_AUTH_TOKEN_FILE; "
          "echo_torch: ECHO_TORCH_TOKEN)"));
    }
    const Token* token = FindToken(absl::StripAsciiWhitespace(
        absl::string_view(header).substr(kBearerPrefix.size())));
    if (token == nullptr) {
      return absl::UnauthenticatedError(absl::StrCat(
          method, ": the bearer token is not valid for this echod"));
    }
    if (!token->identity.empty()) identities.push_back(token->identity);
  }
  // A certificate's CN and SAN, or a token and a certificate, often name
  // the same identity: each is listed once.
  std::vector<absl::string_view> distinct;
  for (absl::string_view identity : identities) {
    if (std::find(distinct.begin(), distinct.end(), identity) ==
        distinct.end()) {
      distinct.push_back(identity);
    }
  }
  identities = std::move(distinct);
  if (IsIdentityRestricted(method) && restricts_profiling()) {
    for (absl::string_view identity : identities) {
      if (std::find(profile_allowed_.begin(), profile_allowed_.end(),
                    identity) != profile_allowed_.end()) {
        return absl::OkStatus();
      }
    }
    return absl::PermissionDeniedError(absl::StrCat(
        method, ": caller ",
        identities.empty()
            ? std::string("(no identity)")
            : absl::StrCat("'", absl::StrJoin(identities, "', '"), "'"),
        " is not in --profile_allowed_identities"));
  }
  return absl::OkStatus();
}

}  // namespace echo::server
