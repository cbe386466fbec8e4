"""add_mcp_servers with a stdio MCP server started inside the sandbox."""
import os
import time
import unittest

from asclient import LACKS, URL, SandboxTest, data, proxy, raw, text_of

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "mcp_echo_server.py")
HTTP_SERVER = os.path.join(HERE, "mcp_http_server.py")


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

    @unittest.skipIf("no_ports" in LACKS, "the sandboxes' isolation level lacks it (capabilities: no_ports)")
    def test_http_server_reached_inside_the_sandbox(self):
        with open(HTTP_SERVER, "rb") as f:
            proxy("PUT", self.sid, "workspace/file", params={"path": "mcp_http.py"}, data=f.read())
        self.shell(self.sid, "setsid nohup python3 /workspace/mcp_http.py 18765 >/tmp/mcp_http.log 2>&1 &")
        cfg = {"mcpServers": {"web": {"type": "streamable_http", "url": "http://127.0.0.1:18765/mcp"}}}
        last = None
        for _ in range(50):  # bounded wait for the server to listen
            last = raw("add_mcp_servers", {"identity": self.sid, "server_configs": cfg})
            if last.status_code == 200:
                break
            time.sleep(0.2)
        self.assertEqual(last.status_code, 200, last.text)
        self.assertEqual(last.json(), {"data": "OK"})
        self.assertEqual(set(data("list_tools", identity=self.sid, tool_type="web")["web"]), {"shout"})
        self.assertEqual(self.tool(self.sid, "shout", text="quiet")["content"][0]["text"], "QUIET")

    def test_http_server_url_is_the_sandboxs_view(self):
        # The daemon's own port is on the host's loopback, not the
        # sandbox's: an HTTP MCP URL cannot reach into the host.
        port = URL.rsplit(":", 1)[-1].split("/")[0]
        cfg = {"mcpServers": {"host": {"type": "sse", "url": f"http://127.0.0.1:{port}/health"}}}
        r = raw("add_mcp_servers", {"identity": self.sid, "server_configs": cfg})
        self.assertEqual(r.status_code, 500)


if __name__ == "__main__":
    unittest.main()
