"""HTTP errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, the
statuses request errors map to (through their gRPC codes, `server.errors.status_of`), and
the limit on a request body's size."""

from __future__ import annotations

import json
import logging
import re

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from server.errors import ServerError, message_of, status_of

log = logging.getLogger(__name__)
HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.UNAUTHENTICATED: 401,
               grpc.StatusCode.PERMISSION_DENIED: 403, grpc.StatusCode.NOT_FOUND: 404,
               grpc.StatusCode.ALREADY_EXISTS: 409, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
               grpc.StatusCode.UNAVAILABLE: 503}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 409: "conflict_error",
               413: "invalid_request_error", 429: "rate_limit_error", 500: "internal_error",
               503: "service_unavailable"}
FIELD_NAME = re.compile(r"^([A-Za-z_][\w.\[\]]*)(?=:| must| is| has| exceed| leaves| \d)")


class HttpError(Exception):
    """A request error with its HTTP status and the parameter it names (if any)."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def error_body(status: int, message: str, param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "error"),
                      "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None,
                   code: str | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(status, message, param, code))


def http_error_of(exc: Exception) -> HttpError:
    """The HTTP form of an engine or server request error (500 for anything else)."""
    if isinstance(exc, HttpError):
        return exc
    code = status_of(exc)
    if code is None:
        log.error("internal error", exc_info=exc)
        return HttpError(500, f"internal error: {message_of(exc)}")
    message = message_of(exc)
    match = FIELD_NAME.match(message) if code == grpc.StatusCode.INVALID_ARGUMENT else None
    return HttpError(HTTP_STATUS.get(code, 500), message, match.group(1) if match else None)


def sse_error_event(error: HttpError) -> str:
    """An SSE event with OpenAI's error body (a stream's error after its 200 was sent)."""
    body = error_body(error.status, error.message, error.param, error.code)
    return f"data: {json.dumps(body)}\n\n"


def install_error_handlers(app: FastAPI) -> None:
    """OpenAI's error body for every refusal of `app`: ours, FastAPI's and Starlette's."""
    @app.exception_handler(HttpError)
    async def on_http_error(_: Request, exc: HttpError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.code)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            return error_response(400, "body: not valid JSON "
                                       f"({first.get('ctx', {}).get('error', 'decode error')})")
        where = [str(part) for part in first.get("loc", ()) if part != "body"]
        param = ".".join(where) or None
        return error_response(400, f"{param or 'body'}: {first.get('msg', 'invalid request')}",
                              param)

    @app.exception_handler(StarletteHTTPException)
    async def on_starlette_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals (a body it cannot parse: invalid UTF-8, JSON nested past
        # the parser's depth) in OpenAI's body.
        message = "body: not valid JSON" if exc.status_code == 400 else str(exc.detail)
        return error_response(exc.status_code, message)

    @app.exception_handler(ServerError)
    async def on_server_error(_: Request, exc: ServerError) -> JSONResponse:
        error = http_error_of(exc)
        return error_response(error.status, error.message, error.param, error.code)


class BodyLimit:
    """ASGI middleware: an HTTP request body may be at most `max_bytes`, declared or not.
    A body without a declared length is read (up to the limit) before the app sees it."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.max_bytes:
                return await self._refuse(scope, receive, send)
            return await self.app(scope, receive, send)
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return await self._refuse(scope, receive, send)
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay():
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send) -> None:
        """413, closing the connection: kept alive, the server would read and discard the
        rest of the body (up to the size declared) before the next request."""
        message = f"body: larger than the server's limit of {self.max_bytes} bytes"
        response = error_response(413, message)
        response.headers["Connection"] = "close"
        await response(scope, receive, send)
