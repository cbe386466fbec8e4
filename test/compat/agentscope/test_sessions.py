"""Sessions: session_ctx_id binding, mapping, keys, heartbeat recycle and restore."""
import time
import unittest

from asclient import HEARTBEAT, MOUNT_DIR, STORAGE, SandboxTest, data, new_session, proxy, text_of


class SessionTest(SandboxTest):
    def test_mapping_before_and_after_release(self):
        key = new_session()
        self.assertEqual(data("get_session_mapping", session_ctx_id=key), [])
        a = self.create(meta={"session_ctx_id": key})
        b = self.create("filesystem", pool=False, meta={"session_ctx_id": key})
        self.assertEqual(data("get_session_mapping", session_ctx_id=key), [a, b])
        self.assertIn(key, data("list_session_keys"))
        info = data("get_info", identity=a)
        self.assertEqual(info["session_ctx_id"], key)
        self.assertEqual(info["meta"]["session_ctx_id"], key)
        self.assertEqual(info["state"], "running")
        data("release", identity=a)
        self.assertEqual(data("get_session_mapping", session_ctx_id=key), [b])
        data("release", identity=b)
        self.assertEqual(data("get_session_mapping", session_ctx_id=key), [])
        self.assertNotIn(key, data("list_session_keys"))

    def test_session_service_flow(self):
        """What SandboxService.connect/release do with session_ctx_id = f"{session}_{user}"."""
        key = new_session() + "_user1"
        created = {}
        for typ in ("base", "filesystem"):
            created[typ] = self.create(typ, meta={"session_ctx_id": key})
        # Reconnect: reuse the mapping, detect each type from "version".
        found = {}
        for sid in data("get_session_mapping", session_ctx_id=key):
            version = data("get_info", identity=sid)["version"]
            typ = "filesystem" if "filesystem" in version else "base"
            found[typ] = sid
        self.assertEqual(found, created)
        for sid in data("get_session_mapping", session_ctx_id=key):
            self.assertIs(data("release", identity=sid), True)
        self.assertEqual(data("get_session_mapping", session_ctx_id=key), [])


@unittest.skipUnless(0 < HEARTBEAT <= 10, "AGENTBOX_HEARTBEAT must be a short HEARTBEAT_TIMEOUT (<= 10 s)")
class HeartbeatTest(SandboxTest):
    def wait_state(self, sid, state, limit):
        deadline = time.monotonic() + limit
        info = None
        while time.monotonic() < deadline:  # bounded in time
            info = data("get_info", identity=sid)
            if info["state"] == state:
                return info
            time.sleep(0.5)
        self.fail(f"{sid} did not become {state} within {limit}s: {info}")

    def test_recycle_then_restore(self):
        key = new_session()
        old = self.create(meta={"session_ctx_id": key})
        proxy("PUT", old, "workspace/file", params={"path": "keep.txt"}, data=b"kept across recycle")
        info = self.wait_state(old, "recycled", HEARTBEAT * 3 + 15)
        self.assertEqual(info["recycle_reason"], "heartbeat_timeout")
        self.assertIsNotNone(info["recycled_at"])
        self.assertEqual(data("get_session_mapping", session_ctx_id=key), [old])
        # The next touching call restores the session with a new sandbox.
        self.assertIs(data("check_health", identity=old), True)
        info = data("get_info", identity=old)
        self.assertEqual(info["state"], "replaced")
        new = info["redirect_to"]
        self.assertTrue(new and new != old)
        self._created.append((new, None))
        self.assertEqual(data("get_session_mapping", session_ctx_id=key), [new])
        new_info = data("get_info", identity=new)
        self.assertEqual(new_info["state"], "running")
        self.assertEqual(new_info["session_ctx_id"], key)
        # Calls on the old id are served by the new sandbox.
        res = self.shell(old, "cat keep.txt 2>/dev/null; git rev-parse --is-inside-work-tree")
        if STORAGE or MOUNT_DIR:  # same workspace only when it is kept somewhere
            self.assertEqual(text_of(res), "kept across recycle" + "true\n")
        else:
            self.assertEqual(text_of(res), "true\n")
        # Releasing the old id releases what replaced it.
        self.assertIs(data("release", identity=old), True)
        self.assertEqual(data("get_info", identity=new)["state"], "released")
        self.assertEqual(data("get_session_mapping", session_ctx_id=key), [])


if __name__ == "__main__":
    unittest.main()
