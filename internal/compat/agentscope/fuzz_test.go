package agentscope

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzToolArgs covers what an agentscope client sends: the JSON keyword
// (and positional) arguments of a method, and the tool arguments and
// paths inside them. Decoded arguments only ever name declared
// parameters, required ones are present; every path a file tool accepts is
// /workspace or below it.
func FuzzToolArgs(f *testing.F) {
	f.Add([]byte(`{"identity":"sbx-1","tool_name":"run_shell_command","arguments":{"command":"ls"}}`), "a.txt")
	f.Add([]byte(`{"args":["sbx-1","read_file",{"path":"../../etc/passwd"}]}`), "../../etc/passwd")
	f.Add([]byte(`{"args":"sbx-1","kwargs":{"tool_name":"x"}}`), "/workspace/../workspace2/x")
	f.Add([]byte(`{"args":[1,2,3,4,5,6,7,8,9]}`), "/workspace")
	f.Add([]byte(`{"kwargs":"not an object"}`), "a\x00b")
	f.Add([]byte(`[]`), "~/x")
	f.Add([]byte(`{"identity":null}`), strings.Repeat("../", 2000))
	s := &Server{}
	var callTool method
	for _, m := range s.methods() {
		if m.name == "call_tool" {
			callTool = m
		}
	}
	if callTool.name == "" {
		f.Fatal("no call_tool method")
	}
	f.Fuzz(func(t *testing.T, body []byte, p string) {
		req := httptest.NewRequest("POST", "/sandbox/call_tool", bytes.NewReader(body))
		args, _, err := decodeArgs(httptest.NewRecorder(), req, callTool)
		if err == nil {
			for k := range args {
				if !contains(callTool.params, k) && !callTool.anyKeys {
					t.Fatalf("%q: undeclared argument %q accepted", body, k)
				}
			}
			for _, r := range callTool.params[:callTool.required] {
				if len(args[r]) == 0 {
					t.Fatalf("%q: required %q missing", body, r)
				}
			}
			var toolArgs map[string]any
			if json.Unmarshal(args["arguments"], &toolArgs) == nil {
				_, _ = argString(toolArgs, "path")
				_, _ = argStrings(toolArgs, "paths", false)
			}
		}
		abs, err := toolPath(map[string]any{"path": p}, "path")
		if err == nil && abs != workspaceRoot && !strings.HasPrefix(abs, workspaceRoot+"/") {
			t.Fatalf("path %q resolved to %q outside %s", p, abs, workspaceRoot)
		}
		if err == nil && strings.Contains(abs, "/../") {
			t.Fatalf("path %q resolved to an unclean %q", p, abs)
		}
	})
}

// FuzzStoragePath: a caller's storage_path resolves inside the caller's own
// area of STORAGE_FOLDER or not at all, and owner areas never collide or
// climb out of the folder, whatever the owner's name.
func FuzzStoragePath(f *testing.F) {
	f.Add("alice", "bob", "ws")
	f.Add("alice", "alice/..", "../bob/x")
	f.Add("..", "~", "/etc/passwd")
	f.Add("a/b", "a\x00b", "x.saving")
	f.Add("é", "e", strings.Repeat("a/", 600))
	dir := filepath.Join(f.TempDir(), "storage")
	s := &Server{cfg: Config{StorageFolder: dir}}
	f.Fuzz(func(t *testing.T, owner, other, p string) {
		area := s.ownerStorage(owner)
		if filepath.Dir(area) != dir {
			t.Fatalf("owner %q: area %q not directly in %s", owner, area, dir)
		}
		if owner != other && area == s.ownerStorage(other) {
			t.Fatalf("owners %q and %q share %q", owner, other, area)
		}
		got, err := s.resolveStoragePath(owner, p)
		if err != nil || got == "" {
			return
		}
		rel, rerr := filepath.Rel(area, got)
		if rerr != nil || !filepath.IsLocal(rel) || rel == "." {
			t.Fatalf("owner %q, storage_path %q: resolved to %q outside %q", owner, p, got, area)
		}
		if strings.ContainsRune(got, 0) || strings.HasSuffix(got, savingSuffix) {
			t.Fatalf("storage_path %q resolved to %q", p, got)
		}
	})
}
