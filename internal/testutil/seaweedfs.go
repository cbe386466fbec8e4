package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// S3Server is a SeaweedFS server (weed mini: master, volume server, filer
// and S3 gateway in one process) on loopback, with one bucket and one
// identity, in a temp dir of its own.
type S3Server struct {
	Endpoint  string // http://127.0.0.1:port
	Bucket    string
	AccessKey string
	SecretKey string
	cmd       *exec.Cmd
	args      []string
	dir       string
	t         testing.TB
}

// seaweedBinary is weed built by scripts/seaweedfs.sh (scripts/test.sh
// sets AGENTBOX_SEAWEEDFS and AGENTBOX_REQUIRE_SEAWEEDFS); without it the
// test skips.
func seaweedBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AGENTBOX_SEAWEEDFS"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "seaweedfs.sh")
	if out, err := exec.Command(script, "--path").Output(); err == nil {
		if p := strings.TrimSpace(string(out)); p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if os.Getenv("AGENTBOX_REQUIRE_SEAWEEDFS") != "" {
		t.Fatal("no weed binary, and AGENTBOX_REQUIRE_SEAWEEDFS is set: scripts/seaweedfs.sh builds it")
	}
	t.Skip("needs SeaweedFS: scripts/seaweedfs.sh builds it into the test cache")
	return ""
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartS3 starts a SeaweedFS S3 server with bucket; it is stopped and its
// data removed when the test ends.
func StartS3(t testing.TB, bucket string) *S3Server {
	t.Helper()
	seaweedBinary(t) // skip early when there is none
	dir := t.TempDir()
	// Fresh keys per server: a test that finds one in a sandbox knows
	// where it came from.
	s := &S3Server{Bucket: bucket, AccessKey: "AK" + randHex(8), SecretKey: randHex(20), dir: dir, t: t}
	cfg := fmt.Sprintf(`{"identities":[{"name":"agentbox","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`, s.AccessKey, s.SecretKey)
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	p := func() string { return fmt.Sprint(freePort(t)) }
	s3port := p()
	s.Endpoint = "http://127.0.0.1:" + s3port
	// Every port its own (a default port's gRPC twin is port+10000, which
	// may be taken or past 65535); nothing but S3 is needed.
	s.args = []string{"mini", "-dir=" + filepath.Join(dir, "data"), "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + p(), "-master.port.grpc=" + p(), "-volume.port=" + p(), "-volume.port.grpc=" + p(),
		"-filer.port=" + p(), "-filer.port.grpc=" + p(), "-s3.port=" + s3port, "-s3.port.grpc=" + p(),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
		"-admin.port=" + p(), "-admin.port.grpc=" + p(), "-admin.port.legacy=0",
		"-master.volumeSizeLimitMB=64", "-s3.config=" + filepath.Join(dir, "s3.json"), "-bucket=" + bucket}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Start (re)starts the server; it returns once the bucket answers.
func (s *S3Server) Start() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("weed already running")
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "weed.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(seaweedBinary(s.t), s.args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start weed: %v", err)
	}
	s.cmd = cmd
	// The bucket is made at start; an unsigned HEAD of it answers 403 (or
	// 200) once the gateway serves it, 404 before.
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < 1200; i++ {
		resp, err := http.Head(s.Endpoint + "/" + s.Bucket)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _ := os.ReadFile(filepath.Join(s.dir, "weed.log"))
	s.Stop()
	s.t.Fatalf("SeaweedFS S3 on %s did not serve bucket %s: %.3000s", s.Endpoint, s.Bucket, out)
}

// Stop stops the server (its data stays for a later Start).
func (s *S3Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	s.cmd = nil
}

// Settings are the daemon's S3_VOLUMES_* settings for this server.
func (s *S3Server) Settings() []string {
	return []string{"S3_VOLUMES_ENDPOINT=" + s.Endpoint, "S3_VOLUMES_BUCKET=" + s.Bucket,
		"S3_VOLUMES_ACCESS_KEY=" + s.AccessKey, "S3_VOLUMES_SECRET_KEY=" + s.SecretKey,
		"S3_VOLUMES_REGION=us-east-1", "S3_VOLUMES_PATH_STYLE=true"}
}
