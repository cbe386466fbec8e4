"""The synchronous API. agentbox/_async.py mirrors it method for method."""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import IO, TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Union

import httpx

if TYPE_CHECKING:  # pragma: no cover
    from ._pty import PtySession

from . import _base as b
from ._base import Cmd, ConnectionConfig, Network
from .errors import CommandExitError, NotFoundError, TransportError, error_from_response
from .models import (
    CodeContext,
    CommandEvent,
    CommandResult,
    EntryInfo,
    Execution,
    FilesystemEvent,
    ExecutionError,
    LogEntry,
    OutputMessage,
    PreviewToken,
    Result,
    SandboxInfo,
    SandboxStats,
    ServerInfo,
    Template,
    Volume,
    VolumeMount,
    _CommandCollector,
    _ExecutionBuilder,
)

_CHUNK = 64 << 10


class _Transport:
    """An httpx.Client bound to a server, turning error answers into exceptions."""

    def __init__(self, config: ConnectionConfig, client: Optional[httpx.Client]) -> None:
        self.config = config
        self.owned = client is None
        self.client = client or httpx.Client(timeout=config.request_timeout)

    def close(self) -> None:
        if self.owned:
            self.client.close()

    def _headers(self, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        h = self.config.headers()
        if extra:
            h.update(extra)
        return h

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Optional[Mapping[str, Any]] = None,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> httpx.Response:
        h = self._headers(headers)
        if method == "POST" and content is None:
            # The server's browser guard wants every POST to say JSON.
            h.setdefault("Content-Type", "application/json")
            content = json.dumps(json_body if json_body is not None else {}).encode()
        elif json_body is not None:
            h.setdefault("Content-Type", "application/json")
            content = json.dumps(json_body).encode()
        waited = 0.0
        while True:
            try:
                resp = self.client.request(
                    method, self.config.url + path, params=params, content=content, headers=h,
                    timeout=timeout if timeout is not None else self.config.request_timeout,
                )
            except httpx.TransportError as e:
                raise TransportError(f"{method} {path}: {e}") from e
            if resp.status_code < 400:
                return resp
            delay = b.busy_delay(resp.status_code, resp.headers, b.replayable(content), waited)
            if delay is None:
                raise error_from_response(resp.status_code, resp.content, resp.headers)
            time.sleep(delay)
            waited += delay

    @contextlib.contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: Any = None,
        params: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        read_timeout: Optional[float] = None,
    ) -> Iterator[httpx.Response]:
        h = self._headers(headers)
        if json_body is not None:
            h.setdefault("Content-Type", "application/json")
            content = json.dumps(json_body).encode()
        timeout = httpx.Timeout(self.config.request_timeout, read=read_timeout)
        waited = 0.0
        try:
            while True:
                with self.client.stream(method, self.config.url + path, params=params, content=content,
                                        headers=h, timeout=timeout) as resp:
                    if resp.status_code >= 400:
                        body = resp.read()
                        delay = b.busy_delay(resp.status_code, resp.headers, b.replayable(content), waited)
                        if delay is None:
                            raise error_from_response(resp.status_code, body, resp.headers)
                    else:
                        yield resp
                        return
                time.sleep(delay)
                waited += delay
        except httpx.TransportError as e:
            raise TransportError(f"{method} {path}: {e}") from e


    def open_stream(
        self, method: str, path: str, *, params: Optional[Mapping[str, Any]] = None,
        read_timeout: Optional[float] = None,
    ) -> httpx.Response:
        """A streamed response the caller closes (for streams that outlive a call)."""
        req = self.client.build_request(method, self.config.url + path, params=params, headers=self._headers(None),
                                        timeout=httpx.Timeout(self.config.request_timeout, read=read_timeout))
        try:
            resp = self.client.send(req, stream=True)
        except httpx.TransportError as e:
            raise TransportError(f"{method} {path}: {e}") from e
        if resp.status_code >= 400:
            try:
                raise error_from_response(resp.status_code, resp.read(), resp.headers)
            finally:
                resp.close()
        return resp


# Watch streams carry a keepalive line every 15 s: a minute of silence is a dead connection.
WATCH_READ_TIMEOUT = 60.0


class WatchHandle:
    """The changes below a directory, from :meth:`Files.watch_dir`: iterate
    it for :class:`~agentbox.FilesystemEvent`s; ``close()`` (or leaving a
    ``with`` block) ends the watch."""

    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp
        self._lines = resp.iter_lines()
        self.closed = False

    def __iter__(self) -> Iterator[FilesystemEvent]:
        return self

    def __next__(self) -> FilesystemEvent:
        while True:
            try:
                line = next(self._lines)
            except httpx.TransportError as e:
                self.close()
                raise TransportError(f"watch: {e}") from e
            except StopIteration:
                self.close()
                raise
            ev = b.parse_line(line)
            if ev is None or ev.get("type") in ("keepalive", "start"):
                continue
            return FilesystemEvent.from_json(ev)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._resp.close()

    def __enter__(self) -> "WatchHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _lines(resp: httpx.Response) -> Iterator[Dict[str, Any]]:
    for line in resp.iter_lines():
        ev = b.parse_line(line)
        if ev is not None:
            yield ev


class Commands:
    """Commands in a sandbox: ``sbx.commands``."""

    def __init__(self, sbx: "Sandbox") -> None:
        self._sbx = sbx

    def run(
        self,
        cmd: Cmd,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout: Optional[float] = None,
        stdin: Optional[Union[str, bytes]] = None,
        user: Optional[str] = None,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
        check: bool = False,
    ) -> CommandResult:
        """Runs ``cmd`` and waits for it.

        A string runs through ``/bin/sh -c``; a list is the program and its
        arguments. ``timeout`` (seconds, server default 60) kills the command
        and everything it started. With ``on_stdout``/``on_stderr`` the
        output is streamed to them as it is printed. A non-zero exit is a
        result, not an error, unless ``check`` is true
        (:class:`~agentbox.CommandExitError`).
        """
        b.seconds("timeout", timeout)
        if on_stdout or on_stderr:
            col = _CommandCollector(on_stdout, on_stderr)
            for ev in self.stream(cmd, env=env, cwd=cwd, timeout=timeout, stdin=stdin, user=user):
                col.feed(ev)
            res = col.result()
        else:
            body = b.exec_body(cmd, env, cwd, timeout, stdin, user)
            resp = self._sbx._t.request(
                "POST", self._sbx._path("/exec"), content=body,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
                timeout=b.read_timeout(timeout, b.DEFAULT_EXEC_TIMEOUT),
            )
            res = CommandResult.from_json(resp.json())
        if check and res.exit_code != 0:
            raise CommandExitError(res)
        return res

    def stream(
        self,
        cmd: Cmd,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout: Optional[float] = None,
        stdin: Optional[Union[str, bytes]] = None,
        user: Optional[str] = None,
    ) -> Iterator[CommandEvent]:
        """Runs ``cmd`` and yields its events as they happen: ``start``, then
        ``stdout``/``stderr`` chunks, then ``exit``. Leaving the loop early
        (or closing the iterator) kills the command."""
        b.seconds("timeout", timeout)
        body = b.exec_body(cmd, env, cwd, timeout, stdin, user)
        with self._sbx._t.stream(
            "POST", self._sbx._path("/exec"), content=body,
            headers={"Content-Type": "application/json", "Accept": "application/x-ndjson"},
            read_timeout=b.read_timeout(timeout, b.DEFAULT_EXEC_TIMEOUT),
        ) as resp:
            for ev in _lines(resp):
                yield CommandEvent.from_json(ev)


class Code:
    """Stateful code contexts of a sandbox: ``sbx.code``."""

    def __init__(self, sbx: "Sandbox") -> None:
        self._sbx = sbx

    def run(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        context: Optional[Union[CodeContext, str]] = None,
        env_vars: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        max_output_bytes: Optional[int] = None,
        on_stdout: Optional[Callable[[OutputMessage], Any]] = None,
        on_stderr: Optional[Callable[[OutputMessage], Any]] = None,
        on_result: Optional[Callable[[Result], Any]] = None,
        on_error: Optional[Callable[[ExecutionError], Any]] = None,
    ) -> Execution:
        """Runs ``code`` in ``context`` (else the default context of
        ``language``, python when neither is given) and returns what it
        printed, its results and its error. Variables persist between runs
        of a context. Errors of the code (and a timeout: the interpreter is
        interrupted, its state kept) are ``Execution.error``, not exceptions.
        Callbacks get output, results and the error as they arrive."""
        b.seconds("timeout", timeout)
        body = b.code_body(code, language, context, env_vars, timeout, max_output_bytes)
        builder = _ExecutionBuilder(on_stdout, on_stderr, on_result, on_error)
        with self._sbx._t.stream(
            "POST", self._sbx._path("/code"), json_body=body,
            headers={"Accept": "application/x-ndjson"},
            read_timeout=b.read_timeout(timeout, b.DEFAULT_CODE_TIMEOUT),
        ) as resp:
            for ev in _lines(resp):
                builder.feed(ev)
        if not builder.ended:
            raise TransportError("code execution stream ended early")
        return builder.execution

    def create_context(
        self, language: str = "python", *, cwd: Optional[str] = None, user: Optional[str] = None
    ) -> CodeContext:
        """Starts a new interpreter (python, javascript or bash)."""
        body: Dict[str, Any] = {"language": language}
        if cwd:
            body["cwd"] = cwd
        if user:
            body["user"] = user
        r = self._sbx._t.request("POST", self._sbx._path("/code/contexts"), json_body=body)
        return CodeContext.from_json(r.json())

    def list_contexts(self) -> List[CodeContext]:
        r = self._sbx._t.request("GET", self._sbx._path("/code/contexts"))
        return [CodeContext.from_json(c) for c in r.json().get("contexts", [])]

    def restart_context(self, context: Union[CodeContext, str]) -> None:
        """Replaces the context's interpreter with a fresh one: every variable is gone."""
        self._sbx._t.request("POST", self._sbx._path(f"/code/contexts/{b.context_id(context)}/restart"))

    def delete_context(self, context: Union[CodeContext, str]) -> None:
        self._sbx._t.request("DELETE", self._sbx._path(f"/code/contexts/{b.context_id(context)}"))


class Files:
    """The sandbox's file system: ``sbx.files``. Relative paths are relative
    to the sandbox user's home."""

    def __init__(self, sbx: "Sandbox") -> None:
        self._sbx = sbx

    def read(self, path: str, *, format: str = "text") -> Union[str, bytes]:
        """The whole file, as text (UTF-8) or ``format="bytes"``."""
        if format not in ("text", "bytes"):
            raise ValueError("format must be 'text' or 'bytes'")
        r = self._sbx._t.request("GET", self._sbx._path("/files"), params={"path": b.check_path(path)})
        return r.content if format == "bytes" else r.content.decode("utf-8")

    def read_bytes(self, path: str) -> bytes:
        r = self._sbx._t.request("GET", self._sbx._path("/files"), params={"path": b.check_path(path)})
        return r.content

    def iter_bytes(self, path: str, chunk_size: int = _CHUNK) -> Iterator[bytes]:
        """The file's bytes as they arrive, without holding the file in memory."""
        with self._sbx._t.stream("GET", self._sbx._path("/files"), params={"path": b.check_path(path)}) as resp:
            yield from resp.iter_bytes(chunk_size)

    def download(self, path: str, dest: Union[str, "os.PathLike[str]", IO[bytes]]) -> int:
        """Streams the file to ``dest`` (a local path or a binary file); returns the bytes written."""
        n = 0
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as f:
                for chunk in self.iter_bytes(path):
                    f.write(chunk)
                    n += len(chunk)
            return n
        for chunk in self.iter_bytes(path):
            dest.write(chunk)
            n += len(chunk)
        return n

    def write(self, path: str, data: Union[str, bytes, IO[bytes], Iterable[bytes]]) -> EntryInfo:
        """Writes a file (parents are created, the file replaced atomically).
        ``data`` may be text, bytes, a binary file or an iterable of bytes,
        the last two streamed."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        content: Any = data
        if hasattr(data, "read"):
            content = _file_chunks(data)  # type: ignore[arg-type]
        r = self._sbx._t.request(
            "PUT", self._sbx._path("/files"), params={"path": b.check_path(path)}, content=content,
            headers={"Content-Type": "application/octet-stream"},
        )
        return EntryInfo.from_json(r.json())

    def upload(self, path: str, src: Union[str, "os.PathLike[str]", IO[bytes]]) -> EntryInfo:
        """Streams a local file (a path or a binary file) to ``path`` in the sandbox."""
        if isinstance(src, (str, os.PathLike)):
            with open(src, "rb") as f:
                return self.write(path, f)
        return self.write(path, src)

    def list(self, path: str = ".", *, depth: int = 1) -> List[EntryInfo]:
        """Entries below a directory, ``depth`` levels deep (1..32)."""
        r = self._sbx._t.request("GET", self._sbx._path("/files/list"),
                                 params={"path": b.check_path(path), "depth": depth})
        return [EntryInfo.from_json(e) for e in r.json().get("entries", [])]

    def get_info(self, path: str) -> EntryInfo:
        r = self._sbx._t.request("GET", self._sbx._path("/files/stat"), params={"path": b.check_path(path)})
        return EntryInfo.from_json(r.json())

    def exists(self, path: str) -> bool:
        try:
            self.get_info(path)
            return True
        except NotFoundError:
            return False

    def remove(self, path: str) -> None:
        """Removes a file or a whole directory tree."""
        self._sbx._t.request("DELETE", self._sbx._path("/files"), params={"path": b.check_path(path)})

    def make_dir(self, path: str) -> EntryInfo:
        r = self._sbx._t.request("POST", self._sbx._path("/files/mkdir"), json_body={"path": b.check_path(path)})
        return EntryInfo.from_json(r.json())

    def rename(self, source: str, destination: str) -> EntryInfo:
        r = self._sbx._t.request("POST", self._sbx._path("/files/move"),
                                 json_body={"source": b.check_path(source), "destination": b.check_path(destination)})
        return EntryInfo.from_json(r.json())

    def watch_dir(self, path: str, *, recursive: bool = False) -> WatchHandle:
        """Watches a directory: returns once the watch is in place, so every
        change after it is reported by iterating the handle."""
        resp = self._sbx._t.open_stream("GET", self._sbx._path("/files/watch"),
                                        params={"path": b.check_path(path), "recursive": str(bool(recursive)).lower()},
                                        read_timeout=WATCH_READ_TIMEOUT)
        handle = WatchHandle(resp)
        try:
            first = b.parse_line(next(handle._lines, ""))
        except BaseException:
            handle.close()
            raise
        if not first or first.get("type") != "start":
            handle.close()
            raise TransportError("watch stream did not begin with a start event")
        return handle


def _file_chunks(f: IO[bytes]) -> Iterator[bytes]:
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            return
        yield chunk


class Pty:
    """Interactive terminals: ``sbx.pty``. Needs the ``websockets`` package
    (Debian: python3-websockets)."""

    def __init__(self, sbx: "Sandbox") -> None:
        self._sbx = sbx

    def connect(
        self, *, cmd: Optional[str] = None, cols: int = 80, rows: int = 24, cwd: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> "PtySession":
        """Opens a terminal running ``cmd`` (default a login bash)."""
        from ._pty import PtySession

        return PtySession.open(self._sbx._t.config, self._sbx._path("/pty"), cmd=cmd, cols=cols, rows=rows,
                               cwd=cwd, timeout=timeout)


class Sandbox:
    """A sandbox. ``Sandbox.create()`` makes one; ``with`` destroys it at the end::

        with Sandbox.create() as sbx:
            print(sbx.commands.run("echo hi").stdout)
    """

    def __init__(self, info: SandboxInfo, transport: _Transport) -> None:
        self._info = info
        self._t = transport
        self.commands = Commands(self)
        self.code = Code(self)
        self.files = Files(self)
        self.pty = Pty(self)

    # --- construction -------------------------------------------------
    @classmethod
    def create(
        cls,
        template: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        cpus: Optional[float] = None,
        memory: Optional[Union[int, str]] = None,
        pids: Optional[int] = None,
        disk: Optional[Union[int, str]] = None,
        network: Optional[Network] = None,
        service: Optional[bool] = None,
        auto_pause: Optional[bool] = None,
        isolation: Optional[str] = None,
        volumes: Optional[Iterable[Union[VolumeMount, Mapping[str, Any]]]] = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        request_timeout: Optional[float] = None,
        http_client: Optional[httpx.Client] = None,
    ) -> "Sandbox":
        """Creates a sandbox, from a warm pool when the server has one ready
        (only when no resources and no other network mode are asked for).

        ``template`` is a template name (default the server's ``base``),
        ``timeout`` the seconds it lives, ``memory``/``disk`` bytes or
        strings like ``"512M"``, ``network`` a mode (``"none"``,
        ``"egress"``) or a :class:`~agentbox.NetworkPolicy`; ``auto_pause``
        pauses the sandbox at its timeout instead of deleting it;
        ``isolation`` is ``"container"`` or ``"gvisor"`` (gVisor's user-space
        kernel, where the server has it; default the server's); ``volumes``
        are :class:`~agentbox.VolumeMount` (or ``{"name", "path", "read_only",
        "subpath"}`` dicts) of your volumes. ``url``,
        ``api_key`` default to AGENTBOX_URL and AGENTBOX_API_KEY;
        ``http_client`` shares one connection pool between sandboxes (it is
        then not closed with the sandbox)."""
        b.seconds("timeout", timeout)
        body = b.create_body(template, timeout, env, metadata, cpus, memory, pids, disk, network, service,
                             auto_pause, isolation, list(volumes) if volumes is not None else None)
        t = _Transport(ConnectionConfig.resolve(url, api_key, request_timeout), http_client)
        try:
            r = t.request("POST", "/v1/sandboxes", json_body=body)
        except BaseException:
            t.close()
            raise
        return cls(SandboxInfo.from_json(r.json()), t)

    @classmethod
    def connect(
        cls, sandbox_id: str, *, url: Optional[str] = None, api_key: Optional[str] = None,
        request_timeout: Optional[float] = None, http_client: Optional[httpx.Client] = None,
    ) -> "Sandbox":
        """Attaches to an existing sandbox of yours."""
        t = _Transport(ConnectionConfig.resolve(url, api_key, request_timeout), http_client)
        try:
            r = t.request("GET", b.sandbox_path(sandbox_id))
        except BaseException:
            t.close()
            raise
        return cls(SandboxInfo.from_json(r.json()), t)

    @classmethod
    def list(
        cls, *, metadata: Optional[Mapping[str, str]] = None, state: Optional[Union[str, Iterable[str]]] = None,
        limit: Optional[int] = None, url: Optional[str] = None, api_key: Optional[str] = None,
        http_client: Optional[httpx.Client] = None,
    ) -> List[SandboxInfo]:
        """Your sandboxes, newest first, every page (at most ``limit`` when given)."""
        t = _Transport(ConnectionConfig.resolve(url, api_key), http_client)
        try:
            out: List[SandboxInfo] = []
            token: Optional[str] = None
            for _ in range(100000):
                params = _list_params(metadata, state, limit, len(out), token)
                data = t.request("GET", "/v1/sandboxes", params=params).json()
                out.extend(SandboxInfo.from_json(s) for s in data.get("sandboxes", []))
                token = data.get("next_token") or None
                if not token or (limit is not None and len(out) >= limit):
                    break
            return out[:limit] if limit is not None else out
        finally:
            t.close()

    @staticmethod
    def server_info(
        *, url: Optional[str] = None, api_key: Optional[str] = None, http_client: Optional[httpx.Client] = None
    ) -> ServerInfo:
        """What the server is and can do: backend, capabilities, templates, pools."""
        t = _Transport(ConnectionConfig.resolve(url, api_key), http_client)
        try:
            return ServerInfo.from_json(t.request("GET", "/v1/info").json())
        finally:
            t.close()

    # --- lifecycle ----------------------------------------------------
    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.kill()
        finally:
            self.close()

    def close(self) -> None:
        """Closes the HTTP client the sandbox owns (the sandbox lives on)."""
        self._t.close()

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def info(self) -> SandboxInfo:
        """The record as last seen (see :meth:`get_info` for a fresh one)."""
        return self._info

    @property
    def access_token(self) -> str:
        return self._info.access_token

    def _path(self, suffix: str = "") -> str:
        return b.sandbox_path(self._info.id, suffix)

    def _update(self, r: httpx.Response) -> SandboxInfo:
        self._info = SandboxInfo.from_json(r.json())
        return self._info

    def get_info(self) -> SandboxInfo:
        return self._update(self._t.request("GET", self._path()))

    def is_running(self) -> bool:
        try:
            return self.get_info().state == "running"
        except NotFoundError:
            return False

    def kill(self) -> bool:
        """Destroys the sandbox and everything in it; False when it was already gone."""
        try:
            self._t.request("DELETE", self._path())
            return True
        except NotFoundError:
            return False

    def set_timeout(self, timeout: float) -> SandboxInfo:
        """Ends the sandbox ``timeout`` seconds from now (may shorten its life)."""
        return self._update(self._t.request("POST", self._path("/timeout"),
                                            json_body={"timeout": b.seconds("timeout", timeout)}))

    def refresh(self, duration: Optional[float] = None) -> SandboxInfo:
        """Extends the sandbox's life to at least now + ``duration`` (never shortens)."""
        body = {} if duration is None else {"duration": b.seconds("duration", duration)}
        return self._update(self._t.request("POST", self._path("/refresh"), json_body=body))

    def stop(self) -> SandboxInfo:
        """Ends every process, keeps the files."""
        return self._update(self._t.request("POST", self._path("/stop")))

    def start(self) -> SandboxInfo:
        """Boots a stopped sandbox again."""
        return self._update(self._t.request("POST", self._path("/start")))

    def pause(self) -> SandboxInfo:
        """Freezes every process (memory, files, sockets kept) and stops the
        sandbox's clock; exec, files, code and pty answer ConflictError until
        :meth:`resume`. A server that cannot pause answers UnavailableError
        (NotFoundError from a server without the route)."""
        return self._update(self._t.request("POST", self._path("/pause")))

    def resume(self, timeout: Optional[float] = None) -> SandboxInfo:
        """Resumes a paused sandbox; ``timeout`` sets a new life, else the remaining one is kept."""
        body = {} if timeout is None else {"timeout": b.seconds("timeout", timeout)}
        return self._update(self._t.request("POST", self._path("/resume"), json_body=body))

    def snapshot(self, name: str) -> Template:
        """Turns the sandbox's root filesystem into a new template ``name``
        (yours alone: the server puts it in your private namespace, its
        :attr:`~agentbox.Template.ref` is what :meth:`create` takes). The
        sandbox keeps running; its disk is frozen while it is read. List
        snapshots with :meth:`Templates.snapshots`, delete with
        :meth:`Templates.delete`."""
        r = self._t.request("POST", self._path("/snapshot"), json_body={"name": name})
        return Template.from_json(r.json())

    def fork(self, count: int = 1, *, timeout: Optional[float] = None) -> List["Sandbox"]:
        """``count`` new sandboxes (1..MaxForks), each starting with a copy
        of this one's disk as it is now (taken frozen), its env, metadata,
        limits, network policy and volume mounts; processes and memory are
        not carried. This sandbox keeps running. All or nothing: on an
        error no fork is left. ``timeout`` is each fork's life in seconds
        (default the server's). Each fork has its own connection pool unless
        this sandbox was given an ``http_client``, which they share."""
        body: Dict[str, Any] = {"count": count}
        if timeout is not None:
            body["timeout"] = b.seconds("timeout", timeout)
        r = self._t.request("POST", self._path("/fork"), json_body=body)
        client = None if self._t.owned else self._t.client
        return [Sandbox(SandboxInfo.from_json(d), _Transport(self._t.config, client)) for d in r.json().get("sandboxes", [])]

    def stats(self) -> SandboxStats:
        return SandboxStats.from_json(self._t.request("GET", self._path("/stats")).json())

    def logs(self, limit: Optional[int] = None) -> List[LogEntry]:
        params = {"limit": limit} if limit is not None else None
        data = self._t.request("GET", self._path("/logs"), params=params).json()
        return [LogEntry.from_json(e) for e in data.get("logs", [])]

    def update_network(
        self, *, allow_out: Optional[Iterable[str]] = None, deny_out: Optional[Iterable[str]] = None
    ) -> SandboxInfo:
        """Replaces the egress policy of an ``egress`` sandbox (the mode itself is fixed)."""
        body: Dict[str, Any] = {"mode": "egress", "allow_out": list(allow_out or []), "deny_out": list(deny_out or [])}
        return self._update(self._t.request("PUT", self._path("/network"), json_body=body))

    # --- previews -----------------------------------------------------
    def preview_url(self, port: int, path: str = "") -> str:
        """The path-form URL of ``port`` inside the sandbox, for programs:
        send :attr:`access_token` as ``X-Access-Token`` (or use
        :meth:`create_preview_token`)."""
        return f"{self._t.config.url}{self._path('/ports/%d/' % b.check_port(port))}{path.lstrip('/')}"

    def create_preview_token(self, port: int, ttl: Optional[float] = None) -> PreviewToken:
        """A signed, expiring token for ``port``: ``path`` works without any
        other credential, ``url`` is the browser origin when the server has
        a PREVIEW_DOMAIN."""
        body: Dict[str, Any] = {"port": b.check_port(port)}
        if ttl is not None:
            body["ttl"] = b.seconds("ttl", ttl)
        return PreviewToken.from_json(self._t.request("POST", self._path("/preview-tokens"), json_body=body).json())

    # --- code ---------------------------------------------------------
    def run_code(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        context: Optional[Union[CodeContext, str]] = None,
        env_vars: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        max_output_bytes: Optional[int] = None,
        on_stdout: Optional[Callable[[OutputMessage], Any]] = None,
        on_stderr: Optional[Callable[[OutputMessage], Any]] = None,
        on_result: Optional[Callable[[Result], Any]] = None,
        on_error: Optional[Callable[[ExecutionError], Any]] = None,
    ) -> Execution:
        """Shorthand for :meth:`Code.run` (``sbx.code.run``)."""
        return self.code.run(code, language=language, context=context, env_vars=env_vars, timeout=timeout,
                             max_output_bytes=max_output_bytes, on_stdout=on_stdout, on_stderr=on_stderr,
                             on_result=on_result, on_error=on_error)


def _list_params(metadata: Optional[Mapping[str, str]], state: Optional[Union[str, Iterable[str]]],
                 limit: Optional[int], have: int, token: Optional[str]) -> Dict[str, Any]:
    from urllib.parse import urlencode

    p: Dict[str, Any] = {}
    if metadata:
        p["metadata"] = urlencode(dict(metadata))
    if state:
        p["state"] = state if isinstance(state, str) else ",".join(state)
    if limit is not None:
        p["limit"] = max(1, min(1000, limit - have))
    if token:
        p["next_token"] = token
    return p


class Templates:
    """The server's templates (``GET /v1/templates``); deleting is for the operator."""

    def __init__(self, *, url: Optional[str] = None, api_key: Optional[str] = None,
                 http_client: Optional[httpx.Client] = None) -> None:
        self._t = _Transport(ConnectionConfig.resolve(url, api_key), http_client)

    def __enter__(self) -> "Templates":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._t.close()

    def list(self) -> List[Template]:
        return [Template.from_json(t) for t in self._t.request("GET", "/v1/templates").json().get("templates", [])]

    def get(self, name: str) -> Template:
        return Template.from_json(self._t.request("GET", b.template_path(name)).json())

    def delete(self, name: str) -> None:
        """Deletes a template: your own snapshots are yours to delete, shared
        templates the operator's."""
        self._t.request("DELETE", b.template_path(name))

    def snapshots(self, sandbox_id: Optional[str] = None) -> List[Template]:
        """Your snapshots (templates made by :meth:`Sandbox.snapshot`), of
        one sandbox when ``sandbox_id`` is given."""
        return [t for t in self.list() if t.is_snapshot and (sandbox_id is None or t.snapshot_of == sandbox_id)]


class Volumes:
    """Your volumes (``/v1/volumes``) and their files, without a sandbox::

        with Volumes() as vols:
            vols.create("data", size="1G")
            vols.write("data", "/in/x.txt", "hello")
            with Sandbox.create(volumes=[VolumeMount("data", "/mnt/data")]) as sbx:
                print(sbx.commands.run("cat /mnt/data/in/x.txt").stdout)
    """

    def __init__(self, *, url: Optional[str] = None, api_key: Optional[str] = None,
                 http_client: Optional[httpx.Client] = None) -> None:
        self._t = _Transport(ConnectionConfig.resolve(url, api_key), http_client)

    def __enter__(self) -> "Volumes":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._t.close()

    def create(self, name: str, *, size: Optional[Union[int, str]] = None, kind: Optional[str] = None) -> Volume:
        """Makes volume ``name`` of ``size`` bytes (or ``"512M"``; default the server's)."""
        body: Dict[str, Any] = {"name": name}
        if size is not None:
            body["size"] = size
        if kind is not None:
            body["kind"] = kind
        b.volume_path(name)
        return Volume.from_json(self._t.request("POST", "/v1/volumes", json_body=body).json())

    def list(self) -> List[Volume]:
        return [Volume.from_json(v) for v in self._t.request("GET", "/v1/volumes").json()]

    def get(self, name: str) -> Volume:
        """The volume with the bytes it holds (``used``) and who mounts it."""
        return Volume.from_json(self._t.request("GET", b.volume_path(name)).json())

    def delete(self, name: str, *, force: bool = False) -> None:
        """Deletes the volume and its files: ConflictError while a sandbox
        mounts it, unless ``force`` (those sandboxes then get I/O errors)."""
        params = {"force": "true"} if force else None
        self._t.request("DELETE", b.volume_path(name), params=params)

    def read(self, name: str, path: str, *, format: str = "text") -> Union[str, bytes]:
        if format not in ("text", "bytes"):
            raise ValueError("format must be 'text' or 'bytes'")
        r = self._t.request("GET", b.volume_path(name, "/files"), params={"path": b.check_path(path)})
        return r.content if format == "bytes" else r.content.decode("utf-8")

    def write(self, name: str, path: str, data: Union[str, bytes, IO[bytes], Iterable[bytes]]) -> EntryInfo:
        """Writes a file (parents created, replaced atomically); a file or iterable is streamed."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        content: Any = data
        if hasattr(data, "read"):
            content = _file_chunks(data)  # type: ignore[arg-type]
        r = self._t.request("PUT", b.volume_path(name, "/files"), params={"path": b.check_path(path)},
                            content=content, headers={"Content-Type": "application/octet-stream"})
        return EntryInfo.from_json(r.json())

    def stat(self, name: str, path: str = "/") -> EntryInfo:
        r = self._t.request("GET", b.volume_path(name, "/files/stat"), params={"path": b.check_path(path)})
        return EntryInfo.from_json(r.json())

    def exists(self, name: str, path: str) -> bool:
        try:
            self.stat(name, path)
            return True
        except NotFoundError:
            return False

    def list_dir(self, name: str, path: str = "/") -> List[EntryInfo]:
        r = self._t.request("GET", b.volume_path(name, "/files/list"), params={"path": b.check_path(path)})
        return [EntryInfo.from_json(e) for e in r.json().get("entries", [])]

    def make_dir(self, name: str, path: str) -> EntryInfo:
        r = self._t.request("POST", b.volume_path(name, "/files/mkdir"), json_body={"path": b.check_path(path)})
        return EntryInfo.from_json(r.json())

    def remove(self, name: str, path: str) -> None:
        """Removes a file or a directory tree (not the root)."""
        self._t.request("DELETE", b.volume_path(name, "/files"), params={"path": b.check_path(path)})
