"""The asyncio API against a real daemon: the same shape as the sync one."""

from __future__ import annotations

import asyncio
import io
import os
from typing import List

import pytest

import agentbox
from agentbox import AsyncSandbox, AsyncTemplates

pytestmark = [pytest.mark.live, pytest.mark.asyncio]


async def test_create_awaited_and_as_context_manager() -> None:
    sbx = await AsyncSandbox.create(metadata={"suite": "async"})
    try:
        async with AsyncSandbox.create(metadata={"suite": "async"}) as other:
            listed = await AsyncSandbox.list(metadata={"suite": "async"})
            assert {s.id for s in listed} == {sbx.id, other.id}
            gone = other.id
        with pytest.raises(agentbox.NotFoundError):
            await AsyncSandbox.connect(gone)
        same = await AsyncSandbox.connect(sbx.id)
        assert (await same.get_info()).id == sbx.id and await same.is_running()
        await same.close()
    finally:
        assert await sbx.kill() is True
        assert await sbx.kill() is False
        await sbx.close()
    info = await AsyncSandbox.server_info()
    assert info.backend == "native"


async def test_lifecycle_calls(asbx: AsyncSandbox) -> None:
    first = asbx.info.end_at
    assert first is not None
    assert (await asbx.set_timeout(60)).end_at < first  # type: ignore[operator]
    assert (await asbx.refresh(600)).end_at > first  # type: ignore[operator]
    st = await asbx.stats()
    assert st.pids_limit == 256
    assert await asbx.logs(limit=10)
    assert (await asbx.stop()).state == "stopped"
    assert (await asbx.start()).state == "running"
    if (await AsyncSandbox.server_info()).capabilities.get("pause"):
        assert (await asbx.pause()).state == "paused"
        with pytest.raises(agentbox.ConflictError):
            await asbx.files.read("/etc/hostname")
        assert (await asbx.resume()).state == "running"
    else:
        with pytest.raises((agentbox.NotFoundError, agentbox.UnavailableError)):
            await asbx.pause()
        with pytest.raises((agentbox.NotFoundError, agentbox.UnavailableError)):
            await asbx.resume()
    with pytest.raises(agentbox.InvalidArgumentError):
        await asbx.snapshot("x")
    with pytest.raises(agentbox.ConflictError):
        await asbx.update_network(allow_out=["10.0.0.0/8"])
    tok = await asbx.create_preview_token(8080)
    assert tok.token and asbx.preview_url(8080).endswith("/ports/8080/")


async def test_commands(asbx: AsyncSandbox) -> None:
    r = await asbx.commands.run("echo out; exit 3")
    assert (r.exit_code, r.stdout) == (3, "out\n")
    with pytest.raises(agentbox.CommandExitError):
        await asbx.commands.run("exit 1", check=True)
    assert (await asbx.commands.run(["cat"], stdin="in")).stdout == "in"
    events = [ev async for ev in asbx.commands.stream("echo a; echo b >&2")]
    assert [e.type for e in events][0] == "start" and events[-1].type == "exit"
    got: List[str] = []

    async def on_out(s: str) -> None:  # async callbacks are awaited
        await asyncio.sleep(0)
        got.append(s)

    r = await asbx.commands.run("echo 1; echo 2", on_stdout=on_out, on_stderr=got.append)
    assert "".join(got) == "1\n2\n" == r.stdout


async def test_busy_refusals_are_retried(asbx: AsyncSandbox) -> None:
    """More heavy requests than the server admits per user (MAX_REQUESTS_PER_USER,
    16 by default) at once: the refused ones (429 + Retry-After, nothing ran)
    are retried and every command runs."""
    import httpx

    statuses: List[int] = []

    async def record(resp: httpx.Response) -> None:
        statuses.append(resp.status_code)

    async with httpx.AsyncClient(event_hooks={"response": [record]}) as client:
        sbx = await AsyncSandbox.connect(asbx.id, http_client=client)
        results = await asyncio.gather(*(sbx.commands.run(f"sleep 2; echo {i}") for i in range(24)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(24)]
    assert 429 in statuses, "expected the server to refuse some of 24 concurrent commands"


async def test_code(asbx: AsyncSandbox) -> None:
    results: List[str] = []
    ex = await asbx.run_code("import math\nprint(math.pi)\n[1, 2]", on_result=lambda r: results.append(r.text))
    assert ex.stdout.startswith("3.14159") and ex.text == "[1, 2]" and results == ["[1, 2]"]
    ctx = await asbx.code.create_context("python")
    await asbx.code.run("y = 5", context=ctx)
    assert (await asbx.code.run("y", context=ctx.id)).text == "5"
    assert ctx.id in {c.id for c in await asbx.code.list_contexts()}
    await asbx.code.restart_context(ctx)
    assert (await asbx.code.run("y", context=ctx)).error.name == "NameError"  # type: ignore[union-attr]
    await asbx.code.delete_context(ctx)
    with pytest.raises(agentbox.NotFoundError):
        await asbx.code.run("1", context=ctx)


async def test_files(asbx: AsyncSandbox, tmp_path: "os.PathLike[str]") -> None:
    await asbx.files.write("/workspace/t.txt", "text")
    assert await asbx.files.read("/workspace/t.txt") == "text"
    assert await asbx.files.read_bytes("/workspace/t.txt") == b"text"
    assert (await asbx.files.make_dir("/workspace/d")).type == "dir"
    assert {e.name for e in await asbx.files.list("/workspace")} >= {"t.txt", "d"}
    assert (await asbx.files.get_info("/workspace/t.txt")).size == 4
    await asbx.files.rename("/workspace/t.txt", "/workspace/d/u.txt")
    assert await asbx.files.exists("/workspace/d/u.txt") and not await asbx.files.exists("/workspace/t.txt")
    await asbx.files.remove("/workspace/d")
    assert not await asbx.files.exists("/workspace/d")
    blob = os.urandom(1 << 20)
    await asbx.files.upload("/workspace/blob", io.BytesIO(blob))
    local = os.path.join(str(tmp_path), "b")
    assert await asbx.files.download("/workspace/blob", local) == len(blob)
    await asbx.files.upload("/workspace/blob2", local)
    assert b"".join([c async for c in asbx.files.iter_bytes("/workspace/blob2")]) == blob

    async def parts():  # type: ignore[no-untyped-def]
        for i in range(3):
            yield bytes([65 + i]) * 10

    await asbx.files.write("/workspace/p", parts())
    assert await asbx.files.read("/workspace/p") == "A" * 10 + "B" * 10 + "C" * 10
    with pytest.raises(agentbox.NotFoundError):
        await asbx.files.read("/workspace/none")


async def test_watch_dir(asbx: AsyncSandbox) -> None:
    async with await asbx.files.watch_dir("/workspace") as watch:
        await asbx.files.write("/workspace/seen.txt", "x")
        async for ev in watch:
            if ev.name == "seen.txt":
                assert ev.type in ("create", "write")
                break
    with pytest.raises(agentbox.NotFoundError):
        await asbx.files.watch_dir("/workspace/none")


async def test_pty(asbx: AsyncSandbox) -> None:
    async with await asbx.pty.connect(cols=90, rows=20) as term:
        await term.send(b"stty size; echo done-$((1+1))\n")
        out = await term.read_until("done-2", timeout=20)
        assert b"20 90" in out
        await term.resize(70, 10)
        await term.send("stty size\n")
        await term.read_until("10 70", timeout=20)
        await term.send("exit 7\n")
        assert await term.wait(20) == 7


async def test_templates() -> None:
    async with AsyncTemplates() as t:
        assert "host" in {x.name for x in await t.list()}
        assert (await t.get("host")).kind == "host"
        with pytest.raises(agentbox.NotFoundError):
            await t.get("nope-nope")
        with pytest.raises(agentbox.NotFoundError):
            await t.delete("nope-nope")


async def test_secrets_and_network_update() -> None:
    name = "PYASYNC_" + os.urandom(4).hex().upper()
    async with agentbox.AsyncSecrets() as secrets:
        s = await secrets.put(name, "async-" + os.urandom(8).hex())
        try:
            assert s.version == 1 and name in {x.name for x in await secrets.list()}
            assert (await secrets.update(name, "async-rotated")).version == 2
            async with AsyncSandbox.create(network="egress") as sbx:
                rule = agentbox.EgressRule(host="api.example.com", headers={"Authorization": "Bearer ${secret:%s}" % name})
                info = await sbx.update_network(allow_out=["api.example.com"], rules=[rule])
                assert info.network.rules == [rule] and info.network.allow_out == ["api.example.com"]
                info = await sbx.update_network(internet=False)
                assert info.network.deny_out == ["0.0.0.0/0"] and info.network.rules == []
        finally:
            assert await secrets.delete(name) is True
        with pytest.raises(agentbox.NotFoundError):
            await secrets.get(name)
