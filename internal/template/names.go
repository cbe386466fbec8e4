package template

import (
	"regexp"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// DefaultTag is the tag of a name given without one.
const DefaultTag = "latest"

// Template names follow Docker's reference grammar, more strictly: every
// component is lowercase (a registry host included), so "UPPER", "../x",
// "a//b" or "/abs" are refused before they get near a path or a map.
//
// Compiled at first use (as every regular expression of the daemon's
// packages): compiled at package initialisation they cost every start of
// the binary, every CLI command included, ~2 ms and 560 page faults.
var (
	pathComponent   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$`) })
	domainComponent = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^(?:[a-z0-9]|[a-z0-9][a-z0-9-]*[a-z0-9])(?:\.(?:[a-z0-9]|[a-z0-9][a-z0-9-]*[a-z0-9]))*(?::[0-9]{1,5})?$`)
	})
	tagPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`) })
)

// maxNameLen is Docker's bound on a repository name.
const maxNameLen = 255

// ref is a parsed template name.
type ref struct{ name, tag string }

// key is the record key "name:tag".
func (r ref) key() string { return r.name + ":" + r.tag }

// String is the canonical form: the name alone for the default tag, as
// users write it ("base", "python:3.12").
func (r ref) String() string {
	if r.tag == DefaultTag {
		return r.name
	}
	return r.key()
}

// parseRef parses a template name "name[:tag]" strictly.
func parseRef(s string) (ref, error) {
	if s == "" {
		return ref{}, sandbox.Errorf(sandbox.ClassInvalid, "template name is empty")
	}
	if strings.Contains(s, "@") {
		return ref{}, sandbox.Errorf(sandbox.ClassInvalid, "template name %q: a template name takes a tag, not a digest", s)
	}
	name, tag := s, DefaultTag
	if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
		name, tag = s[:i], s[i+1:]
		if !tagPattern().MatchString(tag) {
			return ref{}, sandbox.Errorf(sandbox.ClassInvalid, "template name %q: invalid tag %q (1-128 of A-Z a-z 0-9 _ . -, not starting with . or -)", s, tag)
		}
	}
	if err := validName(name); err != nil {
		return ref{}, sandbox.Errorf(sandbox.ClassInvalid, "template name %q: %v", s, err)
	}
	return ref{name: name, tag: tag}, nil
}

// validName checks a name without its tag.
func validName(name string) error {
	if len(name) > maxNameLen {
		return errorf("longer than %d characters", maxNameLen)
	}
	parts := strings.Split(name, "/")
	for i, p := range parts {
		// Docker's rule: the first of several components is a registry
		// host when it has a dot or a port, or is "localhost".
		if i == 0 && len(parts) > 1 && (strings.ContainsAny(p, ".:") || p == "localhost") {
			if !domainComponent().MatchString(p) {
				return errorf("invalid registry host %q (lowercase host[:port])", p)
			}
			continue
		}
		if !pathComponent().MatchString(p) {
			return errorf("invalid component %q (lowercase letters, digits, and . _ __ - between them)", p)
		}
	}
	return nil
}

// nameFromImageRef derives a template name from an image reference as the
// user wrote it: "python:3.12" -> python:3.12, "reg:5000/a/b" -> reg:5000/a/b:latest.
// A reference by digest alone gets the tag "sha256-<12 hex>" so it never
// replaces the name's "latest".
func nameFromImageRef(s string) (ref, error) {
	digest := ""
	if i := strings.IndexByte(s, '@'); i >= 0 {
		s, digest = s[:i], s[i+1:]
	}
	r, err := parseRef(s)
	if err != nil {
		return ref{}, err
	}
	hasTag := strings.LastIndexByte(s, ':') > strings.LastIndexByte(s, '/')
	if digest != "" && !hasTag {
		hex := strings.TrimPrefix(digest, "sha256:")
		if len(hex) < 12 {
			return ref{}, sandbox.Errorf(sandbox.ClassInvalid, "image reference %q: invalid digest", s+"@"+digest)
		}
		r.tag = "sha256-" + hex[:12]
	}
	return r, nil
}
