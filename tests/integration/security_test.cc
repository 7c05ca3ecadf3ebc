// echod's access control in-process: mTLS (a client without a valid
// certificate is refused), bearer tokens (UNAUTHENTICATED without one),
// ProfileOps only for listed identities (PERMISSION_DENIED naming the
// method), and the Unix socket's mode and group. Certificates are made at
// test time by make_test_certs.sh (openssl).
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "adapter/graph_file.h"
#include "client/planner_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http_get.h"
#include "loopback_server.h"
#include "server/echo_server.h"
#include "tests/unit/test_util.h"

namespace echo {
namespace {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

constexpr char kProfilerToken[] = "profiler-token-0123456789abcdef";
constexpr char kTrainerToken[] = "trainer-token-0123456789abcdef";
constexpr char kBareToken[] = "bare-token-0123456789abcdef";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Owner-only, as echod wants its token file.
void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  ::chmod(path.c_str(), 0600);
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(
        absl::StrCat(::testing::TempDir(), "echo_security_", ::getpid()));
    const std::string command =
        absl::StrCat("bash '", ECHO_TEST_DATA_DIR,
                     "/../integration/make_test_certs.sh' '", *dir_, "'");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    WriteText(
        Path("tokens"),
        absl::StrCat("# identity token\nprofiler-bot ", kProfilerToken,
                     "\n\ntrainer ", kTrainerToken, "\n", kBareToken, "\n"));
  }
  static void TearDownTestSuite() {
    std::system(absl::StrCat("rm -rf '", *dir_, "'").c_str());
    delete dir_;
  }
  static std::string Path(const std::string& name) {
    return absl::StrCat(*dir_, "/", name);
  }

  // Options of a server on 127.0.0.1:0 that lets only profiler-bot profile.
  static server::ServerOptions BaseOptions() {
    server::ServerOptions options = testing::Loopback();
    options.auth.profile_allowed_identities = {"profiler-bot"};
    return options;
  }
  static server::ServerOptions MutualTlsOptions() {
    server::ServerOptions options = BaseOptions();
    options.tls_cert_file = Path("server.crt");
    options.tls_key_file = Path("server.key");
    options.tls_client_ca_file = Path("ca.crt");
    return options;
  }

  void Start(const server::ServerOptions& options) {
    absl::StatusOr<std::unique_ptr<server::EchoServer>> started =
        server::EchoServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
  }

  // A client of the TCP port; `cert` names a certificate pair of the test
  // PKI ("" for none); TLS when `tls`.
  client::PlannerClient Client(bool tls, const std::string& cert,
                               const std::string& token = "") {
    client::ClientOptions options;
    options.server = absl::StrCat("localhost:", server_->grpc_port());
    options.timeout_seconds = 10;
    if (tls) options.tls_root_certs = ReadText(Path("ca.crt"));
    if (!cert.empty()) {
      options.tls_cert_chain = ReadText(Path(cert + ".crt"));
      options.tls_private_key = ReadText(Path(cert + ".key"));
    }
    options.auth_token = token;
    return client::PlannerClient(options);
  }

  static v1::EstimateMemoryRequest EstimateRequest() {
    v1::EstimateMemoryRequest request;
    *request.mutable_graph() = testing::ValueOrFail(adapter::LoadGraphFile(
        std::string(ECHO_TEST_DATA_DIR) + "/checkmate/vgg16_b256_train.json"));
    return request;
  }
  static v1::ProfileOpsRequest ProfileRequest() {
    v1::ProfileOpsRequest request;
    *request.mutable_graph() = EstimateRequest().graph();
    return request;
  }

  // This machine has no GPU: a call that passed authorization gets
  // FAILED_PRECONDITION from the profiler.
  static void ExpectProfileAuthorized(client::PlannerClient& client) {
    EXPECT_EQ(client.ProfileOps(ProfileRequest()).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  static void ExpectProfileDenied(client::PlannerClient& client,
                                  const std::string& caller) {
    const absl::Status status = client.ProfileOps(ProfileRequest()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_THAT(status.message(), HasSubstr("ProfileOps"));
    EXPECT_THAT(status.message(), HasSubstr(caller));
  }

  static std::string* dir_;
  std::unique_ptr<server::EchoServer> server_;
};

std::string* SecurityTest::dir_ = nullptr;

TEST_F(SecurityTest, MutualTlsRefusesClientsWithoutAValidCertificate) {
  Start(MutualTlsOptions());
  for (const char* cert : {"", "rogue"}) {
    client::PlannerClient client = Client(/*tls=*/true, cert);
    const absl::Status status =
        client.EstimateMemory(EstimateRequest()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable)
        << "certificate '" << cert << "': " << status;
    EXPECT_FALSE(client.Health("").ok()) << "certificate '" << cert << "'";
  }
  client::PlannerClient plaintext = Client(/*tls=*/false, "");
  EXPECT_FALSE(plaintext.EstimateMemory(EstimateRequest()).ok());
}

TEST_F(SecurityTest, MutualTlsAuthorizesProfilingByCertificateName) {
  Start(MutualTlsOptions());
  client::PlannerClient trainer = Client(/*tls=*/true, "trainer");
  auto health = trainer.Health("");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthCheckResponse::SERVING);
  auto estimate = trainer.EstimateMemory(EstimateRequest());
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  EXPECT_EQ(estimate->peak_bytes(), 15825108992);
  // Named by its CN and its SAN.
  ExpectProfileDenied(trainer, "'trainer', 'trainer.jobs.svc'");

  client::PlannerClient profiler = Client(/*tls=*/true, "profiler");
  ExpectProfileAuthorized(profiler);
}

TEST_F(SecurityTest, TokensAreRequiredAndNameTheCaller) {
  server::ServerOptions options = BaseOptions();
  options.auth.token_file = Path("tokens");
  Start(options);

  for (const std::string& token : {std::string(), std::string("wrong-token")}) {
    client::PlannerClient client = Client(/*tls=*/false, "", token);
    const absl::Status status =
        client.EstimateMemory(EstimateRequest()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
    EXPECT_THAT(status.message(), HasSubstr("EstimateMemory"));
    EXPECT_EQ(client.ProfileOps(ProfileRequest()).status().code(),
              absl::StatusCode::kUnauthenticated);
    // Health needs no token: the kubelet's probes carry none.
    EXPECT_TRUE(client.Health("echo.v1.MemoryPlanner").ok());
  }

  client::PlannerClient trainer = Client(/*tls=*/false, "", kTrainerToken);
  EXPECT_TRUE(trainer.EstimateMemory(EstimateRequest()).ok());
  EXPECT_TRUE(trainer.GetNodeInfo().ok());
  ExpectProfileDenied(trainer, "'trainer'");

  client::PlannerClient bare = Client(/*tls=*/false, "", kBareToken);
  EXPECT_TRUE(bare.EstimateMemory(EstimateRequest()).ok());
  ExpectProfileDenied(bare, "(no identity)");

  client::PlannerClient profiler = Client(/*tls=*/false, "", kProfilerToken);
  ExpectProfileAuthorized(profiler);

  const std::string metrics =
      testing::HttpGet(server_->metrics_endpoint(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("code=\"UNAUTHENTICATED\""));
  EXPECT_THAT(metrics, HasSubstr("code=\"PERMISSION_DENIED\""));
}

TEST_F(SecurityTest, WithoutAnAllowListEveryAuthenticatedCallerProfiles) {
  server::ServerOptions options = BaseOptions();
  options.auth.profile_allowed_identities.clear();
  options.auth.token_file = Path("tokens");
  Start(options);
  client::PlannerClient bare = Client(/*tls=*/false, "", kBareToken);
  ExpectProfileAuthorized(bare);
}

TEST_F(SecurityTest, UnixSocketIsGroupOnlyAndNeedsTokensToo) {
  server::ServerOptions options = BaseOptions();
  options.grpc_address.clear();
  options.unix_socket = Path("echod.sock");
  options.auth.token_file = Path("tokens");
  // root may give the socket any group; others only one of their own.
  const gid_t group = ::geteuid() == 0 ? 65534 : ::getgid();
  options.unix_socket_group = absl::StrCat(group);
  Start(options);

  struct stat info {};
  ASSERT_EQ(::stat(options.unix_socket.c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0660);
  EXPECT_EQ(info.st_gid, group);

  client::ClientOptions client_options;
  client_options.server = "unix:" + options.unix_socket;
  client_options.timeout_seconds = 10;
  client::PlannerClient anonymous(client_options);
  EXPECT_EQ(anonymous.EstimateMemory(EstimateRequest()).status().code(),
            absl::StatusCode::kUnauthenticated);
  client_options.auth_token = kProfilerToken;
  client::PlannerClient profiler(client_options);
  EXPECT_TRUE(profiler.EstimateMemory(EstimateRequest()).ok());
  ExpectProfileAuthorized(profiler);
}

// Issue 23: echod unlinked whatever was at --unix_socket, so a second echod
// took over a live one's path and a regular file there was deleted.
TEST_F(SecurityTest, UnixSocketPathIsTakenOverOnlyWhenStale) {
  const auto options_on = [](const std::string& path) {
    server::ServerOptions options = BaseOptions();
    options.grpc_address.clear();
    options.unix_socket = path;
    return options;
  };
  const auto answers = [](const std::string& path) {
    client::ClientOptions client_options;
    client_options.server = "unix:" + path;
    client_options.timeout_seconds = 10;
    client::PlannerClient client(client_options);
    return client.EstimateMemory(EstimateRequest()).ok();
  };

  // A regular file is refused and kept.
  const std::string file = Path("file.sock");
  WriteText(file, "keep me");
  const absl::Status on_file =
      server::EchoServer::Start(options_on(file)).status();
  EXPECT_EQ(on_file.code(), absl::StatusCode::kFailedPrecondition) << on_file;
  EXPECT_THAT(on_file.message(), HasSubstr("is not a socket"));
  EXPECT_EQ(ReadText(file), "keep me");

  // A live echod's socket is refused, and the first keeps serving.
  const std::string live = Path("live.sock");
  Start(options_on(live));
  const absl::Status second =
      server::EchoServer::Start(options_on(live)).status();
  EXPECT_EQ(second.code(), absl::StatusCode::kAlreadyExists) << second;
  EXPECT_TRUE(answers(live));

  // What replaced the socket at its path stays when the first drains.
  ASSERT_EQ(::unlink(live.c_str()), 0);
  WriteText(live, "not echod's");
  server_->Drain();
  server_->Wait();
  EXPECT_EQ(ReadText(live), "not echod's");

  // A socket nobody answers on (a killed echod's) is taken over.
  const std::string stale = Path("stale.sock");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, stale.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(
      ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)),
      0);
  ::close(fd);  // bound, never listened on: the path stays
  Start(options_on(stale));
  EXPECT_TRUE(answers(stale));
}

TEST_F(SecurityTest, BadSecurityOptionsAreRefusedAtStart) {
  const auto start_error = [](const server::ServerOptions& options) {
    return server::EchoServer::Start(options).status();
  };
  server::ServerOptions options = BaseOptions();
  options.tls_client_ca_file = Path("ca.crt");
  EXPECT_THAT(start_error(options).message(),
              HasSubstr("--tls_client_ca_file needs --tls_cert_file"));

  options = MutualTlsOptions();
  options.tls_client_ca_file = Path("tokens");  // not a certificate
  EXPECT_EQ(start_error(options).code(), absl::StatusCode::kInvalidArgument);

  options = BaseOptions();
  options.auth.token_file = Path("short_tokens");
  WriteText(options.auth.token_file, "alice abc\n");
  const absl::Status short_token = start_error(options);
  EXPECT_EQ(short_token.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_token.message(), HasSubstr("short_tokens:1"));

  options.auth.token_file = Path("no_such_file");
  EXPECT_EQ(start_error(options).code(), absl::StatusCode::kNotFound);

  options = BaseOptions();
  options.unix_socket = Path("other.sock");
  options.unix_socket_group = "no-such-group-echo";
  EXPECT_THAT(start_error(options).message(),
              HasSubstr("no group 'no-such-group-echo'"));
}

}  // namespace
}  // namespace echo
