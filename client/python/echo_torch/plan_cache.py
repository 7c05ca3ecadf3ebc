"""Plans on disk, keyed by the exact request and the server's address, so
the next process with the same model, shapes and options skips planning.

Location: $ECHO_TORCH_CACHE_DIR, else $XDG_CACHE_HOME/echo_torch/plans, else
~/.cache/echo_torch/plans. Each entry is one GenerateRecomputePlanResponse,
written to a temporary file and renamed into place, so a killed process
leaves either the old entry or the new one; an unreadable entry is ignored
and replaced.
"""
import hashlib
import os
import tempfile
from typing import Optional

from echo_torch import proto
from echo_torch.log import logger


def default_directory() -> str:
    explicit = os.environ.get("ECHO_TORCH_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "echo_torch", "plans")


class PlanCache:
    def __init__(self, directory: Optional[str] = None):
        self.directory = directory or default_directory()

    @staticmethod
    def key(request, address: str) -> str:
        digest = hashlib.sha256(address.encode())
        digest.update(b"\0")
        digest.update(request.SerializeToString(deterministic=True))
        return digest.hexdigest()

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key + ".binpb")

    def get(self, key: str):
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
            return proto.planner_pb2.GenerateRecomputePlanResponse.FromString(data)
        except FileNotFoundError:
            return None
        except Exception as error:  # noqa: BLE001 - a bad entry is a miss
            logger.warning("echo_torch: ignoring unreadable cached plan %s (%s)",
                           self._path(key), error)
            return None

    def put(self, key: str, response) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(response.SerializeToString())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path(key))
        except OSError as error:
            logger.warning("echo_torch: could not cache the plan in %s (%s)",
                           self.directory, error)
