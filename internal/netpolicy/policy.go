package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// policy is a sandbox.Network parsed into what the firewall and the DNS
// filter need.
type policy struct {
	// open is true when AllowOut is empty: everything public is allowed.
	open       bool
	allowNets  []netip.Prefix
	allowNames []namePattern
	denyNets   []netip.Prefix
	denyNames  []namePattern
	// broker: the sandbox has egress rules, its HTTP and HTTPS go to the
	// broker.
	broker bool
}

// namePattern is an exact domain name, or with wildcard set every name
// strictly below it.
type namePattern struct {
	name     string // lower case, no trailing dot
	wildcard bool
}

func (p namePattern) match(name string) bool {
	if p.wildcard {
		return strings.HasSuffix(name, "."+p.name)
	}
	return name == p.name
}

// parsePolicy validates n. Entries are CIDRs, bare addresses, or domain
// names ("example.org", "*.example.org"). IPv6 entries in AllowOut are an
// error (IPv6 is not supported); in DenyOut they are ignored since IPv6 is
// always blocked.
func parsePolicy(n sandbox.Network) (policy, error) {
	p := policy{open: len(n.AllowOut) == 0}
	for _, e := range n.AllowOut {
		nets, names, err := parseEntry(e, false)
		if err != nil {
			return policy{}, sandbox.Errorf(sandbox.ClassInvalid, "allow_out: %v", err)
		}
		p.allowNets = append(p.allowNets, nets...)
		p.allowNames = append(p.allowNames, names...)
	}
	for _, e := range n.DenyOut {
		nets, names, err := parseEntry(e, true)
		if err != nil {
			return policy{}, sandbox.Errorf(sandbox.ClassInvalid, "deny_out: %v", err)
		}
		p.denyNets = append(p.denyNets, nets...)
		p.denyNames = append(p.denyNames, names...)
	}
	if len(n.Rules) > MaxRules {
		return policy{}, sandbox.Errorf(sandbox.ClassInvalid, "rules: at most %d", MaxRules)
	}
	for i, r := range n.Rules {
		if err := checkRule(r); err != nil {
			return policy{}, sandbox.Errorf(sandbox.ClassInvalid, "rules[%d]: %v", i, err)
		}
	}
	p.broker = len(n.Rules) > 0
	return p, nil
}

// MaxRules is the most egress rules one sandbox may have.
const MaxRules = 64

func checkRule(r sandbox.EgressRule) error {
	if _, err := parseNamePattern(r.Host); err != nil {
		return fmt.Errorf("host: %v", err)
	}
	for _, m := range r.Methods {
		if m == "" || strings.ToUpper(m) != m || strings.ContainsFunc(m, func(c rune) bool { return c < 'A' || c > 'Z' }) {
			return fmt.Errorf("method %q: want an upper-case HTTP method", m)
		}
	}
	for _, path := range r.Paths {
		if !strings.HasPrefix(path, "/") {
			return fmt.Errorf("path %q: a path prefix starts with /", path)
		}
	}
	for k, v := range r.Headers {
		if k == "" || strings.ContainsFunc(k, func(c rune) bool { return c <= ' ' || c >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", c) }) {
			return fmt.Errorf("header %q: not a header name", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("header %q: the value has a line break", k)
		}
		switch strings.ToLower(k) {
		case "host", "content-length", "transfer-encoding", "connection":
			return fmt.Errorf("header %q cannot be set by a rule", k)
		}
	}
	for _, name := range r.Secrets {
		if name == "" {
			return fmt.Errorf("an empty secret name")
		}
	}
	return nil
}

// RuleMatchesHost reports whether the rule's host pattern matches name.
func RuleMatchesHost(r sandbox.EgressRule, name string) bool {
	p, err := parseNamePattern(r.Host)
	if err != nil {
		return false
	}
	return p.match(strings.TrimSuffix(strings.ToLower(name), "."))
}

func parseEntry(e string, deny bool) ([]netip.Prefix, []namePattern, error) {
	e = strings.TrimSpace(e)
	if pfx, err := netip.ParsePrefix(e); err == nil {
		return ipv4Only(pfx.Masked(), deny)
	}
	if a, err := netip.ParseAddr(e); err == nil {
		a = a.Unmap()
		return ipv4Only(netip.PrefixFrom(a, a.BitLen()), deny)
	}
	pat, err := parseNamePattern(e)
	if err != nil {
		return nil, nil, err
	}
	return nil, []namePattern{pat}, nil
}

func ipv4Only(p netip.Prefix, deny bool) ([]netip.Prefix, []namePattern, error) {
	if p.Addr().Is4() {
		return []netip.Prefix{p}, nil, nil
	}
	if deny {
		return nil, nil, nil
	}
	return nil, nil, fmt.Errorf("%s: IPv6 is not supported", p)
}

// parseNamePattern checks that s is a host name, optionally starting with
// "*." (one leading wildcard label only).
func parseNamePattern(s string) (namePattern, error) {
	name := strings.TrimSuffix(strings.ToLower(s), ".")
	var p namePattern
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		p.wildcard, name = true, rest
	}
	if name == "" || len(name) > 253 {
		return p, fmt.Errorf("%q is neither a CIDR, an IP address nor a domain name", s)
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return p, fmt.Errorf("%q is neither a CIDR, an IP address nor a domain name", s)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return p, fmt.Errorf("%q is neither a CIDR, an IP address nor a domain name", s)
			}
		}
	}
	p.name = name
	return p, nil
}

// nameAllowed reports whether the DNS filter may resolve name (any case,
// trailing dot optional). Deny entries win over allow entries.
func (p policy) nameAllowed(name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	match := func(pp namePattern) bool { return pp.match(name) }
	if slices.ContainsFunc(p.denyNames, match) {
		return false
	}
	return p.open || slices.ContainsFunc(p.allowNames, match)
}

// learns reports whether addresses resolved for allowed names must be added
// to the sandbox's allowed set: only in allow-list mode.
func (p policy) learns() bool { return !p.open }
