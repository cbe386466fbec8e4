package daemon

import (
	"context"
	"testing"

	"github.com/agentbox/agentbox/internal/backend/kube"
	"github.com/agentbox/agentbox/internal/config"
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
