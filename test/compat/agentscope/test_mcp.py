"""add_mcp_servers with a stdio MCP server started inside the sandbox."""
import os
import unittest

from asclient import SandboxTest, data, proxy, raw, text_of

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_echo_server.py")


class MCPTest(SandboxTest):
    def setUp(self):
        super().setUp()
        self.sid = self.create()
        with open(SERVER, "rb") as f:
            r = proxy("PUT", self.sid, "workspace/file", params={"path": "mcp_echo.py"}, data=f.read())
        self.assertEqual(r.status_code, 200, r.text)

    def add(self, name="echo", overwrite=False):
        cfg = {"mcpServers": {name: {"command": "python3", "args": ["/workspace/mcp_echo.py"], "env": {"X": "1"}}}}
        return data("add_mcp_servers", identity=self.sid, server_configs=cfg, overwrite=overwrite)

    def test_stdio_server_tools(self):
        self.assertEqual(self.add(), "OK")
        tools = data("list_tools", identity=self.sid)
        self.assertEqual(set(tools), {"echo", "generic"})
        self.assertEqual(set(tools["echo"]), {"echo", "add"})
        fn = tools["echo"]["add"]["json_schema"]["function"]
        self.assertEqual(fn["name"], "add")
        self.assertEqual(fn["description"], "Add two numbers.")
        self.assertEqual(fn["parameters"]["required"], ["a", "b"])
        res = self.tool(self.sid, "add", a=2, b=3)
        self.assertCallToolResult(res)
        self.assertEqual(res["content"][0]["text"], "5")
        self.assertIs(res["isError"], False)
        self.assertEqual(self.tool(self.sid, "echo", text="hi there")["content"][0]["text"], "hi there")
        self.assertEqual(data("list_tools", identity=self.sid, tool_type="echo"), {"echo": tools["echo"]})
        # Also through the sandbox API.
        self.assertEqual(set(proxy("GET", self.sid, "mcp/list_tools").json()), {"echo"})
        r = proxy("POST", self.sid, "mcp/call_tool", json={"tool_name": "echo", "arguments": {"text": "p"}})
        self.assertEqual(r.json()["content"][0]["text"], "p")
        # The server is a process inside the sandbox.
        ps = text_of(self.shell(self.sid, "ps -eo args"))
        self.assertIn("/workspace/mcp_echo.py", ps)

    def test_overwrite_and_errors(self):
        self.add()
        self.assertEqual(self.add(), "OK")  # kept: same name, no overwrite
        self.assertEqual(self.add(overwrite=True), "OK")
        self.assertEqual(self.tool(self.sid, "add", a=1, b=1)["content"][0]["text"], "2")
        bad = {"mcpServers": {"broken": {"command": "/no/such/binary"}}}
        r = raw("add_mcp_servers", {"identity": self.sid, "server_configs": bad})
        self.assertEqual(r.status_code, 500)
        self.assertTrue(r.json()["detail"].startswith("Error in add_mcp_servers: "))
        r = raw("call_tool", {"identity": self.sid, "tool_name": "not_a_tool", "arguments": {}})
        self.assertEqual(r.status_code, 500)


if __name__ == "__main__":
    unittest.main()
