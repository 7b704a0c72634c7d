"""Registers the Agentix servicer on a grpc.aio server with request parsing of our own: a
request whose bytes do not parse gets INVALID_ARGUMENT naming the method (grpc's generated
registration would answer UNKNOWN "Unexpected DecodeError"); and the names of the services
a server or router registers (Agentix, health), for health and reflection."""

from __future__ import annotations

import functools
from typing import Any, Callable

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2

from server import agentix_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["Agentix"]
SERVICE_NAME = SERVICE.full_name
HEALTH_SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class _Undecodable:
    """Stands for a request whose bytes did not parse."""

    def __init__(self, error: DecodeError) -> None:
        self.error = error


def _parser(message_class: type) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except DecodeError as exc:
            return _Undecodable(exc)

    return parse


def _refusal(method: str) -> str:
    return f"request: the bytes of this {method} request do not parse as agentix.v1 protobuf"


def _unary(method: str, handler: Callable) -> Callable:
    @functools.wraps(handler)
    async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, _Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _refusal(method))
        return await handler(request, context)

    return run


def _streaming(method: str, handler: Callable) -> Callable:
    @functools.wraps(handler)
    async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, _Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _refusal(method))
        async for response in handler(request, context):
            yield response

    return run


def add_service(servicer: Any, server: grpc.aio.Server) -> None:
    """Serve every method of agentix.v1.Agentix from `servicer`'s method of the same name."""
    handlers = {}
    for method in SERVICE.methods:
        parse = _parser(getattr(pb, method.input_type.name))
        serialize = getattr(pb, method.output_type.name).SerializeToString
        handler = getattr(servicer, method.name)
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _streaming(method.name, handler), parse, serialize)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(method.name, handler), parse, serialize)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
