#include "server/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/status_macros.h"

extern char** environ;

namespace echo::server {
namespace {

std::string ErrnoText(int error) {
  char buffer[128];
  return strerror_r(error, buffer, sizeof(buffer));  // the GNU variant
}

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  ~Fd() { Close(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void Reset(int fd) {
    Close();
    fd_ = fd;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Close-on-exec, so that children spawned meanwhile by other threads do not
// inherit them; posix_spawn's dup2 gives the child its own copies.
absl::Status MakePipe(Fd* read_end, Fd* write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot create a pipe: ", ErrnoText(errno)));
  }
  read_end->Reset(fds[0]);
  write_end->Reset(fds[1]);
  return absl::OkStatus();
}

// SIGPIPE is blocked on this thread while it writes to the child, and a
// pending one is consumed after: a child that dies before reading all of its
// input must not kill the server (the write fails with EPIPE instead).
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&sigpipe_);
    sigaddset(&sigpipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &sigpipe_, &previous_);
  }
  ~ScopedSigpipeBlock() {
    const timespec no_wait{0, 0};
    while (sigtimedwait(&sigpipe_, nullptr, &no_wait) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }

 private:
  sigset_t sigpipe_;
  sigset_t previous_;
};

absl::StatusOr<pid_t> Spawn(const ChildRun& run, int stdin_fd, int stdout_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, stdin_fd, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  // echod blocks SIGTERM and SIGINT for its signal thread, and the mask and
  // ignored signals survive exec: the child starts with neither.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(run.path.c_str()));
  for (const std::string& arg : run.args) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, run.path.c_str(), &actions, &attributes,
                                argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start ", run.path, ": ", ErrnoText(error)));
  }
  return pid;
}

// A fork of this (multi-threaded) process running run.fork_body: only the
// calling thread exists in it, so it closes what it inherited and never
// returns into the server's code.
absl::StatusOr<pid_t> Fork(const ChildRun& run, int stdout_fd) {
  for (std::mutex* held : run.held_across_fork) held->lock();
  const pid_t pid = ::fork();
  for (std::mutex* held : run.held_across_fork) held->unlock();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("cannot fork: ", ErrnoText(errno)));
  }
  if (pid > 0) return pid;
  // Dies with the thread that forked it (echod killed outright).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(stdout_fd, STDOUT_FILENO) < 0) ::_exit(127);
  // The server's sockets, pipes of other calls and files: not the child's.
  ::close_range(STDERR_FILENO + 1, ~0U, 0);
  ::_exit(run.fork_body(STDOUT_FILENO));
}

// Owns a running child: reaps it, and kills it first if it still runs when
// the guard goes (an early return, an exception).
class ChildGuard {
 public:
  ChildGuard(pid_t pid, std::atomic<int>* live) : pid_(pid), live_(live) {
    if (live_ != nullptr) live_->fetch_add(1);
  }
  ~ChildGuard() {
    if (!reaped()) Kill();
  }
  ChildGuard(const ChildGuard&) = delete;
  ChildGuard& operator=(const ChildGuard&) = delete;

  bool reaped() const { return reaped_; }
  int wait_status() const { return wait_status_; }
  const rusage& usage() const { return usage_; }

  // True once it has ended.
  bool Poll() { return Wait(WNOHANG); }
  void Kill() {
    ::kill(pid_, SIGKILL);
    Wait(0);
  }

 private:
  bool Wait(int flags) {
    if (reaped_) return true;
    pid_t done;
    do {
      done = ::wait4(pid_, &wait_status_, flags, &usage_);
    } while (done < 0 && errno == EINTR);
    if (done == 0) return false;
    // done < 0 (ECHILD): someone else reaped it; it is gone either way.
    reaped_ = true;
    if (live_ != nullptr) live_->fetch_sub(1);
    return true;
  }

  const pid_t pid_;
  std::atomic<int>* const live_;
  bool reaped_ = false;
  int wait_status_ = 0;
  rusage usage_{};
};

// Moves what the pipe holds into `output`; false at end of file.
bool ReadAvailable(int fd, std::string* output) {
  char buffer[65536];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      output->append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // EAGAIN: more may come; 0 or another error: the end.
    return n < 0 && errno == EAGAIN;
  }
}

// Writes what the pipe takes; false when the input is done (all written, or
// the child closed its end).
bool WriteAvailable(int fd, const std::string& input, size_t* written) {
  while (*written < input.size()) {
    const ssize_t n =
        ::write(fd, input.data() + *written, input.size() - *written);
    if (n > 0) {
      *written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
  return false;
}

double Seconds(const timeval& t) {
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
}

}  // namespace

absl::StatusOr<ChildResult> RunChild(const ChildRun& run,
                                     std::atomic<int>* live_children) {
  if (run.interrupted) RETURN_IF_ERROR(run.interrupted());
  Fd stdin_read, stdin_write, stdout_read, stdout_write;
  RETURN_IF_ERROR(MakePipe(&stdin_read, &stdin_write));
  RETURN_IF_ERROR(MakePipe(&stdout_read, &stdout_write));
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const pid_t pid,
                   run.fork_body
                       ? Fork(run, stdout_write.get())
                       : Spawn(run, stdin_read.get(), stdout_write.get()));
  ChildGuard child(pid, live_children);
  // Readable when the child exits: the wait below wakes then, not at the
  // next poll interval (a plan in a fork takes milliseconds).
  Fd exited;
  exited.Reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  stdin_read.Close();
  stdout_write.Close();
  ::fcntl(stdin_write.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(stdout_read.get(), F_SETFL, O_NONBLOCK);
  ScopedSigpipeBlock sigpipe_blocked;

  ChildResult result;
  size_t written = 0;
  if (run.input.empty()) stdin_write.Close();
  const auto wall_limit = std::chrono::duration<double>(run.wall_limit_seconds);
  const int poll_ms = static_cast<int>(
      std::max<int64_t>(1, static_cast<int64_t>(run.poll_interval.count())));
  while (!child.reaped()) {
    pollfd fds[3];
    nfds_t count = 0;
    if (stdout_read.open()) fds[count++] = {stdout_read.get(), POLLIN, 0};
    if (stdin_write.open()) fds[count++] = {stdin_write.get(), POLLOUT, 0};
    if (exited.open()) fds[count++] = {exited.get(), POLLIN, 0};
    ::poll(count > 0 ? fds : nullptr, count, poll_ms);
    if (stdout_read.open() &&
        !ReadAvailable(stdout_read.get(), &result.output)) {
      stdout_read.Close();
    }
    if (static_cast<int64_t>(result.output.size()) > run.max_output_bytes) {
      return absl::InternalError(absl::StrCat(run.path, " wrote more than ",
                                              run.max_output_bytes, " bytes"));
    }
    if (stdin_write.open() &&
        !WriteAvailable(stdin_write.get(), run.input, &written)) {
      stdin_write.Close();
    }
    if (child.Poll()) break;
    if (run.interrupted) RETURN_IF_ERROR(run.interrupted());
    if (std::chrono::steady_clock::now() - start > wall_limit) {
      child.Kill();
      result.wall_limit_hit = true;
    }
  }
  // What it wrote before it ended is all in the pipe by now.
  if (stdout_read.open()) ReadAvailable(stdout_read.get(), &result.output);
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  result.cpu_seconds =
      Seconds(child.usage().ru_utime) + Seconds(child.usage().ru_stime);
  const int status = child.wait_status();
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

std::string DescribeSignal(int signal) {
  const char* name = sigabbrev_np(signal);
  const char* description = sigdescr_np(signal);
  return absl::StrCat("signal ", signal, " (SIG", name ? name : "?", ": ",
                      description ? description : "unknown", ")");
}

}  // namespace echo::server
