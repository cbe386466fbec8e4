package agent_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/agent/agenttest"
)

// TestFileMetadata: an upload's X-Metadata-* headers become the file's
// user.* extended attributes, answered by the upload and by Stat, ListDir
// and Move; an attribute set on the file directly is metadata too; bad
// metadata is invalid_argument and writes nothing.
func TestFileMetadata(t *testing.T) {
	a, _ := startAgent(t, agenttest.Options{})
	hc := rawHTTP(t, a)
	probe := filepath.Join(a.Workdir, "probe")
	if err := unix.Mknod(probe, unix.S_IFREG|0o644, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(probe, "user.probe", []byte("1"), 0); errors.Is(err, unix.ENOTSUP) {
		t.Skipf("the test directory's filesystem keeps no user extended attributes: %v", err)
	}

	p := filepath.Join(a.Workdir, "m.txt")
	req, _ := http.NewRequest(http.MethodPost, filesURL(p, ""), strings.NewReader("data"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Metadata-author", "alice")
	req.Header.Set("X-Metadata-Purpose", "upload")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var up []struct {
		Path     string            `json:"path"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(body, &up); err != nil || resp.StatusCode != 200 {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	want := map[string]string{"author": "alice", "purpose": "upload"}
	if len(up) != 1 || !reflect.DeepEqual(up[0].Metadata, want) {
		t.Errorf("upload answered %s, want metadata %v", body, want)
	}

	stat := func(path string) map[string]string {
		t.Helper()
		resp, err := hc.Post("http://agent/filesystem.Filesystem/Stat", "application/json", strings.NewReader(`{"path":"`+path+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Entry struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"entry"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("stat %s: %d %v", path, resp.StatusCode, err)
		}
		return out.Entry.Metadata
	}
	if got := stat(p); !reflect.DeepEqual(got, want) {
		t.Errorf("stat metadata %v, want %v", got, want)
	}
	moved := filepath.Join(a.Workdir, "moved.txt")
	resp, err = hc.Post("http://agent/filesystem.Filesystem/Move", "application/json", strings.NewReader(`{"source":"`+p+`","destination":"`+moved+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"author":"alice"`) {
		t.Errorf("move: %d %s", resp.StatusCode, body)
	}
	// Set inside the sandbox (here: directly) as a user.* attribute.
	if err := unix.Setxattr(moved, "user.origin", []byte("inside"), 0); err != nil {
		t.Fatal(err)
	}
	want["origin"] = "inside"
	if got := stat(moved); !reflect.DeepEqual(got, want) {
		t.Errorf("stat metadata after setxattr %v, want %v", got, want)
	}
	resp, err = hc.Post("http://agent/filesystem.Filesystem/ListDir", "application/json", strings.NewReader(`{"path":"`+a.Workdir+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"origin":"inside"`) {
		t.Errorf("list lacks the metadata: %s", body)
	}

	// Over the bounds: refused, nothing written.
	bad := filepath.Join(a.Workdir, "bad.txt")
	req, _ = http.NewRequest(http.MethodPost, filesURL(bad, ""), strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Metadata-big", strings.Repeat("v", 4096))
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("oversized metadata: %d, want 400", resp.StatusCode)
	}
	if err := unix.Access(bad, unix.F_OK); err == nil {
		t.Errorf("oversized metadata wrote %s", bad)
	}
}
