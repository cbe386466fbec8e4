package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/config"
)

// TestRunNodeNeedsSettings: `agentbox node` says which settings it lacks
// before it touches the host.
func TestRunNodeNeedsSettings(t *testing.T) {
	cfg, err := config.Load("", nil, map[string]string{"AGENTBOX_DATA_DIR": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	err = RunNode(context.Background(), Options{Config: cfg})
	if err == nil || !strings.Contains(err.Error(), "KUBE_NODE_ADDRESS") {
		t.Fatalf("RunNode without settings: %v, want a message naming KUBE_NODE_ADDRESS", err)
	}
	if _, err := config.Load("", nil, map[string]string{"KUBE_NODE_NAME": "Bad_Name"}); err == nil {
		t.Fatal("KUBE_NODE_NAME=Bad_Name accepted")
	}
	if _, err := config.Load("", nil, map[string]string{"KUBE_NODE_ADDRESS": "node.example"}); err == nil {
		t.Fatal("KUBE_NODE_ADDRESS=node.example accepted")
	}
}
