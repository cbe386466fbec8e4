package agent_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent/agenttest"
)

// These tests speak to the agent exactly like the E2B JS SDK does: the
// connect protocol with the JSON codec, hand-framed, so field names and
// encodings are checked on the wire rather than through generated code.

// connectFrame envelopes one JSON message: flag byte, big-endian length.
func connectFrame(msg string) []byte {
	b := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

type frame struct {
	flags byte
	body  map[string]any
}

// readFrames parses enveloped frames until the end-of-stream frame.
func readFrames(t *testing.T, r io.Reader) []frame {
	t.Helper()
	var out []frame
	for range 10000 {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			t.Fatalf("frame header after %d frames: %v", len(out), err)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		f := frame{flags: hdr[0]}
		if err := json.Unmarshal(body, &f.body); err != nil {
			t.Fatalf("frame %q: %v", body, err)
		}
		out = append(out, f)
		if f.flags&0x02 != 0 {
			return out
		}
	}
	t.Fatal("no end-of-stream frame")
	return nil
}

func TestE2BJSONProcessStart(t *testing.T) {
	a, _ := startAgent(t, agenttest.Options{})
	hc := rawHTTP(t, a)
	req := `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi; sleep 1.2; echo oops >&2; exit 3"],"envs":{"X":"1"}},"stdin":false}`
	hr, _ := http.NewRequest(http.MethodPost, "http://agent/process.Process/Start", bytes.NewReader(connectFrame(req)))
	hr.Header.Set("Content-Type", "application/connect+json")
	hr.Header.Set("Connect-Protocol-Version", "1")
	hr.Header.Set("Keepalive-Ping-Interval", "1")
	hr.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
	resp, err := hc.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	frames := readFrames(t, resp.Body)
	events := make([]map[string]any, 0, len(frames))
	for _, f := range frames[:len(frames)-1] {
		ev, ok := f.body["event"].(map[string]any)
		if !ok {
			t.Fatalf("frame without event: %v", f.body)
		}
		events = append(events, ev)
	}
	if start, ok := events[0]["start"].(map[string]any); !ok || start["pid"].(float64) <= 0 {
		t.Fatalf("first event %v", events[0])
	}
	var stdout, stderr string
	var keepalives int
	for _, ev := range events[1 : len(events)-1] {
		switch {
		case ev["data"] != nil:
			d := ev["data"].(map[string]any)
			if s, ok := d["stdout"].(string); ok {
				b, _ := base64.StdEncoding.DecodeString(s)
				stdout += string(b)
			}
			if s, ok := d["stderr"].(string); ok {
				b, _ := base64.StdEncoding.DecodeString(s)
				stderr += string(b)
			}
		case ev["keepalive"] != nil:
			keepalives++
		default:
			t.Errorf("unexpected event %v", ev)
		}
	}
	end, ok := events[len(events)-1]["end"].(map[string]any)
	if !ok {
		t.Fatalf("last event %v", events[len(events)-1])
	}
	if end["exitCode"] != float64(3) || end["exited"] != true || end["status"] != "exit status 3" {
		t.Errorf("end event %v", end)
	}
	if stdout != "hi\n" || stderr != "oops\n" || keepalives < 1 {
		t.Errorf("stdout %q stderr %q keepalives %d", stdout, stderr, keepalives)
	}
	if last := frames[len(frames)-1]; len(last.body) != 0 {
		t.Errorf("end-of-stream frame %v", last.body)
	}
}

func TestE2BJSONErrorsAndUnary(t *testing.T) {
	a, _ := startAgent(t, agenttest.Options{})
	hc := rawHTTP(t, a)

	// A streaming error arrives in the end-of-stream frame.
	hr, _ := http.NewRequest(http.MethodPost, "http://agent/process.Process/Connect",
		bytes.NewReader(connectFrame(`{"process":{"pid":999999}}`)))
	hr.Header.Set("Content-Type", "application/connect+json")
	resp, err := hc.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	frames := readFrames(t, resp.Body)
	resp.Body.Close()
	e, _ := frames[len(frames)-1].body["error"].(map[string]any)
	if e == nil || e["code"] != "not_found" {
		t.Errorf("connect to unknown pid: %v", frames[len(frames)-1].body)
	}

	// Unary JSON: lowerCamel names, enum names, 64-bit ints as strings.
	resp, err = hc.Post("http://agent/filesystem.Filesystem/ListDir", "application/json",
		strings.NewReader(`{"path":"`+a.Workdir+`/..","depth":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`"entries"`, `"type":"FILE_TYPE_DIRECTORY"`, `"modifiedTime"`, `"permissions":"`, `"size":"`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("ListDir JSON lacks %s: %s", want, body)
		}
	}

	resp, err = hc.Post("http://agent/filesystem.Filesystem/Stat", "application/json", strings.NewReader(`{"path":"/nonexistent/x"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !bytes.Contains(body, []byte(`"code":"not_found"`)) {
		t.Errorf("stat missing: %d %s", resp.StatusCode, body)
	}
}

// TestE2BDialect: with X-Agentbox-Dialect: e2b (the E2B front end sets
// it), a process without a cwd starts in E2B's working directory, where
// relative file paths resolve too: the template's workdir (--workdir), or
// the user's home when that is agentbox's /workspace; and removing a
// missing path succeeds, as in envd. Without it, a missing path is
// not_found.
func TestE2BDialect(t *testing.T) {
	a, _ := startAgent(t, agenttest.Options{})
	hc := rawHTTP(t, a)
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	call := func(hc *http.Client, path, body string, dialect bool) *http.Response {
		t.Helper()
		hr, _ := http.NewRequest(http.MethodPost, "http://agent"+path, strings.NewReader(body))
		hr.Header.Set("Content-Type", "application/json")
		if strings.HasPrefix(path, "/process.") {
			hr, _ = http.NewRequest(http.MethodPost, "http://agent"+path, bytes.NewReader(connectFrame(body)))
			hr.Header.Set("Content-Type", "application/connect+json")
		}
		if dialect {
			hr.Header.Set("X-Agentbox-Dialect", "e2b")
		}
		resp, err := hc.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	pwd := func(hc *http.Client, dialect bool) string {
		t.Helper()
		resp := call(hc, "/process.Process/Start", `{"process":{"cmd":"pwd"},"stdin":false}`, dialect)
		var out string
		for _, f := range readFrames(t, resp.Body) {
			ev, _ := f.body["event"].(map[string]any)
			if d, ok := ev["data"].(map[string]any); ok {
				b, _ := base64.StdEncoding.DecodeString(d["stdout"].(string))
				out += string(b)
			}
		}
		return strings.TrimSpace(out)
	}

	// A template's own workdir is E2B's working directory.
	if got := pwd(hc, true); got != a.Workdir {
		t.Errorf("E2B process without cwd runs in %q, want the workdir %q", got, a.Workdir)
	}
	if got := pwd(hc, false); got != a.Workdir {
		t.Errorf("process without cwd runs in %q, want --workdir %q", got, a.Workdir)
	}
	if err := os.WriteFile(a.Workdir+"/rel.txt", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(call(hc, "/filesystem.Filesystem/Stat", `{"path":"rel.txt"}`, true).Body)
	if !strings.Contains(string(body), `"path":"`+a.Workdir+`/rel.txt"`) {
		t.Errorf("E2B stat of a relative path: %s, want it in %s", body, a.Workdir)
	}
	// agentbox's /workspace is replaced by the user's home.
	ws, _ := startAgent(t, agenttest.Options{Workdir: "/workspace"})
	if got := pwd(rawHTTP(t, ws), true); got != home {
		t.Errorf("E2B process without cwd in a /workspace sandbox runs in %q, want the home %q", got, home)
	}

	missing := `{"path":"` + a.Workdir + `/never-existed"}`
	if got := call(hc, "/filesystem.Filesystem/Remove", missing, true).StatusCode; got != 200 {
		t.Errorf("E2B remove of a missing path: %d, want 200", got)
	}
	if got := call(hc, "/filesystem.Filesystem/Remove", missing, false).StatusCode; got != 404 {
		t.Errorf("remove of a missing path: %d, want 404", got)
	}
}
