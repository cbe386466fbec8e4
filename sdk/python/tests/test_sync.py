"""The sync API against a real daemon, method by method."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import time
from typing import List

import httpx
import pytest

import agentbox
from agentbox import Sandbox, Templates

pytestmark = pytest.mark.live


def _eventually(fn, what: str, seconds: float = 20.0):  # type: ignore[no-untyped-def]
    """Polls fn until it returns a true value (bounded in time and count)."""
    deadline = time.monotonic() + seconds
    for _ in range(10000):
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


# --- lifecycle ---------------------------------------------------------

def test_create_context_manager_destroys() -> None:
    with Sandbox.create(metadata={"suite": "sync-cm"}, env={"GREETING": "hi"}) as sbx:
        sid = sbx.id
        assert sbx.info.state == "running" and sbx.access_token
        assert sbx.info.metadata == {"suite": "sync-cm"}
        assert sbx.commands.run("echo $GREETING").stdout == "hi\n"
        listed = Sandbox.list(metadata={"suite": "sync-cm"})
        assert [s.id for s in listed] == [sid]
        same = Sandbox.connect(sid)
        assert same.get_info().id == sid and same.is_running()
        same.close()
    with pytest.raises(agentbox.NotFoundError):
        Sandbox.connect(sid)
    assert Sandbox.list(metadata={"suite": "sync-cm"}) == []


def test_kill_twice(sbx: Sandbox) -> None:
    assert sbx.kill() is True
    assert sbx.kill() is False
    assert sbx.is_running() is False


def test_list_limit_and_state() -> None:
    a = Sandbox.create(metadata={"suite": "list"})
    b = Sandbox.create(metadata={"suite": "list"})
    try:
        assert len(Sandbox.list(metadata={"suite": "list"}, limit=1)) == 1
        both = Sandbox.list(metadata={"suite": "list"}, state="running")
        assert {s.id for s in both} == {a.id, b.id}
        assert Sandbox.list(metadata={"suite": "list"}, state=["stopped"]) == []
    finally:
        a.kill(), b.kill(), a.close(), b.close()


def test_server_info() -> None:
    info = Sandbox.server_info()
    assert info.backend == "native" and info.version and "base" in info.templates


def test_timeout_and_refresh(sbx: Sandbox) -> None:
    first = sbx.info.end_at
    assert first is not None
    shorter = sbx.set_timeout(60)
    assert shorter.end_at is not None and shorter.end_at < first
    longer = sbx.refresh(600)
    assert longer.end_at is not None and longer.end_at > shorter.end_at
    # refresh never shortens
    assert sbx.refresh(10).end_at == longer.end_at
    with pytest.raises(agentbox.InvalidArgumentError):
        sbx.set_timeout(0)


def test_stop_and_start_keep_files(sbx: Sandbox) -> None:
    sbx.files.write("/workspace/keep.txt", "kept")
    assert sbx.stop().state == "stopped"
    with pytest.raises(agentbox.ConflictError):
        sbx.commands.run("true")
    assert sbx.start().state == "running"
    assert sbx.files.read("/workspace/keep.txt") == "kept"


def test_pause_resume(sbx: Sandbox) -> None:
    """Pause and resume where the server has them (capability "pause"); on a
    server without them, the SDK surfaces the server's refusal as its class."""
    caps = Sandbox.server_info().capabilities
    if caps.get("pause"):
        sbx.run_code("kept = 41")
        paused = sbx.pause()
        assert paused.state == "paused" and paused.remaining_seconds and paused.remaining_seconds > 0
        assert paused.paused_at is not None
        with pytest.raises(agentbox.ConflictError):
            sbx.commands.run("true")
        assert sbx.pause().state == "paused"  # pausing again returns it unchanged
        resumed = sbx.resume()
        assert resumed.state == "running" and resumed.remaining_seconds is None
        assert sbx.run_code("kept + 1").text == "42"  # the interpreter survived
        sbx.pause()
        assert sbx.resume(timeout=120).state == "running"
    else:
        with pytest.raises((agentbox.NotFoundError, agentbox.UnavailableError)) as ei:
            sbx.pause()
        assert ei.value.status in (404, 503)
        with pytest.raises((agentbox.NotFoundError, agentbox.UnavailableError)):
            sbx.resume(60)
        assert sbx.get_info().state == "running"


def test_auto_pause() -> None:
    if not Sandbox.server_info().capabilities.get("pause"):
        pytest.skip("the server cannot pause sandboxes (capability pause is false)")
    with Sandbox.create(timeout=2, auto_pause=True) as sbx:
        assert sbx.info.auto_pause
        sbx.files.write("/workspace/f", "still here")
        _eventually(lambda: sbx.get_info().state == "paused", "the sandbox to pause at its timeout", 60)
        assert sbx.resume(timeout=60).state == "running"
        assert sbx.files.read("/workspace/f") == "still here"


def test_snapshot_of_host_template_is_refused(sbx: Sandbox) -> None:
    with pytest.raises(agentbox.InvalidArgumentError):
        sbx.snapshot("py-snap")


def test_stats_and_logs(sbx: Sandbox) -> None:
    st = sbx.stats()
    assert st.pids_limit == 256 and st.memory_limit and st.memory_limit > 0
    logs = sbx.logs(limit=50)
    assert logs and all(isinstance(e, agentbox.LogEntry) and e.message for e in logs)


def test_resources_and_bad_input() -> None:
    with Sandbox.create(memory="256M", cpus=0.5, pids=64) as sbx:
        r = sbx.info.resources
        assert (r.memory, r.cpus, r.pids) == (256 << 20, 0.5, 64)
        assert sbx.info.from_pool is False
    with pytest.raises(agentbox.InvalidArgumentError) as ei:
        Sandbox.create(memory="lots")
    assert "lots" in ei.value.message and ei.value.status == 400
    with pytest.raises(agentbox.InvalidArgumentError) as ei:
        Sandbox.create(cpus=-1)
    assert ei.value.field == "resources.cpus"
    with pytest.raises(agentbox.InvalidArgumentError):
        Sandbox.create(template="dir:/etc")


def test_network_policy() -> None:
    with Sandbox.create() as sbx:
        assert sbx.info.network.mode == "none"
        with pytest.raises(agentbox.ConflictError):
            sbx.update_network(allow_out=["10.0.0.0/8"])
        # Isolated: loopback only.
        out = sbx.commands.run("ls /sys/class/net").stdout.split()
        assert out == ["lo"]
    with Sandbox.create(network=agentbox.NetworkPolicy(mode="egress", deny_out=["10.0.0.0/8"])) as sbx:
        assert sbx.info.network.mode == "egress" and sbx.info.network.deny_out == ["10.0.0.0/8"]
        info = sbx.update_network(allow_out=["192.0.2.0/24"])
        assert info.network.allow_out == ["192.0.2.0/24"] and info.network.deny_out == []
        assert sbx.get_info().network.allow_out == ["192.0.2.0/24"]


def test_secrets_and_rules() -> None:
    """Secrets are written, listed and deleted, never read back; rules bind
    them to hosts, on create and at run time; another tenant sees and binds
    none of them."""
    name = "PYSDK_" + os.urandom(4).hex().upper()
    value = "py-secret-" + os.urandom(8).hex()
    other = os.environ.get("AGENTBOX_OTHER_API_KEY")
    assert other, "the suite needs a second tenant's key"
    with agentbox.Secrets() as secrets:
        s = secrets.create(name, value)
        try:
            assert s.name == name and s.version == 1 and s.id.startswith("sec_") and s.placeholder.startswith("agentbox-secret-")
            assert value not in repr(s)
            got = secrets.get(name)
            assert (got.id, got.placeholder) == (s.id, s.placeholder)
            assert name in {x.name for x in secrets.list()}
            rotated = secrets.update(name, value + "-2")
            assert rotated.version == 2 and rotated.placeholder == s.placeholder and rotated.id == s.id
            with pytest.raises(agentbox.NotFoundError):
                secrets.update(name + "_NONE", "v")
            with pytest.raises(agentbox.InvalidArgumentError):
                secrets.put("bad name", "v")
            with agentbox.Secrets(api_key=other) as bob:
                assert name not in {x.name for x in bob.list()}
                with pytest.raises(agentbox.NotFoundError):
                    bob.get(name)
                assert bob.delete(name) is False
            rule = agentbox.EgressRule(host="api.example.com", headers={"Authorization": "Bearer ${secret:%s}" % name},
                                       methods=["POST"], paths=["/v1/"], secrets=[name])
            policy = agentbox.NetworkPolicy(mode="egress", allow_out=["api.example.com"], rules=[rule])
            # Bob cannot bind Alice's secret.
            with pytest.raises(agentbox.InvalidArgumentError):
                Sandbox.create(network=policy, api_key=other)
            with Sandbox.create(network=policy, env={"TOKEN": s.placeholder}) as sbx:
                assert sbx.info.network.rules == [rule]
                out = sbx.commands.run("env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'").stdout
                assert s.placeholder in out and value not in out
                # At run time: rules replaced, then the internet cut off.
                other_rule = {"host": "*.example.org", "headers": {"X-Key": "${secret:%s}" % name}}
                info = sbx.update_network(deny_out=["192.0.2.0/24"], rules=[other_rule])
                assert info.network.deny_out == ["192.0.2.0/24"]
                assert info.network.rules == [agentbox.EgressRule(host="*.example.org", headers=other_rule["headers"])]
                info = sbx.update_network(internet=False)
                assert info.network.deny_out == ["0.0.0.0/0"] and info.network.rules == []
                assert sbx.get_info().network.deny_out == ["0.0.0.0/0"]
                info = sbx.update_network(allow_out=["api.example.com"], internet=False, rules=[rule])
                assert info.network.allow_out == ["api.example.com"] and info.network.deny_out == []
                # A rule naming a secret one does not have is refused.
                with pytest.raises(agentbox.InvalidArgumentError):
                    sbx.update_network(rules=[{"host": "a.example.com", "headers": {"A": "${secret:NO_SUCH_SECRET}"}}])
                assert sbx.get_info().network.rules == [rule]
        finally:
            assert secrets.delete(name) is True
        assert secrets.delete(name) is False
        with pytest.raises(agentbox.NotFoundError):
            secrets.get(name)


def test_auth_and_tenants(sbx: Sandbox) -> None:
    with pytest.raises(agentbox.UnauthenticatedError):
        Sandbox.list(api_key="wrong-key")
    other = os.environ.get("AGENTBOX_OTHER_API_KEY")
    assert other, "the suite needs a second tenant's key"
    with pytest.raises(agentbox.NotFoundError):
        Sandbox.connect(sbx.id, api_key=other)
    assert sbx.id not in {s.id for s in Sandbox.list(api_key=other)}
    # The streaming routes too: another tenant's key finds nothing, no key is refused.
    base = agentbox.ConnectionConfig.resolve().url
    for path in ("/files/watch", "/files"):
        r = httpx.get(f"{base}/v1/sandboxes/{sbx.id}{path}", params={"path": "/workspace"},
                      headers={"Authorization": f"Bearer {other}"})
        assert r.status_code == 404 and r.json()["code"] == "not_found"
        assert httpx.get(f"{base}/v1/sandboxes/{sbx.id}{path}", params={"path": "/workspace"}).status_code == 401


def test_unreachable_server() -> None:
    with pytest.raises(agentbox.TransportError):
        Sandbox.create(url="http://127.0.0.1:9", request_timeout=5)


# --- commands ----------------------------------------------------------

def test_commands_buffered(sbx: Sandbox) -> None:
    r = sbx.commands.run("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)
    with pytest.raises(agentbox.CommandExitError) as ei:
        sbx.commands.run(["false"], check=True)
    assert ei.value.result.exit_code == 1
    r = sbx.commands.run(["pwd"], cwd="/tmp", env={"A": "1"})
    assert r.stdout == "/tmp\n"
    assert sbx.commands.run(["sh", "-c", "echo $A"], env={"A": "x y"}).stdout == "x y\n"
    raw = bytes(range(256)) * 4
    r = sbx.commands.run(["base64", "-w0"], stdin=raw)
    assert base64.b64decode(r.stdout) == raw
    r = sbx.commands.run("sleep 30", timeout=1)
    assert r.timed_out and r.exit_code == -1


def test_commands_streaming(sbx: Sandbox) -> None:
    events = list(sbx.commands.stream("echo a; echo b >&2; exit 4"))
    assert events[0].type == "start" and events[0].pid
    assert events[-1].type == "exit" and events[-1].exit_code == 4
    assert [e.data for e in events if e.type == "stdout"] == ["a\n"]
    assert [e.data for e in events if e.type == "stderr"] == ["b\n"]
    out: List[str] = []
    err: List[str] = []
    r = sbx.commands.run("for i in 1 2 3; do echo $i; done; echo x >&2", on_stdout=out.append, on_stderr=err.append)
    assert "".join(out) == "1\n2\n3\n" == r.stdout and err == ["x\n"] and r.exit_code == 0


def test_leaving_a_stream_kills_the_command(sbx: Sandbox) -> None:
    gen = sbx.commands.stream(["sh", "-c", "echo started; exec sleep 1234"])
    for ev in gen:
        if ev.type == "stdout":
            break
    gen.close()

    def gone() -> bool:
        r = sbx.commands.run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        return "sleep 1234" not in r.stdout

    _eventually(gone, "the abandoned command to be killed")


# --- code --------------------------------------------------------------

def test_run_code_results_and_errors(sbx: Sandbox) -> None:
    ex = sbx.run_code("import math\nprint(math.pi)\nx = 6 * 7\nx")
    assert ex.stdout == f"{3.141592653589793}\n" and ex.text == "42" and ex.error is None
    assert ex.execution_count == 1
    ex = sbx.run_code("x + 1")
    assert ex.text == "43"
    ex = sbx.run_code("undefined_name")
    assert ex.error is not None and ex.error.name == "NameError" and "undefined_name" in ex.error.traceback
    html = sbx.run_code("class H:\n  def _repr_html_(self): return '<b>h</b>'\nH()")
    assert html.results[0].html == "<b>h</b>" and "html" in html.results[0].formats()
    shown = sbx.run_code("display(7)\n8")
    assert [(r.is_main_result, r.text) for r in shown.results] == [(False, "7"), (True, "8")]
    ex = sbx.run_code("import os\nprint(os.environ['V'])", env_vars={"V": "only-now"})
    assert ex.stdout == "only-now\n"
    ex = sbx.run_code("while True: pass", timeout=1)
    assert ex.error is not None and ex.error.name == "TimeoutError"
    assert sbx.run_code("x").text == "42"  # interrupted, state kept


def test_run_code_callbacks(sbx: Sandbox) -> None:
    seen: List[str] = []
    sbx.run_code(
        "import sys\nprint('o')\nprint('e', file=sys.stderr)\nraise ValueError('v')",
        on_stdout=lambda m: seen.append("out:" + m.line),
        on_stderr=lambda m: seen.append("err:" + m.line),
        on_result=lambda r: seen.append("res:" + str(r.text)),
        on_error=lambda e: seen.append("error:" + e.name),
    )
    # stdout and stderr are separate pipes: their relative order is not kept.
    assert sorted(seen[:2]) == ["err:e\n", "out:o\n"]
    assert seen[2:] == ["error:ValueError"]


def test_code_contexts(sbx: Sandbox) -> None:
    a = sbx.code.create_context("python")
    b = sbx.code.create_context("python", cwd="/tmp")
    assert a.id != b.id and b.cwd == "/tmp" and a.language == "python"
    sbx.code.run("v = 'a'", context=a)
    assert sbx.code.run("v * 2", context=a).text == "aa"
    assert sbx.code.run("v", context=b).error.name == "NameError"  # type: ignore[union-attr]
    assert sbx.code.run("import os; print(os.getcwd())", context=b).stdout == "/tmp\n"
    assert {a.id, b.id} <= {c.id for c in sbx.code.list_contexts()}
    sbx.code.restart_context(a)
    assert sbx.code.run("v", context=a).error.name == "NameError"  # type: ignore[union-attr]
    sbx.code.delete_context(b)
    assert b.id not in {c.id for c in sbx.code.list_contexts()}
    with pytest.raises(agentbox.NotFoundError):
        sbx.code.run("1", context=b)
    bash = sbx.code.create_context("bash")
    assert sbx.code.run("X=5", context=bash).error is None
    assert sbx.code.run("echo $X", context=bash).stdout == "5\n"
    assert sbx.run_code("echo hi", language="bash").stdout == "hi\n"


# --- files -------------------------------------------------------------

def test_files(sbx: Sandbox, tmp_path: "os.PathLike[str]") -> None:
    e = sbx.files.write("/workspace/dir/a.txt", "héllo")
    assert e.type == "file" and e.path == "/workspace/dir/a.txt" and e.size == len("héllo".encode())
    assert sbx.files.read("/workspace/dir/a.txt") == "héllo"
    sbx.files.write("rel.bin", b"\x00\xff")
    assert sbx.files.read("rel.bin", format="bytes") == b"\x00\xff" == sbx.files.read_bytes("rel.bin")
    assert sbx.files.get_info("rel.bin").path == "/home/user/rel.bin"
    d = sbx.files.make_dir("/workspace/dir/sub")
    assert d.type == "dir"
    names = {x.name: x.type for x in sbx.files.list("/workspace/dir")}
    assert names == {"a.txt": "file", "sub": "dir"}
    deep = {x.path for x in sbx.files.list("/workspace", depth=2)}
    assert "/workspace/dir/a.txt" in deep
    moved = sbx.files.rename("/workspace/dir/a.txt", "/workspace/b.txt")
    assert moved.path == "/workspace/b.txt" and not sbx.files.exists("/workspace/dir/a.txt")
    assert sbx.files.exists("/workspace/b.txt")
    sbx.files.remove("/workspace/dir")
    assert not sbx.files.exists("/workspace/dir/sub")
    with pytest.raises(agentbox.NotFoundError):
        sbx.files.read("/workspace/missing")
    with pytest.raises(agentbox.AgentboxError):
        sbx.files.write("/usr/bin/evil", "x")  # read-only root
    # Streams: 3 MiB each way, from a file object and an iterator.
    blob = os.urandom(3 << 20)
    sbx.files.upload("/workspace/blob", io.BytesIO(blob))
    local = os.path.join(str(tmp_path), "blob")
    assert sbx.files.download("/workspace/blob", local) == len(blob)
    with open(local, "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(blob).digest()
    sbx.files.upload("/workspace/blob2", local)
    assert b"".join(sbx.files.iter_bytes("/workspace/blob2")) == blob
    sbx.files.write("/workspace/parts", (bytes([i]) * 1000 for i in range(5)))
    assert sbx.files.read_bytes("/workspace/parts") == b"".join(bytes([i]) * 1000 for i in range(5))
    buf = io.BytesIO()
    sbx.files.download("/workspace/parts", buf)
    assert len(buf.getvalue()) == 5000


def test_watch_dir(sbx: Sandbox) -> None:
    sbx.files.make_dir("/workspace/w/sub")
    with sbx.files.watch_dir("/workspace/w") as watch:
        sbx.files.write("/workspace/w/new.txt", "1")
        sbx.files.write("/workspace/w/sub/deep.txt", "2")  # not reported: not recursive
        sbx.files.remove("/workspace/w/new.txt")
        seen = []
        for ev in watch:
            seen.append((ev.type, ev.name))
            if ev.type == "remove":
                break
        assert ("create", "new.txt") in seen and seen[-1] == ("remove", "new.txt")
        assert all(name != "sub/deep.txt" and name != "deep.txt" for _, name in seen)
    assert watch.closed
    with sbx.files.watch_dir("/workspace/w", recursive=True) as watch:
        sbx.files.write("/workspace/w/sub/deeper.txt", "3")
        for ev in watch:
            if ev.type in ("create", "write") and ev.name.endswith("deeper.txt"):
                assert ev.entry is None or ev.entry.path == "/workspace/w/sub/deeper.txt"
                break
    with pytest.raises(agentbox.NotFoundError):
        sbx.files.watch_dir("/workspace/no-such-dir")


def test_watches_per_user_are_capped(sbx: Sandbox) -> None:
    """A user holds at most 32 watch streams at once; closing one frees its slot."""
    with httpx.Client(limits=httpx.Limits(max_connections=64)) as client:
        own = Sandbox.connect(sbx.id, http_client=client)
        handles = []
        try:
            for _ in range(32):
                handles.append(own.files.watch_dir("/workspace"))
            with pytest.raises(agentbox.QuotaExceededError):
                own.files.watch_dir("/workspace")
            handles.pop().close()
            # The server frees the slot once it sees the connection gone.
            h = None
            for _ in range(100):
                try:
                    h = own.files.watch_dir("/workspace")
                    break
                except agentbox.QuotaExceededError:
                    time.sleep(0.1)
            assert h is not None, "a closed watch's slot was not freed"
            handles.append(h)
        finally:
            for h in handles:
                h.close()


# --- pty ---------------------------------------------------------------

def test_pty(sbx: Sandbox) -> None:
    with sbx.pty.connect(cols=100, rows=30) as term:
        term.send("stty size; echo marker-$((6*7))\n")
        out = term.read_until("marker-42", timeout=20)
        assert b"30 100" in out
        term.resize(120, 40)
        term.send("stty size\n")
        assert b"40 120" in term.read_until("40 120", timeout=20)
        term.send("exit 5\n")
        assert term.wait(20) == 5
    with sbx.pty.connect(cmd="echo one-shot; exit 2") as term:
        assert term.wait(20) == 2
    with pytest.raises(agentbox.InvalidArgumentError):
        sbx.pty.connect(cols=0)
    with pytest.raises(agentbox.NotFoundError):
        Sandbox(sbx.info.__class__(**{**sbx.info.__dict__, "id": "nosuchsandbox"}), sbx._t).pty.connect()


# --- previews and templates --------------------------------------------

SERVER = """
import threading, http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ('preview:' + self.path).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(('127.0.0.1', 8080), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
"""


def test_preview(sbx: Sandbox) -> None:
    assert sbx.run_code(SERVER).error is None
    url = sbx.preview_url(8080, "/hello?q=1")
    assert url.endswith(f"/v1/sandboxes/{sbx.id}/ports/8080/hello?q=1")
    r = httpx.get(url, headers={"X-Access-Token": sbx.access_token})
    assert r.status_code == 200 and r.text == "preview:/hello?q=1"
    assert httpx.get(url).status_code == 401
    tok = sbx.create_preview_token(8080, ttl=60)
    assert tok.token and tok.expires_at is not None
    base = agentbox.ConnectionConfig.resolve().url
    r = httpx.get(base + tok.path)
    assert r.status_code == 200 and r.text.startswith("preview:/")
    with pytest.raises(agentbox.InvalidArgumentError):
        sbx.preview_url(0)


def test_templates() -> None:
    with Templates() as t:
        names = {x.ref for x in t.list()}
        assert "host:latest" in names
        host = t.get("host")
        assert host.kind == "host" and host.name == "host"
        with pytest.raises(agentbox.NotFoundError):
            t.get("no-such-template")
        # Deleting is the operator's (TEMPLATE_ADMIN_USERS, the suite's first key).
        with pytest.raises(agentbox.NotFoundError):
            t.delete("no-such-template")
    other = os.environ.get("AGENTBOX_OTHER_API_KEY")
    with Templates(api_key=other) as t:
        assert "host" in {x.name for x in t.list()}
        with pytest.raises(agentbox.PermissionDeniedError):
            t.delete("host")
