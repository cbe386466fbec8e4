"""Workspace persistence: DEFAULT_MOUNT_DIR/<id> kept on release, STORAGE_FOLDER copies.

These tests read the server's host directories, so they run only on the
server's machine, with AGENTBOX_MOUNT_DIR / AGENTBOX_STORAGE set.
"""
import os
import unittest

from asclient import MOUNT_DIR, STORAGE, SandboxTest, data, proxy


class PersistenceTest(SandboxTest):
    @unittest.skipUnless(MOUNT_DIR, "AGENTBOX_MOUNT_DIR not set")
    def test_mount_dir_kept_on_release(self):
        sid = self.create(pool=False)
        info = data("get_info", identity=sid)
        self.assertEqual(info["mount_dir"], os.path.join(MOUNT_DIR, info["session_id"]))
        proxy("PUT", sid, "workspace/file", params={"path": "sub/data.txt"}, data=b"on the host")
        path = os.path.join(info["mount_dir"], "sub", "data.txt")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"on the host")
        self.assertTrue(os.path.isdir(os.path.join(info["mount_dir"], ".git")))
        data("release", identity=sid)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"on the host")

    @unittest.skipUnless(STORAGE, "AGENTBOX_STORAGE not set")
    def test_storage_copy_on_release(self):
        sid = self.create(pool=False)
        info = data("get_info", identity=sid)
        # Copies are kept per owner; the suite's token is the default user.
        self.assertEqual(info["storage_path"], os.path.join(STORAGE, "default", info["session_id"]))
        proxy("PUT", sid, "workspace/file", params={"path": "saved/it.txt"}, data=b"stored copy")
        data("release", identity=sid)
        with open(os.path.join(info["storage_path"], "saved", "it.txt"), "rb") as f:
            self.assertEqual(f.read(), b"stored copy")
        self.assertTrue(os.path.isdir(os.path.join(info["storage_path"], ".git")))

    @unittest.skipUnless(STORAGE, "AGENTBOX_STORAGE not set")
    def test_storage_path_restores_workspace(self):
        sid = self.create(pool=False)
        info = data("get_info", identity=sid)
        proxy("PUT", sid, "workspace/file", params={"path": "again.txt"}, data=b"back again")
        data("release", identity=sid)
        # A new sandbox given the old storage_path starts with that workspace.
        sid2 = data("create", sandbox_type="base", storage_path=info["storage_path"])
        self._created.append((sid2, None))
        r = proxy("GET", sid2, "workspace/file", params={"path": "again.txt"})
        self.assertEqual((r.status_code, r.text), (200, "back again"))


if __name__ == "__main__":
    unittest.main()
