"""Generic tools: exact names, schemas and result shapes."""
import unittest

from asclient import SandboxTest, data, raw, text_of


class GenericToolsTest(SandboxTest):
    def setUp(self):
        super().setUp()
        self.sid = self.create()

    def test_list_tools(self):
        tools = data("list_tools", identity=self.sid)
        self.assertIn("generic", tools)
        self.assertEqual(set(tools["generic"]), {"run_ipython_cell", "run_shell_command"})
        cell = tools["generic"]["run_ipython_cell"]
        self.assertEqual(cell, {"name": "run_ipython_cell", "json_schema": {"type": "function", "function": {
            "name": "run_ipython_cell", "description": "Run an IPython cell.",
            "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "IPython code to execute"}},
                           "required": ["code"]}}}})
        sh = tools["generic"]["run_shell_command"]["json_schema"]["function"]
        self.assertEqual(sh["parameters"]["required"], ["command"])
        self.assertEqual(data("list_tools", identity=self.sid, tool_type="generic"), {"generic": tools["generic"]})
        self.assertEqual(data("list_tools", identity=self.sid, tool_type="nothing"), {"nothing": {}})

    def test_shell_result_shape(self):
        res = self.shell(self.sid, "echo out; pwd")
        self.assertCallToolResult(res)
        self.assertEqual(res["content"], [
            {"type": "text", "text": "out\n/workspace\n", "annotations": None, "description": "stdout"},
            {"type": "text", "text": "0", "annotations": None, "description": "returncode"},
        ])
        self.assertIs(res["isError"], False)

    def test_shell_is_error_follows_stderr(self):
        res = self.shell(self.sid, "echo bad >&2")
        self.assertIs(res["isError"], True)
        self.assertEqual([c["description"] for c in res["content"]], ["stdout", "stderr", "returncode"])
        self.assertEqual(text_of(res, "stderr"), "bad\n")
        res = self.shell(self.sid, "exit 3")
        self.assertIs(res["isError"], False)  # the exit code does not count
        self.assertEqual(text_of(res, "returncode"), "3")

    def test_ipython_state_persists(self):
        res = self.tool(self.sid, "run_ipython_cell", code="import math\nx = 20\nprint('set')")
        self.assertCallToolResult(res)
        self.assertEqual(res["content"], [{"type": "text", "text": "set\n", "annotations": None, "description": "stdout"}])
        self.assertIs(res["isError"], False)
        res = self.tool(self.sid, "run_ipython_cell", code="def f(n):\n    return n + x\nprint(f(22), math.floor(2.5))")
        self.assertEqual(text_of(res), "42 2\n")
        res = self.tool(self.sid, "run_ipython_cell", code="x * 2")
        self.assertEqual(text_of(res), "40\n")

    def test_ipython_errors(self):
        res = self.tool(self.sid, "run_ipython_cell", code="print('before')\n1/0")
        self.assertIs(res["isError"], True)
        self.assertEqual(text_of(res), "before\n")
        self.assertIn("ZeroDivisionError", text_of(res, "stderr"))
        res = self.tool(self.sid, "run_ipython_cell", code="import sys; print('warn', file=sys.stderr)")
        self.assertIs(res["isError"], True)
        self.assertEqual(text_of(res, "stderr"), "warn\n")
        # The interpreter survives errors and exit().
        self.tool(self.sid, "run_ipython_cell", code="y = 5\nexit()")
        self.assertEqual(text_of(self.tool(self.sid, "run_ipython_cell", code="print(y)")), "5\n")

    def test_ipython_captures_child_processes(self):
        res = self.tool(self.sid, "run_ipython_cell", code="import subprocess\n_ = subprocess.run(['echo', 'child'])")
        self.assertEqual(text_of(res), "child\n")

    def test_tool_errors(self):
        res = self.tool(self.sid, "run_shell_command")
        self.assertIs(res["isError"], True)
        self.assertTrue(res["content"][0]["text"].startswith("Error: "), res)
        r = raw("call_tool", {"identity": self.sid, "tool_name": "no_such_tool", "arguments": {}})
        self.assertEqual(r.status_code, 500)
        self.assertTrue(r.json()["detail"].startswith("Error in call_tool: "))

    def test_base_has_no_filesystem_tools(self):
        self.assertNotIn("filesystem", data("list_tools", identity=self.sid))
        r = raw("call_tool", {"identity": self.sid, "tool_name": "read_file", "arguments": {"path": "x"}})
        self.assertEqual(r.status_code, 500)


if __name__ == "__main__":
    unittest.main()
