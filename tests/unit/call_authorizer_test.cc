// Token files and per-method authorization, without a server.
#include "server/call_authorizer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace echo::server {
namespace {

using ::testing::HasSubstr;

constexpr char kAliceToken[] = "alice-0123456789abcdef";
constexpr char kBareToken[] = "bare-0123456789abcdef";

CallAuthorizer TwoTokens(std::vector<std::string> profile_allowed) {
  return CallAuthorizer({{"alice", kAliceToken}, {"", kBareToken}},
                        std::move(profile_allowed));
}

CallerCredentials Bearer(const std::string& token) {
  CallerCredentials caller;
  caller.authorization = "Bearer " + token;
  return caller;
}

TEST(ParseTokensTest, ReadsBareTokensAndIdentityPairs) {
  auto tokens = CallAuthorizer::ParseTokens(
      "# comment\n\n  alice\t alice-0123456789abcdef "
      "\r\nbare-0123456789abcdef\n",
      "tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 2u);
  EXPECT_EQ((*tokens)[0].identity, "alice");
  EXPECT_EQ((*tokens)[0].secret, kAliceToken);
  EXPECT_EQ((*tokens)[1].identity, "");
  EXPECT_EQ((*tokens)[1].secret, kBareToken);
}

TEST(ParseTokensTest, RejectsMalformedFilesNamingTheLine) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"", "tokens: no tokens"},
      {"# only a comment\n", "tokens: no tokens"},
      {"a b c0123456789abcdefgh\n", "tokens:1: expected 'TOKEN' or"},
      {"\nalice short\n", "tokens:2: token shorter than 16"},
      {"a 0123456789abcdef\nb 0123456789abcdef\n", "tokens:2: duplicate"},
  };
  for (const auto& c : cases) {
    const absl::Status status =
        CallAuthorizer::ParseTokens(c.text, "tokens").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.text;
  }
}

TEST(CallAuthorizerTest, TokensAuthenticate) {
  const CallAuthorizer authorizer = TwoTokens({});
  EXPECT_TRUE(authorizer.Authorize("CheckFit", Bearer(kAliceToken)).ok());
  EXPECT_TRUE(authorizer.Authorize("CheckFit", Bearer(kBareToken)).ok());
  CallerCredentials lower_case;
  lower_case.authorization = std::string("bearer ") + kAliceToken;
  EXPECT_TRUE(authorizer.Authorize("CheckFit", lower_case).ok());

  for (const CallerCredentials& caller :
       {CallerCredentials(), Bearer(""), Bearer("alice-0123456789abcde"),
        Bearer(std::string(kAliceToken) + "x")}) {
    const absl::Status status = authorizer.Authorize("CheckFit", caller);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(status.message(), HasSubstr("CheckFit"));
  }
  CallerCredentials basic;
  basic.authorization = std::string("Basic ") + kAliceToken;
  EXPECT_EQ(authorizer.Authorize("CheckFit", basic).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(CallAuthorizerTest, OnlyListedIdentitiesProfile) {
  const CallAuthorizer authorizer = TwoTokens({"alice", "gpu-admin"});
  EXPECT_TRUE(authorizer.Authorize("ProfileOps", Bearer(kAliceToken)).ok());
  const absl::Status bare =
      authorizer.Authorize("ProfileOps", Bearer(kBareToken));
  EXPECT_EQ(bare.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(bare.message(), HasSubstr("ProfileOps"));
  // Other methods are open to every authenticated caller.
  EXPECT_TRUE(authorizer.Authorize("EstimateMemory", Bearer(kBareToken)).ok());

  // A certificate identity counts as well as a token's.
  CallerCredentials admin = Bearer(kBareToken);
  admin.certificate_identities = {"node-7", "gpu-admin"};
  EXPECT_TRUE(authorizer.Authorize("ProfileOps", admin).ok());
}

TEST(CallAuthorizerTest, CertificatesAloneWhenNoTokens) {
  const CallAuthorizer authorizer({}, {"gpu-admin"});
  CallerCredentials admin;
  admin.certificate_identities = {"gpu-admin"};
  EXPECT_TRUE(authorizer.Authorize("ProfileOps", admin).ok());
  EXPECT_TRUE(authorizer.Authorize("EstimateMemory", CallerCredentials()).ok());
  EXPECT_EQ(authorizer.Authorize("ProfileOps", CallerCredentials()).code(),
            absl::StatusCode::kPermissionDenied);
}

// Issue 23: a certificate's CN and SAN (and a token) naming one identity
// were all listed: "caller 'alice', 'alice'".
TEST(CallAuthorizerTest, RefusalNamesEachIdentityOnce) {
  const CallAuthorizer authorizer = TwoTokens({"gpu-admin"});
  CallerCredentials caller = Bearer(kAliceToken);
  caller.certificate_identities = {"alice", "node-7", "alice"};
  const absl::Status refused = authorizer.Authorize("ProfileOps", caller);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(refused.message(),
            "ProfileOps: caller 'alice', 'node-7' is not in "
            "--profile_allowed_identities");
}

}  // namespace
}  // namespace echo::server
