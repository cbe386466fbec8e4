"""Volumes, snapshots and fork, sync and asyncio, against a real daemon."""

from __future__ import annotations

import os
import time

import pytest

import agentbox
from agentbox import AsyncSandbox, AsyncVolumes, Sandbox, Templates, VolumeMount, Volumes

pytestmark = pytest.mark.live


def _name(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{time.monotonic_ns() % 10**9}"


def test_volume_content_mounts_and_tenancy() -> None:
    name = _name("pyvol")
    other = os.environ["AGENTBOX_OTHER_API_KEY"]
    with Volumes() as vols:
        v = vols.create(name, size="64M")
        assert (v.name, v.kind, v.size) == (name, "local", 64 << 20)
        try:
            # Content without a sandbox.
            vols.make_dir(name, "/in")
            e = vols.write(name, "/in/x.txt", "hello")
            assert (e.type, e.size) == ("file", 5)
            assert vols.read(name, "/in/x.txt") == "hello"
            assert vols.read(name, "/in/x.txt", format="bytes") == b"hello"
            assert vols.stat(name, "/in").type == "dir"
            assert [x.name for x in vols.list_dir(name, "/in")] == ["x.txt"]
            assert vols.exists(name, "/in/none") is False
            assert name in {x.name for x in vols.list()}

            # Mounted into two sandboxes: a write in one is read in the other.
            mount = [VolumeMount(name, "/mnt/v")]
            with Sandbox.create(volumes=mount) as a, Sandbox.create(volumes=[{"name": name, "path": "/mnt/v", "read_only": True}]) as ro:
                assert a.commands.run("cat /mnt/v/in/x.txt").stdout == "hello"
                a.commands.run("echo from-a > /mnt/v/a.txt")
                assert ro.commands.run("cat /mnt/v/a.txt").stdout == "from-a\n"
                assert ro.commands.run("echo no > /mnt/v/ro.txt").exit_code != 0
                assert vols.read(name, "/a.txt") == "from-a\n"
                got = vols.get(name)
                assert set(got.mounted_by) == {a.id, ro.id} and got.used is not None
                # Refused while mounted; nothing lost.
                with pytest.raises(agentbox.ConflictError):
                    vols.delete(name)
                assert vols.read(name, "/a.txt") == "from-a\n"

                # A fork carries the mount and the disk.
                a.files.write("/workspace/f", "disk")
                forks = a.fork(2, timeout=120)
                try:
                    assert len(forks) == 2 and len({f.id for f in forks} | {a.id}) == 3
                    for f in forks:
                        assert f.files.read("/workspace/f") == "disk"
                        assert f.commands.run("cat /mnt/v/a.txt").stdout == "from-a\n"
                    forks[0].files.write("/workspace/f", "changed")
                    assert forks[1].files.read("/workspace/f") == "disk"
                    assert a.files.read("/workspace/f") == "disk" and a.is_running()
                finally:
                    for f in forks:
                        f.kill()
                        f.close()

            # Another tenant sees nothing.
            with Volumes(api_key=other) as theirs:
                assert name not in {x.name for x in theirs.list()}
                with pytest.raises(agentbox.NotFoundError):
                    theirs.get(name)
                with pytest.raises(agentbox.NotFoundError):
                    theirs.read(name, "/a.txt")
                with pytest.raises(agentbox.NotFoundError):
                    theirs.delete(name)
            with pytest.raises(agentbox.AgentboxError):
                Sandbox.create(volumes=mount, api_key=other)
            with pytest.raises(agentbox.InvalidArgumentError):
                vols.get("../x")

            vols.remove(name, "/in")
            assert vols.exists(name, "/in") is False
        finally:
            vols.delete(name, force=True)
        with pytest.raises(agentbox.NotFoundError):
            vols.get(name)


def test_fork_bad_count_and_tenancy(sbx: Sandbox) -> None:
    with pytest.raises(agentbox.InvalidArgumentError):
        sbx.fork(0)
    with pytest.raises(agentbox.InvalidArgumentError):
        sbx.fork(1000)
    # Another tenant's key cannot fork it (its connection is refused first:
    # the sandbox is unknown to them).
    other = os.environ["AGENTBOX_OTHER_API_KEY"]
    with pytest.raises(agentbox.NotFoundError):
        Sandbox.connect(sbx.id, api_key=other)
    base = agentbox.ConnectionConfig.resolve().url
    import httpx

    r = httpx.post(f"{base}/v1/sandboxes/{sbx.id}/fork", json={"count": 1},
                   headers={"Authorization": f"Bearer {other}"})
    assert r.status_code == 404


def test_snapshots_listed_only_for_their_owner() -> None:
    # The suite's daemon runs the host template, which has no layer to
    # snapshot (test_snapshot_of_host_template_is_refused): what is listed
    # is the caller's snapshots alone, none here.
    with Templates() as t:
        assert all(x.is_snapshot for x in t.snapshots())
        assert t.snapshots(sandbox_id="sb-none") == []


@pytest.mark.asyncio
async def test_async_volumes_and_fork() -> None:
    name = _name("pyavol")
    async with AsyncVolumes() as vols:
        await vols.create(name)
        try:
            await vols.write(name, "/x", b"\x00\x01")
            assert await vols.read(name, "/x", format="bytes") == b"\x00\x01"
            assert (await vols.stat(name, "/x")).size == 2
            async with AsyncSandbox.create(volumes=[VolumeMount(name, "/mnt/a")]) as sbx:
                assert (await sbx.commands.run("wc -c < /mnt/a/x")).stdout.strip() == "2"
                forks = await sbx.fork(1, timeout=60)
                try:
                    assert (await forks[0].commands.run("wc -c < /mnt/a/x")).stdout.strip() == "2"
                finally:
                    await forks[0].kill()
                    await forks[0].close()
        finally:
            await vols.delete(name, force=True)
        assert name not in {v.name for v in await vols.list()}
