package template

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// Settings are the template store's settings (internal/settings): where
// it lives, registry credentials and mirrors, automatic pulls. The daemon
// gives them to Options.
type Settings struct {
	TemplateDir      Dir      `env:"TEMPLATE_DIR" envDefault:"" help:"directory of the template store, its build cache and bootstrap cache (default: <AGENTBOX_DATA_DIR>/templates); one daemon at a time"`
	TemplateAutoPull bool     `env:"TEMPLATE_AUTO_PULL" envDefault:"false" help:"pull an image reference a create names when it is not a template yet (the create waits)"`
	RegistryAuth     AuthJSON `env:"AGENTBOX_REGISTRY_AUTH" envDefault:"" help:"registry credentials as JSON {\"host\": {\"username\": \"...\", \"password\": \"...\"} | {\"auth\": \"base64\"} | {\"token\": \"...\"}}, besides docker's config.json ($DOCKER_CONFIG or ~/.docker)"`
	RegistryMirrors  Mirrors  `env:"REGISTRY_MIRRORS" envDefault:"" help:"registry mirrors as JSON {\"docker.io\": [\"https://mirror.example\"]}: pulls try the mirrors in order, then the registry itself"`
}

// Dir is TEMPLATE_DIR: an absolute path, cleaned ("": in the data dir).
type Dir string

// UnmarshalText checks the path.
func (d *Dir) UnmarshalText(b []byte) error {
	v := string(b)
	switch {
	case v == "":
		*d = ""
	case !filepath.IsAbs(v):
		return fmt.Errorf("want an absolute path")
	default:
		*d = Dir(filepath.Clean(v))
	}
	return nil
}

// AuthJSON is AGENTBOX_REGISTRY_AUTH: a JSON object of registry hosts to
// credentials (RegistryAuth.Inline), kept as written.
type AuthJSON string

// UnmarshalText checks the JSON object.
func (a *AuthJSON) UnmarshalText(b []byte) error {
	if len(b) > 0 {
		var m map[string]map[string]string
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("want a JSON object of registry hosts to credentials: %v", err)
		}
	}
	*a = AuthJSON(b)
	return nil
}

// Mirrors is REGISTRY_MIRRORS: a JSON object of registry hosts to lists of
// mirror URLs.
type Mirrors map[string][]string

// UnmarshalText reads and checks the JSON object; empty is none.
func (ms *Mirrors) UnmarshalText(b []byte) error {
	*ms = nil
	if len(b) == 0 {
		return nil
	}
	m := map[string][]string{}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("want a JSON object of registry hosts to lists of mirror URLs: %v", err)
	}
	for host, urls := range m {
		if host == "" || strings.ContainsAny(host, "/ ") {
			return fmt.Errorf("registry %q: want a host name such as docker.io", host)
		}
		for _, u := range urls {
			if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
				return fmt.Errorf("mirror %q of %s: want an http(s) URL", u, host)
			}
		}
	}
	*ms = m
	return nil
}
