"""The echo.v1 API, built at import time from the descriptor set that the
package build compiled from proto/ (see setup.py).

`graph_pb2`, `device_pb2`, `planner_pb2` and `health_pb2` read like protoc's
modules: message classes, enum wrappers and top-level enum values as
attributes. `planner_pb2_grpc.MemoryPlannerStub` and
`health_pb2_grpc.HealthStub` are built from the service descriptors. The
classes live in a private descriptor pool, so another copy of echo.v1 in the
same process (e.g. protoc output) cannot clash with them.
"""
import os
import types

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import enum_type_wrapper

_DESCRIPTOR_SET = os.path.join(os.path.dirname(__file__), "_proto", "echo_v1.binpb")


def _message_class(descriptor):
    get = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.21
    if get is not None:
        return get(descriptor)
    return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)


def _load_pool():
    try:
        with open(_DESCRIPTOR_SET, "rb") as f:
            file_set = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    except FileNotFoundError as error:
        raise ImportError(
            "echo_torch: echo_v1.binpb is missing; install the package with "
            "`pip install ./client/python` (its build compiles proto/)") from error
    pool = descriptor_pool.DescriptorPool()
    for file_proto in file_set.file:
        pool.Add(file_proto)
    return pool, [f.name for f in file_set.file]


def _module_for(pool, file_name, module_name):
    file_descriptor = pool.FindFileByName(file_name)
    module = types.ModuleType(module_name)
    module.DESCRIPTOR = file_descriptor
    for name, descriptor in file_descriptor.message_types_by_name.items():
        setattr(module, name, _message_class(descriptor))
    for name, descriptor in file_descriptor.enum_types_by_name.items():
        setattr(module, name, enum_type_wrapper.EnumTypeWrapper(descriptor))
        for value in descriptor.values:
            setattr(module, value.name, value.number)
    return module


def _unimplemented(self, request, context):
    import grpc
    context.abort(grpc.StatusCode.UNIMPLEMENTED, "method not implemented")


def _stub_module(module, module_name):
    """A `*_pb2_grpc`-like module per service: `<Service>Stub(channel)`, a
    `<Service>Servicer` base class and `add_<Service>Servicer_to_server`
    (unary methods only, which is all echo.v1 has)."""
    stubs = types.ModuleType(module_name)
    for service_name, service in module.DESCRIPTOR.services_by_name.items():
        methods = [(m.name, f"/{service.full_name}/{m.name}",
                    _message_class(m.input_type), _message_class(m.output_type))
                   for m in service.methods]

        def init(self, channel, _methods=methods):
            for name, path, request, response in _methods:
                setattr(self, name, channel.unary_unary(
                    path, request_serializer=request.SerializeToString,
                    response_deserializer=response.FromString))

        def add_to_server(servicer, server, _methods=methods, _service=service.full_name):
            import grpc
            handlers = {name: grpc.unary_unary_rpc_method_handler(
                getattr(servicer, name), request_deserializer=request.FromString,
                response_serializer=response.SerializeToString)
                for name, _, request, response in _methods}
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(_service, handlers),))

        setattr(stubs, service_name + "Stub", type(service_name + "Stub", (), {
            "__init__": init, "__doc__": f"Client stub of {service.full_name}."}))
        setattr(stubs, service_name + "Servicer", type(
            service_name + "Servicer", (),
            {name: _unimplemented for name, _, _, _ in methods}))
        setattr(stubs, f"add_{service_name}Servicer_to_server", add_to_server)
    return stubs


_pool, _files = _load_pool()
graph_pb2 = _module_for(_pool, "echo/v1/graph.proto", "echo_torch.proto.graph_pb2")
device_pb2 = _module_for(_pool, "echo/v1/device.proto", "echo_torch.proto.device_pb2")
planner_pb2 = _module_for(_pool, "echo/v1/planner.proto", "echo_torch.proto.planner_pb2")
health_pb2 = _module_for(_pool, "grpc/health/v1/health.proto", "echo_torch.proto.health_pb2")
planner_pb2_grpc = _stub_module(planner_pb2, "echo_torch.proto.planner_pb2_grpc")
health_pb2_grpc = _stub_module(health_pb2, "echo_torch.proto.health_pb2_grpc")

__all__ = ["graph_pb2", "device_pb2", "planner_pb2", "health_pb2", "planner_pb2_grpc",
           "health_pb2_grpc"]
