"""One table from failures to OpenAI's error envelope and an HTTP status."""

from __future__ import annotations

import logging
import shlex

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException

from rose_embed.compat.inputs import InvalidInputError
from rose_embed.compat.openai import ErrorDetail, ErrorResponse
from rose_embed.engine.contract.interface import BatchFailedError, EngineUnavailableError, QueueFullError

logger = logging.getLogger("rose_embed.errors")


class APIError(Exception):
    """An error with everything OpenAI's envelope carries."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}


def invalid_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def model_not_found(model: str, served_names: list[str], models: list[str] | None = None) -> APIError:
    """OpenAI's 404, then every id this server serves and how to accept `model` as another name.
    `served_names`: what /v1/models lists; `models`: the served models' own names among them (None: the first only)."""
    models = models or served_names[:1]
    aliases = [name for name in served_names if name not in models]
    also = f" (also as {', '.join(repr(a) for a in aliases)})" if aliases else ""
    if len(model) > 200:  # echoed three times: a name of megabytes would make a reply three times that
        model = model[:200] + "..."
    if len(models) == 1:
        how = f"to accept '{model}' as another name for it, start the server with --model-alias {shlex.quote(model)}."
    else:
        how = (f"to accept '{model}' as another name for one of them, start the server with "
               f"--model-alias {shlex.quote(model)}=MODEL.")
    return APIError(
        404,
        f"The model '{model}' does not exist or you do not have access to it. This server serves "
        f"{', '.join(repr(m) for m in models)}{also}; {how}",
        "invalid_request_error", "model", "model_not_found",
    )


def not_ready() -> APIError:
    return APIError(503, "The model is still loading; retry shortly.", "server_error", None, "model_not_ready",
                    headers={"Retry-After": "1"})


def engine_unavailable(reason: str, retry_after: int | None = None) -> APIError:
    """`retry_after`: where an engine is being restarted, when to send the request again. Without
    one (an engine stuck in this process) nothing comes back by itself; /health tells the orchestrator."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return APIError(503, f"The server cannot compute embeddings now: {reason}.", "server_error", None,
                    "engine_unavailable", headers=headers)


def shutting_down() -> APIError:
    """A request the server's stop cut off: a second Ctrl-C, or --shutdown-timeout passed."""
    # No Retry-After: this server is going away; whatever balances the load sends the retry elsewhere.
    return APIError(503, "The server is shutting down; retry the request.", "server_error", None,
                    "server_shutting_down")


def from_decode_error(exc: msgspec.DecodeError) -> APIError:
    """msgspec says e.g. "Expected `int | null`, got `str` - at `$.dimensions`"; name the field."""
    text = str(exc)
    if not isinstance(exc, msgspec.ValidationError):
        return invalid_request(
            f"We could not parse the JSON body of your request ({text}). The API expects a JSON object."
        )
    param = None
    if " - at `$." in text:
        path = text.rsplit(" - at `$.", 1)[1].rstrip("`")
        param = path.split("[", 1)[0].split(".", 1)[0]
    elif "missing required field `" in text:
        param = text.split("missing required field `", 1)[1].rstrip("`")
    return invalid_request(f"Invalid request body: {text}", param)


def _to_api_error(exc: Exception) -> APIError:
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, InvalidInputError):
        return invalid_request(str(exc), exc.param)
    if isinstance(exc, msgspec.DecodeError):
        return from_decode_error(exc)
    if isinstance(exc, QueueFullError):
        return APIError(429, str(exc), "rate_limit_error", None, "rate_limit_exceeded",
                        headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, BatchFailedError):
        logger.error("batch failed", exc_info=exc.__cause__ or exc)
        return APIError(500, "The server failed to compute this batch; retry the request.", "server_error")
    if isinstance(exc, EngineUnavailableError):
        return engine_unavailable(str(exc), exc.retry_after)
    if isinstance(exc, HTTPException):
        status = exc.status_code
        kind = "invalid_request_error" if status < 500 else "server_error"
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(status)
        return APIError(status, str(exc.detail), kind, None, code, headers=dict(exc.headers or {}))
    logger.exception("unhandled error", exc_info=exc)
    return APIError(500, "The server had an error while processing your request.", "server_error")


def envelope(err: APIError) -> bytes:
    """`err` in OpenAI's envelope, as JSON."""
    body = ErrorResponse(error=ErrorDetail(message=err.message, type=err.type, param=err.param, code=err.code))
    return msgspec.json.encode(body)


def error_response(request: Request, exc: Exception) -> Response:
    """Litestar exception handler: every error leaves in OpenAI's envelope."""
    err = _to_api_error(exc)
    return Response(content=envelope(err), status_code=err.status, headers=err.headers,
                    media_type="application/json")
