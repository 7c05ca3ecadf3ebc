// Who can connect: TLS (and mTLS) credentials for the TCP port, and the Unix
// socket's owner group and mode.
#ifndef ECHO_SERVER_TRANSPORT_SECURITY_H_
#define ECHO_SERVER_TRANSPORT_SECURITY_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace echo::server {

// The Unix socket's mode: owner and group only (framework hooks on the node
// reach it by being in its group).
inline constexpr mode_t kUnixSocketMode = 0660;

// Plaintext when cert_file is empty; TLS with cert_file and key_file; mTLS
// when client_ca_file is also set (clients must present a certificate the
// CA signed, else the handshake fails). INVALID_ARGUMENT for inconsistent
// flags, NOT_FOUND for unreadable files.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpServerCredentials(
    const std::string& cert_file, const std::string& key_file,
    const std::string& client_ca_file);

// A group name or number; nullopt for an empty string. NOT_FOUND for an
// unknown group.
absl::StatusOr<std::optional<gid_t>> ResolveGroup(const std::string& group);

// chmod kUnixSocketMode, and chgrp when `group` is set.
absl::Status RestrictUnixSocket(const std::string& path,
                                std::optional<gid_t> group);

// Makes `path` free for echod's socket: nothing there, or a socket nobody
// answers on (left by a killed echod), which it removes. FAILED_PRECONDITION
// for anything else at the path (a file, a directory: never removed),
// ALREADY_EXISTS when a live process serves the socket.
absl::Status ClaimUnixSocketPath(const std::string& path);

// The device and inode of what is at `path`, nullopt when nothing is: echod
// removes its socket at exit only while the path is still its own.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const FileIdentity& other) const {
    return device == other.device && inode == other.inode;
  }
};
std::optional<FileIdentity> IdentityOf(const std::string& path);

// Sets the process's umask for its lifetime, so that a socket is never
// created wider than kUnixSocketMode, even before RestrictUnixSocket.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask);
  ~ScopedUmask();
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

 private:
  mode_t previous_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_TRANSPORT_SECURITY_H_
