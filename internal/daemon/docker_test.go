package daemon

import (
	"context"
	"testing"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestTypeTemplatesDockerDeployment: under CONTAINER_DEPLOYMENT=docker the
// sandbox types run agentscope's images (RUNTIME_SANDBOX_* naming) on the
// engine; a type the operator mapped to a dir or a stored template stays
// on native, an explicit docker: entry is kept.
func TestTypeTemplatesDockerDeployment(t *testing.T) {
	cfg, err := config.Load("", nil, map[string]string{
		"CONTAINER_DEPLOYMENT": "docker",
		"SANDBOX_TEMPLATES":    `{"base":"host","fs":"dir:/srv/rootfs","py":"python:3.12","own":"docker:busybox:1"}`,
		"DEFAULT_SANDBOX_TYPE": "base,browser", "RUNTIME_SANDBOX_REGISTRY": "mirror.example", "RUNTIME_SANDBOX_IMAGE_TAG": "v1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.DockerEnabled {
		t.Fatal("CONTAINER_DEPLOYMENT=docker does not enable the Docker backend")
	}
	got := typeTemplates(cfg)
	want := map[string]string{
		"base":    "docker:mirror.example/agentscope/runtime-sandbox-base:v1",
		"browser": "docker:mirror.example/agentscope/runtime-sandbox-browser:v1",
		"fs":      "fs", "py": "python:3.12", "own": "docker:busybox:1",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("type %s: %q, want %q", k, got[k], v)
		}
	}
	// The native deployment keeps its mapping.
	cfg, _ = config.Load("", nil, map[string]string{"DOCKER_BACKEND": "true"})
	if got := typeTemplates(cfg); got["base"] != "host" {
		t.Errorf("native deployment with the Docker backend on: base -> %q", got["base"])
	}
}

type nameResolver struct{}

func (nameResolver) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	return sandbox.Template{Ref: ref, Kind: sandbox.TemplateImage}, nil
}

func TestDockerResolver(t *testing.T) {
	ctx := context.Background()
	on := dockerResolver{enabled: true, next: nameResolver{}}
	tmpl, err := on.Resolve(ctx, "docker:python:3.12-slim")
	if err != nil || tmpl.Kind != sandbox.TemplateDocker || tmpl.Ref != "docker:python:3.12-slim" {
		t.Fatalf("docker:python:3.12-slim = %+v, %v", tmpl, err)
	}
	if tmpl, err := on.Resolve(ctx, "python:3.12"); err != nil || tmpl.Kind != sandbox.TemplateImage {
		t.Fatalf("a store name went elsewhere: %+v, %v", tmpl, err)
	}
	for _, bad := range []string{"docker:", "docker:UPPER", "docker:a b", "docker:x@sha256:nothex"} {
		if _, err := on.Resolve(ctx, bad); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("%q: %v, want invalid_argument", bad, err)
		}
	}
	off := dockerResolver{next: nameResolver{}}
	if tmpl, err := off.Resolve(ctx, "docker:3.12"); err != nil || tmpl.Kind != sandbox.TemplateImage {
		t.Errorf("Docker backend off: a store name docker:TAG = %+v, %v", tmpl, err)
	}
}
