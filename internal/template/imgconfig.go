package template

import (
	"maps"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// imageConfig maps an OCI image config's run configuration to ours.
func imageConfig(c v1.Config) sandbox.ImageConfig {
	out := sandbox.ImageConfig{
		Env:        slices.Clone(c.Env),
		WorkingDir: c.WorkingDir,
		User:       c.User,
		Entrypoint: slices.Clone(c.Entrypoint),
		Cmd:        slices.Clone(c.Cmd),
		StopSignal: c.StopSignal,
	}
	if len(c.Labels) > 0 {
		out.Labels = maps.Clone(c.Labels)
	}
	for p := range c.ExposedPorts {
		out.Ports = append(out.Ports, p)
	}
	slices.Sort(out.Ports)
	if h := c.Healthcheck; h != nil && len(h.Test) > 0 {
		out.Healthcheck = &sandbox.Healthcheck{
			Test: slices.Clone(h.Test), Interval: h.Interval, Timeout: h.Timeout,
			StartPeriod: h.StartPeriod, Retries: h.Retries,
		}
	}
	return out
}

// ociConfig writes our run configuration into an OCI config, keeping the
// fields we do not model (volumes, args escaping, ...) from base.
func ociConfig(base v1.Config, c sandbox.ImageConfig) v1.Config {
	out := base
	out.Env = slices.Clone(c.Env)
	out.WorkingDir = c.WorkingDir
	out.User = c.User
	out.Entrypoint = slices.Clone(c.Entrypoint)
	out.Cmd = slices.Clone(c.Cmd)
	out.StopSignal = c.StopSignal
	out.Labels = maps.Clone(c.Labels)
	out.ExposedPorts = nil
	if len(c.Ports) > 0 {
		out.ExposedPorts = map[string]struct{}{}
		for _, p := range c.Ports {
			out.ExposedPorts[p] = struct{}{}
		}
	}
	out.Healthcheck = nil
	if h := c.Healthcheck; h != nil {
		out.Healthcheck = &v1.HealthConfig{
			Test: slices.Clone(h.Test), Interval: h.Interval, Timeout: h.Timeout,
			StartPeriod: h.StartPeriod, Retries: h.Retries,
		}
	}
	return out
}
