"""The filesystem sandbox's tools, rooted at /workspace."""
import json
import unittest

from asclient import SandboxTest, data, raw

FS_TOOLS = {
    "read_file": ["path"], "read_multiple_files": ["paths"], "write_file": ["path", "content"],
    "edit_file": ["path", "edits"], "create_directory": ["path"], "list_directory": ["path"],
    "directory_tree": ["path"], "move_file": ["source", "destination"], "search_files": ["path", "pattern"],
    "get_file_info": ["path"], "list_allowed_directories": [],
}


class FilesystemToolsTest(SandboxTest):
    def setUp(self):
        super().setUp()
        self.sid = self.create("filesystem")

    def ok(self, name, **args):
        res = self.tool(self.sid, name, **args)
        self.assertCallToolResult(res)
        self.assertIs(res["isError"], False, res)
        self.assertEqual(len(res["content"]), 1)
        return res["content"][0]["text"]

    def err(self, name, **args):
        res = self.tool(self.sid, name, **args)
        self.assertIs(res["isError"], True, res)
        text = res["content"][0]["text"]
        self.assertTrue(text.startswith("Error: "), text)
        return text

    def test_list_tools(self):
        tools = data("list_tools", identity=self.sid)
        self.assertEqual(set(tools), {"filesystem", "generic"})
        self.assertEqual(set(tools["filesystem"]), set(FS_TOOLS))
        for name, required in FS_TOOLS.items():
            fn = tools["filesystem"][name]["json_schema"]["function"]
            self.assertEqual(fn["name"], name)
            self.assertEqual(fn["parameters"]["type"], "object")
            self.assertEqual(sorted(fn["parameters"]["required"]), sorted(required))
            self.assertTrue(fn["description"])
        edit = tools["filesystem"]["edit_file"]["json_schema"]["function"]["parameters"]["properties"]
        self.assertEqual(edit["dryRun"]["type"], "boolean")
        self.assertEqual(edit["edits"]["items"]["required"], ["oldText", "newText"])
        self.assertEqual(data("list_tools", identity=self.sid, tool_type="filesystem"), {"filesystem": tools["filesystem"]})

    def test_write_read_edit(self):
        self.assertEqual(self.ok("write_file", path="notes/a.txt", content="one\ntwo\nthree\n"),
                         "Successfully wrote to notes/a.txt")
        self.assertEqual(self.ok("read_file", path="/workspace/notes/a.txt"), "one\ntwo\nthree\n")
        diff = self.ok("edit_file", path="notes/a.txt", edits=[{"oldText": "two", "newText": "TWO"}], dryRun=True)
        self.assertTrue(diff.startswith("```diff\nIndex: /workspace/notes/a.txt\n"), diff)
        self.assertIn("--- /workspace/notes/a.txt\toriginal\n+++ /workspace/notes/a.txt\tmodified\n", diff)
        self.assertIn("@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n", diff)
        self.assertTrue(diff.endswith("```\n\n"))
        self.assertEqual(self.ok("read_file", path="notes/a.txt"), "one\ntwo\nthree\n")  # dry run: unchanged
        self.ok("edit_file", path="notes/a.txt", edits=[{"oldText": "three", "newText": "3"}])
        self.assertEqual(self.ok("read_file", path="notes/a.txt"), "one\ntwo\n3\n")
        self.assertIn("Could not find exact match", self.err("edit_file", path="notes/a.txt",
                                                              edits=[{"oldText": "absent", "newText": "x"}]))

    def test_read_multiple(self):
        self.ok("write_file", path="a.txt", content="A")
        text = self.ok("read_multiple_files", paths=["a.txt", "missing.txt"])
        self.assertEqual(text.split("\n---\n")[0], "a.txt:\nA\n")
        self.assertTrue(text.split("\n---\n")[1].startswith("missing.txt: Error - "))

    def test_directories(self):
        self.assertEqual(self.ok("create_directory", path="d/e"), "Successfully created directory d/e")
        self.ok("create_directory", path="d/e")  # exists: fine
        self.ok("write_file", path="d/f.txt", content="x")
        self.assertEqual(self.ok("list_directory", path="d"), "[DIR] e\n[FILE] f.txt")
        tree = json.loads(self.ok("directory_tree", path="d"))
        self.assertEqual(tree, [{"name": "e", "type": "directory", "children": []}, {"name": "f.txt", "type": "file"}])
        self.assertEqual(self.ok("move_file", source="d/f.txt", destination="d/e/g.txt"),
                         "Successfully moved d/f.txt to d/e/g.txt")
        self.assertEqual(json.loads(self.ok("directory_tree", path="d")),
                         [{"name": "e", "type": "directory", "children": [{"name": "g.txt", "type": "file"}]}])

    def test_search(self):
        for p in ("src/app.py", "src/lib/util.py", "src/README.md", "build/out.py"):
            self.ok("write_file", path=p, content="x")
        self.assertEqual(self.ok("search_files", path="src", pattern="util"), "/workspace/src/lib/util.py")
        found = self.ok("search_files", path=".", pattern="**/*.py", excludePatterns=["build"]).split("\n")
        self.assertEqual(sorted(found), ["/workspace/src/app.py", "/workspace/src/lib/util.py"])
        found = self.ok("search_files", path=".", pattern="*.py", excludePatterns=["**/lib/**", ".git"]).split("\n")
        self.assertEqual(sorted(found), ["/workspace/build/out.py", "/workspace/src/app.py"])
        self.assertEqual(self.ok("search_files", path=".", pattern="nothing-like-this"), "No matches found")

    def test_info_and_allowed(self):
        self.ok("write_file", path="i.txt", content="12345")
        lines = dict(l.split(": ", 1) for l in self.ok("get_file_info", path="i.txt").split("\n"))
        self.assertEqual(lines["size"], "5")
        self.assertEqual(lines["isFile"], "true")
        self.assertEqual(lines["isDirectory"], "false")
        self.assertEqual(set(lines), {"size", "created", "modified", "accessed", "isDirectory", "isFile", "permissions"})
        self.assertEqual(self.ok("list_allowed_directories"), "Allowed directories:\n/workspace")

    def test_confined_to_workspace(self):
        text = self.err("read_file", path="/etc/passwd")
        self.assertEqual(text, "Error: Access denied - path outside allowed directories: /etc/passwd not in /workspace")
        self.err("write_file", path="../escape.txt", content="x")
        self.err("read_file", path="does-not-exist.txt")

    def test_missing_argument_is_error_result(self):
        self.err("read_file")
        r = raw("call_tool", {"identity": self.sid, "tool_name": "no_such", "arguments": {}})
        self.assertEqual(r.status_code, 500)


if __name__ == "__main__":
    unittest.main()
