"""The asyncio API: the same classes and methods as agentbox/_sync.py,
prefixed ``Async`` and awaited."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
from typing import (IO, Any, AsyncIterable, AsyncIterator, Awaitable, Callable, Dict, Generator, Iterable, List,
                    Mapping, Optional, Union)

import httpx

from . import _base as b
from ._base import Cmd, ConnectionConfig, Network
from ._pty import AsyncPtySession
from ._sync import WATCH_READ_TIMEOUT, _list_params
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


async def _maybe_await(v: Any) -> None:
    """Callbacks may be plain functions or coroutines."""
    if inspect.isawaitable(v):
        await v


class _AsyncTransport:
    def __init__(self, config: ConnectionConfig, client: Optional[httpx.AsyncClient]) -> None:
        self.config = config
        self.owned = client is None
        self.client = client or httpx.AsyncClient(timeout=config.request_timeout)

    async def close(self) -> None:
        if self.owned:
            await self.client.aclose()

    def _headers(self, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        h = self.config.headers()
        if extra:
            h.update(extra)
        return h

    async def request(
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
            h.setdefault("Content-Type", "application/json")
            content = json.dumps(json_body if json_body is not None else {}).encode()
        elif json_body is not None:
            h.setdefault("Content-Type", "application/json")
            content = json.dumps(json_body).encode()
        waited = 0.0
        while True:
            try:
                resp = await self.client.request(
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
            await asyncio.sleep(delay)
            waited += delay

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: Any = None,
        params: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        read_timeout: Optional[float] = None,
    ) -> AsyncIterator[httpx.Response]:
        h = self._headers(headers)
        if json_body is not None:
            h.setdefault("Content-Type", "application/json")
            content = json.dumps(json_body).encode()
        timeout = httpx.Timeout(self.config.request_timeout, read=read_timeout)
        waited = 0.0
        try:
            while True:
                async with self.client.stream(method, self.config.url + path, params=params, content=content,
                                              headers=h, timeout=timeout) as resp:
                    if resp.status_code >= 400:
                        body = await resp.aread()
                        delay = b.busy_delay(resp.status_code, resp.headers, b.replayable(content), waited)
                        if delay is None:
                            raise error_from_response(resp.status_code, body, resp.headers)
                    else:
                        yield resp
                        return
                await asyncio.sleep(delay)
                waited += delay
        except httpx.TransportError as e:
            raise TransportError(f"{method} {path}: {e}") from e


    async def open_stream(
        self, method: str, path: str, *, params: Optional[Mapping[str, Any]] = None,
        read_timeout: Optional[float] = None,
    ) -> httpx.Response:
        req = self.client.build_request(method, self.config.url + path, params=params, headers=self._headers(None),
                                        timeout=httpx.Timeout(self.config.request_timeout, read=read_timeout))
        try:
            resp = await self.client.send(req, stream=True)
        except httpx.TransportError as e:
            raise TransportError(f"{method} {path}: {e}") from e
        if resp.status_code >= 400:
            try:
                raise error_from_response(resp.status_code, await resp.aread(), resp.headers)
            finally:
                await resp.aclose()
        return resp


class AsyncWatchHandle:
    """The changes below a directory (``async for``), see :class:`agentbox.WatchHandle`."""

    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp
        self._lines = resp.aiter_lines()
        self.closed = False

    def __aiter__(self) -> "AsyncWatchHandle":
        return self

    async def __anext__(self) -> FilesystemEvent:
        while True:
            try:
                line = await self._lines.__anext__()
            except httpx.TransportError as e:
                await self.close()
                raise TransportError(f"watch: {e}") from e
            except StopAsyncIteration:
                await self.close()
                raise
            ev = b.parse_line(line)
            if ev is None or ev.get("type") in ("keepalive", "start"):
                continue
            return FilesystemEvent.from_json(ev)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self._resp.aclose()

    async def __aenter__(self) -> "AsyncWatchHandle":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def _lines(resp: httpx.Response) -> AsyncIterator[Dict[str, Any]]:
    async for line in resp.aiter_lines():
        ev = b.parse_line(line)
        if ev is not None:
            yield ev


class AsyncCommands:
    """Commands in a sandbox: ``sbx.commands`` (see :class:`agentbox.Commands`)."""

    def __init__(self, sbx: "AsyncSandbox") -> None:
        self._sbx = sbx

    async def run(
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
        """Runs ``cmd`` and waits for it; callbacks (plain or async) stream its output."""
        b.seconds("timeout", timeout)
        if on_stdout or on_stderr:
            col = _CommandCollector(None, None)
            async for ev in self.stream(cmd, env=env, cwd=cwd, timeout=timeout, stdin=stdin, user=user):
                col.feed(ev)
                if ev.type == "stdout" and on_stdout and ev.data is not None:
                    await _maybe_await(on_stdout(ev.data))
                elif ev.type == "stderr" and on_stderr and ev.data is not None:
                    await _maybe_await(on_stderr(ev.data))
            res = col.result()
        else:
            body = b.exec_body(cmd, env, cwd, timeout, stdin, user)
            resp = await self._sbx._t.request(
                "POST", self._sbx._path("/exec"), content=body,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
                timeout=b.read_timeout(timeout, b.DEFAULT_EXEC_TIMEOUT),
            )
            res = CommandResult.from_json(resp.json())
        if check and res.exit_code != 0:
            raise CommandExitError(res)
        return res

    async def stream(
        self,
        cmd: Cmd,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout: Optional[float] = None,
        stdin: Optional[Union[str, bytes]] = None,
        user: Optional[str] = None,
    ) -> AsyncIterator[CommandEvent]:
        """Yields the command's events as they happen (``async for``); leaving
        early kills the command."""
        b.seconds("timeout", timeout)
        body = b.exec_body(cmd, env, cwd, timeout, stdin, user)
        async with self._sbx._t.stream(
            "POST", self._sbx._path("/exec"), content=body,
            headers={"Content-Type": "application/json", "Accept": "application/x-ndjson"},
            read_timeout=b.read_timeout(timeout, b.DEFAULT_EXEC_TIMEOUT),
        ) as resp:
            async for ev in _lines(resp):
                yield CommandEvent.from_json(ev)


class AsyncCode:
    """Stateful code contexts: ``sbx.code`` (see :class:`agentbox.Code`)."""

    def __init__(self, sbx: "AsyncSandbox") -> None:
        self._sbx = sbx

    async def run(
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
        """Runs ``code`` in a context; see :meth:`agentbox.Code.run`. Callbacks may be coroutines."""
        b.seconds("timeout", timeout)
        body = b.code_body(code, language, context, env_vars, timeout, max_output_bytes)
        builder = _ExecutionBuilder(on_stdout, on_stderr, on_result, on_error)
        async with self._sbx._t.stream(
            "POST", self._sbx._path("/code"), json_body=body,
            headers={"Accept": "application/x-ndjson"},
            read_timeout=b.read_timeout(timeout, b.DEFAULT_CODE_TIMEOUT),
        ) as resp:
            async for ev in _lines(resp):
                await _maybe_await(builder.feed(ev))
        if not builder.ended:
            raise TransportError("code execution stream ended early")
        return builder.execution

    async def create_context(
        self, language: str = "python", *, cwd: Optional[str] = None, user: Optional[str] = None
    ) -> CodeContext:
        body: Dict[str, Any] = {"language": language}
        if cwd:
            body["cwd"] = cwd
        if user:
            body["user"] = user
        r = await self._sbx._t.request("POST", self._sbx._path("/code/contexts"), json_body=body)
        return CodeContext.from_json(r.json())

    async def list_contexts(self) -> List[CodeContext]:
        r = await self._sbx._t.request("GET", self._sbx._path("/code/contexts"))
        return [CodeContext.from_json(c) for c in r.json().get("contexts", [])]

    async def restart_context(self, context: Union[CodeContext, str]) -> None:
        await self._sbx._t.request("POST", self._sbx._path(f"/code/contexts/{b.context_id(context)}/restart"))

    async def delete_context(self, context: Union[CodeContext, str]) -> None:
        await self._sbx._t.request("DELETE", self._sbx._path(f"/code/contexts/{b.context_id(context)}"))


async def _afile_chunks(f: IO[bytes]) -> AsyncIterator[bytes]:
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            return
        yield chunk


class AsyncFiles:
    """The sandbox's file system: ``sbx.files`` (see :class:`agentbox.Files`)."""

    def __init__(self, sbx: "AsyncSandbox") -> None:
        self._sbx = sbx

    async def read(self, path: str, *, format: str = "text") -> Union[str, bytes]:
        if format not in ("text", "bytes"):
            raise ValueError("format must be 'text' or 'bytes'")
        r = await self._sbx._t.request("GET", self._sbx._path("/files"), params={"path": b.check_path(path)})
        return r.content if format == "bytes" else r.content.decode("utf-8")

    async def read_bytes(self, path: str) -> bytes:
        r = await self._sbx._t.request("GET", self._sbx._path("/files"), params={"path": b.check_path(path)})
        return r.content

    async def iter_bytes(self, path: str, chunk_size: int = _CHUNK) -> AsyncIterator[bytes]:
        async with self._sbx._t.stream("GET", self._sbx._path("/files"), params={"path": b.check_path(path)}) as resp:
            async for chunk in resp.aiter_bytes(chunk_size):
                yield chunk

    async def download(self, path: str, dest: Union[str, "os.PathLike[str]", IO[bytes]]) -> int:
        n = 0
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as f:
                async for chunk in self.iter_bytes(path):
                    f.write(chunk)
                    n += len(chunk)
            return n
        async for chunk in self.iter_bytes(path):
            dest.write(chunk)
            n += len(chunk)
        return n

    async def write(self, path: str, data: Union[str, bytes, IO[bytes], AsyncIterable[bytes]]) -> EntryInfo:
        """Writes a file; a binary file or an async iterable of bytes is streamed."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        content: Any = data
        if hasattr(data, "read"):
            content = _afile_chunks(data)  # type: ignore[arg-type]
        r = await self._sbx._t.request(
            "PUT", self._sbx._path("/files"), params={"path": b.check_path(path)}, content=content,
            headers={"Content-Type": "application/octet-stream"},
        )
        return EntryInfo.from_json(r.json())

    async def upload(self, path: str, src: Union[str, "os.PathLike[str]", IO[bytes]]) -> EntryInfo:
        if isinstance(src, (str, os.PathLike)):
            with open(src, "rb") as f:
                return await self.write(path, f)
        return await self.write(path, src)

    async def list(self, path: str = ".", *, depth: int = 1) -> List[EntryInfo]:
        r = await self._sbx._t.request("GET", self._sbx._path("/files/list"),
                                       params={"path": b.check_path(path), "depth": depth})
        return [EntryInfo.from_json(e) for e in r.json().get("entries", [])]

    async def get_info(self, path: str) -> EntryInfo:
        r = await self._sbx._t.request("GET", self._sbx._path("/files/stat"), params={"path": b.check_path(path)})
        return EntryInfo.from_json(r.json())

    async def exists(self, path: str) -> bool:
        try:
            await self.get_info(path)
            return True
        except NotFoundError:
            return False

    async def remove(self, path: str) -> None:
        await self._sbx._t.request("DELETE", self._sbx._path("/files"), params={"path": b.check_path(path)})

    async def make_dir(self, path: str) -> EntryInfo:
        r = await self._sbx._t.request("POST", self._sbx._path("/files/mkdir"), json_body={"path": b.check_path(path)})
        return EntryInfo.from_json(r.json())

    async def rename(self, source: str, destination: str) -> EntryInfo:
        r = await self._sbx._t.request(
            "POST", self._sbx._path("/files/move"),
            json_body={"source": b.check_path(source), "destination": b.check_path(destination)})
        return EntryInfo.from_json(r.json())

    async def watch_dir(self, path: str, *, recursive: bool = False) -> AsyncWatchHandle:
        """Watches a directory; returns once the watch is in place."""
        resp = await self._sbx._t.open_stream(
            "GET", self._sbx._path("/files/watch"),
            params={"path": b.check_path(path), "recursive": str(bool(recursive)).lower()},
            read_timeout=WATCH_READ_TIMEOUT)
        handle = AsyncWatchHandle(resp)
        try:
            first = b.parse_line(await handle._lines.__anext__())
        except StopAsyncIteration:
            first = None
        except BaseException:
            await handle.close()
            raise
        if not first or first.get("type") != "start":
            await handle.close()
            raise TransportError("watch stream did not begin with a start event")
        return handle


class AsyncPty:
    """Interactive terminals: ``sbx.pty`` (needs ``websockets``)."""

    def __init__(self, sbx: "AsyncSandbox") -> None:
        self._sbx = sbx

    async def connect(
        self, *, cmd: Optional[str] = None, cols: int = 80, rows: int = 24, cwd: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> AsyncPtySession:
        return await AsyncPtySession.open(self._sbx._t.config, self._sbx._path("/pty"), cmd=cmd, cols=cols,
                                          rows=rows, cwd=cwd, timeout=timeout)


class _Creating:
    """What AsyncSandbox.create returns: awaitable (``sbx = await ...``) and an
    async context manager (``async with AsyncSandbox.create() as sbx``)."""

    def __init__(self, make: Callable[[], Awaitable["AsyncSandbox"]]) -> None:
        self._make = make
        self._sbx: Optional[AsyncSandbox] = None

    def __await__(self) -> Generator[Any, None, "AsyncSandbox"]:
        return self._make().__await__()

    async def __aenter__(self) -> "AsyncSandbox":
        self._sbx = await self._make()
        return self._sbx

    async def __aexit__(self, *exc: Any) -> None:
        if self._sbx is not None:
            await self._sbx.__aexit__(*exc)


class AsyncSandbox:
    """A sandbox, asyncio form (see :class:`agentbox.Sandbox`)::

        async with AsyncSandbox.create() as sbx:
            print((await sbx.commands.run("echo hi")).stdout)
    """

    def __init__(self, info: SandboxInfo, transport: _AsyncTransport) -> None:
        self._info = info
        self._t = transport
        self.commands = AsyncCommands(self)
        self.code = AsyncCode(self)
        self.files = AsyncFiles(self)
        self.pty = AsyncPty(self)

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
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> _Creating:
        """Creates a sandbox; see :meth:`agentbox.Sandbox.create`."""
        b.seconds("timeout", timeout)
        body = b.create_body(template, timeout, env, metadata, cpus, memory, pids, disk, network, service,
                             auto_pause, isolation, list(volumes) if volumes is not None else None)
        config = ConnectionConfig.resolve(url, api_key, request_timeout)

        async def make() -> AsyncSandbox:
            t = _AsyncTransport(config, http_client)
            try:
                r = await t.request("POST", "/v1/sandboxes", json_body=body)
            except BaseException:
                await t.close()
                raise
            return cls(SandboxInfo.from_json(r.json()), t)

        return _Creating(make)

    @classmethod
    async def connect(
        cls, sandbox_id: str, *, url: Optional[str] = None, api_key: Optional[str] = None,
        request_timeout: Optional[float] = None, http_client: Optional[httpx.AsyncClient] = None,
    ) -> "AsyncSandbox":
        t = _AsyncTransport(ConnectionConfig.resolve(url, api_key, request_timeout), http_client)
        try:
            r = await t.request("GET", b.sandbox_path(sandbox_id))
        except BaseException:
            await t.close()
            raise
        return cls(SandboxInfo.from_json(r.json()), t)

    @classmethod
    async def list(
        cls, *, metadata: Optional[Mapping[str, str]] = None, state: Optional[Union[str, Iterable[str]]] = None,
        limit: Optional[int] = None, url: Optional[str] = None, api_key: Optional[str] = None,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> List[SandboxInfo]:
        t = _AsyncTransport(ConnectionConfig.resolve(url, api_key), http_client)
        try:
            out: List[SandboxInfo] = []
            token: Optional[str] = None
            for _ in range(100000):
                params = _list_params(metadata, state, limit, len(out), token)
                data = (await t.request("GET", "/v1/sandboxes", params=params)).json()
                out.extend(SandboxInfo.from_json(s) for s in data.get("sandboxes", []))
                token = data.get("next_token") or None
                if not token or (limit is not None and len(out) >= limit):
                    break
            return out[:limit] if limit is not None else out
        finally:
            await t.close()

    @staticmethod
    async def server_info(
        *, url: Optional[str] = None, api_key: Optional[str] = None, http_client: Optional[httpx.AsyncClient] = None
    ) -> ServerInfo:
        t = _AsyncTransport(ConnectionConfig.resolve(url, api_key), http_client)
        try:
            return ServerInfo.from_json((await t.request("GET", "/v1/info")).json())
        finally:
            await t.close()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.kill()
        finally:
            await self.close()

    async def close(self) -> None:
        await self._t.close()

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def info(self) -> SandboxInfo:
        return self._info

    @property
    def access_token(self) -> str:
        return self._info.access_token

    def _path(self, suffix: str = "") -> str:
        return b.sandbox_path(self._info.id, suffix)

    def _update(self, r: httpx.Response) -> SandboxInfo:
        self._info = SandboxInfo.from_json(r.json())
        return self._info

    async def get_info(self) -> SandboxInfo:
        return self._update(await self._t.request("GET", self._path()))

    async def is_running(self) -> bool:
        try:
            return (await self.get_info()).state == "running"
        except NotFoundError:
            return False

    async def kill(self) -> bool:
        try:
            await self._t.request("DELETE", self._path())
            return True
        except NotFoundError:
            return False

    async def set_timeout(self, timeout: float) -> SandboxInfo:
        return self._update(await self._t.request("POST", self._path("/timeout"),
                                                  json_body={"timeout": b.seconds("timeout", timeout)}))

    async def refresh(self, duration: Optional[float] = None) -> SandboxInfo:
        body = {} if duration is None else {"duration": b.seconds("duration", duration)}
        return self._update(await self._t.request("POST", self._path("/refresh"), json_body=body))

    async def stop(self) -> SandboxInfo:
        return self._update(await self._t.request("POST", self._path("/stop")))

    async def start(self) -> SandboxInfo:
        return self._update(await self._t.request("POST", self._path("/start")))

    async def pause(self) -> SandboxInfo:
        return self._update(await self._t.request("POST", self._path("/pause")))

    async def resume(self, timeout: Optional[float] = None) -> SandboxInfo:
        body = {} if timeout is None else {"timeout": b.seconds("timeout", timeout)}
        return self._update(await self._t.request("POST", self._path("/resume"), json_body=body))

    async def snapshot(self, name: str) -> Template:
        """See :meth:`agentbox.Sandbox.snapshot`."""
        r = await self._t.request("POST", self._path("/snapshot"), json_body={"name": name})
        return Template.from_json(r.json())

    async def fork(self, count: int = 1, *, timeout: Optional[float] = None) -> List["AsyncSandbox"]:
        """See :meth:`agentbox.Sandbox.fork`."""
        body: Dict[str, Any] = {"count": count}
        if timeout is not None:
            body["timeout"] = b.seconds("timeout", timeout)
        r = await self._t.request("POST", self._path("/fork"), json_body=body)
        client = None if self._t.owned else self._t.client
        return [AsyncSandbox(SandboxInfo.from_json(d), _AsyncTransport(self._t.config, client))
                for d in r.json().get("sandboxes", [])]

    async def stats(self) -> SandboxStats:
        return SandboxStats.from_json((await self._t.request("GET", self._path("/stats"))).json())

    async def logs(self, limit: Optional[int] = None) -> List[LogEntry]:
        params = {"limit": limit} if limit is not None else None
        data = (await self._t.request("GET", self._path("/logs"), params=params)).json()
        return [LogEntry.from_json(e) for e in data.get("logs", [])]

    async def update_network(
        self, *, allow_out: Optional[Iterable[str]] = None, deny_out: Optional[Iterable[str]] = None
    ) -> SandboxInfo:
        body: Dict[str, Any] = {"mode": "egress", "allow_out": list(allow_out or []), "deny_out": list(deny_out or [])}
        return self._update(await self._t.request("PUT", self._path("/network"), json_body=body))

    def preview_url(self, port: int, path: str = "") -> str:
        return f"{self._t.config.url}{self._path('/ports/%d/' % b.check_port(port))}{path.lstrip('/')}"

    async def create_preview_token(self, port: int, ttl: Optional[float] = None) -> PreviewToken:
        body: Dict[str, Any] = {"port": b.check_port(port)}
        if ttl is not None:
            body["ttl"] = b.seconds("ttl", ttl)
        r = await self._t.request("POST", self._path("/preview-tokens"), json_body=body)
        return PreviewToken.from_json(r.json())

    async def run_code(
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
        return await self.code.run(code, language=language, context=context, env_vars=env_vars, timeout=timeout,
                                   max_output_bytes=max_output_bytes, on_stdout=on_stdout, on_stderr=on_stderr,
                                   on_result=on_result, on_error=on_error)


class AsyncTemplates:
    """The server's templates, asyncio form (see :class:`agentbox.Templates`)."""

    def __init__(self, *, url: Optional[str] = None, api_key: Optional[str] = None,
                 http_client: Optional[httpx.AsyncClient] = None) -> None:
        self._t = _AsyncTransport(ConnectionConfig.resolve(url, api_key), http_client)

    async def __aenter__(self) -> "AsyncTemplates":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._t.close()

    async def list(self) -> List[Template]:
        r = await self._t.request("GET", "/v1/templates")
        return [Template.from_json(t) for t in r.json().get("templates", [])]

    async def get(self, name: str) -> Template:
        return Template.from_json((await self._t.request("GET", b.template_path(name))).json())

    async def delete(self, name: str) -> None:
        await self._t.request("DELETE", b.template_path(name))

    async def snapshots(self, sandbox_id: Optional[str] = None) -> List[Template]:
        """See :meth:`agentbox.Templates.snapshots`."""
        return [t for t in await self.list() if t.is_snapshot and (sandbox_id is None or t.snapshot_of == sandbox_id)]


class AsyncVolumes:
    """Your volumes and their files, asyncio form (see :class:`agentbox.Volumes`)."""

    def __init__(self, *, url: Optional[str] = None, api_key: Optional[str] = None,
                 http_client: Optional[httpx.AsyncClient] = None) -> None:
        self._t = _AsyncTransport(ConnectionConfig.resolve(url, api_key), http_client)

    async def __aenter__(self) -> "AsyncVolumes":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._t.close()

    async def create(self, name: str, *, size: Optional[Union[int, str]] = None, kind: Optional[str] = None) -> Volume:
        body: Dict[str, Any] = {"name": name}
        if size is not None:
            body["size"] = size
        if kind is not None:
            body["kind"] = kind
        b.volume_path(name)
        return Volume.from_json((await self._t.request("POST", "/v1/volumes", json_body=body)).json())

    async def list(self) -> List[Volume]:
        return [Volume.from_json(v) for v in (await self._t.request("GET", "/v1/volumes")).json()]

    async def get(self, name: str) -> Volume:
        return Volume.from_json((await self._t.request("GET", b.volume_path(name))).json())

    async def delete(self, name: str, *, force: bool = False) -> None:
        params = {"force": "true"} if force else None
        await self._t.request("DELETE", b.volume_path(name), params=params)

    async def read(self, name: str, path: str, *, format: str = "text") -> Union[str, bytes]:
        if format not in ("text", "bytes"):
            raise ValueError("format must be 'text' or 'bytes'")
        r = await self._t.request("GET", b.volume_path(name, "/files"), params={"path": b.check_path(path)})
        return r.content if format == "bytes" else r.content.decode("utf-8")

    async def write(self, name: str, path: str, data: Union[str, bytes, IO[bytes], AsyncIterable[bytes]]) -> EntryInfo:
        if isinstance(data, str):
            data = data.encode("utf-8")
        content: Any = data
        if hasattr(data, "read"):
            content = _afile_chunks(data)  # type: ignore[arg-type]
        r = await self._t.request("PUT", b.volume_path(name, "/files"), params={"path": b.check_path(path)},
                                  content=content, headers={"Content-Type": "application/octet-stream"})
        return EntryInfo.from_json(r.json())

    async def stat(self, name: str, path: str = "/") -> EntryInfo:
        r = await self._t.request("GET", b.volume_path(name, "/files/stat"), params={"path": b.check_path(path)})
        return EntryInfo.from_json(r.json())

    async def exists(self, name: str, path: str) -> bool:
        try:
            await self.stat(name, path)
            return True
        except NotFoundError:
            return False

    async def list_dir(self, name: str, path: str = "/") -> List[EntryInfo]:
        r = await self._t.request("GET", b.volume_path(name, "/files/list"), params={"path": b.check_path(path)})
        return [EntryInfo.from_json(e) for e in r.json().get("entries", [])]

    async def make_dir(self, name: str, path: str) -> EntryInfo:
        r = await self._t.request("POST", b.volume_path(name, "/files/mkdir"), json_body={"path": b.check_path(path)})
        return EntryInfo.from_json(r.json())

    async def remove(self, name: str, path: str) -> None:
        await self._t.request("DELETE", b.volume_path(name, "/files"), params={"path": b.check_path(path)})
