package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// inlineCred is one entry of AGENTBOX_REGISTRY_AUTH.
type inlineCred struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Auth     string `json:"auth,omitempty"`  // base64 "user:password", as in config.json
	Token    string `json:"token,omitempty"` // a registry bearer token, sent as is
}

// keychain resolves registry credentials: AGENTBOX_REGISTRY_AUTH first,
// then the docker config.json (an explicit path, or the usual places:
// $DOCKER_CONFIG, ~/.docker, podman's auth.json), else anonymous.
type keychain struct {
	inline map[string]authn.AuthConfig // by normalized registry host
	docker authn.Keychain
}

func newKeychain(a RegistryAuth) (*keychain, error) {
	k := &keychain{inline: map[string]authn.AuthConfig{}, docker: authn.DefaultKeychain}
	if a.Inline != "" {
		var m map[string]inlineCred
		if err := json.Unmarshal([]byte(a.Inline), &m); err != nil {
			return nil, fmt.Errorf("AGENTBOX_REGISTRY_AUTH: not a JSON map of registry to credentials: %w", err)
		}
		for reg, c := range m {
			ac, err := c.authConfig()
			if err != nil {
				return nil, fmt.Errorf("AGENTBOX_REGISTRY_AUTH: registry %q: %w", reg, err)
			}
			k.inline[normalizeRegistry(reg)] = ac
		}
	}
	if a.DockerConfig != "" {
		kc, err := dockerConfigKeychain(a.DockerConfig)
		if err != nil {
			return nil, err
		}
		k.docker = kc
	}
	return k, nil
}

func (c inlineCred) authConfig() (authn.AuthConfig, error) {
	n := 0
	for _, set := range []bool{c.Username != "" || c.Password != "", c.Auth != "", c.Token != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return authn.AuthConfig{}, fmt.Errorf("give exactly one of username+password, auth or token")
	}
	if c.Username != "" && c.Password == "" || c.Username == "" && c.Password != "" {
		return authn.AuthConfig{}, fmt.Errorf("username and password go together")
	}
	return authn.AuthConfig{Username: c.Username, Password: c.Password, Auth: c.Auth, RegistryToken: c.Token}, nil
}

// Resolve implements authn.Keychain.
func (k *keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if ac, ok := k.inline[normalizeRegistry(r.RegistryStr())]; ok {
		return authn.FromConfig(ac), nil
	}
	return k.docker.Resolve(r)
}

// normalizeRegistry maps the spellings of a registry host to one key:
// scheme and path dropped, Docker Hub's aliases to "index.docker.io".
func normalizeRegistry(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	switch s {
	case "docker.io", "registry-1.docker.io", "index.docker.io":
		return name.DefaultRegistry
	}
	return s
}

// dockerConfig is the part of config.json an explicit path is read for.
// Credential helpers are only run for the default locations (through
// go-containerregistry's keychain), never for a file named in settings.
type dockerConfig struct {
	Auths map[string]authn.AuthConfig `json:"auths"`
}

type staticKeychain map[string]authn.AuthConfig

func (k staticKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if ac, ok := k[normalizeRegistry(r.RegistryStr())]; ok {
		return authn.FromConfig(ac), nil
	}
	return authn.Anonymous, nil
}

func dockerConfigKeychain(path string) (authn.Keychain, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return staticKeychain{}, nil // no file yet: anonymous, like docker
	}
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	var c dockerConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("registry credentials: %s: %w", path, err)
	}
	k := staticKeychain{}
	for reg, ac := range c.Auths {
		k[normalizeRegistry(reg)] = ac
	}
	return k, nil
}
