"""Asks echod's server reflection to list its services (a raw gRPC call:
no reflection package needed). Prints the services, or the error code."""
import sys

import grpc

# ServerReflectionRequest { list_services: "" } (field 7).
LIST_SERVICES = b"\x3a\x00"

channel = grpc.insecure_channel(sys.argv[1])
call = channel.stream_stream(
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
try:
    replies = list(call(iter([LIST_SERVICES]), timeout=10))
    print("services:", b"".join(replies).decode("latin-1"))
except grpc.RpcError as error:
    print("error:", error.code().name)
