"""Checks that need no server: configuration, error mapping, request bodies."""

from __future__ import annotations

import json

import pytest

import agentbox
from agentbox import _base
from agentbox.errors import error_from_response


def test_config_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBOX_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("AGENTBOX_API_KEY", "k1")
    c = agentbox.ConnectionConfig.resolve()
    assert (c.url, c.api_key) == ("http://127.0.0.1:9", "k1")
    assert c.headers()["Authorization"] == "Bearer k1"
    assert c.ws_url("/v1/x") == "ws://127.0.0.1:9/v1/x"
    # Arguments win over the environment.
    c = agentbox.ConnectionConfig.resolve("https://h:1", "k2")
    assert (c.url, c.api_key, c.ws_url("/p")) == ("https://h:1", "k2", "wss://h:1/p")
    monkeypatch.delenv("AGENTBOX_URL")
    monkeypatch.delenv("AGENTBOX_API_KEY")
    c = agentbox.ConnectionConfig.resolve()
    assert c.url == "http://127.0.0.1:8000" and c.api_key is None and "Authorization" not in c.headers()


@pytest.mark.parametrize("url", ["ftp://h", "127.0.0.1:8000", "http://"])
def test_config_refuses_bad_urls(url: str) -> None:
    with pytest.raises(agentbox.InvalidArgumentError):
        agentbox.ConnectionConfig.resolve(url)


def test_config_refuses_header_injection() -> None:
    with pytest.raises(agentbox.InvalidArgumentError):
        agentbox.ConnectionConfig.resolve("http://h", "k\r\nX-Evil: 1")


@pytest.mark.parametrize(
    "code,status,cls",
    [
        ("invalid_argument", 400, agentbox.InvalidArgumentError),
        ("not_found", 404, agentbox.NotFoundError),
        ("conflict", 409, agentbox.ConflictError),
        ("too_large", 413, agentbox.TooLargeError),
        ("quota_exceeded", 429, agentbox.QuotaExceededError),
        ("unauthenticated", 401, agentbox.UnauthenticatedError),
        ("permission_denied", 403, agentbox.PermissionDeniedError),
        ("deadline_exceeded", 504, agentbox.DeadlineExceededError),
        ("insufficient_space", 507, agentbox.InsufficientSpaceError),
        ("unavailable", 503, agentbox.UnavailableError),
        ("internal", 500, agentbox.InternalError),
    ],
)
def test_every_error_code_has_its_class(code: str, status: int, cls: type) -> None:
    body = json.dumps({"code": code, "message": "m", "field": "f", "request_id": "r"}).encode()
    err = error_from_response(status, body, {"retry-after": "3"})
    assert type(err) is cls and isinstance(err, agentbox.AgentboxError)
    assert (err.code, err.message, err.field, err.request_id, err.status) == (code, "m", "f", "r", status)
    if cls is agentbox.QuotaExceededError:
        assert err.retry_after == 3.0  # type: ignore[attr-defined]


def test_error_codes_match_the_api_spec() -> None:
    """Every code of api/openapi.yaml's Error enum has a class (the spec is the contract)."""
    import os
    import re

    spec = os.path.join(os.path.dirname(__file__), "..", "..", "..", "api", "openapi.yaml")
    with open(spec) as f:
        text = f.read()
    m = re.search(r"Error:\n\s+type: object\n\s+required: \[code, message\]\n.*?enum: \[([^\]]*)\]", text, re.S)
    assert m, "Error schema not found in the spec"
    codes = {c.strip() for c in m.group(1).replace("\n", " ").split(",")}
    from agentbox.errors import _BY_CODE

    assert codes == set(_BY_CODE)


def test_non_json_errors_map_by_status() -> None:
    err = error_from_response(404, b"<html>nope</html>", {"x-request-id": "abc"})
    assert isinstance(err, agentbox.NotFoundError) and "nope" in err.message and err.request_id == "abc"
    assert isinstance(error_from_response(502, b"", {}), agentbox.InternalError)


def test_exec_body_keeps_stdin_bytes() -> None:
    raw = bytes(range(256))
    body = _base.exec_body(["cat"], None, None, None, raw, None)
    # JSON parsers that accept raw bytes in strings (Go's) see every byte;
    # here: the escaped form decodes back to the same bytes through latin-1.
    doc = json.loads(body.decode("latin-1"))
    assert doc["cmd"] == ["cat"] and doc["stdin"].encode("latin-1") == raw


def test_input_checks() -> None:
    with pytest.raises(agentbox.InvalidArgumentError):
        _base.sandbox_path("../../v1/info")
    with pytest.raises(agentbox.InvalidArgumentError):
        _base.argv([])
    with pytest.raises(agentbox.InvalidArgumentError):
        _base.check_port(70000)
    with pytest.raises(agentbox.InvalidArgumentError):
        _base.code_body("1", "python", "ctx", None, None, None)
    with pytest.raises(agentbox.InvalidArgumentError):
        _base.context_id("a/b")
    with pytest.raises(agentbox.InvalidArgumentError):
        _base.seconds("timeout", -1)
    assert _base.argv("echo hi") == ["/bin/sh", "-c", "echo hi"]
    assert _base.template_path("ghcr.io/a/b:1") == "/v1/templates/ghcr.io%2Fa%2Fb%3A1"


def test_env_argument_checks() -> None:
    from agentbox.envs import EnvPool, PythonSandboxEnv

    with pytest.raises(ValueError):
        PythonSandboxEnv(max_episodes=0)
    with pytest.raises(ValueError):
        PythonSandboxEnv(cpu=-1)
    with pytest.raises(ValueError):
        EnvPool(0)


def test_busy_retry_policy() -> None:
    hdr = {"retry-after": "2"}
    assert _base.busy_delay(429, hdr, True, 0) == 2.0
    assert _base.busy_delay(429, hdr, False, 0) is None  # a consumed upload stream cannot be sent again
    assert _base.busy_delay(429, {}, True, 0) is None  # a quota without Retry-After is final
    assert _base.busy_delay(503, hdr, True, 0) is None
    assert _base.busy_delay(429, hdr, True, _base.BUSY_RETRY_BUDGET - 1) is None  # the budget is spent
    assert _base.replayable(b"x") and _base.replayable(None) and not _base.replayable(iter([b"x"]))


def test_create_body_isolation() -> None:
    body = _base.create_body(None, None, None, None, None, None, None, None, None, None, None, "gvisor")
    assert body == {"isolation": "gvisor"}
    with pytest.raises(agentbox.InvalidArgumentError):
        _base.create_body(None, None, None, None, None, None, None, None, None, None, None, "vm")
    assert agentbox.SandboxInfo.from_json({"id": "x", "isolation": "gvisor"}).isolation == "gvisor"
    assert agentbox.SandboxInfo.from_json({"id": "x"}).isolation == "container"


def test_volume_bodies_and_snapshot_sizes() -> None:
    body = _base.create_body(None, None, None, None, None, None, None, None, None, None,
                             volumes=[agentbox.VolumeMount("data", "/mnt/d", read_only=True, subpath="a"),
                                      {"name": "b", "path": "/mnt/b"}])
    assert body["volumes"] == [{"name": "data", "path": "/mnt/d", "read_only": True, "subpath": "a"},
                               {"name": "b", "path": "/mnt/b"}]
    assert "volumes" not in _base.create_body(None, None, None, None, None, None, None, None, None, None)
    assert _base.volume_path("data", "/files") == "/v1/volumes/data/files"
    for bad in ("", "../x", "a/b", "-x", "x" * 64):
        with pytest.raises(agentbox.InvalidArgumentError):
            _base.volume_path(bad)
    t = agentbox.Template.from_json({"name": "private/u1/snap", "tag": "latest", "kind": "image",
                                     "source": "snapshot of sb-1", "size": 1100,
                                     "layers": [{"diff_id": "sha256:a", "size": 1000}, {"diff_id": "sha256:b", "size": 100}]})
    assert (t.is_snapshot, t.snapshot_of, t.own_size, t.shared_size) == (True, "sb-1", 100, 1000)
    base = agentbox.Template.from_json({"name": "base", "tag": "latest", "kind": "image", "source": "build"})
    assert (base.is_snapshot, base.snapshot_of, base.own_size, base.shared_size) == (False, None, 0, 0)
