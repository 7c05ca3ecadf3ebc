"""gRPC client of echo.v1.MemoryPlanner."""
import os
from typing import Optional

import grpc

from echo_torch import proto

DEFAULT_SERVER = "127.0.0.1:50051"
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024


def resolve_address(server: Optional[str] = None) -> str:
    """The server argument, else $ECHO_SERVER, else 127.0.0.1:50051. A bare
    absolute path is a Unix socket ("/run/echo/echod.sock" ->
    "unix:///run/echo/echod.sock")."""
    address = server or os.environ.get("ECHO_SERVER") or DEFAULT_SERVER
    if address.startswith("/"):
        address = "unix://" + address
    return address


class ServerUnavailable(RuntimeError):
    """echod could not be reached (not running, wrong address, timed out)."""


_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class PlannerClient:
    def __init__(self, server: Optional[str] = None, timeout_seconds: float = 30.0):
        self.address = resolve_address(server)
        self.timeout_seconds = timeout_seconds
        self._channel = grpc.insecure_channel(
            self.address,
            options=[("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                     ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES)])
        self._stub = proto.planner_pb2_grpc.MemoryPlannerStub(self._channel)

    def close(self):
        self._channel.close()

    def wait_ready(self, timeout_seconds: Optional[float] = None) -> None:
        """Raises ServerUnavailable unless the channel connects in time."""
        timeout = self.timeout_seconds if timeout_seconds is None else timeout_seconds
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError as error:
            raise ServerUnavailable(
                f"echod at {self.address} is not reachable within {timeout:g} s") from error

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout_seconds)
        except grpc.RpcError as error:
            if error.code() in _UNREACHABLE:
                raise ServerUnavailable(
                    f"echod at {self.address}: {error.code().name}: {error.details()}") from error
            raise

    def estimate_memory(self, request):
        return self._call(self._stub.EstimateMemory, request)

    def generate_recompute_plan(self, request):
        return self._call(self._stub.GenerateRecomputePlan, request)

    def check_fit(self, request):
        return self._call(self._stub.CheckFit, request)
