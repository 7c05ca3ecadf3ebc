"""The generated echo.v1 stubs (built from proto/ by client/python/CMakeLists.txt
or gen_proto.py)."""
try:
    from echo_torch._proto.echo.v1 import graph_pb2, device_pb2, planner_pb2, planner_pb2_grpc
except ImportError as error:  # pragma: no cover - depends on the build
    raise ImportError(
        "echo_torch: the echo.v1 Python stubs are missing; build the project "
        "(target echo_python_proto) or run `/usr/bin/python3 "
        "client/python/gen_proto.py`") from error

__all__ = ["graph_pb2", "device_pb2", "planner_pb2", "planner_pb2_grpc"]
