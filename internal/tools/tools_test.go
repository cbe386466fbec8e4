package tools

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
)

func TestKitSchemas(t *testing.T) {
	k := New() // panics on a schema that does not resolve
	session, bound := k.Defs(SessionMode), k.Defs(BoundMode)
	if len(session) != len(bound)+3 {
		t.Fatalf("session mode has %d tools, bound %d: want 3 more (sandbox_*)", len(session), len(bound))
	}
	for _, d := range session {
		props := d.InputSchema["properties"].(map[string]any)
		_, hasID := props["sandbox_id"]
		global := strings.HasPrefix(d.Name, "sandbox_")
		if hasID == global && d.Name != "sandbox_kill" {
			t.Errorf("%s: sandbox_id present=%v", d.Name, hasID)
		}
		if d.InputSchema["additionalProperties"] != false {
			t.Errorf("%s: accepts unknown arguments", d.Name)
		}
		if _, err := json.Marshal(d.InputSchema); err != nil {
			t.Errorf("%s: %v", d.Name, err)
		}
	}
	for _, d := range bound {
		if _, ok := d.InputSchema["properties"].(map[string]any)["sandbox_id"]; ok {
			t.Errorf("bound %s has sandbox_id", d.Name)
		}
	}
}

func TestCallRefusesBeforeTheServer(t *testing.T) {
	// A server that does not exist: these calls must fail before any
	// request is made.
	c, err := client.New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	s := New().NewSession(c, SessionOptions{Sandbox: "sb1"})
	ctx := context.Background()
	if _, err := s.Call(ctx, "sandbox_create", nil); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("sandbox_create in bound mode: %v", err)
	}
	if _, err := s.Call(ctx, "nope", nil); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("unknown tool: %v", err)
	}
	for _, c := range []struct{ tool, args, want string }{
		{"file_read", `{}`, `missing properties: \["path"\]`},
		{"file_read", `{"path": 3}`, `invalid arguments`},
		{"file_read", `[1]`, `must be a JSON object`},
		{"file_read", `{"path": "/etc/passwd"}`, `outside the workspace`},
		{"file_read", `{"path": "../../etc"}`, `outside the workspace`},
		{"file_write", `{"path": "/workspace/../root/x", "content": ""}`, `outside the workspace`},
		{"shell_exec", `{"command": "x", "timeout": 0}`, `invalid arguments`},
		{"http_request", `{"url": "ftp://x"}`, `http://`},
		{"pip_install", `{"packages": ["-e."]}`, `not options`},
		// Values that git, pip or npm would read as options or as a
		// transport that runs a command.
		{"pip_install", `{"packages": ["requests", " --index-url=http://x"]}`, `not options`},
		{"npm_install", `{"packages": ["--prefix=/"]}`, `not options`},
		{"git_clone", `{"url": "--upload-pack=touch /tmp/x"}`, `invalid repository URL`},
		{"git_clone", `{"url": "Ext::sh -c touch% /tmp/x"}`, `invalid repository URL`},
		{"git_diff", `{"ref": "--output=/tmp/x"}`, `invalid ref`},
		{"git_push", `{"remote": "--receive-pack=touch /tmp/x"}`, `invalid remote`},
		{"git_push", `{"branch": "--exec=x"}`, `invalid remote`},
		{"git_commit", `{"message": "m", "author": "--exec=x"}`, `author must look like`},
		{"file_read", `{"path": "a", "sandbox_id": "other"}`, `sandbox_id`},
	} {
		res, err := s.Call(ctx, c.tool, json.RawMessage(c.args))
		if err != nil {
			t.Fatalf("%s %s: %v", c.tool, c.args, err)
		}
		if !res.IsError || !strings.Contains(res.Text(), "Error: ") {
			t.Errorf("%s %s: want a tool error, got %+v", c.tool, c.args, res)
			continue
		}
		if ok, _ := regexpMatch(c.want, res.Text()); !ok {
			t.Errorf("%s %s: %q does not match %q", c.tool, c.args, res.Text(), c.want)
		}
	}
}

func TestCapture(t *testing.T) {
	var c capture
	big := strings.Repeat("a", maxOutputHead) + strings.Repeat("b", 100<<10) + strings.Repeat("c", maxOutputTail)
	for i := 0; i < len(big); i += 777 {
		c.Write([]byte(big[i:min(i+777, len(big))]))
	}
	out := c.String()
	if !c.truncated() || c.total != int64(len(big)) {
		t.Fatalf("truncated=%v total=%d", c.truncated(), c.total)
	}
	if !strings.HasPrefix(out, strings.Repeat("a", maxOutputHead)+"\n\n[... ") || !strings.HasSuffix(out, strings.Repeat("c", maxOutputTail)) {
		t.Errorf("head/tail wrong: %q...%q", out[:40], out[len(out)-40:])
	}
	if !strings.Contains(out, "[... 102400 bytes omitted ...]") {
		t.Errorf("no omission note")
	}
	var small capture
	small.Write([]byte("hi\n"))
	if small.String() != "hi\n" || small.truncated() {
		t.Errorf("small: %q", small.String())
	}
}

func TestLooksBinary(t *testing.T) {
	for _, c := range []struct {
		data string
		want bool
	}{
		{"plain text\n", false},
		{"héllo wörld ✓", false},
		{"a\x00b", true},
		{"\xff\xfe\xfd garbage", true},
		{strings.Repeat("é", 5000), false}, // a character cut by the 8 KiB sample
		{"", false},
	} {
		if got := looksBinary([]byte(c.data)); got != c.want {
			t.Errorf("looksBinary(%.20q) = %v", c.data, got)
		}
	}
	if imageType([]byte("\x89PNG\r\n\x1a\nrest")) != "image/png" || imageType([]byte("text")) != "" {
		t.Errorf("imageType")
	}
}

func TestPlainTerminal(t *testing.T) {
	in := "\x1b[1;32muser@box\x1b[0m:~$ ls\r\nfile\r\nprogress 10%\rprogress 100%\r\n\x1b]0;title\x07done\x07"
	if got := plainTerminal(in); got != "user@box:~$ ls\nfile\nprogress 100%\ndone" {
		t.Errorf("plainTerminal = %q", got)
	}
}

func TestSplitHTTP(t *testing.T) {
	head, body := splitHTTP("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nA: b\r\n\r\nbody\r\n\r\nmore")
	if !strings.Contains(head, "200 OK") || body != "body\r\n\r\nmore" {
		t.Errorf("head %q body %q", head, body)
	}
}

func TestShellQuote(t *testing.T) {
	if got := shellQuote(`it's "x" $y`); got != `'it'\''s "x" $y'` {
		t.Errorf("shellQuote = %s", got)
	}
}

func regexpMatch(re, s string) (bool, error) { return regexp.MatchString(re, s) }
