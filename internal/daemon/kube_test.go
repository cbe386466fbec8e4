//go:build !nokube

package daemon

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/backend/kube"
	"github.com/agentbox/agentbox/internal/backend/multi"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/kubetest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestTypeTemplatesKubeDeployment: under CONTAINER_DEPLOYMENT=k8s the
// sandbox types run agentscope's images as Sandboxes; a type mapped to a
// dir or a stored template stays on native, an explicit kube: entry is kept.
func TestTypeTemplatesKubeDeployment(t *testing.T) {
	cfg, err := config.Load("", nil, map[string]string{
		"CONTAINER_DEPLOYMENT": "k8s",
		"SANDBOX_TEMPLATES":    `{"base":"host","fs":"dir:/srv/rootfs","py":"python:3.12","own":"kube:busybox:1"}`,
		"DEFAULT_SANDBOX_TYPE": "base,browser", "RUNTIME_SANDBOX_REGISTRY": "mirror.example", "RUNTIME_SANDBOX_IMAGE_TAG": "v1",
	})
	if err != nil {
		t.Fatal(err)
	}
	got := typeTemplates(cfg)
	want := map[string]string{
		"base":    "kube:mirror.example/agentscope/runtime-sandbox-base:v1",
		"browser": "kube:mirror.example/agentscope/runtime-sandbox-browser:v1",
		"fs":      "fs", "py": "python:3.12", "own": "kube:busybox:1",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("type %s: %q, want %q", k, got[k], v)
		}
	}
}

func TestKubeResolver(t *testing.T) {
	ctx := context.Background()
	on := kubeResolver{enabled: true, next: nameResolver{}}
	tmpl, err := on.Resolve(ctx, "kube:python:3.12-slim")
	if err != nil || tmpl.Kind != kube.TemplateKind || tmpl.Ref != "kube:python:3.12-slim" {
		t.Fatalf("kube:python:3.12-slim = %+v, %v", tmpl, err)
	}
	if _, err := on.Resolve(ctx, "kube:Not A Ref"); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("bad reference: %v", err)
	}
	if tmpl, _ := on.Resolve(ctx, "base"); tmpl.Kind != sandbox.TemplateImage {
		t.Fatalf("other names go on: %+v", tmpl)
	}
	off := kubeResolver{next: nameResolver{}}
	if tmpl, _ := off.Resolve(ctx, "kube:alpine"); tmpl.Kind != sandbox.TemplateImage {
		t.Fatalf("without the backend kube:alpine is a stored template's name: %+v", tmpl)
	}
}

// TestWithKube: with KUBE_BACKEND the daemon puts the Kubernetes backend
// beside native, connected through KUBECONFIG_PATH to a real apiserver
// serving agent-sandbox's CRDs; kube: templates go to it. Without the
// CRDs' namespace access it refuses to start, naming the settings.
func TestWithKube(t *testing.T) {
	c := kubetest.Start(t)
	ctx := context.Background()
	cfg, err := config.Load("", nil, map[string]string{"KUBE_BACKEND": "true", "K8S_NAMESPACE": c.Namespace,
		"KUBECONFIG_PATH": c.KubeconfigPath, "K8S_AGENT_IMAGE": "agentbox-agent:test"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := withKube(ctx, cfg, fake.New("/nonexistent/agent", t.TempDir()), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	m, ok := b.(*multi.Backend)
	if !ok || b.Name() != "fake+kube" || m.For(kube.TemplateKind).Name() != "kube" || !slices.Contains(b.Capabilities().Templates, kube.TemplateKind) {
		t.Fatalf("backend %s (%T), capabilities %+v", b.Name(), b, b.Capabilities())
	}
	cfg.Kube.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	if _, err := withKube(ctx, cfg, fake.New("/nonexistent/agent", t.TempDir()), slog.Default()); err == nil || !strings.Contains(err.Error(), "KUBE_BACKEND") {
		t.Fatalf("a missing kubeconfig: %v", err)
	}
	cfg.Kube.Kubeconfig, cfg.Kube.AgentImage = c.KubeconfigPath, ""
	if _, err := withKube(ctx, cfg, fake.New("/nonexistent/agent", t.TempDir()), slog.Default()); err == nil || !strings.Contains(err.Error(), "K8S_AGENT_IMAGE") {
		t.Fatalf("no agent image: %v", err)
	}
}
