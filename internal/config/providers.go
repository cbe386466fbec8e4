package config

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/settings"
)

// ProviderSettings configure the remote providers: sandboxes created at
// an E2B-compatible or a Daytona-compatible API (docs/providers.md). The
// seed's names (SANDBOX_PROVIDER, E2B_API_KEY, E2B_DOMAIN, DAYTONA_API_KEY,
// DAYTONA_SERVER_URL, DAYTONA_TARGET) plus agentbox's own.
type ProviderSettings struct {
	SandboxProvider Provider            `env:"SANDBOX_PROVIDER" envDefault:"local" help:"remote provider beside this host's backends: local (none), e2b (an E2B-compatible API: E2B's cloud, another agentbox) or daytona (a Daytona-compatible API: Daytona's cloud, another agentbox); templates named e2b:NAME or daytona:SNAPSHOT then run at the provider (docs/providers.md)"`
	E2BAPIKey       string              `env:"E2B_API_KEY" envDefault:"" help:"the operator's key of the E2B-compatible provider (sent as X-API-Key to its lifecycle API only; never shown to tenants or sandboxes); required with SANDBOX_PROVIDER=e2b"`
	E2BDomain       string              `env:"E2B_DOMAIN" envDefault:"e2b.app" help:"the provider's domain: its API is https://api.<domain>, a sandbox's port P https://P-<id>.<domain>"`
	E2BAPIURL       ProviderURL         `env:"E2B_API_URL" envDefault:"" help:"the provider's lifecycle API base URL instead of https://api.<E2B_DOMAIN> (another agentbox daemon: its URL)"`
	E2BSandboxURL   ProviderURL         `env:"E2B_SANDBOX_URL" envDefault:"" help:"one base URL for every in-sandbox call at the provider, routed by the E2b-Sandbox-Id and E2b-Sandbox-Port headers, instead of https://<port>-<id>.<E2B_DOMAIN> (another agentbox daemon: its URL)"`
	DaytonaAPIKey   string              `env:"DAYTONA_API_KEY" envDefault:"" help:"the operator's key of the Daytona-compatible provider (sent as a bearer token to its API and toolbox only; never shown to tenants or sandboxes); required with SANDBOX_PROVIDER=daytona"`
	DaytonaURL      ProviderURL         `env:"DAYTONA_SERVER_URL" envDefault:"https://app.daytona.io/api" help:"the Daytona-compatible provider's API base URL, with its /api (another agentbox daemon: its URL + /api)"`
	DaytonaAPIURL   ProviderURL         `env:"DAYTONA_API_URL" envDefault:"" help:"the same as DAYTONA_SERVER_URL (the newer SDKs' name); when set it wins"`
	DaytonaTarget   string              `env:"DAYTONA_TARGET" envDefault:"" help:"the Daytona provider's target (region) sandboxes are created in; empty: the provider's default"`
	ProviderRoutes  Routes              `env:"PROVIDER_ROUTES" envDefault:"" help:"JSON map of a template or sandbox type name to a remote template: \"e2b:NAME\" (or \"daytona:SNAPSHOT\", the provider SANDBOX_PROVIDER names) sends every create of the name to the provider, \"overflow:e2b:NAME\" only when this host is full (NODE_MAX_SANDBOXES, NODE_MAX_MEMORY)"`
	ProviderMaxUser int                 `env:"PROVIDER_MAX_PER_USER" envDefault:"10" min:"0" max:"1048576" help:"sandboxes one user may hold at remote providers at once (they count against MAX_SANDBOXES_PER_USER too); 0 = no cap of its own"`
	ProviderLease   time.Duration       `env:"PROVIDER_LEASE" envDefault:"600" help:"seconds a remote sandbox lives at the provider unless this server renews it (every third of it while it runs): a server that never comes back leaves nothing running longer; at least 60"`
	NodeMaxMemory   settings.SizeOrZero `env:"NODE_MAX_MEMORY" envDefault:"0" help:"memory limits this replica's local sandboxes may add up to (warm pooled ones not counted): a create beyond is refused with 429, or goes to the provider with an overflow route; 0 = no cap"`
}

// Provider is SANDBOX_PROVIDER: local, e2b or daytona.
type Provider string

// UnmarshalText reads the provider's name.
func (p *Provider) UnmarshalText(b []byte) error {
	switch v := strings.ToLower(strings.TrimSpace(string(b))); v {
	case "", "local", "none":
		*p = "local"
	case "e2b", "daytona":
		*p = Provider(v)
	default:
		return fmt.Errorf("unknown provider %q: want local, e2b or daytona", v)
	}
	return nil
}

// ProviderURL is an http or https base URL, or "".
type ProviderURL string

// UnmarshalText checks the URL.
func (p *ProviderURL) UnmarshalText(b []byte) error {
	v := strings.TrimRight(strings.TrimSpace(string(b)), "/")
	if v != "" {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
			return fmt.Errorf("want an http:// or https:// base URL without credentials or query")
		}
	}
	*p = ProviderURL(v)
	return nil
}

// Routes is PROVIDER_ROUTES: name -> "e2b:NAME" or "overflow:e2b:NAME"
// (daytona:SNAPSHOT likewise).
type Routes map[string]string

// UnmarshalText reads and checks the JSON object.
func (r *Routes) UnmarshalText(b []byte) error {
	*r = nil
	if strings.TrimSpace(string(b)) == "" {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("want a JSON object of names to e2b:NAME or overflow:e2b:NAME: %v", err)
	}
	for name, to := range m {
		target := strings.TrimPrefix(to, "overflow:")
		kind, rest, _ := strings.Cut(target, ":")
		if name == "" || (kind != "e2b" && kind != "daytona") || rest == "" {
			return fmt.Errorf("route %q: %q: want e2b:NAME, daytona:SNAPSHOT or overflow: before one", name, to)
		}
	}
	*r = m
	return nil
}

// Always are the routes that send every create of their name to the
// provider: name -> remote template.
func (r Routes) Always() map[string]string { return r.split(false) }

// Overflow are the routes taken when this host is full.
func (r Routes) Overflow() map[string]string { return r.split(true) }

func (r Routes) split(overflow bool) map[string]string {
	out := map[string]string{}
	for name, to := range r {
		target, isOverflow := strings.CutPrefix(to, "overflow:")
		if isOverflow == overflow {
			out[name] = target
		}
	}
	return out
}

// DaytonaAPI is the Daytona provider's API base URL.
func (p ProviderSettings) DaytonaAPI() string {
	if p.DaytonaAPIURL != "" {
		return string(p.DaytonaAPIURL)
	}
	return string(p.DaytonaURL)
}

// ProviderAPI is the provider's lifecycle API base URL.
func (p ProviderSettings) ProviderAPI() string {
	if p.E2BAPIURL != "" {
		return string(p.E2BAPIURL)
	}
	return "https://api." + p.E2BDomain
}

// validate checks what the provider settings decide together.
func (p ProviderSettings) validate() error {
	if p.SandboxProvider == "local" || p.SandboxProvider == "" {
		if len(p.ProviderRoutes) > 0 {
			return fmt.Errorf("setting PROVIDER_ROUTES: needs SANDBOX_PROVIDER=e2b or daytona")
		}
		return nil
	}
	for name, to := range p.ProviderRoutes {
		if kind, _, _ := strings.Cut(strings.TrimPrefix(to, "overflow:"), ":"); kind != string(p.SandboxProvider) {
			return fmt.Errorf("setting PROVIDER_ROUTES: route %q goes to %s, but SANDBOX_PROVIDER is %s", name, kind, p.SandboxProvider)
		}
	}
	if p.ProviderLease < time.Minute {
		return fmt.Errorf("setting PROVIDER_LEASE: at least 60 seconds")
	}
	if p.SandboxProvider == "daytona" {
		if p.DaytonaAPIKey == "" {
			return fmt.Errorf("setting DAYTONA_API_KEY: required with SANDBOX_PROVIDER=daytona")
		}
		if p.DaytonaAPI() == "" {
			return fmt.Errorf("setting DAYTONA_SERVER_URL: required with SANDBOX_PROVIDER=daytona")
		}
		return nil
	}
	if p.E2BAPIKey == "" {
		return fmt.Errorf("setting E2B_API_KEY: required with SANDBOX_PROVIDER=e2b")
	}
	if p.E2BDomain == "" && (p.E2BAPIURL == "" || p.E2BSandboxURL == "") {
		return fmt.Errorf("setting E2B_DOMAIN: required unless E2B_API_URL and E2B_SANDBOX_URL are set")
	}
	if p.ProviderLease < time.Minute {
		return fmt.Errorf("setting PROVIDER_LEASE: at least 60 seconds")
	}
	return nil
}
