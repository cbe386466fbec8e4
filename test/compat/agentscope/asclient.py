"""Shared helpers of the agentscope compatibility suite.

The suite talks to a running agentbox daemon exactly as agentscope-runtime's
client does: POST /<method> with the keyword arguments as a JSON object,
answers {"data": ...}, bearer-token auth, /proxy/{id}/... for the sandbox's
own API. Settings come from the environment:

  AGENTBOX_URL            daemon base URL (default http://127.0.0.1:8000)
  AGENTBOX_TOKEN          bearer token ("" = the server has auth off)
  AGENTBOX_OTHER_TOKEN    a second user's key (isolation tests), optional
  AGENTBOX_PREFIX         CONTAINER_PREFIX_KEY of the server, optional
  AGENTBOX_MAX_INSTANCES  MAX_SANDBOX_INSTANCES of the server, optional
  AGENTBOX_HEARTBEAT      HEARTBEAT_TIMEOUT of the server (seconds), optional
  AGENTBOX_STORAGE        STORAGE_FOLDER of the server, optional
  AGENTBOX_MOUNT_DIR      DEFAULT_MOUNT_DIR of the server, optional
  AGENTBOX_LACKS          features the sandboxes' isolation level lacks, as
                          /v1/info capabilities names them (no_ports, ...),
                          comma-separated, optional: tests needing one skip

Every request has a timeout; every loop is bounded.
"""
import contextlib
import os
import unittest
import uuid

import requests

URL = os.environ.get("AGENTBOX_URL", "http://127.0.0.1:8000").rstrip("/")
TOKEN = os.environ.get("AGENTBOX_TOKEN", "")
OTHER_TOKEN = os.environ.get("AGENTBOX_OTHER_TOKEN", "")
PREFIX = os.environ.get("AGENTBOX_PREFIX", "")
MAX_INSTANCES = int(os.environ.get("AGENTBOX_MAX_INSTANCES", "0") or 0)
HEARTBEAT = float(os.environ.get("AGENTBOX_HEARTBEAT", "0") or 0)
STORAGE = os.environ.get("AGENTBOX_STORAGE", "")
MOUNT_DIR = os.environ.get("AGENTBOX_MOUNT_DIR", "")
LACKS = set(filter(None, os.environ.get("AGENTBOX_LACKS", "").split(",")))
TIMEOUT = 120  # seconds, per request

METHODS = [
    "create", "create_from_pool", "release", "start", "stop", "get_status",
    "get_info", "check_health", "list_tools", "call_tool", "add_mcp_servers",
    "get_session_mapping", "list_session_keys", "cleanup",
]


def headers(token=None):
    token = TOKEN if token is None else token
    return {"Authorization": "Bearer " + token} if token else {}


def raw(method, body=None, token=None):
    """POST /<method> and return the response."""
    return requests.post(f"{URL}/{method}", json={} if body is None else body,
                         headers=headers(token), timeout=TIMEOUT)


def data(method, token=None, **kwargs):
    """Call a manager method; fail unless it answers 200 {"data": ...}."""
    r = raw(method, kwargs, token)
    if r.status_code != 200:
        raise AssertionError(f"{method}: HTTP {r.status_code}: {r.text}")
    body = r.json()
    if set(body) != {"data"}:
        raise AssertionError(f"{method}: body is not {{'data': ...}}: {body}")
    return body["data"]


def proxy(method, sandbox_id, path, token=None, **kwargs):
    """A request to the sandbox's own API through /proxy."""
    kwargs.setdefault("timeout", TIMEOUT)
    h = headers(token)
    h.update(kwargs.pop("headers", {}))
    return requests.request(method, f"{URL}/proxy/{sandbox_id}/{path.lstrip('/')}", headers=h, **kwargs)


def new_session():
    return "sess-" + uuid.uuid4().hex[:12]


def text_of(result, description="stdout"):
    for item in result["content"]:
        if item.get("description") == description:
            return item["text"]
    return None


class SandboxTest(unittest.TestCase):
    """A test case that releases every sandbox it created."""

    def setUp(self):
        self._created = []

    def tearDown(self):
        for sid, token in reversed(self._created):
            try:
                raw("release", {"identity": sid}, token)
            except requests.RequestException:
                pass

    def create(self, sandbox_type="base", pool=True, token=None, **kwargs):
        method = "create_from_pool" if pool else "create"
        sid = data(method, token=token, sandbox_type=sandbox_type, **kwargs)
        self.assertIsInstance(sid, str, f"{method} returned {sid!r}")
        self._created.append((sid, token))
        return sid

    def tool(self, sid, name, **arguments):
        return data("call_tool", identity=sid, tool_name=name, arguments=arguments)

    def shell(self, sid, command):
        return self.tool(sid, "run_shell_command", command=command)

    def assertCallToolResult(self, res):
        self.assertEqual(set(res), {"meta", "content", "isError"}, res)
        self.assertIsNone(res["meta"])
        self.assertIsInstance(res["isError"], bool)
        for item in res["content"]:
            self.assertEqual(item["type"], "text")
            self.assertIn("annotations", item)
            self.assertIsNone(item["annotations"])
            self.assertIsInstance(item["text"], str)

    @contextlib.contextmanager
    def released(self, sid, token=None):
        try:
            yield sid
        finally:
            raw("release", {"identity": sid}, token)


def needs_auth(test):
    return unittest.skipUnless(TOKEN, "the server has auth off (AGENTBOX_TOKEN empty)")(test)
