#!/usr/bin/python3
"""The worked RL-style loop of docs/python.md: many episodes, each in a clean
interpreter, a fresh sandbox every 50 episodes, 16 environments at once.

Usage: AGENTBOX_URL=... /usr/bin/python3 examples/rl_loop.py [episodes]
"""

import asyncio
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from agentbox.envs import EnvPool  # noqa: E402

TASKS = [(a, b) for a in range(10) for b in range(10)]


async def main(episodes: int = 320) -> None:
    async with EnvPool(16, max_episodes=50, step_timeout=5) as pool:
        done, reward, t = 0, 0.0, time.perf_counter()
        while done < episodes:
            tasks = [random.choice(TASKS) for _ in pool.envs]
            await pool.step([f"a, b = {a}, {b}" for a, b in tasks])  # the observation
            await pool.step("def solve(a, b):\n    return a * b")  # the policy's action
            outs = await pool.step("print(solve(a, b))")
            reward += sum(o.strip() == str(a * b) for o, (a, b) in zip(outs, tasks))
            await pool.reset()  # next episode: clean
            done += len(pool)
        print(f"{done} episodes, mean reward {reward / done:.2f}, "
              f"{done / (time.perf_counter() - t):.1f} episodes/s")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 320))
