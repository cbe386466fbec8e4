package agentscope

import (
	"log/slog"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
)

// Config configures the front-end. The daemon fills it from the server
// configuration.
type Config struct {
	// APIKeys maps API keys to users, as for the native API. Empty: auth is
	// off and every caller is user "default".
	APIKeys map[string]string
	// Prefix is CONTAINER_PREFIX_KEY: sandbox names are Prefix + id, and an
	// identity may be given with or without it.
	Prefix string
	// DefaultTypes is DEFAULT_SANDBOX_TYPE; the first is used when a request
	// names no type.
	DefaultTypes []string
	// StorageFolder (FILE_SYSTEM=local) receives a copy of a sandbox's
	// workspace when it is released or recycled, and gives it back when the
	// sandbox is restored. Empty: no copies.
	StorageFolder string
	// Objects (FILE_SYSTEM=oss) keeps the copies in a bucket instead, and
	// StorageFolder only stages them (objects.go).
	Objects *Objects
	// SandboxTimeout is how long an agentscope sandbox lives without any
	// call; agentscope sandboxes live until released, so this is the
	// server's maximum and it is extended on use.
	SandboxTimeout time.Duration
	// ToolTimeout bounds one tool call (run_shell_command, run_ipython_cell,
	// the filesystem tools).
	ToolTimeout time.Duration
	// MaxOutput caps each of stdout and stderr kept for one tool call.
	MaxOutput int64
	// MaxUploadBytes caps a file written through /proxy/{id}/workspace.
	MaxUploadBytes int64
	// Version is reported by GET /health.
	Version string
	// DesktopLink mints the signed noVNC link GET /desktop/{id}/...
	// redirects to (desktop.go); nil: the route answers that the desktop
	// is not available.
	DesktopLink DesktopLinkFunc
	// Docs keeps the records (the daemon's store: Redis shares them
	// between replicas, bbolt keeps them across restarts). nil: memory.
	Docs store.Docs
	// DataPlane is the service every tool and sandbox route works through
	// (nil: one over the manager).
	DataPlane *dataplane.Service
	// Peers reaches the other replicas (nil: none, a lone daemon).
	Peers  Peers
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Docs == nil {
		c.Docs = store.NewMemory()
	}
	if len(c.DefaultTypes) == 0 {
		c.DefaultTypes = manager.DefaultSettings().DefaultTypes
	}
	if c.SandboxTimeout <= 0 {
		c.SandboxTimeout = manager.DefaultSettings().MaxTimeout
	}
	if c.ToolTimeout <= 0 {
		c.ToolTimeout = 10 * time.Minute
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = dataplane.DefaultSettings().MaxExecOutputBytes
	}
	if c.MaxUploadBytes <= 0 {
		c.MaxUploadBytes = httpapi.DefaultSettings().MaxUploadBytes
	}
	if c.Version == "" {
		c.Version = "dev"
	}
}
