"""PythonSandboxEnv, EnvPool and the Gym adapter against a real daemon:
the seed's usage examples and its semantics."""

from __future__ import annotations

import asyncio

import pytest

import agentbox
from agentbox import AsyncSandbox, StepTimeoutError
from agentbox.envs import EnvPool, PythonGymEnv, PythonSandboxEnv

pytestmark = pytest.mark.live
aio = pytest.mark.asyncio


@aio
async def test_seed_examples() -> None:
    env = PythonSandboxEnv(step_timeout=2)
    await env.start()
    try:
        out = await env.step("import math\nprint(math.pi)")
        assert out == "3.141592653589793\n"
        await env.step("x = [1]")
        await env.step("x += [2, 3]")
        assert await env.step("x.append(4)\nprint(x)") == "[1, 2, 3, 4]\n"
        await env.reset()
        out = await env.step("print(x)")
        assert "NameError: name 'x' is not defined" in out
        # An infinite loop: interrupted at the timeout, surfaced, and the env goes on.
        await env.step("kept = 'yes'")
        with pytest.raises(StepTimeoutError) as ei:
            await env.step("while True: pass")
        assert not ei.value.state_lost and "KeyboardInterrupt" in ei.value.output
        assert await env.step("print(kept)") == "yes\n"
        # A loop that ignores the interrupt: the interpreter is restarted.
        with pytest.raises(StepTimeoutError) as ei:
            await env.step("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass",
                           timeout=1)
        assert ei.value.state_lost
        assert "NameError" in await env.step("kept")
        assert await env.step("1 + 1") == "2\n"
    finally:
        await env.aclose()


@aio
async def test_acquire_from_warm_pool() -> None:
    # The pool refills in the background: wait (bounded) until it has one.
    for _ in range(600):
        if sum((await AsyncSandbox.server_info()).pools.values()) > 0:
            break
        await asyncio.sleep(0.1)
    env = await PythonSandboxEnv.acquire()
    try:
        assert env.from_pool
        assert await env.step("print('ready')") == "ready\n"
        assert "NameError" in await env.step("x")  # a fresh interpreter
    finally:
        await env.aclose()
    with pytest.raises(agentbox.NotFoundError):
        await AsyncSandbox.connect(env.sandbox_id or "gone")  # type: ignore[arg-type]


@aio
async def test_limits_and_isolation() -> None:
    async with PythonSandboxEnv(cpu=0.5, mem="256M") as env:
        st = await env.sandbox.stats()
        assert st.memory_limit == 256 << 20 and st.pids_limit == 256
        assert not env.from_pool
        out = await env.step("open('/usr/lib/evil', 'w')")
        assert "Read-only file system" in out or "Permission denied" in out
        out = await env.step("import os\nprint(sorted(os.listdir('/sys/class/net')))")
        assert out == "['lo']\n"
        out = await env.step(
            "import socket\ns = socket.socket()\ns.settimeout(2)\n"
            "try:\n    s.connect(('192.0.2.1', 80))\n    print('connected')\nexcept OSError as e:\n    print('blocked')")
        assert out == "blocked\n"
        out = await env.step("import os\nprint(os.getuid() != 0, open('/proc/self/status').read().count('CapEff:\\t0000000000000000'))")
        assert out == "True 1\n"


@aio
async def test_max_episodes_replaces_the_sandbox() -> None:
    async with PythonSandboxEnv(max_episodes=2) as env:
        first = env.sandbox_id
        await env.step("x = 1")
        await env.reset()
        assert env.sandbox_id == first and env.episodes == 1
        await env.step("open('/tmp/mark', 'w').write('m')")
        await env.reset()  # the second episode ends: a fresh sandbox
        assert env.sandbox_id != first and env.episodes == 0 and env.sandboxes_used == 2
        assert "False" in await env.step("import os\nprint(os.path.exists('/tmp/mark'))")
        with pytest.raises(agentbox.NotFoundError):
            await AsyncSandbox.connect(first)  # type: ignore[arg-type]


@aio
async def test_two_envs_never_share_state() -> None:
    async with PythonSandboxEnv() as a, PythonSandboxEnv() as b:
        assert a.sandbox_id != b.sandbox_id
        await a.step("secret = 1\nopen('/tmp/secret', 'w').write('s')")
        assert "NameError" in await b.step("secret")
        assert await b.step("import os\nprint(os.path.exists('/tmp/secret'))") == "False\n"


@aio
async def test_start_timeout() -> None:
    env = PythonSandboxEnv(start_timeout=0.001, mem="300M")
    with pytest.raises(agentbox.StartTimeoutError):
        await env.start()
    assert env.sandbox_id is None


@aio
async def test_lifetime_is_extended_while_used() -> None:
    async with PythonSandboxEnv(lifetime=4) as env:
        end0 = env.sandbox.info.end_at
        await asyncio.sleep(2.5)  # past half the lifetime: the next step extends it
        assert await env.step("print(1)") == "1\n"
        end1 = (await env.sandbox.get_info()).end_at
        assert end0 is not None and end1 is not None and end1 > end0


@aio
async def test_env_survives_a_destroyed_sandbox() -> None:
    async with PythonSandboxEnv() as env:
        first = env.sandbox_id
        await env.sandbox.kill()
        with pytest.raises(agentbox.NotFoundError):
            await env.step("1")
        await env.reset()  # replaces the sandbox
        assert env.sandbox_id != first and await env.step("print(3)") == "3\n"


# Each step marks that it is running, then waits (bounded) for a go file
# the test writes only once all 16 are marked: steps run one after another
# never all get marked, so the test proves they overlap without timing them.
# The 16 steps fill the user's 16 heavy requests (MAX_REQUESTS_PER_USER's
# default); the test's daemon admits one more, which the test's own file
# requests take one at a time.
_BARRIER_STEP = """
import os, time
open("/tmp/step-running", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists("/tmp/step-go") and time.monotonic() < deadline:
    time.sleep(0.05)
print(os.path.exists("/tmp/step-go"))
"""


async def _all_exist(pool: EnvPool, path: str) -> bool:
    for e in pool.envs:
        if not await e.sandbox.files.exists(path):
            return False
    return True


@aio
async def test_pool_of_16_steps_concurrently() -> None:
    async with EnvPool(16) as pool:
        assert len({e.sandbox_id for e in pool.envs}) == 16
        await pool.step([f"x = {i}" for i in range(16)])
        outs = await pool.step("print(x)")
        assert outs == [f"{i}\n" for i in range(16)]

        steps = asyncio.ensure_future(pool.step(_BARRIER_STEP, timeout=90))
        try:
            for _ in range(600):  # 60 s at most
                if steps.done() or await _all_exist(pool, "/tmp/step-running"):
                    break
                await asyncio.sleep(0.1)
            assert not steps.done(), f"steps returned before the go file: {steps.result()}"
            assert await _all_exist(pool, "/tmp/step-running"), "the 16 steps were never all running at once"
            for e in pool.envs:
                await e.sandbox.files.write("/tmp/step-go", "")
            assert await asyncio.wait_for(steps, 90) == ["True\n"] * 16
        finally:
            if not steps.done():
                steps.cancel()

        await pool.reset()
        assert all("NameError" in o for o in await pool.step("x"))
        # The spinning step always overruns its timeout; the 15 prints get
        # the same timeout, long enough for a loaded 2-core machine.
        res = await pool.step(["while True: pass"] + ["print(1)"] * 15, timeout=5, return_exceptions=True)
        assert isinstance(res[0], StepTimeoutError), res[0]
        assert res[1:] == ["1\n"] * 15
        with pytest.raises(StepTimeoutError):
            await pool.step(["while True: pass"] + ["1"] * 15, timeout=2)
        # After a timeout the environment still steps.
        assert await pool.envs[0].step("print(2)") == "2\n"


def test_gym_adapter() -> None:
    def reward(action: str, obs: str, info: dict) -> tuple:
        return (1.0 if obs.strip() == "42" else 0.0, obs.strip() == "42")

    env = PythonGymEnv(reward_fn=reward, max_steps=3, setup_code="target = 42\nprint('go')")
    try:
        obs, info = env.reset(seed=7)
        assert obs == "go\n" and info["sandbox_id"]
        obs, r, term, trunc, info = env.step("print(target - 1)")
        assert (obs, r, term, trunc) == ("41\n", 0.0, False, False)
        obs, r, term, trunc, info = env.step("print(target)")
        assert (r, term, trunc) == (1.0, True, False)
        first = env.step("import random; print(random.random())")[0]
        obs, info = env.reset(seed=7)
        assert "NameError" in env.step("random")[0]  # reset cleared the import
        assert env.step("import random; print(random.random())")[0] == first  # same seed, same draw
    finally:
        env.close()


def test_gym_adapter_timeout_and_truncation() -> None:
    env = PythonGymEnv(max_steps=2, step_timeout=1)
    try:
        env.reset()
        obs, r, term, trunc, info = env.step("while True: pass")
        assert info["timeout"] and info["error"] == "TimeoutError" and not trunc
        obs, r, term, trunc, info = env.step("print('after')")
        assert obs == "after\n" and trunc and not term
    finally:
        env.close()
