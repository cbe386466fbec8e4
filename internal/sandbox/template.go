package sandbox

import "time"

// Template kinds.
const (
	// TemplateHost: the host's /usr read-only under a generated skeleton.
	TemplateHost = "host"
	// TemplateDir: an operator-registered unpacked root filesystem.
	TemplateDir = "dir"
	// TemplateImage: layers of the template store (an OCI image, a
	// Dockerfile build, a snapshot).
	TemplateImage = "image"
	// TemplateDocker: an image of a Docker engine, run by the Docker
	// backend (Ref is the image reference, "python:3.12-slim").
	TemplateDocker = "docker"
)

// Template is a resolved template: everything a backend needs to build a
// sandbox's root filesystem and its processes' defaults. Backends receive
// one, never a name to parse. It is stored with the sandbox, so a restarted
// daemon rebuilds the same root filesystem without asking the store.
type Template struct {
	// Ref is the name the sandbox was created from ("base", "python:3.12").
	Ref string `json:"ref"`
	// Digest identifies the exact content (sha256 of the image config for
	// images; empty for host).
	Digest string `json:"digest,omitempty"`
	Kind   string `json:"kind"`
	// Dir is the root filesystem of a TemplateDir.
	Dir string `json:"dir,omitempty"`
	// Layers are the unpacked layer directories of a TemplateImage, lowest
	// first, in overlayfs form (whiteouts as 0/0 character devices, opaque
	// directories marked with the trusted.overlay.opaque xattr). Files carry
	// the image's own ids (root is 0): backends map them into each
	// sandbox's id range (idmapped mounts), never chown them.
	Layers []string `json:"layers,omitempty"`
	// Config is the image's run configuration.
	Config ImageConfig `json:"config"`
}

// ImageConfig is what an image says about running it (the OCI image
// config's "config" object, and our own additions).
type ImageConfig struct {
	Env        []string          `json:"env,omitempty"` // KEY=VALUE
	WorkingDir string            `json:"working_dir,omitempty"`
	User       string            `json:"user,omitempty"` // name, uid, uid:gid
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Ports      []string          `json:"ports,omitempty"` // "8080/tcp"
	Labels     map[string]string `json:"labels,omitempty"`
	StopSignal string            `json:"stop_signal,omitempty"`
	// Healthcheck is the readiness check of a template that runs a service.
	Healthcheck *Healthcheck `json:"healthcheck,omitempty"`
	// StartCmd, ReadyCmd and ReadyPort are our own additions: an explicit
	// service and readiness check (see ServiceOf; the agentbox.start_cmd,
	// agentbox.ready_cmd and agentbox.ready_port labels say the same).
	StartCmd  []string `json:"start_cmd,omitempty"`
	ReadyCmd  []string `json:"ready_cmd,omitempty"`
	ReadyPort int      `json:"ready_port,omitempty"`
}

// Healthcheck is a Dockerfile HEALTHCHECK, used as a readiness check.
type Healthcheck struct {
	Test        []string      `json:"test,omitempty"` // ["CMD", ...] or ["CMD-SHELL", "..."]
	Interval    time.Duration `json:"interval,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	StartPeriod time.Duration `json:"start_period,omitempty"`
	Retries     int           `json:"retries,omitempty"`
}

// HostTemplate is the resolved zero-set-up template.
func HostTemplate() Template { return Template{Ref: TemplateHost, Kind: TemplateHost} }
