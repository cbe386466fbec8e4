package daytona

import (
	"bytes"
	"encoding/base64"
	"os/exec"
	"testing"

	"github.com/agentbox/agentbox/api/proto/process"
)

// A process's config becomes one shell command a real sh runs with its
// directory, env and words intact, and its stdin comes through the
// wrapper's base64 lines up to the EOF line.
func TestCommandLineAndStdinWrapper(t *testing.T) {
	if _, err := exec.LookPath("base64"); err != nil {
		t.Skip("no base64 on this host")
	}
	cwd := "/tmp"
	pc := &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `pwd; printf '%s|' "$A" "$B"; cat`}, Cwd: &cwd,
		Envs: map[string]string{"A": "it's", "B": "x y"}}
	line, err := commandLine(pc)
	if err != nil {
		t.Fatal(err)
	}
	in := []byte("binary \x00\xff and\nlines\n")
	feed := base64.StdEncoding.EncodeToString(in[:5]) + "\n" + base64.StdEncoding.EncodeToString(in[5:]) + "\n" + stdinEOF + "\nnot read\n"
	cmd := exec.Command("bash", "-c", stdinWrapper+"{ "+line+"; }")
	cmd.Stdin = bytes.NewBufferString(feed)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]byte("/tmp\nit's|x y|"), in...); !bytes.Equal(out, want) {
		t.Fatalf("got %q, want %q", out, want)
	}
	if _, err := commandLine(&process.ProcessConfig{Cmd: "true", Envs: map[string]string{"A;rm": "x"}}); err == nil {
		t.Fatal("an env name that is not a shell name was taken")
	}
}
