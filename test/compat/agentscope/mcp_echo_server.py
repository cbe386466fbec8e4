"""A tiny stdio MCP server (standard library only) used by the tests.

It speaks newline-delimited JSON-RPC 2.0 on stdin/stdout and offers two
tools: echo {text} and add {a, b}. The tests upload it into a sandbox's
/workspace and register it with add_mcp_servers.
"""
import json
import sys

TOOLS = [
    {
        "name": "echo",
        "description": "Echo the text back.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "add",
        "description": "Add two numbers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
]


def answer(msg_id, result=None, error=None):
    out = {"jsonrpc": "2.0", "id": msg_id}
    if error is not None:
        out["error"] = error
    else:
        out["result"] = result
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def handle(msg):
    method, msg_id = msg.get("method"), msg.get("id")
    if msg_id is None:
        return  # a notification
    if method == "initialize":
        answer(msg_id, {
            "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "echo", "version": "1.0"},
        })
    elif method == "tools/list":
        answer(msg_id, {"tools": TOOLS})
    elif method == "tools/call":
        name = msg["params"]["name"]
        args = msg["params"].get("arguments") or {}
        if name == "echo":
            answer(msg_id, {"content": [{"type": "text", "text": args.get("text", "")}], "isError": False})
        elif name == "add":
            answer(msg_id, {"content": [{"type": "text", "text": str(args["a"] + args["b"])}], "isError": False})
        else:
            answer(msg_id, error={"code": -32602, "message": "unknown tool " + name})
    elif method == "ping":
        answer(msg_id, {})
    else:
        answer(msg_id, error={"code": -32601, "message": "method not found: " + str(method)})


for line in sys.stdin:
    line = line.strip()
    if line:
        handle(json.loads(line))
