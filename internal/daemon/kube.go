//go:build !nokube

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/distribution/reference"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/backend/kube"
	"github.com/agentbox/agentbox/internal/backend/multi"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// KubeLinked reports whether this build has the Kubernetes backend and
// `agentbox node` (see kube_nokube.go for the build without them).
const KubeLinked = true

// withKube puts the Kubernetes backend beside b when the configuration
// asks for it (KUBE_BACKEND, CONTAINER_DEPLOYMENT=k8s): kube: templates
// run as agent-sandbox Sandboxes, everything else where it ran before.
func withKube(ctx context.Context, cfg *config.Config, b backend.Backend, log *slog.Logger) (backend.Backend, error) {
	k := cfg.Kube
	if !k.Enabled {
		return b, nil
	}
	kb, err := kube.New(ctx, kube.Config{Namespace: string(k.Namespace), Kubeconfig: k.Kubeconfig, Instance: string(k.Instance),
		AgentImage: k.AgentImage, RuntimeClass: string(k.RuntimeClass), GVisorRuntimeClass: string(k.GVisorClass), NodeSelector: k.NodeSelector, StorageClass: k.StorageClass,
		SeccompProfile: string(k.SeccompProfile), UserNamespaces: k.UserNamespaces, Defaults: cfg.Resources, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("Kubernetes backend (KUBE_BACKEND, CONTAINER_DEPLOYMENT=k8s): %w", err)
	}
	log.Info("Kubernetes backend enabled", "namespace", k.Namespace, "instance", k.Instance)
	if m, ok := b.(*multi.Backend); ok {
		return multi.New(m.Backends()[0], append(m.Backends()[1:], kb)...), nil
	}
	return multi.New(b, kb), nil
}

// kubeResolver resolves "kube:IMAGE" to a template the Kubernetes backend
// runs (the cluster pulls the image); other names go to next, and so do
// all names without the Kubernetes backend.
type kubeResolver struct {
	enabled bool
	next    resolver
}

func (r kubeResolver) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	image, ok := strings.CutPrefix(ref, kube.TemplatePrefix)
	if !ok || !r.enabled {
		return r.next.Resolve(ctx, ref)
	}
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		return sandbox.Template{}, sandbox.Errorf(sandbox.ClassInvalid, "template %q: not an image reference: %v", ref, err)
	}
	return sandbox.Template{Ref: ref, Kind: kube.TemplateKind}, nil
}

// kubeTypeTemplate is the template of a sandbox type under
// CONTAINER_DEPLOYMENT=k8s: agentscope's image of the type on the cluster,
// unless the operator mapped the type to an explicit kube: image.
func kubeTypeTemplate(cfg *config.Config, typ, target string) string {
	if cfg.Deployment != "k8s" || strings.HasPrefix(target, kube.TemplatePrefix) {
		return target
	}
	if target == "" || target == sandbox.TemplateHost || target == cfg.RuntimeImage(typ) || target == docker.ImagePrefix+cfg.RuntimeImage(typ) {
		return kube.TemplatePrefix + cfg.RuntimeImage(typ)
	}
	return target
}
