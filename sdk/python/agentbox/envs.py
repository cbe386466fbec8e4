"""Episode environments: a Python interpreter in a sandbox, stepped with code.

:class:`PythonSandboxEnv` has the interface of the Docker-based
``PythonSandboxEnv`` agents and RL loops use (``start``, ``step(code)`` →
output, ``reset``, ``aclose``, ``acquire``, ``max_episodes``, ``cpu``,
``mem``, ``start_timeout``) without Docker: each environment is an agentbox
sandbox (read-only root, no capabilities, pids 256, no network unless the
server says otherwise) holding one stateful Python code context.

* ``step`` runs code in the context: variables persist between steps; the
  output is what the code printed, the value of its last expression and,
  when it raised, the traceback.
* A step that runs past ``step_timeout`` is interrupted (KeyboardInterrupt;
  the state is kept), or the interpreter is restarted when it would not stop
  within 2 seconds; either way :class:`~agentbox.StepTimeoutError` reaches the
  caller and the environment is usable at once.
* ``reset`` restarts the interpreter (every variable is gone) in
  milliseconds; after ``max_episodes`` episodes the sandbox itself is
  replaced by a fresh one (files written in /workspace and /tmp go with it).
* ``acquire`` hands out an environment from the server's warm pool (a
  sandbox that booted before anyone asked, never used): the pool serves
  sandboxes created without explicit limits, so ``acquire`` with ``cpu`` or
  ``mem`` set boots one instead.

:class:`EnvPool` steps many environments concurrently; :class:`PythonGymEnv`
is a Gymnasium-style ``reset()``/``step()`` adapter that does not need
gymnasium installed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import httpx

from ._async import AsyncSandbox
from .errors import AgentboxError, NotFoundError, StartTimeoutError, StepTimeoutError
from .models import CodeContext, Execution

_ENV_LABEL = "agentbox.env"
_LOST = "state was lost"
# Seconds past start_timeout a sandbox lives until start() completes.
_ORPHAN_GRACE = 30.0


def render_output(ex: Execution) -> str:
    """What a step shows: stdout, stderr, the last expression's value and
    the error's traceback, in that order."""
    parts = [ex.stdout, ex.stderr]
    if ex.text is not None:
        parts.append(ex.text if ex.text.endswith("\n") else ex.text + "\n")
    if ex.error is not None:
        if ex.error.traceback:
            tb = ex.error.traceback
            # The agent's own errors keep their explanation in value.
            if ex.error.value and ex.error.value not in tb:
                tb += f"{ex.error.name}: {ex.error.value}\n"
            parts.append(tb if tb.endswith("\n") else tb + "\n")
        else:
            parts.append(f"{ex.error.name}: {ex.error.value}\n")
    return "".join(parts)


def _positive(name: str, v: Optional[float]) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise ValueError(f"{name} must be a positive number, got {v!r}")
    return float(v)


class PythonSandboxEnv:
    """A stateful Python interpreter in a sandbox.

    ``cpu`` (cores) and ``mem`` (bytes or ``"512M"``) are hard limits (the
    server's defaults when None); ``max_episodes`` replaces the sandbox after
    that many episodes (None: never); ``start_timeout`` bounds ``start``;
    ``step_timeout`` is the default bound of a step; ``lifetime`` is how long
    the sandbox lives without steps or resets (it is extended as the
    environment is used). ``url``/``api_key`` default to AGENTBOX_URL and
    AGENTBOX_API_KEY; ``http_client`` shares a connection pool.
    """

    def __init__(
        self,
        *,
        cpu: Optional[float] = None,
        mem: Optional[Union[int, str]] = None,
        max_episodes: Optional[int] = None,
        start_timeout: float = 60.0,
        step_timeout: float = 10.0,
        lifetime: float = 3600.0,
        template: Optional[str] = None,
        network: Optional[str] = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        if max_episodes is not None and (isinstance(max_episodes, bool) or not isinstance(max_episodes, int)
                                         or max_episodes < 1):
            raise ValueError(f"max_episodes must be a positive integer or None, got {max_episodes!r}")
        self.cpu = _positive("cpu", cpu)
        self.mem = mem
        self.max_episodes = max_episodes
        self.start_timeout = float(_positive("start_timeout", start_timeout) or 60.0)
        self.step_timeout = float(_positive("step_timeout", step_timeout) or 10.0)
        self.lifetime = float(_positive("lifetime", lifetime) or 3600.0)
        self.template = template
        self.network = network
        self._url, self._api_key = url, api_key
        self._http = http_client
        self._sbx: Optional[AsyncSandbox] = None
        self._ctx: Optional[CodeContext] = None
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()
        #: Episodes finished (resets) in the current sandbox.
        self.episodes = 0
        #: Sandboxes this environment has used so far (1 after start).
        self.sandboxes_used = 0

    # --- lifecycle ----------------------------------------------------
    @classmethod
    async def acquire(cls, **kwargs: Any) -> "PythonSandboxEnv":
        """A started environment, from the server's warm pool when it has one
        ready: a sandbox nobody used, so already reset."""
        env = cls(**kwargs)
        await env.start()
        return env

    async def start(self) -> "PythonSandboxEnv":
        """Gets a sandbox and its interpreter ready (within ``start_timeout``)."""
        if self._sbx is None:
            self._sbx, self._ctx = await self._boot()
            self.episodes = 0
        return self

    async def _boot(self) -> Tuple[AsyncSandbox, CodeContext]:
        tag = uuid.uuid4().hex
        try:
            return await asyncio.wait_for(self._create(tag), self.start_timeout)
        except asyncio.TimeoutError:
            await self._reap(tag)
            raise StartTimeoutError(f"environment did not start within {self.start_timeout:g}s") from None

    async def _create(self, tag: str) -> Tuple[AsyncSandbox, CodeContext]:
        # The sandbox first lives just past start_timeout, and gets its
        # lifetime once ready: one whose creation outlives a caller that
        # gave up (and missed it in _reap) does not linger for the lifetime.
        sbx = await AsyncSandbox.create(
            self.template, timeout=self.start_timeout + _ORPHAN_GRACE, cpus=self.cpu, memory=self.mem, network=self.network,
            metadata={_ENV_LABEL: tag}, url=self._url, api_key=self._api_key, http_client=self._http,
        )
        try:
            ctx = next((c for c in await sbx.code.list_contexts() if c.language == "python"), None)
            if ctx is None:
                ctx = await sbx.code.create_context("python")
            await sbx.set_timeout(self.lifetime)
        except BaseException:
            await asyncio.shield(self._kill(sbx))
            raise
        self.sandboxes_used += 1
        self._refresh_at = time.monotonic() + self.lifetime / 2
        return sbx, ctx

    async def _reap(self, tag: str) -> None:
        """Destroys a sandbox whose create outlived start_timeout (it may
        still have been made after the client gave up waiting)."""
        try:
            for info in await AsyncSandbox.list(metadata={_ENV_LABEL: tag}, url=self._url, api_key=self._api_key,
                                                http_client=self._http):
                sbx = await AsyncSandbox.connect(info.id, url=self._url, api_key=self._api_key,
                                                 http_client=self._http)
                await self._kill(sbx)
        except AgentboxError:
            pass

    @staticmethod
    async def _kill(sbx: AsyncSandbox) -> None:
        try:
            await sbx.kill()
        except AgentboxError:
            pass
        finally:
            await sbx.close()

    async def aclose(self) -> None:
        """Destroys the sandbox. The environment can be started again."""
        sbx, self._sbx, self._ctx = self._sbx, None, None
        if sbx is not None:
            await self._kill(sbx)

    async def __aenter__(self) -> "PythonSandboxEnv":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    @property
    def sandbox(self) -> AsyncSandbox:
        """The current sandbox (it changes when the environment is replaced)."""
        if self._sbx is None:
            raise RuntimeError("environment not started: await env.start() first")
        return self._sbx

    @property
    def sandbox_id(self) -> Optional[str]:
        return self._sbx.id if self._sbx else None

    @property
    def from_pool(self) -> bool:
        """Whether the current sandbox came from the server's warm pool."""
        return bool(self._sbx and self._sbx.info.from_pool)

    async def _keep_alive(self) -> None:
        if self._sbx is not None and time.monotonic() >= self._refresh_at:
            await self._sbx.refresh(self.lifetime)
            self._refresh_at = time.monotonic() + self.lifetime / 2

    # --- stepping -----------------------------------------------------
    async def step_execution(self, code: str, *, timeout: Optional[float] = None) -> Execution:
        """Runs ``code`` and returns the whole :class:`~agentbox.Execution`
        (results in every format, the error apart); a timeout is its error,
        not an exception."""
        await self.start()
        t = _positive("timeout", timeout) or self.step_timeout
        async with self._lock:
            await self._keep_alive()
            assert self._sbx is not None and self._ctx is not None
            return await self._sbx.code.run(code, context=self._ctx, timeout=t)

    async def step(self, code: str, *, timeout: Optional[float] = None) -> str:
        """Runs ``code`` and returns its output (see :func:`render_output`).
        Exceptions of the code are part of the output; a run past the timeout
        raises :class:`~agentbox.StepTimeoutError` once the environment has
        recovered."""
        ex = await self.step_execution(code, timeout=timeout)
        out = render_output(ex)
        if ex.error is not None and ex.error.name == "TimeoutError":
            lost = _LOST in ex.error.value
            raise StepTimeoutError(ex.error.value, output=out, execution=ex, state_lost=lost)
        return out

    async def reset(self) -> None:
        """Ends the episode: a fresh interpreter (no variables, no imports);
        after ``max_episodes`` episodes a fresh sandbox."""
        await self.start()
        async with self._lock:
            self.episodes += 1
            if self.max_episodes is not None and self.episodes >= self.max_episodes:
                await self._replace()
                return
            assert self._sbx is not None and self._ctx is not None
            try:
                await self._keep_alive()
                await self._sbx.code.restart_context(self._ctx)
            except NotFoundError:
                # The sandbox (or its context) is gone: its time ran out, or
                # someone destroyed it. A fresh one is the reset.
                await self._replace()

    async def _replace(self) -> None:
        old = self._sbx
        self._sbx, self._ctx = None, None
        new, kill = await asyncio.gather(self._boot(), self._kill(old) if old else asyncio.sleep(0),
                                         return_exceptions=True)
        if isinstance(new, BaseException):
            raise new
        self._sbx, self._ctx = new
        self.episodes = 0


class EnvPool:
    """``n`` environments stepped concurrently, for batched rollouts::

        async with EnvPool(16) as pool:
            outs = await pool.step(["x = 1"] * 16)
            await pool.reset()

    Keyword arguments go to every :class:`PythonSandboxEnv`; the pool shares
    one HTTP connection pool between them. ``max_concurrency`` bounds the
    steps and resets in flight at once: the server refuses a user's heavy
    requests beyond MAX_REQUESTS_PER_USER (default 16) with 429, which the
    SDK retries only after the server's Retry-After (a second or more)."""

    def __init__(self, n: int, *, max_concurrency: int = 16, **env_kwargs: Any) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be a positive integer, got {max_concurrency!r}")
        self.max_concurrency = max_concurrency
        self._sem: Optional[asyncio.Semaphore] = None  # made in the running loop
        self._own_http = "http_client" not in env_kwargs
        self._http: httpx.AsyncClient = env_kwargs.pop("http_client", None) or httpx.AsyncClient(
            limits=httpx.Limits(max_connections=4 * n + 8, max_keepalive_connections=2 * n + 4))
        self.envs: List[PythonSandboxEnv] = [PythonSandboxEnv(http_client=self._http, **env_kwargs) for _ in range(n)]

    def __len__(self) -> int:
        return len(self.envs)

    def __getitem__(self, i: int) -> PythonSandboxEnv:
        return self.envs[i]

    def _limit(self) -> asyncio.Semaphore:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.max_concurrency)
        return self._sem

    async def _bounded(self, coro: Any) -> Any:
        async with self._limit():
            return await coro

    async def start(self) -> "EnvPool":
        """Starts every environment (concurrently); on a failure the started ones are closed."""
        res = await asyncio.gather(*(e.start() for e in self.envs), return_exceptions=True)
        errs = [r for r in res if isinstance(r, BaseException)]
        if errs:
            await self.aclose()
            raise errs[0]
        return self

    async def step(self, codes: Union[str, Sequence[str]], *, timeout: Optional[float] = None,
                   return_exceptions: bool = False) -> List[Any]:
        """Steps every environment with its code (one string: the same code
        everywhere) and returns the outputs in order. With
        ``return_exceptions`` an environment's error (a StepTimeoutError, say)
        takes its place in the list; otherwise the first one is raised once
        every step has finished."""
        if isinstance(codes, str):
            codes = [codes] * len(self.envs)
        if len(codes) != len(self.envs):
            raise ValueError(f"{len(codes)} codes for {len(self.envs)} environments")
        res = await asyncio.gather(*(self._bounded(e.step(c, timeout=timeout)) for e, c in zip(self.envs, codes)),
                                   return_exceptions=True)
        if not return_exceptions:
            for r in res:
                if isinstance(r, BaseException):
                    raise r
        return list(res)

    async def reset(self) -> None:
        """Resets every environment (concurrently)."""
        res = await asyncio.gather(*(self._bounded(e.reset()) for e in self.envs), return_exceptions=True)
        for r in res:
            if isinstance(r, BaseException):
                raise r

    async def aclose(self) -> None:
        await asyncio.gather(*(e.aclose() for e in self.envs), return_exceptions=True)
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> "EnvPool":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


RewardFn = Callable[[str, str, Dict[str, Any]], Union[float, Tuple[float, bool]]]


class PythonGymEnv:
    """A Gymnasium-style adapter (``reset()``/``step()``/``close()``), blocking,
    with no gymnasium import: actions are code, observations its output.

    ``reward_fn(action, observation, info)`` returns the reward, or
    ``(reward, terminated)``; default 0.0 and never terminated. ``max_steps``
    truncates an episode. A step timeout is not raised: the observation
    carries the error and ``info["timeout"]`` is True. ``setup_code`` runs
    at every reset, its output is the first observation. It runs its own
    event loop: call it from synchronous code (not inside a running loop).
    """

    metadata: Dict[str, Any] = {"render_modes": []}

    def __init__(self, *, reward_fn: Optional[RewardFn] = None, max_steps: Optional[int] = None,
                 setup_code: Optional[str] = None, **env_kwargs: Any) -> None:
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"max_steps must be a positive integer or None, got {max_steps!r}")
        self._loop = asyncio.new_event_loop()
        self.env = PythonSandboxEnv(**env_kwargs)
        self.reward_fn, self.max_steps, self.setup_code = reward_fn, max_steps, setup_code
        self._steps = 0
        self._started = False

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def reset(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None
              ) -> Tuple[str, Dict[str, Any]]:
        """Starts a clean episode; returns ``(observation, info)``. ``seed``
        seeds Python's ``random`` in the environment."""
        if not self._started:
            self._run(self.env.start())
            self._started = True
        else:
            self._run(self.env.reset())
        self._steps = 0
        code = (options or {}).get("setup_code", self.setup_code) or ""
        if seed is not None:
            code = f"import random as _r; _r.seed({int(seed)}); del _r\n" + code
        obs = self._run(self.env.step(code)) if code else ""
        return obs, {"sandbox_id": self.env.sandbox_id, "episode": self.env.episodes}

    def step(self, action: str) -> Tuple[str, float, bool, bool, Dict[str, Any]]:
        """Runs ``action``; returns ``(observation, reward, terminated, truncated, info)``."""
        if not self._started:
            raise RuntimeError("call reset() before step()")
        self._steps += 1
        info: Dict[str, Any] = {"timeout": False, "error": None}
        ex = self._run(self.env.step_execution(action))
        obs = render_output(ex)
        if ex.error is not None:
            info["error"] = ex.error.name
            info["timeout"] = ex.error.name == "TimeoutError"
        reward: float = 0.0
        terminated = False
        if self.reward_fn is not None:
            r = self.reward_fn(action, obs, info)
            if isinstance(r, tuple):
                reward, terminated = float(r[0]), bool(r[1])
            else:
                reward = float(r)
        truncated = self.max_steps is not None and self._steps >= self.max_steps and not terminated
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.env.aclose())
        finally:
            self._loop.close()

    def __enter__(self) -> "PythonGymEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
