"""What the sync and async clients share: configuration, request bodies,
paths and the checks of caller input. No I/O here."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union
from urllib.parse import quote, urlsplit

from .errors import InvalidArgumentError
from .models import NetworkPolicy

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_REQUEST_TIMEOUT = 60.0
# Added to a command's or an execution's own timeout for the HTTP read
# timeout: the server ends them itself and answers first.
STREAM_GRACE = 30.0
# The server's own defaults when a caller gives none (ExecRequest, CodeRequest).
DEFAULT_EXEC_TIMEOUT = 60.0
DEFAULT_CODE_TIMEOUT = 300.0

_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_CTX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

Cmd = Union[str, Sequence[str]]
Network = Union[NetworkPolicy, Mapping[str, Any], str]


@dataclass(frozen=True)
class ConnectionConfig:
    """Where the server is and how to authenticate.

    ``url`` defaults to ``$AGENTBOX_URL`` (else http://127.0.0.1:8000),
    ``api_key`` to ``$AGENTBOX_API_KEY`` (none for a keyless loopback server),
    ``request_timeout`` (seconds) bounds ordinary requests.
    """

    url: str
    api_key: Optional[str]
    request_timeout: float

    @classmethod
    def resolve(
        cls,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> "ConnectionConfig":
        u = (url or os.environ.get("AGENTBOX_URL") or DEFAULT_URL).rstrip("/")
        parts = urlsplit(u)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidArgumentError(f"AGENTBOX_URL must be an http(s) URL, got {u!r}", field="url")
        key = api_key if api_key is not None else os.environ.get("AGENTBOX_API_KEY") or None
        if key is not None and any(c in key for c in "\r\n"):
            raise InvalidArgumentError("api_key contains a line break", field="api_key")
        t = DEFAULT_REQUEST_TIMEOUT if request_timeout is None else float(request_timeout)
        if t <= 0:
            raise InvalidArgumentError("request_timeout must be positive", field="request_timeout")
        return cls(url=u, api_key=key, request_timeout=t)

    def headers(self) -> Dict[str, str]:
        h = {"User-Agent": "agentbox-python/0.1"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def ws_url(self, path: str) -> str:
        """The websocket URL of an API path."""
        scheme = "wss" if self.url.startswith("https:") else "ws"
        return scheme + self.url[self.url.index(":"):] + path


# A request the server refused as busy (429 with Retry-After: too many heavy
# requests of this user in flight, or its request memory in use) ran
# nothing: it is retried after the server's Retry-After, for at most this
# many seconds in all.
BUSY_RETRY_BUDGET = 60.0


def busy_delay(status: int, headers: Mapping[str, str], replayable: bool, waited: float) -> Optional[float]:
    """How long to wait before retrying a busy refusal, or None to give up."""
    if status != 429 or not replayable:
        return None
    try:
        after = float(headers.get("retry-after", ""))
    except ValueError:
        return None
    if after <= 0 or waited + after > BUSY_RETRY_BUDGET:
        return None
    return after


def replayable(content: Any) -> bool:
    """Whether a request body can be sent again (not a consumed stream)."""
    return content is None or isinstance(content, (bytes, bytearray, str))


def sandbox_path(sandbox_id: str, suffix: str = "") -> str:
    """``/v1/sandboxes/{id}{suffix}``, refusing ids that are not ids (no path tricks)."""
    if not isinstance(sandbox_id, str) or not _ID.match(sandbox_id):
        raise InvalidArgumentError(f"not a sandbox id: {sandbox_id!r}", field="id")
    return f"/v1/sandboxes/{sandbox_id}{suffix}"


def context_id(ctx: Any) -> str:
    cid = getattr(ctx, "id", ctx)
    if not isinstance(cid, str) or not _CTX.match(cid):
        raise InvalidArgumentError(f"not a code context id: {cid!r}", field="context_id")
    return cid


_VOLUME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def volume_path(name: str, suffix: str = "") -> str:
    """``/v1/volumes/{name}{suffix}``, refusing names that are not names."""
    if not isinstance(name, str) or not _VOLUME.match(name):
        raise InvalidArgumentError(f"not a volume name: {name!r}", field="name")
    return f"/v1/volumes/{name}{suffix}"


def volume_mounts(volumes: Optional[Sequence[Any]]) -> Optional[List[Dict[str, Any]]]:
    """The create body's ``volumes``: VolumeMount objects or ``{name, path, ...}`` dicts."""
    if volumes is None:
        return None
    out = []
    for v in volumes:
        out.append(v.to_json() if hasattr(v, "to_json") else dict(v))
    return out


def template_path(name: str, suffix: str = "") -> str:
    if not isinstance(name, str) or not name or len(name) > 512:
        raise InvalidArgumentError(f"not a template name: {name!r}", field="name")
    return "/v1/templates/" + quote(name, safe="") + suffix


def check_port(port: int) -> int:
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise InvalidArgumentError(f"port must be an integer in 1..65535, got {port!r}", field="port")
    return port


def check_path(path: str) -> str:
    if not isinstance(path, str) or not path or "\x00" in path:
        raise InvalidArgumentError(f"not a file path: {path!r}", field="path")
    return path


def network_json(network: Optional[Network]) -> Optional[Dict[str, Any]]:
    if network is None:
        return None
    if isinstance(network, str):
        return {"mode": network}
    if isinstance(network, NetworkPolicy):
        return network.to_json()
    if isinstance(network, Mapping):
        return dict(network)
    raise InvalidArgumentError(f"network must be a mode, a NetworkPolicy or a dict, got {type(network).__name__}", field="network")


def create_body(
    template: Optional[str],
    timeout: Optional[float],
    env: Optional[Mapping[str, str]],
    metadata: Optional[Mapping[str, str]],
    cpus: Optional[float],
    memory: Optional[Union[int, str]],
    pids: Optional[int],
    disk: Optional[Union[int, str]],
    network: Optional[Network],
    service: Optional[bool],
    auto_pause: Optional[bool] = None,
    isolation: Optional[str] = None,
    volumes: Optional[Sequence[Any]] = None,
) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if template is not None:
        body["template"] = template
    if timeout is not None:
        body["timeout"] = timeout
    if env:
        body["env"] = dict(env)
    if metadata:
        body["metadata"] = dict(metadata)
    res = {k: v for k, v in (("cpus", cpus), ("memory", memory), ("pids", pids), ("disk", disk)) if v is not None}
    if res:
        body["resources"] = res
    net = network_json(network)
    if net is not None:
        body["network"] = net
    if service is not None:
        body["service"] = service
    if auto_pause:
        body["auto_pause"] = True
    if isolation is not None:
        if isolation not in ("container", "gvisor"):
            raise InvalidArgumentError(f'isolation must be "container" or "gvisor", got {isolation!r}', field="isolation")
        body["isolation"] = isolation
    vms = volume_mounts(volumes)
    if vms:
        body["volumes"] = vms
    return body


def argv(cmd: Cmd) -> List[str]:
    """A command as the API's argv: a string runs through /bin/sh -c."""
    if isinstance(cmd, str):
        if not cmd:
            raise InvalidArgumentError("cmd is empty", field="cmd")
        return ["/bin/sh", "-c", cmd]
    out = list(cmd)
    if not out or not all(isinstance(a, str) for a in out):
        raise InvalidArgumentError("cmd must be a string or a non-empty list of strings", field="cmd")
    return out


def _json_bytes(b: bytes) -> bytes:
    """b as a JSON string literal, its bytes kept as they are.

    The server takes exec stdin as a JSON string whose bytes it feeds as
    they are, also when they are not UTF-8; json.dumps cannot write such
    bytes, so this escapes only what JSON requires."""
    out = bytearray(b'"')
    for c in b:
        if c == 0x22:
            out += b'\\"'
        elif c == 0x5C:
            out += b"\\\\"
        elif c < 0x20:
            out += b"\\u%04x" % c
        else:
            out.append(c)
    out += b'"'
    return bytes(out)


def exec_body(
    cmd: Cmd,
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    timeout: Optional[float],
    stdin: Optional[Union[str, bytes]],
    user: Optional[str],
) -> bytes:
    body: Dict[str, Any] = {"cmd": argv(cmd)}
    if env:
        body["env"] = dict(env)
    if cwd:
        body["cwd"] = cwd
    if timeout is not None:
        body["timeout"] = timeout
    if user:
        body["user"] = user
    data = json.dumps(body).encode()
    if stdin is None:
        return data
    raw = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
    return data[:-1] + b',"stdin":' + _json_bytes(raw) + b"}"


def code_body(
    code: str,
    language: Optional[str],
    context: Any,
    env_vars: Optional[Mapping[str, str]],
    timeout: Optional[float],
    max_output_bytes: Optional[int],
) -> Dict[str, Any]:
    if not isinstance(code, str):
        raise InvalidArgumentError("code must be a string", field="code")
    if language is not None and context is not None:
        raise InvalidArgumentError("give language or context, not both", field="context_id")
    body: Dict[str, Any] = {"code": code}
    if context is not None:
        body["context_id"] = context_id(context)
    if language is not None:
        body["language"] = language
    if env_vars:
        body["env_vars"] = dict(env_vars)
    if timeout is not None:
        body["timeout"] = timeout
    if max_output_bytes is not None:
        body["max_output_bytes"] = max_output_bytes
    return body


def read_timeout(timeout: Optional[float], default: float) -> float:
    """The HTTP read timeout of a run the server bounds by ``timeout``."""
    return (default if timeout is None else float(timeout)) + STREAM_GRACE


def parse_line(line: Union[str, bytes]) -> Optional[Dict[str, Any]]:
    """One NDJSON line, or None for a blank one."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    line = line.strip()
    if not line:
        return None
    v = json.loads(line)
    if not isinstance(v, dict):
        raise ValueError(f"unexpected stream line {line[:80]!r}")
    return v


def seconds(name: str, v: Optional[float]) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise InvalidArgumentError(f"{name} must be a positive number of seconds, got {v!r}", field=name)
    return float(v)
