"""The sandbox's own HTTP API behind /proxy/{id}/: workspace, tools, git watcher."""
import secrets
import unittest

import requests

from asclient import TIMEOUT, SandboxTest, data, proxy


class ProxyTest(SandboxTest):
    def setUp(self):
        super().setUp()
        self.sid = self.create()

    def p(self, method, path, **kw):
        return proxy(method, self.sid, path, **kw)

    def test_healthz_and_unknown(self):
        r = self.p("GET", "healthz")
        self.assertEqual((r.status_code, r.text), (200, "OK"))
        r = proxy("GET", "no-such-sandbox", "healthz")
        self.assertEqual(r.status_code, 404)
        self.assertEqual(r.json(), {"detail": "sandbox not found: no-such-sandbox"})
        self.assertEqual(self.p("GET", "no/such/route").status_code, 404)

    def test_runtime_token_works_on_its_sandbox(self):
        info = data("get_info", identity=self.sid)
        h = {"Authorization": "Bearer " + info["runtime_token"]}
        r = requests.get(info["url"] + "/healthz", headers=h, timeout=TIMEOUT)
        self.assertEqual((r.status_code, r.text), (200, "OK"))
        r = requests.get(info["url"] + "/fastapi/healthz", headers=h, timeout=TIMEOUT)
        self.assertEqual(r.status_code, 200)

    def test_file_round_trip(self):
        r = self.p("PUT", "workspace/file", params={"path": "dir/hello.txt"}, data=b"hello world")
        self.assertEqual(r.status_code, 200, r.text)
        e = r.json()
        self.assertEqual(e["path"], "/workspace/dir/hello.txt")
        self.assertEqual((e["name"], e["type"], e["size"]), ("hello.txt", "file", 11))
        self.assertIsInstance(e["mtime_ms"], int)
        r = self.p("GET", "workspace/file", params={"path": "dir/hello.txt"})
        self.assertEqual((r.status_code, r.text), (200, "hello world"))
        blob = secrets.token_bytes(200_000)
        self.p("PUT", "workspace/file", params={"path": "/workspace/blob.bin"}, data=blob)
        r = self.p("GET", "workspace/file", params={"path": "blob.bin", "format": "bytes"})
        self.assertEqual(r.content, blob)
        self.assertEqual(r.headers["Content-Type"], "application/octet-stream")

    def test_errors(self):
        r = self.p("GET", "workspace/file", params={"path": "missing.txt"})
        self.assertEqual(r.status_code, 404)
        r = self.p("GET", "workspace/file", params={"path": "../etc/passwd"})
        self.assertEqual(r.status_code, 403)
        self.assertEqual(r.json(), {"detail": "Permission error. Access restricted to /workspace directory."})
        self.assertEqual(self.p("GET", "workspace/exists", params={"path": "/etc"}).status_code, 403)
        self.p("POST", "workspace/mkdir", json={"path": "adir"})
        r = self.p("PUT", "workspace/file", params={"path": "adir"}, data=b"x")
        self.assertEqual(r.status_code, 409)
        r = self.p("POST", "workspace/move", json={"source": "nope", "destination": "x"})
        self.assertEqual(r.status_code, 404)

    def test_list_exists_mkdir_move_remove(self):
        self.assertEqual(self.p("POST", "workspace/mkdir", json={"path": "a/b"}).json(), {"created": True})
        self.assertEqual(self.p("POST", "workspace/mkdir", json={"path": "a/b"}).json(), {"created": False})
        self.p("PUT", "workspace/file", params={"path": "a/b/c.txt"}, data=b"c")
        self.assertEqual(self.p("POST", "workspace/mkdir", json={"path": "a/b/c.txt"}).status_code, 409)
        top = self.p("GET", "workspace/list", params={"path": "a"}).json()
        self.assertEqual([(e["name"], e["type"]) for e in top], [("b", "dir")])
        self.assertIsNone(top[0]["size"])
        deep = self.p("GET", "workspace/list", params={"path": "a", "depth": 2}).json()
        self.assertEqual(sorted(e["path"] for e in deep), ["/workspace/a/b", "/workspace/a/b/c.txt"])
        self.assertEqual(self.p("GET", "workspace/list", params={"path": "nope"}).status_code, 404)
        self.assertEqual(self.p("GET", "workspace/exists", params={"path": "a/b/c.txt"}).json(), {"exists": True})
        e = self.p("POST", "workspace/move", json={"source": "a/b/c.txt", "destination": "z/c2.txt"}).json()
        self.assertEqual((e["path"], e["type"]), ("/workspace/z/c2.txt", "file"))
        self.assertEqual(self.p("GET", "workspace/exists", params={"path": "a/b/c.txt"}).json(), {"exists": False})
        self.assertEqual(self.p("DELETE", "workspace/entry", params={"path": "a"}).status_code, 204)
        self.assertEqual(self.p("DELETE", "workspace/entry", params={"path": "a"}).status_code, 204)
        self.assertEqual(self.p("GET", "workspace/exists", params={"path": "a"}).json(), {"exists": False})

    def test_batch_write(self):
        # Built like agentscope's workspace_write_many: repeated "paths"
        # fields, each followed by its "files" part.
        files = [("paths", (None, "batch/one.txt")), ("files", ("one.txt", b"1", "text/plain")),
                 ("paths", (None, "batch/two.bin")), ("files", ("two.bin", b"\x00\x01", "application/octet-stream"))]
        r = self.p("POST", "workspace/files:batch", files=files)
        self.assertEqual(r.status_code, 200, r.text)
        self.assertEqual([e["path"] for e in r.json()], ["/workspace/batch/one.txt", "/workspace/batch/two.bin"])
        self.assertEqual(self.p("GET", "workspace/file", params={"path": "batch/two.bin", "format": "bytes"}).content,
                         b"\x00\x01")

    def test_tools_route(self):
        r = self.p("POST", "tools/run_shell_command", json={"command": "echo via-proxy"})
        self.assertEqual(r.status_code, 200)
        res = r.json()
        self.assertEqual(res["content"][0]["text"], "via-proxy\n")
        r = self.p("POST", "tools/run_ipython_cell", json={"code": "print(6*7)"})
        self.assertEqual(r.json()["content"][0]["text"], "42\n")
        self.assertEqual(self.p("GET", "mcp/list_tools").json(), {})

    def test_git_watcher(self):
        logs = self.p("GET", "watcher/git_logs").json()["logs"]
        self.assertEqual(len(logs), 1)  # the repository exists from creation
        self.p("PUT", "workspace/file", params={"path": "g.txt"}, data=b"first\n")
        r = self.p("POST", "watcher/commit_changes", json={"commit_message": "add g"})
        self.assertEqual(r.status_code, 200, r.text)
        first = r.json()
        self.assertEqual(first["message"], "add g")
        self.assertRegex(first["commit"], "^[0-9a-f]{40}$")
        self.p("PUT", "workspace/file", params={"path": "g.txt"}, data=b"second\n")
        self.p("PUT", "workspace/file", params={"path": "new.txt"}, data=b"untracked\n")
        diffs = self.p("POST", "watcher/generate_diff", json={"commit_a": None, "commit_b": None}).json()["diffs"]
        self.assertEqual(set(diffs), {"g.txt", "new.txt"})
        self.assertIn("-first\n+second\n", diffs["g.txt"])
        self.assertIn("+untracked\n", diffs["new.txt"])
        second = self.p("POST", "watcher/commit_changes", json={"commit_message": "change g"}).json()
        between = self.p("POST", "watcher/generate_diff",
                         json={"commit_a": first["commit"], "commit_b": second["commit"]}).json()["diffs"]
        self.assertEqual(set(between), {"g.txt", "new.txt"})
        logs = self.p("GET", "watcher/git_logs").json()["logs"]
        self.assertEqual([l["message"] for l in logs[:2]], ["change g", "add g"])
        self.assertEqual(logs[0]["commit"], second["commit"])
        self.assertEqual(set(logs[1]["diff"]), {"g.txt"})
        for key in ("commit", "author", "date", "message", "diff"):
            self.assertIn(key, logs[0])
        nothing = self.p("POST", "watcher/commit_changes", json={"commit_message": "empty"}).json()
        self.assertIsNone(nothing["commit"])


if __name__ == "__main__":
    unittest.main()
