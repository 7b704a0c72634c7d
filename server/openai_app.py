"""The OpenAI-compatible FastAPI apps: the whole door (server/openai_http.py) on a backend,
and the metrics port of a gRPC-only server."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from scheduler.program_inference import ProgramInference
from server.auth import TokenAuth
from server.door_backend import DoorBackend, EngineBackend
from server.http_errors import (BodyLimit, error_response, http_error_of,
                                install_error_handlers)
from server.metrics import CONTENT_TYPE, ServerMetrics
from server.openai_http import OpenAIDoor
from server.openai_tokens import TokenEndpoints
from server.prompts import PromptTokenizer
from server.response_store import ResponseStore

BODY_OVERHEAD_BYTES = 64 << 10  # a body's room beyond its prompt


def build_app(backend: DoorBackend, prompts: PromptTokenizer, auth: TokenAuth | None,
              model_name: str, max_model_len: int, responses: ResponseStore,
              tool_call_parser: str | None = None, metrics: ServerMetrics | None = None,
              reasoning_parser: str | None = None,
              inference: ProgramInference | None = None) -> FastAPI:
    """The OpenAI-compatible app (see server/openai_http.py) on `backend`. A request body
    may be up to four times the prompt limit (JSON escapes) plus room for the other fields.
    `responses` keeps the stored Responses; `tool_call_parser` (a `server.tool_parsers`
    name; None: off) turns on "auto" tool choice; `reasoning_parser` (a
    `server.reasoning_parsers` name; None: off) splits chat outputs' reasoning off;
    `metrics` (an EngineBackend's only) serves /metrics; `inference` (None: off) infers the
    programs of chat requests that name none (`--infer-programs`)."""
    door = OpenAIDoor(backend, prompts, auth, model_name, max_model_len, responses,
                      tool_call_parser, reasoning_parser, inference)
    app = FastAPI(title="Agentix", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=4 * prompts.max_prompt_bytes + BODY_OVERHEAD_BYTES)
    app.post("/v1/chat/completions")(door.chat)
    app.post("/v1/completions")(door.completions)
    app.post("/v1/responses")(door.responses)
    app.get("/v1/responses/{response_id}")(door.get_response)
    app.delete("/v1/responses/{response_id}")(door.delete_response)
    app.get("/v1/models")(door.models)
    tokens = TokenEndpoints(prompts, max_model_len, door.namespace, door.check_model,
                            http_error_of)
    app.post("/tokenize")(tokens.tokenize)
    app.post("/detokenize")(tokens.detokenize)
    app.get("/v1/programs/{program_id}")(door.get_program)
    app.post("/v1/programs/{program_id}:end")(door.end_program)
    app.get("/health")(health_endpoint(backend))
    if metrics is not None:
        app.get("/metrics")(_metrics_endpoint(backend, metrics))
    return app


def build_metrics_app(backend: EngineBackend, metrics: ServerMetrics) -> FastAPI:
    """/metrics and /health alone (the metrics port of a gRPC-only server)."""
    app = FastAPI(title="Agentix metrics", docs_url=None, redoc_url=None, openapi_url=None)
    app.get("/metrics")(_metrics_endpoint(backend, metrics))
    app.get("/health")(health_endpoint(backend))
    return app


def health_endpoint(backend: DoorBackend):
    """GET /health: 200 {"status": "ok"}, or 503 naming why `backend` takes no calls."""
    async def health() -> Response:
        reason = backend.unavailable()
        if reason is not None:
            return error_response(503, reason)
        return JSONResponse({"status": "ok"})

    return health


def _metrics_endpoint(backend: EngineBackend, metrics: ServerMetrics):
    async def render_metrics() -> Response:
        return Response(metrics.render(await backend.stats()), media_type=CONTENT_TYPE)

    return render_metrics
