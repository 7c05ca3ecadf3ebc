"""gRPC client of echo.v1.MemoryPlanner."""
import os
from typing import Optional

import grpc

from echo_torch import local_server, proto
from echo_torch.errors import ServerUnavailable
from echo_torch.log import logger

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



class PlanningError(RuntimeError):
    """echod answered a request with an error; the message says which and
    what to do, in one line."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None):
        super().__init__(message)
        self.code = code


_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_START_HINT = ("start echod (`make run`) or pass server=/set ECHO_SERVER to where it "
               "listens; with no server given, echo_torch starts a private echod when it "
               "finds one (a wheel from `make wheel`, $ECHO_TORCH_ECHOD or echod on PATH)")


# gRPC's words for a connection that never opened (TCP or Unix socket),
# as opposed to one that broke while the call was in flight.
_NEVER_CONNECTED = ("failed to connect", "connection refused", "no such file",
                    "name resolution", "dns resolution", "empty address list")


def _unreachable_kind(code, details: str) -> str:
    """ServerUnavailable.kind for an UNAVAILABLE or DEADLINE_EXCEEDED call."""
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "timeout"
    lowered = details.lower()
    if any(words in lowered for words in _NEVER_CONNECTED):
        return "unreachable"
    return "died"


def unavailable_message(kind: str, address: str, detail: str,
                        timeout_seconds: float = 0.0) -> str:
    """What ServerUnavailable says, by its kind."""
    if kind == "timeout":
        return (f"echod at {address} did not answer within {timeout_seconds:g} s "
                f"(timeout_seconds; {detail})")
    if kind == "died":
        return (f"echod at {address} stopped answering during the request ({detail}): "
                f"it crashed or restarted")
    return f"echod is not reachable at {address} ({detail}); {_START_HINT}"


def _one_line(text: str) -> str:
    return " ".join((text or "").split())


def _read_file(path: Optional[str], what: str) -> Optional[bytes]:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as error:
        raise ValueError(f"echo_torch: cannot read {what} {path}: {error.strerror}") from None


def _channel_credentials(tls_ca_file, tls_cert_file, tls_key_file):
    """None (plaintext) without a CA file; TLS with one; mTLS with a client
    certificate and key as well."""
    if bool(tls_cert_file) != bool(tls_key_file):
        raise ValueError("echo_torch: tls_cert_file and tls_key_file go together "
                         "(ECHO_TORCH_TLS_CERT_FILE, ECHO_TORCH_TLS_KEY_FILE)")
    if not tls_ca_file:
        if tls_cert_file:
            raise ValueError("echo_torch: a client certificate needs tls_ca_file "
                             "(ECHO_TORCH_TLS_CA_FILE), the CA of echod's certificate")
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read_file(tls_ca_file, "tls_ca_file"),
        private_key=_read_file(tls_key_file, "tls_key_file"),
        certificate_chain=_read_file(tls_cert_file, "tls_cert_file"))


def resolve_token(token: Optional[str] = None) -> Optional[str]:
    """The token argument, else $ECHO_TORCH_TOKEN, else the contents of
    $ECHO_TORCH_TOKEN_FILE, else None (no authorization metadata)."""
    token = token or os.environ.get("ECHO_TORCH_TOKEN")
    if not token and os.environ.get("ECHO_TORCH_TOKEN_FILE"):
        path = os.environ["ECHO_TORCH_TOKEN_FILE"]
        token = (_read_file(path, "ECHO_TORCH_TOKEN_FILE") or b"").decode().strip()
    return token or None


class PlannerClient:
    """Plaintext to 127.0.0.1:50051 by default. For an echod with TLS, pass
    tls_ca_file (and tls_cert_file + tls_key_file when it verifies client
    certificates); for one with --auth_token_file, a token. Each falls back to
    $ECHO_TORCH_TLS_CA_FILE, $ECHO_TORCH_TLS_CERT_FILE, $ECHO_TORCH_TLS_KEY_FILE,
    $ECHO_TORCH_TOKEN (or a file named by $ECHO_TORCH_TOKEN_FILE)."""

    def __init__(self, server: Optional[str] = None, timeout_seconds: float = 30.0, *,
                 tls_ca_file: Optional[str] = None, tls_cert_file: Optional[str] = None,
                 tls_key_file: Optional[str] = None, token: Optional[str] = None):
        self.address = resolve_address(server)
        self.timeout_seconds = timeout_seconds
        env = os.environ.get
        credentials = _channel_credentials(
            tls_ca_file or env("ECHO_TORCH_TLS_CA_FILE"),
            tls_cert_file or env("ECHO_TORCH_TLS_CERT_FILE"),
            tls_key_file or env("ECHO_TORCH_TLS_KEY_FILE"))
        token = resolve_token(token)
        # Metadata rather than call credentials: gRPC sends those over TLS
        # only, and the node's Unix socket is plaintext.
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        # A restarted echod is found within a second: gRPC's reconnect
        # backoff otherwise grows to minutes while it is down, and a retry
        # in that window fails at once (EchoModule retries a signature).
        options = [("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                   ("grpc.initial_reconnect_backoff_ms", 200),
                   ("grpc.min_reconnect_backoff_ms", 200),
                   ("grpc.max_reconnect_backoff_ms", 1000)]
        if credentials is None:
            self._channel = grpc.insecure_channel(self.address, options=options)
        else:
            self._channel = grpc.secure_channel(self.address, credentials, options=options)
        self._stub = proto.planner_pb2_grpc.MemoryPlannerStub(self._channel)
        self._health = proto.health_pb2_grpc.HealthStub(self._channel)

    def close(self):
        self._channel.close()

    def wait_ready(self, timeout_seconds: Optional[float] = None) -> None:
        """Raises ServerUnavailable unless echod answers a health check in
        time. A refused connection fails at once (the call does not wait for
        the channel to become ready); a silent address fails at the timeout."""
        timeout = self.timeout_seconds if timeout_seconds is None else timeout_seconds
        request = proto.health_pb2.HealthCheckRequest(service="")
        try:
            response = self._health.Check(request, timeout=timeout, wait_for_ready=False)
        except grpc.RpcError as error:
            if error.code() not in _UNREACHABLE:
                return  # it answered (e.g. a server without the health service)
            if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                reason = f"no answer within {timeout:g} s"
            else:
                reason = _one_line(error.details()) or error.code().name
            raise ServerUnavailable(
                f"echod is not reachable at {self.address} ({reason}); {_START_HINT}") from None
        serving = proto.health_pb2.HealthCheckResponse.SERVING
        if response.status != serving:
            raise ServerUnavailable(f"echod at {self.address} is not serving (status "
                                    f"{response.status}); it is starting or draining",
                                    "not_serving")

    def _call(self, method, name, request):
        try:
            return method(request, timeout=self.timeout_seconds, metadata=self._metadata)
        except grpc.RpcError as error:
            code, details = error.code(), _one_line(error.details())
            if code in _UNREACHABLE:
                kind = _unreachable_kind(code, details)
                detail = f"{name}: {code.name}: {details}"
                raise ServerUnavailable(
                    unavailable_message(kind, self.address, detail, self.timeout_seconds),
                    kind, self.address, detail) from None
            raise PlanningError(f"echod at {self.address} refused {name}: {code.name}: "
                                f"{details}", code) from None

    def estimate_memory(self, request):
        return self._call(self._stub.EstimateMemory, "EstimateMemory", request)

    def generate_recompute_plan(self, request):
        return self._call(self._stub.GenerateRecomputePlan, "GenerateRecomputePlan", request)

    def check_fit(self, request):
        return self._call(self._stub.CheckFit, "CheckFit", request)

    def register_graph(self, request):
        """RegisterGraphRequest -> RegisterGraphResponse (graph_fingerprint):
        later requests may carry the fingerprint instead of the graph."""
        return self._call(self._stub.RegisterGraph, "RegisterGraph", request)

    def find_max_batch_size(self, request):
        """FindMaxBatchSizeRequest -> FindMaxBatchSizeResponse: the largest
        batch that fits, for a graph with a batch dimension (the hook marks
        it; echo_torch.batch_dim)."""
        return self._call(self._stub.FindMaxBatchSize, "FindMaxBatchSize", request)

    def get_memory_frontier(self, request):
        return self._call(self._stub.GetMemoryFrontier, "GetMemoryFrontier", request)


def _answers(address: str) -> bool:
    """Whether echod answers at `address` within a second."""
    client = PlannerClient(address, timeout_seconds=1.0)
    try:
        client.wait_ready(1.0)
        return True
    except ServerUnavailable:
        return False
    finally:
        client.close()


def connect(server: Optional[str] = None, timeout_seconds: float = 30.0) -> "PlannerClient":
    """A PlannerClient for `server`. With none given and $ECHO_SERVER unset:
    the default address when echod answers there, else this process's
    private echod (echo_torch.local_server) when one can be found, else the
    default address (whose calls then fail as unreachable)."""
    if server or os.environ.get("ECHO_SERVER") or not local_server.enabled():
        return PlannerClient(server, timeout_seconds)
    client = PlannerClient(None, timeout_seconds)
    try:
        client.wait_ready(1.0)
        return client
    except ServerUnavailable:
        pass
    try:
        address = local_server.private_address(_answers)
    except ServerUnavailable as error:
        logger.warning("echo_torch: %s", error)
        return client
    if address is None:
        return client
    client.close()
    return PlannerClient(address, timeout_seconds)
