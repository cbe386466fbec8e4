"""Exceptions raised by the SDK.

Every error the server answers has a stable ``code`` (api/openapi.yaml,
schema ``Error``); each code has a class here, all subclasses of
:class:`AgentboxError`, so callers can catch exactly the kind they handle::

    try:
        sbx.files.read("/nope")
    except agentbox.NotFoundError:
        ...
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Type

if TYPE_CHECKING:  # pragma: no cover
    from .models import CommandResult, Execution


class AgentboxError(Exception):
    """Base class of every error of this package.

    ``code`` is the server's error class (``"not_found"``, ...), or
    ``"transport"`` when the server could not be reached at all.
    """

    code: str = "unknown"

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        field: Optional[str] = None,
        request_id: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.field = field
        self.request_id = request_id

    def __str__(self) -> str:
        parts = [self.message]
        if self.field:
            parts.append(f"(field {self.field})")
        if self.status is not None:
            parts.append(f"[{self.code}, HTTP {self.status}]")
        return " ".join(parts)


class InvalidArgumentError(AgentboxError, ValueError):
    """The request was refused as malformed (HTTP 400); ``field`` names the culprit."""

    code = "invalid_argument"


class NotFoundError(AgentboxError, LookupError):
    """No such sandbox, file, context, template or route (HTTP 404)."""

    code = "not_found"


class ConflictError(AgentboxError):
    """The resource is not in a state that allows it (HTTP 409), e.g. a stopped sandbox."""

    code = "conflict"


class TooLargeError(AgentboxError):
    """A body, upload or value is over a limit (HTTP 413)."""

    code = "too_large"


class QuotaExceededError(AgentboxError):
    """A limit was reached (HTTP 429): sandbox caps, requests in flight.

    ``retry_after`` is the server's Retry-After in seconds, when it sent one.
    """

    code = "quota_exceeded"

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class UnauthenticatedError(AgentboxError):
    """No API key or a wrong one (HTTP 401)."""

    code = "unauthenticated"


class PermissionDeniedError(AgentboxError):
    """The key is valid but may not do this (HTTP 403), e.g. operator-only routes."""

    code = "permission_denied"


class DeadlineExceededError(AgentboxError, TimeoutError):
    """The server gave up waiting (HTTP 504)."""

    code = "deadline_exceeded"


class InsufficientSpaceError(AgentboxError):
    """A disk is full (HTTP 507)."""

    code = "insufficient_space"


class UnavailableError(AgentboxError):
    """The server or the sandbox cannot serve this now (HTTP 503)."""

    code = "unavailable"


class InternalError(AgentboxError):
    """The server failed (HTTP 500); its log has the details under ``request_id``."""

    code = "internal"


class TransportError(AgentboxError, ConnectionError):
    """The server could not be reached or the connection broke."""

    code = "transport"


class CommandExitError(AgentboxError):
    """``commands.run(..., check=True)`` and the command did not exit with 0."""

    code = "command_exit"

    def __init__(self, result: "CommandResult") -> None:
        super().__init__(f"command exited with {result.exit_code} ({result.status}): {result.stderr[-500:]}")
        self.result = result


class StepTimeoutError(AgentboxError, TimeoutError):
    """A :class:`~agentbox.envs.PythonSandboxEnv` step ran past its timeout.

    The environment recovered (the interpreter was interrupted, or restarted
    when it would not stop) and can be stepped again. ``output`` is what the
    step printed before; ``state_lost`` says whether the variables are gone.
    """

    code = "step_timeout"

    def __init__(self, message: str, *, output: str, execution: "Execution", state_lost: bool) -> None:
        super().__init__(message)
        self.output = output
        self.execution = execution
        self.state_lost = state_lost


class StartTimeoutError(AgentboxError, TimeoutError):
    """An environment did not start within its ``start_timeout``."""

    code = "start_timeout"


_CLASSES: "tuple[Type[AgentboxError], ...]" = (
    InvalidArgumentError,
    NotFoundError,
    ConflictError,
    TooLargeError,
    QuotaExceededError,
    UnauthenticatedError,
    PermissionDeniedError,
    DeadlineExceededError,
    InsufficientSpaceError,
    UnavailableError,
    InternalError,
)
_BY_CODE: Dict[str, Type[AgentboxError]] = {c.code: c for c in _CLASSES}

# What a status means when the body is not the API's JSON error (a proxy
# in front of the server, a websocket handshake refused).
_BY_STATUS: Dict[int, Type[AgentboxError]] = {
    400: InvalidArgumentError,
    401: UnauthenticatedError,
    403: PermissionDeniedError,
    404: NotFoundError,
    405: NotFoundError,
    409: ConflictError,
    413: TooLargeError,
    429: QuotaExceededError,
    503: UnavailableError,
    504: DeadlineExceededError,
    507: InsufficientSpaceError,
}


def error_from_response(status: int, body: bytes, headers: Mapping[str, str]) -> AgentboxError:
    """Builds the exception for an error answer of the server."""
    data: Any = None
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        pass
    cls: Type[AgentboxError]
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        cls = _BY_CODE.get(data["code"], _BY_STATUS.get(status, InternalError))
        message = str(data.get("message") or data["code"])
        field = data.get("field") if isinstance(data.get("field"), str) else None
        request_id = data.get("request_id") if isinstance(data.get("request_id"), str) else None
    else:
        cls = _BY_STATUS.get(status, InternalError)
        text = body[:300].decode("utf-8", "replace").strip()
        message = f"HTTP {status}" + (f": {text}" if text else "")
        field, request_id = None, headers.get("x-request-id")
    if cls is QuotaExceededError:
        retry: Optional[float] = None
        try:
            retry = float(headers.get("retry-after", ""))
        except ValueError:
            pass
        return QuotaExceededError(message, retry_after=retry, status=status, field=field, request_id=request_id)
    return cls(message, status=status, field=field, request_id=request_id)


__all__ = [
    "AgentboxError",
    "InvalidArgumentError",
    "NotFoundError",
    "ConflictError",
    "TooLargeError",
    "QuotaExceededError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "DeadlineExceededError",
    "InsufficientSpaceError",
    "UnavailableError",
    "InternalError",
    "TransportError",
    "CommandExitError",
    "StepTimeoutError",
    "StartTimeoutError",
    "error_from_response",
]
