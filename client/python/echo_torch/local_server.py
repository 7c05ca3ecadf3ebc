"""A private echod for one Python process, so that the hook works on a machine
where nobody started one.

When `optimize`, `backend` or `max_batch_size` get no server and $ECHO_SERVER
is unset, and nothing answers at the default address, echo_torch starts an
echod of its own: the one the wheel ships (echo_torch/_echod/, `make wheel`),
else $ECHO_TORCH_ECHOD, else `echod` on PATH. It listens on a Unix socket in
a private directory (mode 0700, no TCP), keeps its profile cache there, and
is stopped when the process exits (and by the kernel if the process dies
first). Set ECHO_TORCH_PRIVATE_ECHOD=0 to turn this off.
"""
import atexit
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Callable, List, Optional

from echo_torch.errors import ServerUnavailable
from echo_torch.log import logger

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Where `make wheel` puts echod, echo_milp_worker and their libraries.
BUNDLED_DIR = os.path.join(_PACKAGE_DIR, "_echod")

_START_SECONDS = 20.0
_STOP_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1


def enabled() -> bool:
    return os.environ.get("ECHO_TORCH_PRIVATE_ECHOD", "1").lower() not in ("0", "false", "no", "off")


def find_echod() -> Optional[str]:
    """The echod a private server runs: bundled, $ECHO_TORCH_ECHOD, or PATH."""
    candidates: List[Optional[str]] = [
        os.path.join(BUNDLED_DIR, "bin", "echod"),
        os.environ.get("ECHO_TORCH_ECHOD"),
        shutil.which("echod"),
    ]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _die_with_parent():
    # Runs in the child before exec: SIGTERM when this process dies, even by
    # SIGKILL, so that no echod outlives its user.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def spawn_with_parent(command, **kwargs) -> subprocess.Popen:
    """Popen that dies with this process: through util-linux's setpriv where
    there is one, since Python code between fork and exec (preexec_fn) is
    unsafe beside gRPC's threads."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return subprocess.Popen([setpriv, "--pdeathsig", "TERM", "--", *command], **kwargs)
    return subprocess.Popen(command, preexec_fn=_die_with_parent, **kwargs)


class PrivateServer:
    """One echod child on a Unix socket in a private directory."""

    def __init__(self, echod: str):
        self.echod = echod
        self.directory = tempfile.mkdtemp(prefix="echo-torch-")  # mode 0700
        self.socket = os.path.join(self.directory, "echod.sock")
        self.address = "unix://" + self.socket
        self.log_path = os.path.join(self.directory, "echod.log")
        env = dict(os.environ)
        lib = os.path.join(os.path.dirname(os.path.dirname(echod)), "lib")
        if os.path.isdir(lib):  # a bundle's libraries (gRPC, protobuf, ...)
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (lib, env.get("LD_LIBRARY_PATH")) if p)
        command = [echod, "--grpc_address=", "--metrics_address=",
                   f"--unix_socket={self.socket}",
                   f"--profile_cache_dir={os.path.join(self.directory, 'profiles')}",
                   "--log_level=warn"]
        with open(self.log_path, "wb") as log:
            self.process = spawn_with_parent(command, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, answers: Callable[[str], bool],
                   timeout_seconds: float = _START_SECONDS) -> None:
        """Until answers(address) (the client's probe) holds; raises
        ServerUnavailable when echod exits first or the time is up."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            if self.process.poll() is not None:
                raise ServerUnavailable(
                    f"the private echod ({self.echod}) exited with code "
                    f"{self.process.returncode} at start: {self.log_tail()}")
            if os.path.exists(self.socket) and answers(self.address):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise ServerUnavailable(
                    f"the private echod ({self.echod}) did not answer within "
                    f"{timeout_seconds:g} s: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log_path, "r", errors="replace") as f:
                tail = f.read().splitlines()[-lines:]
        except OSError:
            return "(no log)"
        return " | ".join(tail) or "(empty log)"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # echod drains, then exits
            try:
                self.process.wait(_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


_lock = threading.Lock()
_server: Optional[PrivateServer] = None


def private_address(answers: Callable[[str], bool]) -> Optional[str]:
    """The address of this process's private echod, started on first use and
    ready when answers(address) holds; None when none can be found (or
    ECHO_TORCH_PRIVATE_ECHOD=0). Raises ServerUnavailable when one is found
    but does not start."""
    global _server
    with _lock:
        if _server is not None and _server.process.poll() is None:
            return _server.address
        if not enabled():
            return None
        echod = find_echod()
        if echod is None:
            return None
        server = PrivateServer(echod)
        atexit.register(server.stop)
        server.wait_ready(answers)
        _server = server
        logger.info("echo_torch: no echod answered at the default address; started a "
                       "private one (%s) on %s for this process, stopped when it exits",
                       echod, server.address)
        return server.address


def stop_private_server() -> None:
    """Stops this process's private echod now (tests; atexit does it too)."""
    global _server
    with _lock:
        if _server is not None:
            _server.stop()
            _server = None
