//go:build nokube

package daemon

import (
	"context"
	"errors"
	"log/slog"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The nokube build (bin/agentbox) leaves out the Kubernetes backend and
// `agentbox node`. The Kubernetes client libraries they link cost every
// start of the binary about 25 ms of package initialisers and make it four
// times larger, which every CLI command, every `agentbox run` and every
// sandbox's init (an exec of the daemon binary) pays. bin/agentbox-kube is
// the full build; the command line hands Kubernetes work to it (see
// cmd/agentbox, kube.go).

// KubeLinked reports whether this build has the Kubernetes backend and
// `agentbox node`.
const KubeLinked = false

// ErrNoKube is what the Kubernetes entry points of this build return.
var ErrNoKube = errors.New("this agentbox binary is built without Kubernetes support (tag nokube); agentbox-kube, which make build puts next to it, has it")

// withKube returns b: a configuration that asks for the Kubernetes
// backend is refused.
func withKube(_ context.Context, cfg *config.Config, b backend.Backend, _ *slog.Logger) (backend.Backend, error) {
	if cfg.Kube.Enabled {
		return nil, ErrNoKube
	}
	return b, nil
}

// kubeResolver passes every name on: there is no kube: template here.
type kubeResolver struct {
	enabled bool
	next    resolver
}

func (r kubeResolver) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	return r.next.Resolve(ctx, ref)
}

// kubeTypeTemplate keeps target: no sandbox type maps to a kube: image.
func kubeTypeTemplate(_ *config.Config, _, target string) string { return target }

// RunNode refuses: `agentbox node` is in agentbox-kube.
func RunNode(context.Context, Options) error { return ErrNoKube }
