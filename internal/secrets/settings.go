package secrets

import (
	"github.com/agentbox/agentbox/internal/settings"
)

// Settings are the secrets' settings (internal/settings). The daemon gives
// them to LoadKey and New.
type Settings struct {
	SecretsKey        string `env:"SECRETS_KEY" envDefault:"" help:"the key that encrypts tenants' secrets at rest: 32 bytes, base64 or hex. Empty on one host: a key is generated into the data dir (secrets.key, mode 0600). Required with REDIS_ENABLED (every replica must use the same one); see docs/secrets.md"`
	SecretsKeyFile    string `env:"SECRETS_KEY_FILE" envDefault:"" help:"file holding SECRETS_KEY (read at start), instead of the setting itself"`
	SecretsMaxPerUser int    `env:"SECRETS_MAX_PER_USER" envDefault:"100" min:"0" max:"100000" help:"secrets one user may keep; 0 = no cap"`
}

var defaults = settings.Defaults[Settings]()

// DefaultSettings are the settings' defaults.
func DefaultSettings() Settings { return defaults }
