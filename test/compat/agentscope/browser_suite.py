"""The browser and gui sandbox types, driven as agentscope-runtime's
BrowserSandbox and GuiSandbox drive them: create_from_pool with the type,
call_tool with the exact argument dicts their methods send (defaults
included: "" and None for what the caller left out), and the desktop URL
GUIMixin.desktop_url builds. Needs a server whose browser type has the
browser template and whose gui type has the desktop template (the
default SANDBOX_TEMPLATES; run from test/e2e's TestAgentscopeBrowser).

A page is served inside the sandbox by python3 -m http.server; its
script reports clicks back to that server, so a click is observed inside
the sandbox, in the server's log.
"""
import base64
import json
import re
import struct
import time
import unittest
import urllib.parse

import requests

from asclient import OTHER_TOKEN, URL, SandboxTest, data, headers, raw

PORT = 8765
SITE = "/workspace/site"

PAGE = """<!doctype html>
<html><head><title>agentbox browser page</title></head>
<body>
<h1>Hello from the sandbox</h1>
<p id="size"></p>
<button id="b" onclick="press()">Press me</button>
<p id="out">Not pressed</p>
<script>
let n = 0;
document.getElementById('size').textContent = 'viewport ' + innerWidth + 'x' + innerHeight;
function press() {
  n++;
  document.getElementById('out').textContent = 'Pressed ' + n + ' times';
  fetch('/clicked?via=browser_click&n=' + n);
}
</script></body></html>
"""

FORM = """<!doctype html>
<html><head><title>form page</title></head>
<body>
<input aria-label="Name" oninput="document.getElementById('echo').textContent = 'Name is ' + this.value">
<p id="echo">Name is nobody</p>
<select aria-label="Color" onchange="document.getElementById('color').textContent = 'Color is ' + this.value">
<option value="red">Red</option><option value="blue">Blue</option></select>
<p id="color">Color is red</p>
<button onmouseover="document.getElementById('hov').textContent = 'Hovered'">Hover me</button>
<p id="hov">Not hovered</p>
<button onclick="alert('hello dialog'); document.getElementById('dlg').textContent = 'Dialog closed'">Alert me</button>
<p id="dlg">No dialog</p>
<input type="file" aria-label="Upload" onchange="document.getElementById('file').textContent = 'File ' + this.files[0].name">
<p id="file">No file</p>
<div role="button" aria-label="Source" draggable="true" ondragstart="event.dataTransfer.setData('text/plain', 'x')">Drag me</div>
<div role="button" aria-label="Target" ondragover="event.preventDefault()"
  ondrop="event.preventDefault(); document.getElementById('drop').textContent = 'Dropped'">Drop here</div>
<p id="drop">Not dropped</p>
<script>console.log('console says hi'); fetch('/ping?from=page');</script>
</body></html>
"""

# A page whose one button fills the viewport, for computer clicks at a
# screen point: any point below the browser's toolbar hits it. What is
# typed on it is reported when Return is pressed.
GUI_PAGE = """<!doctype html>
<html><head><title>gui page</title></head>
<body style="margin:0">
<button style="position:fixed;left:0;top:0;width:100vw;height:100vh;font-size:40px"
  onclick="fetch('/clicked?via=computer')">Big button</button>
<script>
let typed = '';
document.addEventListener('keydown', e => {
  if (e.key === 'Enter') {
    e.preventDefault();
    fetch('/typed?text=' + encodeURIComponent(typed));
    typed = '';
  } else if (e.key.length === 1) {
    typed += e.key;
  }
});
</script>
</body></html>
"""

# BrowserSandbox's tools (agentscope_runtime/sandbox/box/browser).
BROWSER_TOOLS = {
    "browser_close", "browser_resize", "browser_console_messages", "browser_handle_dialog",
    "browser_file_upload", "browser_press_key", "browser_navigate", "browser_navigate_back",
    "browser_navigate_forward", "browser_network_requests", "browser_pdf_save",
    "browser_take_screenshot", "browser_snapshot", "browser_click", "browser_drag",
    "browser_hover", "browser_type", "browser_select_option", "browser_tab_list",
    "browser_tab_new", "browser_tab_select", "browser_tab_close", "browser_wait_for",
}


def texts(res):
    return "\n".join(c["text"] for c in res["content"] if c["type"] == "text")


def images(res):
    return [c for c in res["content"] if c["type"] == "image"]


def png_size(raw_png):
    if raw_png[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError("not a PNG: %r" % raw_png[:16])
    return struct.unpack(">II", raw_png[16:24])


class DesktopSandboxTest(SandboxTest):
    def serve(self, sid, files):
        """Write files into SITE and start python3 -m http.server on it,
        logging requests to /tmp/http.log; wait until it answers."""
        for name, body in files.items():
            res = self.shell(sid, "mkdir -p %s && cat > %s/%s <<'EOF'\n%sEOF" % (SITE, SITE, name, body))
            self.assertEqual(res["content"][-1]["text"], "0", res)
        self.shell(sid, "cd %s && setsid nohup python3 -m http.server %d --bind 127.0.0.1 >/tmp/http.log 2>&1 </dev/null &" % (SITE, PORT))
        self.wait_shell(sid, "curl -sf -o /dev/null http://127.0.0.1:%d/ && echo up" % PORT, "up", "the page server")

    def wait_shell(self, sid, command, want, what, tries=60):
        out = None
        for _ in range(tries):
            out = self.shell(sid, command)["content"][0]["text"].strip()
            if out == want:
                return
            time.sleep(0.5)
        self.fail("%s: last output %r, want %r" % (what, out, want))

    def clicks_seen(self, sid, via):
        res = self.shell(sid, "grep -c 'GET /clicked?via=%s' /tmp/http.log || true" % via)
        return int(res["content"][0]["text"].strip() or 0)

    def check_desktop_url(self):
        """GUIMixin.desktop_url (BrowserSandbox's and GuiSandbox's):
        check_health, get_info, then this URL, which redirects to the
        sandbox's signed noVNC link."""
        self.assertIs(data("check_health", identity=self.sid), True)
        info = data("get_info", identity=self.sid)
        url = "%s/desktop/%s/vnc/vnc_relay.html?%s" % (URL, self.sid, urllib.parse.urlencode({"password": info["runtime_token"]}))
        r = requests.get(url, allow_redirects=False, timeout=30)
        self.assertEqual(r.status_code, 302, r.text)
        self.assertEqual(r.headers.get("Cache-Control"), "no-store")
        loc = r.headers["Location"]
        # The native API's signed, interactive noVNC link, on this server.
        m = re.match(r"^(https?://[^/]+)/v1/sandboxes/([^/?]+)/desktop\?(.+)$", loc)
        self.assertIsNotNone(m, loc)
        self.assertEqual(m.group(1), URL)
        query = urllib.parse.parse_qs(m.group(3))
        self.assertEqual(query["mode"], ["interactive"], loc)
        self.assertTrue(query["sig"][0] and query["exp"][0], loc)
        # The link alone opens the page (a person's browser sends no token).
        page = requests.get(loc, allow_redirects=False, timeout=30)
        self.assertEqual(page.status_code, 200, page.text)
        self.assertTrue(page.headers["Content-Type"].startswith("text/html"), page.headers)
        self.assertIn("<title>agentbox desktop</title>", page.text)
        self.assertIn("/desktop/assets/desktop.js", page.text)
        # Its signature is checked: tampered, refused.
        bad = requests.get(loc.replace("sig=" + query["sig"][0], "sig=" + "0" * 64), allow_redirects=False, timeout=30)
        self.assertEqual(bad.status_code, 401, bad.text)
        # Without the token, or with another sandbox's: refused, nothing leaked.
        r = requests.get("%s/desktop/%s/vnc/vnc_relay.html" % (URL, self.sid), allow_redirects=False, timeout=30)
        self.assertEqual(r.status_code, 401, r.text)
        r = requests.get(url.replace(info["runtime_token"], "wrong"), allow_redirects=False, timeout=30)
        self.assertEqual(r.status_code, 401, r.text)
        if OTHER_TOKEN:
            r = requests.get("%s/desktop/%s/vnc/vnc_relay.html" % (URL, self.sid), headers=headers(OTHER_TOKEN),
                             allow_redirects=False, timeout=30)
            self.assertEqual(r.status_code, 404, r.text)


class BrowserTypeTest(DesktopSandboxTest):
    def setUp(self):
        super().setUp()
        self.sid = self.create("browser", meta={"session_ctx_id": "browser-suite"})

    def call(self, name, args):
        res = self.tool(self.sid, name, **args)
        self.assertEqual(set(res), {"meta", "content", "isError"}, res)
        self.assertIs(res["isError"], False, "%s: %s" % (name, texts(res)))
        return res

    def test_list_tools(self):
        tools = data("list_tools", identity=self.sid)
        self.assertEqual(set(tools), {"generic", "browser"})
        self.assertEqual(set(tools["browser"]), BROWSER_TOOLS)
        nav = tools["browser"]["browser_navigate"]
        self.assertEqual(nav["name"], "browser_navigate")
        fn = nav["json_schema"]["function"]
        self.assertEqual(fn["name"], "browser_navigate")
        self.assertEqual(fn["parameters"]["required"], ["url"])
        self.assertEqual(fn["parameters"]["properties"]["url"]["type"], "string")
        click = tools["browser"]["browser_click"]["json_schema"]["function"]["parameters"]
        self.assertEqual(sorted(click["required"]), ["element", "ref"])
        shot = tools["browser"]["browser_take_screenshot"]["json_schema"]["function"]["parameters"]
        self.assertEqual(set(shot["properties"]), {"raw", "filename", "element", "ref"})
        self.assertEqual(data("list_tools", identity=self.sid, tool_type="browser"), {"browser": tools["browser"]})
        # The server's others are not offered.
        r = raw("call_tool", {"identity": self.sid, "tool_name": "browser_install", "arguments": {}})
        self.assertEqual(r.status_code, 500, r.text)

    def test_navigate_snapshot_click_screenshot(self):
        self.serve(self.sid, {"index.html": PAGE})
        url = "http://127.0.0.1:%d/index.html" % PORT
        res = self.call("browser_navigate", {"url": url})
        self.assertIn("agentbox browser page", texts(res))

        snap = texts(self.call("browser_snapshot", {}))
        self.assertIn("Hello from the sandbox", snap)
        self.assertIn("Not pressed", snap)
        m = re.search(r'button "Press me" \[ref=([^\]]+)\]', snap)
        self.assertIsNotNone(m, snap)
        size = re.search(r"viewport (\d+)x(\d+)", snap)
        self.assertIsNotNone(size, snap)
        viewport = (int(size.group(1)), int(size.group(2)))

        res = self.call("browser_click", {"element": "Press me button", "ref": m.group(1)})
        self.assertIn("Pressed 1 times", texts(res) + texts(self.call("browser_snapshot", {})))
        # The page's script told the server inside the sandbox.
        self.wait_shell(self.sid, "grep -c 'GET /clicked?via=browser_click&n=1' /tmp/http.log", "1", "the click's request")

        # BrowserSandbox.browser_wait_for sends None for what it leaves out.
        self.call("browser_wait_for", {"time": None, "text": "Pressed 1 times", "textGone": None})

        # raw=True: PNG of the viewport (defaults "" for the rest, as sent).
        res = self.call("browser_take_screenshot", {"raw": True, "filename": "", "element": "", "ref": ""})
        imgs = images(res)
        self.assertEqual(len(imgs), 1, res)
        self.assertEqual(imgs[0]["mimeType"], "image/png")
        self.assertEqual(png_size(base64.b64decode(imgs[0]["data"])), viewport)
        # The default is a JPEG.
        res = self.call("browser_take_screenshot", {"raw": False, "filename": "", "element": "", "ref": ""})
        self.assertEqual(images(res)[0]["mimeType"], "image/jpeg")

    def ref(self, snap, role, name):
        m = re.search(r'%s "%s"[^\n]*\[ref=([^\]]+)\]' % (re.escape(role), re.escape(name)), snap)
        self.assertIsNotNone(m, "no %s %r in the snapshot:\n%s" % (role, name, snap))
        return m.group(1)

    def snap(self):
        return texts(self.call("browser_snapshot", {}))

    def test_forms_dialogs_and_the_rest(self):
        self.serve(self.sid, {"form.html": FORM})
        self.call("browser_navigate", {"url": "http://127.0.0.1:%d/form.html" % PORT})
        snap = self.snap()
        # BrowserSandbox.browser_type sends submit and slowly.
        self.call("browser_type", {"element": "Name", "ref": self.ref(snap, "textbox", "Name"), "text": "Ada",
                                   "submit": False, "slowly": False})
        self.call("browser_press_key", {"key": "End"})
        self.call("browser_select_option", {"element": "Color", "ref": self.ref(snap, "combobox", "Color"), "values": ["blue"]})
        self.call("browser_hover", {"element": "Hover me", "ref": self.ref(snap, "button", "Hover me")})
        snap2 = self.snap()
        for want in ("Name is Ada", "Color is blue", "Hovered"):
            self.assertIn(want, snap2)

        res = self.call("browser_click", {"element": "Alert me", "ref": self.ref(snap, "button", "Alert me")})
        self.assertIn("hello dialog", texts(res))
        self.call("browser_handle_dialog", {"accept": True, "promptText": ""})
        self.assertIn("Dialog closed", self.snap())

        res = self.call("browser_click", {"element": "Upload", "ref": self.ref(snap, "button", "Upload")})
        self.call("browser_file_upload", {"paths": [SITE + "/form.html"]})
        self.assertIn("File form.html", self.snap())

        self.call("browser_drag", {"startElement": "Source", "startRef": self.ref(snap, "button", "Source"),
                                   "endElement": "Target", "endRef": self.ref(snap, "button", "Target")})
        self.assertIn("Dropped", self.snap())

        self.assertIn("console says hi", texts(self.call("browser_console_messages", {})))
        self.assertIn("/ping?from=page", texts(self.call("browser_network_requests", {})))

        self.call("browser_resize", {"width": 800, "height": 600})
        res = self.call("browser_take_screenshot", {"raw": True, "filename": "", "element": "", "ref": ""})
        self.assertEqual(png_size(base64.b64decode(images(res)[0]["data"])), (800, 600))

    def test_tabs_and_back(self):
        self.serve(self.sid, {"index.html": PAGE, "two.html": "<title>second page</title><p>Two</p>\n"})
        base = "http://127.0.0.1:%d/" % PORT
        self.call("browser_navigate", {"url": base + "index.html"})
        self.call("browser_navigate", {"url": base + "two.html"})
        self.assertIn("agentbox browser page", texts(self.call("browser_navigate_back", {})))
        self.assertIn("second page", texts(self.call("browser_navigate_forward", {})))
        self.call("browser_navigate_back", {})
        self.call("browser_tab_new", {"url": base + "two.html"})
        listing = texts(self.call("browser_tab_list", {}))
        self.assertIn("second page", listing)
        self.assertIn("agentbox browser page", listing)
        # Tabs are numbered from 1, as browser_tab_list shows them.
        self.assertIn("agentbox browser page", texts(self.call("browser_tab_select", {"index": 1})))
        self.call("browser_tab_select", {"index": 2})
        # BrowserSandbox.browser_tab_close(): index None closes the current tab.
        self.call("browser_tab_close", {"index": None})
        self.assertNotIn("second page", texts(self.call("browser_tab_list", {})))
        res = self.call("browser_pdf_save", {"filename": ""})
        m = re.search(r"(/\S+\.pdf)", texts(res))
        self.assertIsNotNone(m, texts(res))
        head = self.shell(self.sid, "head -c 5 %s" % m.group(1))["content"][0]["text"]
        self.assertEqual(head, "%PDF-")

    def test_close_then_navigate(self):
        self.serve(self.sid, {"index.html": PAGE})
        url = "http://127.0.0.1:%d/index.html" % PORT
        self.call("browser_navigate", {"url": url})
        self.call("browser_close", {})
        # The next call opens the browser's page again.
        self.assertIn("agentbox browser page", texts(self.call("browser_navigate", {"url": url})))
        self.assertIn("Hello from the sandbox", self.snap())

    def test_desktop_url(self):
        # The browser template's screen has a VNC server, as agentscope's
        # browser image does: BrowserSandbox.desktop_url opens it (test/e2e
        # TestAgentscopeBrowser opens it in Chromium and sees the page).
        self.check_desktop_url()

    def test_bad_calls_are_tool_errors(self):
        res = self.tool(self.sid, "browser_click", element="nothing", ref="e999")
        self.assertIs(res["isError"], True, res)
        res = self.tool(self.sid, "browser_navigate")
        self.assertIs(res["isError"], True, res)


class GuiTypeTest(DesktopSandboxTest):
    def setUp(self):
        super().setUp()
        self.sid = self.create("gui", meta={"session_ctx_id": "gui-suite"})

    def computer(self, **payload):
        # GuiSandbox.computer_use sends action, and coordinate/text when given.
        return self.tool(self.sid, "computer", **payload)

    def test_list_tools(self):
        tools = data("list_tools", identity=self.sid)
        self.assertEqual(set(tools), {"generic", "gui"})
        fn = tools["gui"]["computer"]["json_schema"]["function"]
        self.assertEqual(fn["name"], "computer")
        self.assertEqual(fn["parameters"]["required"], ["action"])
        self.assertEqual(set(fn["parameters"]["properties"]["action"]["enum"]), {
            "key", "type", "mouse_move", "left_click", "left_click_drag", "right_click",
            "middle_click", "double_click", "get_screenshot", "get_cursor_position"})
        info = data("get_info", identity=self.sid)
        self.assertIn("gui", info["version"])

    def test_computer_clicks_a_button(self):
        self.serve(self.sid, {"gui.html": GUI_PAGE})
        shot = self.computer(action="get_screenshot")
        self.assertIs(shot["isError"], False, shot)
        dims = json.loads(shot["content"][0]["text"])
        img = images(shot)
        self.assertEqual(img[0]["mimeType"], "image/png")
        self.assertEqual(png_size(base64.b64decode(img[0]["data"])), (dims["display_width_px"], dims["display_height_px"]))

        # The desktop has no browser open: the agent starts one from its
        # shell, whose DISPLAY is the desktop's (the one computer drives).
        self.assertEqual(self.shell(self.sid, "echo $DISPLAY")["content"][0]["text"].strip(), ":0")
        self.shell(self.sid, "setsid chromium --start-maximized http://127.0.0.1:%d/gui.html "
                             ">/tmp/chromium.log 2>&1 </dev/null &" % PORT)
        self.wait_shell(self.sid, "grep -q 'GET /gui.html' /tmp/http.log && echo loaded", "loaded", "the page load", tries=120)

        x, y = dims["display_width_px"] // 2, dims["display_height_px"] * 2 // 3
        res = self.computer(action="mouse_move", coordinate=[x, y])
        self.assertEqual(texts(res), "Moved cursor to: (%d, %d)" % (x, y))
        self.assertEqual(json.loads(texts(self.computer(action="get_cursor_position"))), {"x": x, "y": y})
        # The button may still be loading: click until the server saw one
        # (bounded).
        for _ in range(20):
            self.assertEqual(texts(self.computer(action="left_click", coordinate=[x, y])), "Left clicked")
            deadline = time.time() + 2
            while time.time() < deadline and self.clicks_seen(self.sid, "computer") == 0:
                time.sleep(0.2)
            if self.clicks_seen(self.sid, "computer") > 0:
                break
        self.assertGreater(self.clicks_seen(self.sid, "computer"), 0, "the click never reached the page")

        # Typing goes to the focused window (the page just clicked).
        self.assertEqual(texts(self.computer(action="type", text="hello")), "Typed text: hello")
        self.assertEqual(texts(self.computer(action="key", text="Return")), "Pressed key: Return")
        self.wait_shell(self.sid, "grep -c 'GET /typed?text=hello ' /tmp/http.log", "1", "the typed text's request")

    def test_bad_actions(self):
        res = self.computer(action="explode")
        self.assertIs(res["isError"], True)
        self.assertIn("Unknown action", texts(res))
        res = self.computer(action="mouse_move")
        self.assertIs(res["isError"], True)
        self.assertIn("Coordinate required", texts(res))
        res = self.computer(action="mouse_move", coordinate=[-1, 5])
        self.assertIs(res["isError"], True)
        res = self.computer(action="key", text="ctrl+l; rm -rf /")
        self.assertIs(res["isError"], True)

    def test_desktop_url(self):
        self.check_desktop_url()


if __name__ == "__main__":
    unittest.main()
