#include "server/transport_security.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "planner/status_macros.h"
#include "server/read_file.h"

namespace echo::server {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpServerCredentials(
    const std::string& cert_file, const std::string& key_file,
    const std::string& client_ca_file) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file must be given together");
  }
  if (cert_file.empty()) {
    if (!client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca_file needs --tls_cert_file and --tls_key_file "
          "(client certificates are verified over TLS only)");
    }
    return grpc::InsecureServerCredentials();
  }
  ASSIGN_OR_RETURN(std::string cert,
                   ReadWholeFile("--tls_cert_file", cert_file));
  ASSIGN_OR_RETURN(std::string key, ReadWholeFile("--tls_key_file", key_file));
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({key, cert});
  if (!client_ca_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs,
                     ReadWholeFile("--tls_client_ca_file", client_ca_file));
    if (ssl.pem_root_certs.find("-----BEGIN CERTIFICATE-----") ==
        std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_client_ca_file: ", client_ca_file, " has no PEM certificate"));
    }
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::optional<gid_t>> ResolveGroup(const std::string& group) {
  if (group.empty()) return std::nullopt;
  uint32_t number = 0;
  if (absl::SimpleAtoi(group, &number)) return static_cast<gid_t>(number);
  std::vector<char> buffer(16384);
  struct group entry {};
  struct group* found = nullptr;
  const int error =
      ::getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (error != 0 || found == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "--unix_socket_group: no group '", group, "' on this host",
        error != 0 ? absl::StrCat(" (", std::strerror(error), ")") : ""));
  }
  return found->gr_gid;
}

absl::Status RestrictUnixSocket(const std::string& path,
                                std::optional<gid_t> group) {
  if (group && ::chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "--unix_socket_group: cannot chgrp ", path, " to gid ", *group, ": ",
        std::strerror(errno), " (echod must be a member of the group)"));
  }
  if (::chmod(path.c_str(), kUnixSocketMode) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot chmod ", path, " to 0660: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ClaimUnixSocketPath(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "--unix_socket ", path, ": cannot stat it: ", std::strerror(errno)));
  }
  if (!S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--unix_socket ", path,
                     " exists and is not a socket; echod leaves it alone: "
                     "remove it or choose another path"));
  }
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--unix_socket ", path, " is longer than ",
                     sizeof(address.sun_path) - 1, " bytes"));
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot make a socket: ", std::strerror(errno)));
  }
  const int connected = ::connect(
      fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int connect_errno = errno;
  ::close(fd);
  if (connected == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("--unix_socket ", path,
                     ": another process (an echod?) is serving it; stop it "
                     "or choose another path"));
  }
  if (connect_errno != ECONNREFUSED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--unix_socket ", path, ": cannot tell whether it is in use (",
        std::strerror(connect_errno), "); echod leaves it alone"));
  }
  // Nobody listens: a socket left by an echod that was killed.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--unix_socket ", path,
        ": cannot remove the stale socket: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::optional<FileIdentity> IdentityOf(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return std::nullopt;
  return FileIdentity{info.st_dev, info.st_ino};
}

ScopedUmask::ScopedUmask(mode_t mask) : previous_(::umask(mask)) {}

ScopedUmask::~ScopedUmask() { ::umask(previous_); }

}  // namespace echo::server
