"""Interactive terminals over the API's websocket (GET /v1/sandboxes/{id}/pty).

The websocket client is the ``websockets`` package (Debian:
python3-websockets, 10.4 in bookworm), whose asyncio client works from 10
on. :class:`AsyncPtySession` uses it directly; :class:`PtySession` (the
sync API) drives the same session on an event loop of its own thread.
Binary messages are terminal bytes both ways; text messages are JSON
control messages (``resize`` from us, ``exit`` from the server).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, AsyncIterator, Dict, Iterator, Optional, Union, cast
from urllib.parse import urlencode

from ._base import ConnectionConfig
from .errors import AgentboxError, TransportError, error_from_response


def _websockets() -> Any:
    try:
        import websockets.client  # noqa: F401
        import websockets.exceptions  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the host
        raise AgentboxError(
            "the pty needs the websockets package (apt-get install python3-websockets, or pip install websockets)"
        ) from e
    import websockets

    return websockets


def _check_size(cols: int, rows: int) -> None:
    for name, v in (("cols", cols), ("rows", rows)):
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 65535:
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(f"{name} must be an integer in 1..65535, got {v!r}", field=name)


class AsyncPtySession:
    """A terminal in a sandbox. ``recv()`` returns output bytes, ``None`` once
    the program exited (``exit_code`` is then set); ``send()`` types input."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self.exit_code: Optional[int] = None
        self._closed = False

    @classmethod
    async def open(
        cls, config: ConnectionConfig, path: str, *, cmd: Optional[str] = None, cols: int = 80, rows: int = 24,
        cwd: Optional[str] = None, timeout: Optional[float] = None,
    ) -> "AsyncPtySession":
        _check_size(cols, rows)
        ws_mod = _websockets()
        q: Dict[str, Any] = {"cols": cols, "rows": rows}
        if cmd:
            q["cmd"] = cmd
        if cwd:
            q["cwd"] = cwd
        headers = config.headers()
        headers.pop("User-Agent", None)
        uri = config.ws_url(path) + "?" + urlencode(q)
        try:
            ws = await ws_mod.client.connect(
                uri, extra_headers=headers, max_size=1 << 20, open_timeout=timeout or config.request_timeout,
                ping_interval=20, compression=None,
            )
        except ws_mod.exceptions.InvalidStatusCode as e:
            raise error_from_response(e.status_code, getattr(e, "body", b"") or b"", {}) from e
        except (OSError, asyncio.TimeoutError, ws_mod.exceptions.WebSocketException) as e:
            raise TransportError(f"pty websocket: {e}") from e
        return cls(ws)

    async def send(self, data: Union[str, bytes]) -> None:
        """Types ``data`` (text is sent as UTF-8)."""
        await self._ws.send(data.encode("utf-8") if isinstance(data, str) else bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        _check_size(cols, rows)
        await self._ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))

    async def recv(self) -> Optional[bytes]:
        """The next output bytes; None when the terminal is gone."""
        ws_mod = _websockets()
        while True:
            try:
                msg = await self._ws.recv()
            except ws_mod.exceptions.ConnectionClosed:
                return None
            if isinstance(msg, bytes):
                return msg
            try:
                ctl = json.loads(msg)
            except ValueError:
                continue
            if isinstance(ctl, dict) and ctl.get("type") == "exit":
                code = ctl.get("exit_code")
                self.exit_code = int(code) if isinstance(code, int) else -1

    async def read_until(self, needle: Union[str, bytes], timeout: float = 10.0) -> bytes:
        """Reads output until it contains ``needle``; returns all of it.
        Raises TimeoutError after ``timeout`` seconds, EOFError if the terminal ends first."""
        want = needle.encode() if isinstance(needle, str) else needle
        buf = bytearray()

        async def loop() -> bytes:
            while want not in buf:
                chunk = await self.recv()
                if chunk is None:
                    raise EOFError(f"terminal ended before {needle!r}: {bytes(buf[-300:])!r}")
                buf.extend(chunk)
            return bytes(buf)

        return await asyncio.wait_for(loop(), timeout)

    async def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Reads until the program exits; returns its exit code."""

        async def drain() -> None:
            while await self.recv() is not None:
                pass

        await asyncio.wait_for(drain(), timeout)
        return self.exit_code

    async def close(self) -> None:
        """Closes the terminal; the server kills its program."""
        if not self._closed:
            self._closed = True
            await self._ws.close()

    async def __aenter__(self) -> "AsyncPtySession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.recv()
            if chunk is None:
                return
            yield chunk


class PtySession:
    """The sync form of :class:`AsyncPtySession` (same methods, blocking)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread, inner: AsyncPtySession) -> None:
        self._loop, self._thread, self._inner = loop, thread, inner

    @classmethod
    def open(cls, config: ConnectionConfig, path: str, **kw: Any) -> "PtySession":
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="agentbox-pty", daemon=True)
        thread.start()
        try:
            inner = asyncio.run_coroutine_threadsafe(AsyncPtySession.open(config, path, **kw), loop).result()
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()
            raise
        return cls(loop, thread, inner)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def exit_code(self) -> Optional[int]:
        return self._inner.exit_code

    def send(self, data: Union[str, bytes]) -> None:
        self._run(self._inner.send(data))

    def resize(self, cols: int, rows: int) -> None:
        self._run(self._inner.resize(cols, rows))

    def recv(self) -> Optional[bytes]:
        return cast(Optional[bytes], self._run(self._inner.recv()))

    def read_until(self, needle: Union[str, bytes], timeout: float = 10.0) -> bytes:
        return cast(bytes, self._run(self._inner.read_until(needle, timeout)))

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        return cast(Optional[int], self._run(self._inner.wait(timeout)))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self._inner.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    def __enter__(self) -> "PtySession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[bytes]:
        while True:
            chunk = self.recv()
            if chunk is None:
                return
            yield chunk
