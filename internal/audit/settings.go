package audit

import (
	"time"

	"github.com/agentbox/agentbox/internal/settings"
)

// Settings are the audit log's settings (internal/settings). The daemon
// gives them to Config.
type Settings struct {
	AuditEnabled   bool          `env:"AUDIT_ENABLED" envDefault:"true" help:"record every state-changing API call (POST, PUT, PATCH, DELETE on every door: who, from where, what, result) in the store; GET /v1/audit for operators (docs/events.md)"`
	AuditRetention time.Duration `env:"AUDIT_RETENTION" envDefault:"2592000" help:"seconds audit entries are kept (default 30 days); 0 = no time limit"`
	AuditMax       int           `env:"AUDIT_MAX" envDefault:"200000" min:"0" max:"100000000" help:"audit entries kept at most, the oldest trimmed first (every replica's together); 0 = no count limit"`
}

var defaults = settings.Defaults[Settings]()

// DefaultSettings are the settings' defaults.
func DefaultSettings() Settings { return defaults }
