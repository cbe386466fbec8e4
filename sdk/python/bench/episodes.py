#!/usr/bin/python3
"""Episodes per second: agentbox's EnvPool(16) against the same loop on
Docker containers (docker run + docker exec, the seed's approach).

An episode is: an environment (start) -> 3 steps -> reset. Two forms:

  steady  16 environments started once, then rounds of 3 steps + reset on
          all 16 at once (the RL rollout loop: reset is the per-episode cost).
  fresh   16 workers, each episode on a new environment: start, 3 steps,
          close (what max_episodes=1 or a throwaway environment costs).

agentbox: PythonSandboxEnv (a sandbox from the warm pool, a Python code
context; reset restarts the interpreter). Docker: `docker run -d` with the
same limits as a sandbox (--network none, --read-only, --cap-drop ALL,
--pids-limit 256, --memory 512m, --cpus 1) of an image imported from the
host's /usr (no registry), a persistent python3 REPL over `docker exec -i`,
reset = a new `docker exec -i` interpreter.

Usage: AGENTBOX_URL=... [AGENTBOX_API_KEY=...] /usr/bin/python3 bench/episodes.py [--rounds N] [--fresh N] [--no-docker]
(run it from sdk/python, or with sdk/python on PYTHONPATH). The daemon
should have a warm pool (POOL_SIZE >= 16 for the fresh form to hit it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from typing import List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from agentbox.envs import EnvPool, PythonSandboxEnv  # noqa: E402

N = 16
STEPS = ["x = [1]", "x += [2, 3]", "x.append(4)\nprint(x)"]
WANT = "[1, 2, 3, 4]\n"
IMAGE = "agentbox-bench-host:latest"  # as internal/bench/docker.go
LIMITS = ["--network", "none", "--memory", "512m", "--pids-limit", "256", "--cpus", "1", "--read-only",
          "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
REPL = r"""
import sys, json, io, contextlib, traceback
g = {"__name__": "__main__"}
for line in sys.stdin:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            exec(compile(json.loads(line), "<step>", "exec"), g)
        except BaseException:
            traceback.print_exc()
    sys.stdout.write(json.dumps(buf.getvalue()) + "\n")
    sys.stdout.flush()
"""


# --- agentbox -----------------------------------------------------------

async def agentbox_steady(rounds: int) -> float:
    async with EnvPool(N) as pool:
        await pool.reset()  # warm: one round not timed
        t = time.perf_counter()
        for _ in range(rounds):
            outs: List[str] = []
            for code in STEPS:
                outs = await pool.step(code)
            assert outs == [WANT] * N, outs
            await pool.reset()
        return rounds * N / (time.perf_counter() - t)


async def agentbox_fresh(episodes: int) -> float:
    left = [episodes]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            env = await PythonSandboxEnv.acquire()
            try:
                out = ""
                for code in STEPS:
                    out = await env.step(code)
                assert out == WANT, out
            finally:
                await env.aclose()

    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(N)))
    return episodes / (time.perf_counter() - t)


# --- docker -------------------------------------------------------------

async def run(*args: str) -> str:
    p = await asyncio.create_subprocess_exec(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])}: {err.decode().strip()}")
    return out.decode()


class DockerEnv:
    """The seed's approach: a container, a Python REPL in it over docker exec."""

    def __init__(self) -> None:
        self.cid = ""
        self.repl: Optional[asyncio.subprocess.Process] = None

    async def start(self) -> None:
        self.cid = (await run("docker", "run", "-d", "--rm", *LIMITS, IMAGE, "sleep", "infinity")).strip()
        await self._interpreter()

    async def _interpreter(self) -> None:
        self.repl = await asyncio.create_subprocess_exec(
            "docker", "exec", "-i", self.cid, "python3", "-u", "-c", REPL,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    async def step(self, code: str) -> str:
        assert self.repl and self.repl.stdin and self.repl.stdout
        self.repl.stdin.write((json.dumps(code) + "\n").encode())
        await self.repl.stdin.drain()
        return json.loads(await self.repl.stdout.readline())

    async def _stop_interpreter(self) -> None:
        if self.repl:
            self.repl.kill()
            await self.repl.wait()
            self.repl = None
            # docker exec's process in the container may outlive the client: end it.
            await run("docker", "exec", self.cid, "sh", "-c", "pkill -f '^python3 -u -c' || true")

    async def reset(self) -> None:
        await self._stop_interpreter()
        await self._interpreter()

    async def close(self) -> None:
        if self.repl:
            self.repl.kill()
            await self.repl.wait()
        if self.cid:
            await run("docker", "rm", "-f", self.cid)


async def docker_steady(rounds: int) -> float:
    envs = [DockerEnv() for _ in range(N)]
    try:
        await asyncio.gather(*(e.start() for e in envs))
        await asyncio.gather(*(e.reset() for e in envs))
        t = time.perf_counter()
        for _ in range(rounds):
            outs: List[str] = []
            for code in STEPS:
                outs = await asyncio.gather(*(e.step(code) for e in envs))
            assert outs == [WANT] * N, outs
            await asyncio.gather(*(e.reset() for e in envs))
        return rounds * N / (time.perf_counter() - t)
    finally:
        await asyncio.gather(*(e.close() for e in envs), return_exceptions=True)


async def docker_fresh(episodes: int) -> float:
    left = [episodes]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            env = DockerEnv()
            try:
                await env.start()
                out = ""
                for code in STEPS:
                    out = await env.step(code)
                assert out == WANT, out
            finally:
                await env.close()

    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(N)))
    return episodes / (time.perf_counter() - t)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10, help="steady rounds (16 episodes each)")
    ap.add_argument("--fresh", type=int, default=48, help="episodes of the fresh form")
    ap.add_argument("--no-docker", action="store_true")
    a = ap.parse_args()
    have_docker = not a.no_docker and subprocess.run(["docker", "image", "inspect", IMAGE],
                                                     capture_output=True).returncode == 0
    if not a.no_docker and not have_docker:
        print(f"docker or the image {IMAGE} is missing: build it with "
              "`go test -run XXX -bench BenchmarkDocker ./internal/bench/` or scripts/start-docker.sh + "
              "`tar -c usr bin sbin lib lib64 etc/ld.so.cache etc/alternatives | docker import - " + IMAGE + "`",
              file=sys.stderr)
    rows = [("agentbox EnvPool(16), steady (3 steps + reset)", await agentbox_steady(a.rounds))]
    if have_docker:
        rows.append(("docker run + docker exec x16, steady (3 steps + reset)", await docker_steady(a.rounds)))
    rows.append(("agentbox, fresh env per episode (start + 3 steps + close)", await agentbox_fresh(a.fresh)))
    if have_docker:
        rows.append(("docker, fresh container per episode (run + 3 execs + rm)", await docker_fresh(a.fresh)))
    print(f"{'loop':<62} episodes/s")
    for name, eps in rows:
        print(f"{name:<62} {eps:10.1f}")


if __name__ == "__main__":
    asyncio.run(main())
