"""Sandbox lifecycle routes: create, pools, info, status, release, cleanup, limits."""
import time
import unittest

from asclient import (MAX_INSTANCES, PREFIX, SandboxTest, data, raw, text_of)

MODEL_FIELDS = {
    "session_id", "container_id", "container_name", "url", "ports", "mount_dir", "storage_path",
    "runtime_token", "version", "meta", "timeout", "sandbox_type", "session_ctx_id", "state",
    "last_active_at", "recycled_at", "released_at", "updated_at", "recycle_reason", "redirect_to",
}


class LifecycleTest(SandboxTest):
    def test_create_and_info(self):
        sid = self.create(pool=False)
        self.assertTrue(sid.startswith(PREFIX))
        info = data("get_info", identity=sid)
        self.assertLessEqual(MODEL_FIELDS, set(info))
        self.assertEqual(info["container_name"], sid)
        self.assertIn("base", info["version"])
        self.assertEqual(info["sandbox_type"], "base")
        self.assertEqual(info["state"], "warm")  # no session bound
        self.assertTrue(info["url"].endswith("/proxy/" + sid), info["url"])
        self.assertTrue(info["runtime_token"])
        self.assertIsNone(info["released_at"])
        self.assertEqual(data("get_status", identity=sid), "running")
        self.assertIs(data("check_health", identity=sid), True)
        self.assertIs(data("start", identity=sid), True)

    def test_identity_without_prefix(self):
        if not PREFIX:
            self.skipTest("the server has no CONTAINER_PREFIX_KEY")
        sid = self.create()
        short = sid[len(PREFIX):]
        self.assertEqual(data("get_info", identity=short)["container_name"], sid)
        self.assertEqual(data("get_status", identity=short), "running")

    def test_release_keeps_record(self):
        sid = self.create()
        self.assertIs(data("release", identity=sid), True)
        info = data("get_info", identity=sid)
        self.assertEqual(info["state"], "released")
        self.assertIsNotNone(info["released_at"])
        self.assertIsNone(info["session_ctx_id"])
        self.assertIsNone(data("get_status", identity=sid))
        self.assertIs(data("release", identity=sid), True)
        self.assertIs(data("release", identity="never-existed"), True)
        r = raw("call_tool", {"identity": sid, "tool_name": "run_shell_command", "arguments": {"command": "true"}})
        self.assertEqual(r.status_code, 500)

    def test_async_twins_and_positional_args(self):
        sid = data("create_async", sandbox_type="base")
        self._created.append((sid, None))
        self.assertEqual(data("get_info_async", args=sid)["container_name"], sid)
        self.assertEqual(data("get_status_async", args=[sid]), "running")
        res = data("call_tool_async", args=[sid, "run_shell_command", {"command": "echo pos"}])
        self.assertEqual(text_of(res), "pos\n")
        self.assertIs(data("release_async", args=sid), True)
        self.assertEqual(data("get_info", identity=sid)["state"], "released")

    def test_environment(self):
        sid = self.create(pool=False, environment={"GREETING": "hello", "N": 3})
        res = self.shell(sid, 'echo "$GREETING $N"')
        self.assertEqual(text_of(res), "hello 3\n")

    def test_null_environment_value_gives_null(self):
        self.assertIsNone(data("create", sandbox_type="base", environment={"X": None}))

    def test_types(self):
        sid = self.create("filesystem")
        info = data("get_info", identity=sid)
        self.assertIn("filesystem", info["version"])
        self.assertEqual(info["sandbox_type"], "filesystem")
        r = raw("create", {"sandbox_type": "no-such-type"})
        self.assertEqual(r.status_code, 500)
        self.assertTrue(r.json()["detail"].startswith("Error in create: "), r.json())

    def test_stop_then_start_keeps_files(self):
        sid = self.create()
        tool = data("call_tool", identity=sid, tool_name="run_shell_command",
                    arguments={"command": "echo still here > /workspace/kept.txt"})
        self.assertFalse(tool["isError"], tool)
        self.assertIs(data("stop", identity=sid), True)
        self.assertEqual(data("get_status", identity=sid), "exited")
        self.assertIs(data("stop", identity=sid), True)  # again: no error
        self.assertIs(data("start", identity=sid), True)
        self.assertEqual(data("get_status", identity=sid), "running")
        tool = data("call_tool", identity=sid, tool_name="run_shell_command",
                    arguments={"command": "cat /workspace/kept.txt"})
        self.assertEqual(tool["content"][0]["text"].strip(), "still here", tool)

    def test_cleanup(self):
        a, b = self.create(), self.create("filesystem", pool=False)
        self.assertIsNone(data("cleanup"))
        for sid in (a, b):
            self.assertEqual(data("get_info", identity=sid)["state"], "released")


@unittest.skipUnless(MAX_INSTANCES, "AGENTBOX_MAX_INSTANCES not set")
class LimitTest(SandboxTest):
    def test_instance_limit_gives_null(self):
        got_null = False
        for _ in range(MAX_INSTANCES + 1):  # bounded: the limit must hit by then
            sid = data("create", sandbox_type="base")
            if sid is None:
                got_null = True
                break
            self._created.append((sid, None))
        self.assertTrue(got_null, "no null within MAX_SANDBOX_INSTANCES + 1 creates")
        # A warm pooled sandbox already counts against the limit, so
        # create_from_pool may still hand one out; then it is null too.
        for _ in range(3):
            sid = data("create_from_pool", sandbox_type="base")
            if sid is None:
                break
            self._created.append((sid, None))
        self.assertIsNone(sid)
        # A released slot can be used again (the warm pool may refill into
        # it first: then create_from_pool hands that one out).
        sid, _ = self._created.pop()
        data("release", identity=sid)
        again = None
        for _ in range(40):  # bounded: 10 s
            again = data("create_from_pool", sandbox_type="base")
            if again is not None:
                break
            time.sleep(0.25)
        self.assertIsInstance(again, str)
        self._created.append((again, None))


if __name__ == "__main__":
    unittest.main()
