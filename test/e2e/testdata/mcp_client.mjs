// Drives agentbox's MCP server with the official TypeScript SDK
// (@modelcontextprotocol/sdk): over stdio (agentbox mcp) or streamable
// HTTP (/mcp), per MCP_MODE. Exits non-zero with a message on the first
// failed check. Run from a Go test (test/e2e/mcp_node_test.go), with
// NODE_PATH pointing at the SDK's node_modules.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import Ajv from "ajv";

const mode = process.env.MCP_MODE;
const url = process.env.AGENTBOX_URL;
const key = process.env.AGENTBOX_API_KEY;
const bin = process.env.AGENTBOX_BIN;

function check(cond, msg) {
  if (!cond) throw new Error("check failed: " + msg);
}

async function connect() {
  const client = new Client({ name: "agentbox-node-test", version: "1.0.0" });
  let transport;
  if (mode === "stdio") {
    transport = new StdioClientTransport({
      command: bin, args: ["mcp"],
      env: { ...process.env, AGENTBOX_URL: url, AGENTBOX_API_KEY: key },
      stderr: "inherit",
    });
  } else {
    transport = new StreamableHTTPClientTransport(new URL(url + "/mcp"), {
      requestInit: { headers: { Authorization: "Bearer " + key } },
    });
  }
  await client.connect(transport);
  return { client, transport };
}

function text(res) {
  return res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

async function call(client, name, args = {}) {
  return client.callTool({ name, arguments: args }, undefined, { timeout: 180000 });
}

async function ok(client, name, args) {
  const res = await call(client, name, args);
  check(!res.isError, `${name} failed: ${text(res)}`);
  return text(res);
}

async function bad(client, name, args, re) {
  const res = await call(client, name, args);
  check(res.isError, `${name} succeeded, want an error: ${text(res)}`);
  check(re.test(text(res)), `${name} error ${JSON.stringify(text(res))} does not match ${re}`);
  return text(res);
}

async function sessionSandbox(client) {
  const list = await ok(client, "sandbox_list");
  const m = /^(\S+)\s+template=.*\(this session's default\)/m.exec(list);
  check(m, "no default sandbox in " + list);
  return m[1];
}

async function sandboxExists(id) {
  const r = await fetch(`${url}/v1/sandboxes/${id}`, { headers: { Authorization: "Bearer " + key } });
  return r.status === 200;
}

async function waitGone(id) {
  for (let i = 0; i < 600; i++) {
    if (!(await sandboxExists(id))) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`sandbox ${id} still exists after its session ended`);
}

async function main() {
  const { client, transport } = await connect();

  // Every tool's schema is a valid JSON Schema (Ajv, strict mode).
  const { tools } = await client.listTools();
  check(tools.length >= 25, `only ${tools.length} tools`);
  const ajv = new Ajv({ strict: true, allErrors: true });
  for (const t of tools) {
    check(t.inputSchema && t.inputSchema.type === "object", `${t.name}: schema is not an object`);
    try {
      ajv.compile(t.inputSchema);
    } catch (e) {
      throw new Error(`${t.name}: invalid JSON Schema: ${e.message}`);
    }
    check(t.description && t.description.length > 40, `${t.name}: thin description`);
  }
  for (const n of ["run_code", "shell_exec", "file_edit", "git_commit", "sandbox_create"]) {
    check(tools.some((t) => t.name === n), "missing tool " + n);
  }

  // State across calls.
  await ok(client, "run_code", { code: "counter = 40" });
  await ok(client, "run_code", { code: "counter += 2" });
  check((await ok(client, "run_code", { code: "counter" })).includes("42"), "state across run_code calls");

  // Write, edit, read.
  await ok(client, "file_write", { path: "app/hello.py", content: "print('hello')\nprint('bye')\n" });
  await ok(client, "file_edit", { path: "app/hello.py", old_string: "hello", new_string: "world" });
  const read = await ok(client, "file_read", { path: "app/hello.py" });
  check(read === "print('world')\nprint('bye')\n", "file after edit: " + JSON.stringify(read));

  // git init, commit, diff, log.
  await ok(client, "git_init", { path: "app" });
  await ok(client, "git_commit", { path: "app", message: "initial" });
  await ok(client, "file_edit", { path: "app/hello.py", old_string: "bye", new_string: "ciao" });
  const diff = await ok(client, "git_diff", { path: "app" });
  check(diff.includes("-print('bye')") && diff.includes("+print('ciao')"), "git diff: " + diff);
  await ok(client, "git_commit", { path: "app", message: "say ciao" });
  const log = await ok(client, "git_log", { path: "app" });
  check(log.includes("say ciao") && log.includes("initial"), "git log: " + log);

  // An image result.
  const img = await call(client, "run_code", {
    code: "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.bar([1, 2], [3, 4])\nplt.show()",
  });
  check(!img.isError, "matplotlib: " + text(img));
  const png = img.content.find((c) => c.type === "image");
  check(png && png.mimeType === "image/png" && Buffer.from(png.data, "base64").subarray(1, 4).toString() === "PNG", "no PNG image");

  // A failing command, a huge output, a path outside the workspace.
  await bad(client, "shell_exec", { command: "ls /nonexistent" }, /No such file[\s\S]*exit code 2/);
  const huge = await ok(client, "shell_exec", { command: "yes agentbox | head -n 500000" });
  check(huge.length < 65536 && /output truncated/.test(huge) && /file_read/.test(huge), `huge output: ${huge.length} chars`);
  await bad(client, "file_read", { path: "/etc/passwd" }, /outside the workspace/);
  await bad(client, "file_write", { path: "/root/x", content: "x" }, /outside the workspace/);

  // Two sessions never see each other's sandbox.
  const mine = await sessionSandbox(client);
  const other = await connect();
  await ok(other.client, "file_write", { path: "other.txt", content: "2" });
  const theirs = await sessionSandbox(other.client);
  check(mine !== theirs, "two sessions share a sandbox");
  check(!(await ok(other.client, "sandbox_list")).includes(mine), "session 2 lists session 1's sandbox");
  await bad(other.client, "file_read", { path: "app/hello.py" }, /does not exist/);

  // Session end destroys its sandbox (and only its own).
  if (mode === "http") await transport.terminateSession();
  await client.close();
  await waitGone(mine);
  check(await sandboxExists(theirs), "session 2's sandbox went with session 1");
  if (mode === "http") await other.transport.terminateSession();
  await other.client.close();
  await waitGone(theirs);
  console.log(JSON.stringify({ ok: true, mode, tools: tools.length }));
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
