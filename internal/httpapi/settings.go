package httpapi

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/settings"
)

// Settings are the shared server's settings (internal/settings): uploads,
// previews, the desktop page, /metrics and template transfers. The daemon
// gives them to Config.
type Settings struct {
	MaxUploadBytes    int64         `env:"MAX_UPLOAD_SIZE" envDefault:"1G" help:"largest file upload"`
	PreviewDomain     PreviewDomain `env:"PREVIEW_DOMAIN" envDefault:"localhost" help:"browser previews: sandbox port P at <P>-<id>.<domain>, each its own origin (e.g. sandbox.example.com); empty turns them off"`
	PreviewMaxPerUser int           `env:"PREVIEW_MAX_PER_USER" envDefault:"64" min:"0" max:"1048576" help:"preview requests (both forms; a WebSocket while it is open) one user may have in flight on this daemon; more get 429 with Retry-After, 0 = unlimited"`
	// A sandbox's server gets a minute by default to start its answer (a
	// development server compiling a page on its first request), as
	// behind nginx's default proxy_read_timeout.
	PreviewHeaderTimeout time.Duration    `env:"PREVIEW_HEADER_TIMEOUT" envDefault:"60" help:"seconds a preview waits for the sandbox server to start its answer (its response headers) before it fails with 504; an answer under way (a stream, a WebSocket) has no limit"`
	NoVNCDir             settings.AbsPath `env:"DESKTOP_NOVNC_DIR" envDefault:"/usr/share/novnc" help:"host directory of noVNC's client (Debian's novnc package), served to the desktop page of desktop sandboxes; never the sandbox's copy"`
	MetricsToken         string           `env:"METRICS_TOKEN" envDefault:"" help:"bearer token the operator reads /metrics with; without it /metrics is refused when API keys are set"`
	TemplateMaxImport    int64            `env:"TEMPLATE_MAX_IMPORT" envDefault:"8G" help:"largest tarball a template import may upload"`
	TemplateMaxPulls     int              `env:"TEMPLATE_MAX_PULLS" envDefault:"2" min:"1" max:"64" help:"template pulls, imports and exports running at once (automatic pulls included); more wait for a turn"`
}

var defaults = settings.Defaults[Settings]()

// DefaultSettings are the settings' defaults: what the server (and the
// doors, for their upload limit) take for fields left zero.
func DefaultSettings() Settings { return defaults }

// PreviewDomain is PREVIEW_DOMAIN: a DNS name whose subdomains reach the
// server, optionally with :port, lower-cased; "" turns previews off.
type PreviewDomain string

// UnmarshalText checks the name.
func (d *PreviewDomain) UnmarshalText(b []byte) error {
	v := string(b)
	host := v
	if h, _, err := net.SplitHostPort(v); err == nil {
		host = h
	}
	if strings.ContainsAny(v, "/ *") || strings.HasPrefix(host, ".") || strings.HasSuffix(host, ".") || net.ParseIP(host) != nil {
		return fmt.Errorf("want a DNS name whose subdomains reach this server, optionally with :port")
	}
	*d = PreviewDomain(strings.ToLower(v))
	return nil
}
