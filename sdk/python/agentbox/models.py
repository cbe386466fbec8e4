"""Typed values the API returns (api/openapi.yaml, components/schemas)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple


def _time(v: Any) -> Optional[datetime]:
    """Parses the server's RFC 3339 times (nanoseconds trimmed to what Python keeps)."""
    if not isinstance(v, str) or not v:
        return None
    s = v.replace("Z", "+00:00")
    # datetime.fromisoformat takes at most 6 fractional digits before 3.11.
    if "." in s:
        head, rest = s.split(".", 1)
        digits = ""
        for ch in rest:
            if not ch.isdigit():
                break
            digits += ch
        s = head + "." + (digits[:6].ljust(6, "0")) + rest[len(digits):]
    try:
        return datetime.fromisoformat(s)
    except ValueError:
        return None


def _str_map(v: Any) -> Dict[str, str]:
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}


@dataclass
class EgressRule:
    """What the egress broker does to HTTPS requests for ``host`` (an exact
    name or ``*.example.com``): ``headers`` set on matching requests, where
    ``${secret:NAME}`` is your secret NAME (the sandbox never sees it);
    ``methods`` and ``paths`` (prefixes) narrow which requests, empty meaning
    all; ``secrets`` binds secrets whose placeholders the broker replaces in
    requests to this host only (docs/secrets.md). A rule opens nothing: the
    host must also pass the allow and deny lists."""

    host: str
    headers: Dict[str, str] = field(default_factory=dict)
    methods: List[str] = field(default_factory=list)
    paths: List[str] = field(default_factory=list)
    secrets: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Any) -> "EgressRule":
        d = d if isinstance(d, dict) else {}
        return cls(host=str(d.get("host", "")), headers=dict(d.get("headers") or {}),
                   methods=list(d.get("methods") or []), paths=list(d.get("paths") or []),
                   secrets=list(d.get("secrets") or []))

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"host": self.host}
        if self.headers:
            out["headers"] = dict(self.headers)
        if self.methods:
            out["methods"] = list(self.methods)
        if self.paths:
            out["paths"] = list(self.paths)
        if self.secrets:
            out["secrets"] = list(self.secrets)
        return out


@dataclass
class NetworkPolicy:
    """A sandbox's network: ``mode`` ``"none"`` (loopback only) or ``"egress"``
    with optional allow/deny lists of CIDRs or domain names, and the egress
    broker's ``rules`` (:class:`EgressRule`)."""

    mode: Optional[str] = None
    allow_out: List[str] = field(default_factory=list)
    deny_out: List[str] = field(default_factory=list)
    rules: List[EgressRule] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Any) -> "NetworkPolicy":
        d = d if isinstance(d, dict) else {}
        return cls(mode=d.get("mode"), allow_out=list(d.get("allow_out") or []), deny_out=list(d.get("deny_out") or []),
                   rules=[EgressRule.from_json(r) for r in d.get("rules") or []])

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if self.mode:
            out["mode"] = self.mode
        if self.allow_out:
            out["allow_out"] = list(self.allow_out)
        if self.deny_out:
            out["deny_out"] = list(self.deny_out)
        if self.rules:
            out["rules"] = [r.to_json() for r in self.rules]
        return out


@dataclass
class SecretInfo:
    """One of your secrets as the server describes it (schema ``Secret``):
    never its value. ``placeholder`` is text a sandbox may carry instead of
    the value; the broker replaces it in requests to the hosts a rule binds
    the secret to, and nowhere else."""

    name: str
    id: str = ""
    version: int = 0
    placeholder: str = ""
    metadata: Dict[str, str] = field(default_factory=dict)
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SecretInfo":
        return cls(name=str(d.get("name", "")), id=str(d.get("id", "")), version=int(d.get("version") or 0),
                   placeholder=str(d.get("placeholder", "")), metadata=dict(d.get("metadata") or {}),
                   created_at=_time(d.get("created_at")), updated_at=_time(d.get("updated_at")))


@dataclass
class Resources:
    """Hard limits of a sandbox as the server applied them (bytes, cores, count)."""

    memory: Optional[int] = None
    cpus: Optional[float] = None
    pids: Optional[int] = None
    disk: Optional[int] = None

    @classmethod
    def from_json(cls, d: Any) -> "Resources":
        d = d if isinstance(d, dict) else {}
        return cls(memory=d.get("memory"), cpus=d.get("cpus"), pids=d.get("pids"), disk=d.get("disk"))


@dataclass
class SandboxInfo:
    """A sandbox record (schema ``Sandbox``)."""

    id: str
    template: str
    state: str
    created_at: Optional[datetime]
    end_at: Optional[datetime]
    access_token: str
    type: Optional[str] = None
    metadata: Dict[str, str] = field(default_factory=dict)
    env: Dict[str, str] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    session_key: Optional[str] = None
    from_pool: bool = False
    #: Paused instead of deleted at its end time.
    auto_pause: bool = False
    #: The isolation level it runs at: "container" or "gvisor".
    isolation: str = "container"
    #: While paused: when it was paused, and the running time resume gives back.
    paused_at: Optional[datetime] = None
    remaining_seconds: Optional[float] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        return cls(
            id=str(d["id"]),
            template=str(d.get("template", "")),
            state=str(d.get("state", "")),
            created_at=_time(d.get("created_at")),
            end_at=_time(d.get("end_at")),
            access_token=str(d.get("access_token", "")),
            type=d.get("type"),
            metadata=_str_map(d.get("metadata")),
            env=_str_map(d.get("env")),
            resources=Resources.from_json(d.get("resources")),
            network=NetworkPolicy.from_json(d.get("network")),
            session_key=d.get("session_key") or None,
            from_pool=bool(d.get("from_pool")),
            auto_pause=bool(d.get("auto_pause")),
            isolation=str(d.get("isolation") or "container"),
            paused_at=_time(d.get("paused_at")),
            remaining_seconds=d.get("remaining_seconds"),
        )


@dataclass
class CommandResult:
    """A finished command (schema ``ExecResult``). ``exit_code`` is -1 when a signal killed it."""

    exit_code: int
    stdout: str
    stderr: str
    status: str = ""
    timed_out: bool = False
    oom_killed: bool = False
    pids_limit_hit: bool = False
    truncated: bool = False
    duration_ms: float = 0.0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CommandResult":
        return cls(
            exit_code=int(d.get("exit_code", -1)),
            stdout=str(d.get("stdout", "")),
            stderr=str(d.get("stderr", "")),
            status=str(d.get("status", "")),
            timed_out=bool(d.get("timed_out")),
            oom_killed=bool(d.get("oom_killed")),
            pids_limit_hit=bool(d.get("pids_limit_hit")),
            truncated=bool(d.get("truncated")),
            duration_ms=float(d.get("duration_ms") or 0),
        )

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class CommandEvent:
    """One event of a streamed command (schema ``ExecEvent``): ``start`` (pid),
    ``stdout``/``stderr`` (data), then ``exit`` (exit_code, status, flags)."""

    type: str
    pid: Optional[int] = None
    data: Optional[str] = None
    exit_code: Optional[int] = None
    status: Optional[str] = None
    timed_out: bool = False
    oom_killed: bool = False
    pids_limit_hit: bool = False
    duration_ms: Optional[float] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CommandEvent":
        return cls(
            type=str(d.get("type", "")),
            pid=d.get("pid"),
            data=d.get("data"),
            exit_code=d.get("exit_code"),
            status=d.get("status"),
            timed_out=bool(d.get("timed_out")),
            oom_killed=bool(d.get("oom_killed")),
            pids_limit_hit=bool(d.get("pids_limit_hit")),
            duration_ms=d.get("duration_ms"),
        )


class _CommandCollector:
    """Builds a CommandResult out of a command's event stream."""

    def __init__(
        self,
        on_stdout: Optional[Callable[[str], Any]],
        on_stderr: Optional[Callable[[str], Any]],
    ) -> None:
        self.stdout: List[str] = []
        self.stderr: List[str] = []
        self.exit: Optional[CommandEvent] = None
        self.on_stdout, self.on_stderr = on_stdout, on_stderr

    def feed(self, ev: CommandEvent) -> None:
        if ev.type == "stdout" and ev.data is not None:
            self.stdout.append(ev.data)
            if self.on_stdout:
                self.on_stdout(ev.data)
        elif ev.type == "stderr" and ev.data is not None:
            self.stderr.append(ev.data)
            if self.on_stderr:
                self.on_stderr(ev.data)
        elif ev.type == "exit":
            self.exit = ev

    def result(self) -> CommandResult:
        if self.exit is None:
            from .errors import TransportError

            raise TransportError("command stream ended without an exit event")
        e = self.exit
        return CommandResult(
            exit_code=e.exit_code if e.exit_code is not None else -1,
            stdout="".join(self.stdout),
            stderr="".join(self.stderr),
            status=e.status or "",
            timed_out=e.timed_out,
            oom_killed=e.oom_killed,
            pids_limit_hit=e.pids_limit_hit,
            duration_ms=e.duration_ms or 0.0,
        )


_FORMATS = ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript", "data", "chart")


@dataclass
class Result:
    """A rich result of a code execution: the value of the last expression
    (``is_main_result``) or a ``display()``/figure, in every format the
    interpreter produced. ``png``/``jpeg``/``pdf`` are base64 text; use
    :meth:`png_bytes` etc. for the bytes."""

    is_main_result: bool = False
    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Any = None
    javascript: Optional[str] = None
    data: Optional[Dict[str, Any]] = None
    chart: Optional[Dict[str, Any]] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Result":
        r = cls(is_main_result=bool(d.get("is_main_result")))
        for f in _FORMATS:
            if f in d:
                setattr(r, f, d[f])
        if isinstance(d.get("extra"), dict):
            r.extra = dict(d["extra"])
        return r

    def formats(self) -> List[str]:
        """The formats this result has, e.g. ``["text", "png"]``."""
        out = [f for f in _FORMATS if getattr(self, f) is not None]
        return out + list(self.extra)

    def png_bytes(self) -> Optional[bytes]:
        return base64.b64decode(self.png) if self.png else None

    def jpeg_bytes(self) -> Optional[bytes]:
        return base64.b64decode(self.jpeg) if self.jpeg else None

    def pdf_bytes(self) -> Optional[bytes]:
        return base64.b64decode(self.pdf) if self.pdf else None


@dataclass
class ExecutionError:
    """An error of a code execution: the exception's class ``name``, ``value``
    and ``traceback``. The agent's own errors are named TimeoutError,
    ContextRestarting, ContextDeleted, ExecutionInterrupted, ContextStartFailed."""

    name: str
    value: str
    traceback: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecutionError":
        return cls(name=str(d.get("name", "")), value=str(d.get("value", "")), traceback=str(d.get("traceback", "")))


@dataclass
class OutputMessage:
    """A chunk of stdout or stderr as it was printed."""

    line: str
    error: bool
    timestamp: Optional[datetime] = None


@dataclass
class Logs:
    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class Execution:
    """The outcome of :meth:`Sandbox.run_code`."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None

    @property
    def text(self) -> Optional[str]:
        """The main result's text (the value of the last expression), if any."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    @property
    def stdout(self) -> str:
        return "".join(self.logs.stdout)

    @property
    def stderr(self) -> str:
        return "".join(self.logs.stderr)


class _ExecutionBuilder:
    """Folds a code execution's NDJSON events into an Execution, calling the
    caller's callbacks as events arrive."""

    def __init__(
        self,
        on_stdout: Optional[Callable[[OutputMessage], Any]] = None,
        on_stderr: Optional[Callable[[OutputMessage], Any]] = None,
        on_result: Optional[Callable[[Result], Any]] = None,
        on_error: Optional[Callable[[ExecutionError], Any]] = None,
    ) -> None:
        self.execution = Execution()
        self.ended = False
        self.on_stdout, self.on_stderr, self.on_result, self.on_error = on_stdout, on_stderr, on_result, on_error

    def feed(self, ev: Mapping[str, Any]) -> Optional[Any]:
        """Applies one event; returns what a callback returned (an awaitable for async callbacks)."""
        t = ev.get("type")
        ex = self.execution
        if t in ("stdout", "stderr"):
            text = str(ev.get("text", ""))
            msg = OutputMessage(line=text, error=t == "stderr", timestamp=_time(ev.get("timestamp")))
            if t == "stdout":
                ex.logs.stdout.append(text)
                return self.on_stdout(msg) if self.on_stdout else None
            ex.logs.stderr.append(text)
            return self.on_stderr(msg) if self.on_stderr else None
        if t == "number_of_executions":
            ex.execution_count = ev.get("execution_count")
        elif t == "result":
            r = Result.from_json(ev)
            ex.results.append(r)
            return self.on_result(r) if self.on_result else None
        elif t == "error":
            ex.error = ExecutionError.from_json(ev)
            return self.on_error(ex.error) if self.on_error else None
        elif t == "end_of_execution":
            self.ended = True
        return None


@dataclass
class CodeContext:
    """A stateful interpreter in a sandbox (schema ``CodeContext``)."""

    id: str
    language: str
    cwd: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CodeContext":
        return cls(id=str(d["id"]), language=str(d.get("language", "")), cwd=str(d.get("cwd", "")))


@dataclass
class EntryInfo:
    """A file system entry (schema ``Entry``); ``type`` is file, dir, symlink or other."""

    name: str
    path: str
    type: str
    size: int = 0
    mode: Optional[str] = None
    owner: Optional[str] = None
    group: Optional[str] = None
    modified_at: Optional[datetime] = None
    symlink_target: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "EntryInfo":
        return cls(
            name=str(d.get("name", "")),
            path=str(d.get("path", "")),
            type=str(d.get("type", "")),
            size=int(d.get("size") or 0),
            mode=d.get("mode"),
            owner=d.get("owner"),
            group=d.get("group"),
            modified_at=_time(d.get("modified_at")),
            symlink_target=d.get("symlink_target"),
        )


@dataclass
class FilesystemEvent:
    """A change below a watched directory: ``type`` is create, write, remove,
    rename (the name went away by a rename) or chmod; ``name`` is relative to
    the directory; ``entry`` is the entry when it could still be read."""

    type: str
    name: str
    entry: Optional[EntryInfo] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FilesystemEvent":
        e = d.get("entry")
        return cls(type=str(d.get("type", "")), name=str(d.get("name", "")),
                   entry=EntryInfo.from_json(e) if isinstance(e, dict) else None)


@dataclass
class Template:
    """A template of the server's store (schema ``Template``); ``raw`` keeps every field."""

    name: str
    tag: str
    kind: str
    size: int = 0
    in_use: int = 0
    digest: Optional[str] = None
    source: Optional[str] = None
    created: Optional[datetime] = None
    #: ``(diff_id, unpacked bytes)`` of each layer, base first. A snapshot's
    #: layers are its template's, stored once and shared, plus its own last.
    layers: List[Tuple[str, int]] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Template":
        return cls(
            name=str(d.get("name", "")),
            tag=str(d.get("tag", "")),
            kind=str(d.get("kind", "")),
            size=int(d.get("size") or 0),
            in_use=int(d.get("in_use") or 0),
            digest=d.get("digest"),
            source=d.get("source"),
            created=_time(d.get("created")),
            layers=[(str(x.get("diff_id", "")), int(x.get("size") or 0)) for x in d.get("layers") or []],
            raw=dict(d),
        )

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.tag}" if self.tag else self.name

    @property
    def is_snapshot(self) -> bool:
        """Whether the template is a sandbox's snapshot."""
        return (self.source or "").startswith("snapshot of ")

    @property
    def snapshot_of(self) -> Optional[str]:
        """The sandbox a snapshot was taken of (None for other templates)."""
        return self.source[len("snapshot of "):] if self.source and self.is_snapshot else None

    @property
    def own_size(self) -> int:
        """Unpacked bytes of the last layer: what a snapshot adds to its template."""
        return self.layers[-1][1] if self.layers else 0

    @property
    def shared_size(self) -> int:
        """Unpacked bytes of the layers before the last, shared with the template it was made from."""
        return sum(n for _, n in self.layers[:-1])


@dataclass
class PreviewToken:
    """A signed, expiring preview token and where to use it."""

    token: str
    expires_at: Optional[datetime]
    path: str
    host: Optional[str] = None
    url: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "PreviewToken":
        return cls(
            token=str(d.get("token", "")),
            expires_at=_time(d.get("expires_at")),
            path=str(d.get("path", "")),
            host=d.get("host") or None,
            url=d.get("url") or None,
        )


@dataclass
class SandboxStats:
    """Resource usage and limit counters (schema ``Stats``); absent values are None."""

    memory_bytes: Optional[int] = None
    memory_max_bytes: Optional[int] = None
    memory_limit: Optional[int] = None
    cpu_seconds: Optional[float] = None
    pids: Optional[int] = None
    pids_limit: Optional[int] = None
    oom_kills: Optional[int] = None
    pids_limit_hits: Optional[int] = None
    disk_used_bytes: Optional[int] = None
    disk_total_bytes: Optional[int] = None
    network_denials: Optional[int] = None
    network_tx_bytes: Optional[int] = None
    network_rx_bytes: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxStats":
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class LogEntry:
    timestamp: Optional[datetime]
    level: str
    message: str
    fields: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "LogEntry":
        return cls(
            timestamp=_time(d.get("timestamp")),
            level=str(d.get("level", "")),
            message=str(d.get("message", "")),
            fields=dict(d.get("fields") or {}),
        )


@dataclass
class ServerInfo:
    """What the server is and can do (``GET /v1/info``)."""

    version: str = ""
    backend: str = ""
    capabilities: Dict[str, Any] = field(default_factory=dict)
    templates: Dict[str, str] = field(default_factory=dict)
    pools: Dict[str, int] = field(default_factory=dict)
    user: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ServerInfo":
        return cls(
            version=str(d.get("version", "")),
            backend=str(d.get("backend", "")),
            capabilities=dict(d.get("capabilities") or {}),
            templates=_str_map(d.get("templates")),
            pools={str(k): int(v) for k, v in (d.get("pools") or {}).items()},
            user=str(d.get("user", "")),
        )


@dataclass
class VolumeMount:
    """A volume to mount at create: ``name`` at ``path`` (absolute), read-only
    or not, ``subpath`` a directory of the volume to mount instead of its root."""

    name: str
    path: str
    read_only: bool = False
    subpath: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"name": self.name, "path": self.path}
        if self.read_only:
            d["read_only"] = True
        if self.subpath:
            d["subpath"] = self.subpath
        return d


@dataclass
class Volume:
    """A volume (schema ``Volume``): a tenant's named store of files that outlives sandboxes."""

    id: str
    name: str
    kind: str
    size: int = 0
    created_at: Optional[datetime] = None
    node: Optional[str] = None
    used: Optional[int] = None
    mounted_by: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Volume":
        return cls(
            id=str(d.get("id", "")),
            name=str(d.get("name", "")),
            kind=str(d.get("kind", "")),
            size=int(d.get("size") or 0),
            created_at=_time(d.get("created_at")),
            node=d.get("node"),
            used=d.get("used"),
            mounted_by=[str(x) for x in d.get("mounted_by") or []],
        )
