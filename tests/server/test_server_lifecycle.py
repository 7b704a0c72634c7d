"""Health checking, reflection, and shutdown: NOT_SERVING first, UNAVAILABLE for new work
while calls in flight finish within the grace period, abort after it."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_helpers import collect, gen_request, rpc_error, start
from grpc_reflection.v1alpha import reflection_pb2

from server import agentix_pb2 as pb
from server import agentix_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_health_check_serving(grpc_server):
    with grpc.insecure_channel(grpc_server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "agentix.v1.Agentix"):
            response = health.Check(health_pb2.HealthCheckRequest(service=service))
            assert response.status == SERVING
        err = rpc_error(health.Check, health_pb2.HealthCheckRequest(service="nope"))
        assert err.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("version", ["v1alpha", "v1"])
def test_reflection_lists_services_under_both_versions(grpc_server, version):
    """v1 has v1alpha's messages under another package name: call its path with them."""
    with grpc.insecure_channel(grpc_server.address) as channel:
        info = channel.stream_stream(
            f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        response = next(info(iter([request])))
        names = {s.name for s in response.list_services_response.service}
        assert {"agentix.v1.Agentix", "grpc.health.v1.Health",
                "grpc.reflection.v1alpha.ServerReflection",
                "grpc.reflection.v1.ServerReflection"} <= names
        request = reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="agentix.v1.Agentix")
        response = next(info(iter([request])))
        assert response.file_descriptor_response.file_descriptor_proto


def test_graceful_shutdown(tiny_llama_dir):
    """Watch sees NOT_SERVING; new work is UNAVAILABLE; the call in flight finishes."""
    server = start(tiny_llama_dir)
    channel = grpc.insecure_channel(server.address)
    stub = agentix_pb2_grpc.AgentixStub(channel)
    pid = stub.StartProgram(pb.StartProgramRequest()).program_id
    watch = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service="agentix.v1.Agentix"))
    assert next(watch).status == SERVING
    in_flight = stub.Generate(gen_request([1, 5, 6], pid, max_tokens=120, ignore_eos=True))
    first = next(in_flight)
    stopper = threading.Thread(target=server.stop, kwargs=dict(grace=30.0))
    stopper.start()
    assert next(watch).status == NOT_SERVING
    for call, request_ in ((stub.Generate, gen_request([1, 5, 6], pid)),
                           (stub.Generate, gen_request([1, 5, 6])),
                           (stub.StartProgram, pb.StartProgramRequest())):
        err = rpc_error(call, request_)
        assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()
    ids, _, final = collect(in_flight)
    assert final.finish_reason == "length" and len(first.delta.token_ids) + len(ids) == 120
    stopper.join(timeout=30)
    assert not stopper.is_alive()
    err = rpc_error(stub.ModelInfo, pb.ModelInfoRequest(), timeout=2)
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    channel.close()
    server.stop()  # idempotent


def test_shutdown_aborts_calls_past_the_grace_period(tiny_llama_dir):
    server = start(tiny_llama_dir)
    with grpc.insecure_channel(server.address) as channel:
        stub = agentix_pb2_grpc.AgentixStub(channel)
        in_flight = stub.Generate(gen_request([1, 5, 6], max_tokens=240, ignore_eos=True))
        next(in_flight)
        server.stop(grace=0.0)
        # The call is cut with its own reason and a retryable status, after its final message.
        responses = []
        with pytest.raises(grpc.RpcError) as info:
            for response in in_flight:
                responses.append(response)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "retry" in info.value.details()
        final = responses[-1].final
        streamed = [t for r in responses[:-1] for t in r.delta.token_ids]
        assert final.finish_reason == "shutdown" and len(streamed) < 239
        assert final.usage.completion_tokens == len(streamed) + 1


def test_idle_programs_expire_while_the_server_idles(tiny_llama_dir):
    """The engine thread ticks about once a second when idle, so TTL expiry runs."""
    server = start(tiny_llama_dir, program_ttl=0.2)
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = agentix_pb2_grpc.AgentixStub(channel)
            pid = stub.StartProgram(pb.StartProgramRequest()).program_id
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    stub.GetProgram(pb.GetProgramRequest(program_id=pid))
                except grpc.RpcError as err:
                    assert err.code() == grpc.StatusCode.NOT_FOUND
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the idle program never expired")
            assert stub.EndProgram(pb.EndProgramRequest(program_id=pid)).state == "expired"
    finally:
        server.stop(grace=0)
