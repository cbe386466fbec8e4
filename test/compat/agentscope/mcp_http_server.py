"""A tiny MCP server over streamable HTTP (standard library only).

Usage: python3 mcp_http_server.py PORT. It answers JSON-RPC POSTs on /mcp
with plain JSON responses (no SSE stream: GET is 405, as the transport
allows) and offers one tool, shout {text}. The tests start it inside a
sandbox, where only the sandbox's own loopback reaches it.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOOL = {"name": "shout", "description": "Upper-case the text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(405)

    def do_DELETE(self):
        self.reply(200)

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if "id" not in msg:
            return self.reply(202)
        method, result = msg.get("method"), None
        if method == "initialize":
            result = {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "shout", "version": "1.0"}}
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        elif method == "tools/call":
            text = (msg["params"].get("arguments") or {}).get("text", "")
            result = {"content": [{"type": "text", "text": text.upper()}], "isError": False}
        elif method == "ping":
            result = {}
        if result is None:
            return self.reply(200, {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no such method"}})
        self.reply(200, {"jsonrpc": "2.0", "id": msg["id"], "result": result})


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
