//go:build !nokube

package doctor

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kubeconfigFor writes a kubeconfig whose cluster is server.
func kubeconfigFor(t *testing.T, server string) string {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + server + `"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKubeReachable runs the real probe against a loopback API server that
// answers /version, and one that is not there.
func TestKubeReachable(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"major":"1","minor":"33","gitVersion":"v1.33.0"}`))
	}))
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kubeReachable(ctx, kubeconfigFor(t, ts.URL)); err != nil {
		t.Errorf("answering API server: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	if err := kubeReachable(ctx, kubeconfigFor(t, gone)); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("absent API server: %v", err)
	}
	if err := kubeReachable(ctx, filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("missing kubeconfig: %v", err)
	}
}
