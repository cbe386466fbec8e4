package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/builder"
	"github.com/agentbox/agentbox/internal/version"
)

// StartInfo is what a started daemon tells its operator: where to go, how
// to sign in, and what it runs with. It is plain data, filled once the
// listener is bound, so the banner does not depend on how Run assembles
// the daemon.
type StartInfo struct {
	// Addr is the listener's address (host:port).
	Addr    string
	Version string
	// Keys is the number of API keys; 0 is a keyless server.
	Keys    int
	DataDir string
	// Backends names the sandbox backends ("native", "native+docker").
	Backends string
	// Types are the sandbox types (SANDBOX_TEMPLATES and the warm-pool
	// types), each with its template and whether that template is there.
	Types []TypeInfo
	// Templates are the store's templates other than host.
	Templates []string
	// Bridge and Subnet are sandbox networking's; empty with loopback
	// only, when NetworkOff says why.
	Bridge, Subnet string
	NetworkOff     string
	// PoolSize warm sandboxes are kept for each of PoolTypes.
	PoolSize  int
	PoolTypes []string
}

// TypeInfo is one sandbox type at start.
type TypeInfo struct {
	Name, Template string
	Ready          bool
}

// URL is the API's base URL, as a client on this machine reaches it: a
// wildcard listener is reached on loopback too.
func (s StartInfo) URL() string {
	host, port, err := net.SplitHostPort(s.Addr)
	if err != nil {
		return "http://" + s.Addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// auth says how to sign in.
func (s StartInfo) auth() (mode, signIn string) {
	if s.Keys == 0 {
		return "off (no API key; loopback only)",
			"leave the API key empty (clients that send one are answered, with Agentbox-Auth: off; the key is not checked)"
	}
	return fmt.Sprintf("API keys (%d)", s.Keys), "the console and clients take one of the API keys (BEARER_TOKEN or API_KEYS)"
}

// network says what sandboxes reach.
func (s StartInfo) network() string {
	if s.Bridge == "" {
		why := s.NetworkOff
		if why == "" {
			why = "NETWORK=off"
		}
		return "loopback only (" + why + ")"
	}
	return "egress through bridge " + s.Bridge + ", subnet " + s.Subnet
}

// pools says which warm pools run.
func (s StartInfo) pools() string {
	if s.PoolSize == 0 || len(s.PoolTypes) == 0 {
		return "none (POOL_SIZE=0: sandboxes start on demand)"
	}
	return fmt.Sprintf("%d warm per type: %s", s.PoolSize, strings.Join(s.PoolTypes, ", "))
}

// types lists each type as "name (template)" with its readiness.
func (s StartInfo) types() (ready, missing []string) {
	for _, t := range s.Types {
		label := t.Name
		if t.Template != t.Name {
			label += " (" + t.Template + ")"
		}
		if t.Ready {
			ready = append(ready, label)
		} else {
			missing = append(missing, label)
		}
	}
	return ready, missing
}

// next is the command to try first: one command in a sandbox of the
// first ready type, made by this server (run without --url would make it
// without the server).
func (s StartInfo) next() string {
	cmd := "agentbox run --url " + s.URL()
	if s.Keys > 0 {
		cmd = "AGENTBOX_API_KEY=<key> " + cmd
	}
	for _, t := range s.Types {
		if t.Ready {
			return cmd + " --template " + t.Name + " -- uname -a"
		}
	}
	return cmd + " --template host -- uname -a"
}

// PrintBanner writes the start's facts for a person at a terminal.
func PrintBanner(w io.Writer, s StartInfo) {
	mode, signIn := s.auth()
	ready, missing := s.types()
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "  %-11s %s\n", k, v) }
	fmt.Fprintf(&b, "agentbox %s is serving\n", s.Version)
	line("API", s.URL())
	line("console", s.URL()+"/")
	line("auth", mode)
	line("sign in", signIn)
	line("data dir", s.DataDir)
	line("backends", s.Backends)
	line("types", orNone(ready))
	if len(missing) > 0 {
		line("not built", strings.Join(missing, ", ")+" — make templates builds them (docs/templates.md)")
	}
	line("templates", orNone(append([]string{"host"}, s.Templates...)))
	line("network", s.network())
	line("pools", s.pools())
	line("next", s.next())
	_, _ = io.WriteString(w, b.String())
}

// LogStart logs the banner's facts as one structured record.
func LogStart(log *slog.Logger, s StartInfo) {
	mode, _ := s.auth()
	ready, missing := s.types()
	attrs := []any{"api_url", s.URL(), "console_url", s.URL() + "/", "auth", mode, "data_dir", s.DataDir,
		"backends", s.Backends, "types_ready", ready, "types_not_built", missing, "templates", s.Templates,
		"network", s.network(), "pools", s.pools(), "next", s.next()}
	if s.Bridge != "" {
		attrs = append(attrs, "bridge", s.Bridge, "subnet", s.Subnet)
	}
	log.Info("agentbox started", attrs...)
}

func orNone(v []string) string {
	if len(v) == 0 {
		return "none"
	}
	return strings.Join(v, ", ")
}

// collectStartInfo gathers the banner's facts from the started parts.
func collectStartInfo(ctx context.Context, cfg *config.Config, addr, dataDir, backends string, store *template.Store, netMgr *netpolicy.Manager, netOff string) StartInfo {
	s := StartInfo{Addr: addr, Version: version.Version, Keys: len(cfg.APIKeys), DataDir: dataDir, Backends: backends,
		NetworkOff: netOff, PoolSize: cfg.PoolSize, PoolTypes: cfg.DefaultTypes}
	if netMgr != nil {
		s.Bridge, s.Subnet = netMgr.Bridge(), netMgr.Subnet().String()
	}
	stored := map[string]bool{}
	if list, err := store.List(ctx); err == nil {
		for _, t := range list {
			if t.Name == sandbox.TemplateHost || strings.HasPrefix(t.Name, builder.CachePrefix) {
				continue
			}
			name := t.Name
			if t.Tag != "" && t.Tag != template.DefaultTag {
				name += ":" + t.Tag
			}
			stored[t.Name] = true
			stored[name] = true
			s.Templates = append(s.Templates, name)
		}
	}
	seen := map[string]bool{}
	var types []string
	for t := range cfg.Templates {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range append(types, cfg.DefaultTypes...) {
		if seen[t] {
			continue
		}
		seen[t] = true
		target := cfg.TypeTemplate(t)
		ti := TypeInfo{Name: t, Template: target}
		switch {
		case target == sandbox.TemplateHost && stored[t]:
			// A type mapped to host uses a stored template of its name.
			ti.Template, ti.Ready = t, true
		case target == sandbox.TemplateHost, strings.HasPrefix(target, "dir:"):
			ti.Ready = true
		default:
			ti.Ready = stored[target]
		}
		s.Types = append(s.Types, ti)
	}
	return s
}
