"""Servers for the Python tests: the real echod as a subprocess on a free
port, and a fake MemoryPlanner (grpc.server on 127.0.0.1) that answers with
plans built by a simple local rule, recording the requests it gets."""
import concurrent.futures
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time

import grpc
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
from echo_torch import proto  # noqa: E402
from echo_torch.local_server import spawn_with_parent  # noqa: E402
from echo_torch.planners import schedule_from_stash, stash_of_schedule  # noqa: E402

_g = proto.graph_pb2
_pl = proto.planner_pb2

# Classes the fake planner never recomputes (their outputs are stashed).
HEAVY_CLASSES = {_g.OP_CLASS_GEMM, _g.OP_CLASS_CONV, _g.OP_CLASS_EMBEDDING,
                 _g.OP_CLASS_RANDOM, _g.OP_CLASS_SOFTMAX,
                 _g.OP_CLASS_REDUCTION, _g.OP_CLASS_OTHER}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def echod_path():
    """$ECHO_ECHOD (set by ctest), else build/bin/echod; None if not built."""
    path = os.environ.get("ECHO_ECHOD") or os.path.join(REPO, "build", "bin", "echod")
    return path if os.access(path, os.X_OK) else None


@contextlib.contextmanager
def planner_client(address=None, timeout_seconds=300):
    """A PlannerClient for `address`, or for an echod started here (and
    stopped on exit) when it is None; for the benchmarks' --server flag."""
    from echo_torch import PlannerClient
    with contextlib.ExitStack() as stack:
        if address is None:
            if echod_path() is None:
                raise SystemExit("echod is not built (build/bin/echod or $ECHO_ECHOD); "
                                 "pass --server")
            address = stack.enter_context(Echod()).address
        client = PlannerClient(address, timeout_seconds=timeout_seconds)
        stack.callback(client.close)
        yield client


class Echod:
    """The real server on a free port; use as a context manager."""

    def __init__(self, extra_args=(), channel_credentials=None, port=None):
        """extra_args: more echod flags; channel_credentials: what a client
        needs to reach it (e.g. with --tls_cert_file), None for plaintext;
        port: where to listen (default: a free one), e.g. an earlier echod's
        to stand for it restarted."""
        self.path = echod_path()
        self.process = None
        self.port = port
        self.address = None
        self.extra_args = list(extra_args)
        self.channel_credentials = channel_credentials

    def __enter__(self):
        port = self.port or free_port()
        self.port = port
        self.address = f"127.0.0.1:{port}"
        # A file, not a pipe: nobody drains a pipe while tests run.
        self.log = tempfile.TemporaryFile()
        # Dies with this process: a ctest timeout kills python without its cleanup.
        self.process = spawn_with_parent(
            [self.path, f"--grpc_address={self.address}", "--metrics_address=",
             "--log_level=warn", *self.extra_args], stdout=subprocess.DEVNULL,
            stderr=self.log)
        channel = (grpc.insecure_channel(self.address) if self.channel_credentials is None
                   else grpc.secure_channel(self.address, self.channel_credentials))
        try:
            grpc.channel_ready_future(channel).result(timeout=20)
        except grpc.FutureTimeoutError:
            self.process.kill()
            self.log.seek(0)
            raise RuntimeError(f"echod did not start: {self.log.read()!r}")
        finally:
            channel.close()
        return self

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


class SharedEchod:
    """A mixin for a unittest.TestCase: one real echod for the whole class
    (cls.echod), and torch on 2 threads, as the suite's machines have."""

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.echod = Echod().__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.echod.__exit__(None, None, None)


def cheap_ops_plan(graph, policy=_pl.RECOMPUTE_POLICY_ECHO):
    """Recompute every cheap forward op (element-wise, data movement) the
    backward needs; stash the outputs of heavy ones."""
    heavy = set()
    for op in graph.ops:
        if op.op_class in HEAVY_CLASSES:
            heavy.update(op.output_ids)
    schedule = schedule_from_stash(graph, heavy)
    response = _pl.GenerateRecomputePlanResponse(feasible=True, policy=policy,
                                                 message="fake planner: cheap ops recomputed")
    for op_index, recompute in schedule:
        response.schedule.add(op_id=graph.ops[op_index].id, recompute=recompute)
    response.stash_tensor_ids.extend(stash_of_schedule(graph, schedule))
    return response


class FakePlanner(proto.planner_pb2_grpc.MemoryPlannerServicer):
    def __init__(self, error=None):
        self.requests = []
        self.error = error  # (grpc.StatusCode, message) to fail with

    def GenerateRecomputePlan(self, request, context):
        self.requests.append(request)
        if self.error is not None:
            context.abort(*self.error)
        return cheap_ops_plan(request.graph, request.policy)


class DyingPlanner(FakePlanner):
    """Exits its process on the first plan request, as a crashed echod."""

    def GenerateRecomputePlan(self, request, context):
        os._exit(1)


class DyingServer:
    """DyingPlanner in a process of its own on 127.0.0.1:<free port>."""

    def __enter__(self):
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        self.process = spawn_with_parent(
            [sys.executable, "-c",
             "import sys, time, servers\n"
             "servers.FakeServer(port=int(sys.argv[1]),\n"
             "                   servicer=servers.DyingPlanner()).__enter__()\n"
             "time.sleep(600)", str(port)], cwd=HERE)
        if not wait_for(lambda: _listening(port), timeout=20):
            self.process.kill()
            raise RuntimeError("the dying server did not start")
        return self

    def __exit__(self, *exc):
        self.process.kill()
        self.process.wait()


def _listening(port) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class FakeServer:
    """FakePlanner on 127.0.0.1:<free port> or on a Unix socket path."""

    def __init__(self, unix_path=None, error=None, port=None, servicer=None):
        self.servicer = servicer or FakePlanner(error)
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2),
                                  options=[("grpc.max_receive_message_length", 1 << 28)])
        proto.planner_pb2_grpc.add_MemoryPlannerServicer_to_server(self.servicer, self.server)
        if unix_path:
            self.address = f"unix://{unix_path}"
        else:
            self.address = f"127.0.0.1:{port or free_port()}"
        self.server.add_insecure_port(self.address)

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(grace=None)


def wait_for(predicate, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
