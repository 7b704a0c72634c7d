"""Server reflection under both names clients use: `grpc.reflection.v1alpha` (what
grpcio-reflection ships) and `grpc.reflection.v1` (what newer grpcurl and Postman ask for).

The two protocols have the same messages under different package names, so one servicer,
with v1alpha's (de)serializers, answers both.
"""

from __future__ import annotations

from typing import Iterable

import grpc
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as pb

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
V1ALPHA_SERVICE_NAME = reflection.SERVICE_NAME


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serve reflection for `service_names` (and for both reflection services) on `server`."""
    servicer = reflection.aio.ReflectionServicer(
        (*service_names, V1ALPHA_SERVICE_NAME, V1_SERVICE_NAME))
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=pb.ServerReflectionRequest.FromString,
        response_serializer=pb.ServerReflectionResponse.SerializeToString)
    for name in (V1ALPHA_SERVICE_NAME, V1_SERVICE_NAME):
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": handler}),))
