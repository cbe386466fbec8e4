package bootstrap

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// source is one apt source: a repository URI with its suites and
// components, in the host's own words.
type source struct {
	URI        string
	Suites     []string
	Components []string
	// SignedBy is a keyring path ("" when absent or given inline: apt then
	// uses the trusted keyrings, which mmdebstrap takes from the host).
	SignedBy string
	// Arch restricts the architectures ("" = all).
	Arch string
}

// debianSuites are the release names a Debian archive serves; the host's
// entries for one of them (and its -updates, -security, ... companions)
// are the host's way to Debian, whatever mirror they name.
var debianSuites = map[string]bool{
	"buster": true, "bullseye": true, "bookworm": true, "trixie": true, "forky": true, "duke": true,
	"sid": true, "experimental": true,
	"oldoldstable": true, "oldstable": true, "stable": true, "testing": true, "unstable": true,
}

// rolling suites have no -updates, -security or -backports companions.
var rolling = map[string]bool{"sid": true, "unstable": true, "experimental": true}

// readHostSources reads the host's apt sources: the one-line list file and
// every *.list and *.sources file of the parts directory, as apt does.
// Files apt ignores (other extensions, e.g. "*.disabled") are ignored.
func readHostSources(list, parts string) ([]source, error) {
	var out []source
	if b, err := os.ReadFile(list); err == nil {
		out = append(out, parseOneLine(string(b))...)
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("read apt sources %s: %w", list, err)
	}
	ents, err := os.ReadDir(parts)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("read apt sources directory %s: %w", parts, err)
	}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		ext := filepath.Ext(name)
		if ext != ".list" && ext != ".sources" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(parts, name))
		if err != nil {
			return nil, fmt.Errorf("read apt sources %s: %w", name, err)
		}
		if ext == ".list" {
			out = append(out, parseOneLine(string(b))...)
		} else {
			out = append(out, parseDeb822(string(b))...)
		}
	}
	return out, nil
}

// parseOneLine parses sources.list lines: "deb [opt=v ...] URI SUITE COMP...".
// deb-src lines and malformed lines are skipped.
func parseOneLine(text string) []source {
	var out []source
	for _, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		var s source
		if strings.HasPrefix(f[0], "[") {
			// Options run to the closing bracket, possibly across fields.
			var opts []string
			for len(f) > 0 {
				tok := f[0]
				f = f[1:]
				end := strings.HasSuffix(tok, "]")
				opts = append(opts, strings.Trim(tok, "[]"))
				if end {
					break
				}
			}
			for _, o := range opts {
				k, v, _ := strings.Cut(o, "=")
				switch k {
				case "signed-by":
					s.SignedBy = keyringPath(v)
				case "arch":
					s.Arch = v
				}
			}
		}
		if len(f) < 2 {
			continue
		}
		s.URI, s.Suites = f[0], []string{f[1]}
		s.Components = f[2:]
		out = append(out, s)
	}
	return out
}

// parseDeb822 parses a deb822 .sources file: stanzas of "Field: value"
// separated by blank lines, continuation lines starting with a space.
func parseDeb822(text string) []source {
	var out []source
	fields := map[string]string{}
	last := ""
	flush := func() {
		defer func() { fields, last = map[string]string{}, "" }()
		if len(fields) == 0 || strings.EqualFold(fields["enabled"], "no") {
			return
		}
		if !slices.Contains(strings.Fields(fields["types"]), "deb") {
			return
		}
		for _, uri := range strings.Fields(fields["uris"]) {
			out = append(out, source{
				URI:        uri,
				Suites:     strings.Fields(fields["suites"]),
				Components: strings.Fields(fields["components"]),
				SignedBy:   keyringPath(fields["signed-by"]),
				Arch:       strings.Join(strings.Fields(fields["architectures"]), ","),
			})
		}
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += "\n" + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return out
}

// keyringPath keeps a Signed-By value that names keyring files; an inline
// key (deb822 allows one) or fingerprints cannot go on a one-line source.
func keyringPath(v string) string {
	v = strings.TrimSpace(v)
	if v == "" || strings.ContainsAny(v, "\n ,") || !strings.HasPrefix(v, "/") {
		return ""
	}
	return v
}

// debianSourcesFor picks the host's Debian entries and points them at
// suite: "bookworm" becomes suite, "bookworm-updates" suite-updates, and so
// on. Entries of other repositories (vendor repositories, PPAs) are left
// out: their packages are not part of a Debian image.
func debianSourcesFor(host []source, suite string) []source {
	var out []source
	seen := map[string]bool{}
	for _, s := range host {
		var suites []string
		for _, hs := range s.Suites {
			base, rest, _ := strings.Cut(hs, "-")
			if !debianSuites[base] || strings.Contains(hs, "/") {
				continue
			}
			if rest != "" && rolling[suite] {
				continue
			}
			t := suite
			if rest != "" {
				t += "-" + rest
			}
			key := s.URI + " " + t
			if seen[key] {
				continue
			}
			seen[key] = true
			suites = append(suites, t)
		}
		if len(suites) == 0 || len(s.Components) == 0 {
			continue
		}
		s.Suites = suites
		out = append(out, s)
	}
	return out
}

// sourceLines renders sources as one-line entries, the form every apt and
// mmdebstrap version reads. With redact, credentials in URIs are removed
// (the image keeps the mirror, never its password).
func sourceLines(srcs []source, redact bool) []string {
	var out []string
	for _, s := range srcs {
		var opts []string
		if s.Arch != "" {
			opts = append(opts, "arch="+s.Arch)
		}
		if s.SignedBy != "" {
			opts = append(opts, "signed-by="+s.SignedBy)
		}
		uri := s.URI
		if redact {
			uri = redactURI(uri)
		}
		prefix := "deb "
		if len(opts) > 0 {
			prefix += "[" + strings.Join(opts, " ") + "] "
		}
		// One suite per line: the one-line format has no list of suites.
		for _, su := range s.Suites {
			out = append(out, prefix+uri+" "+su+" "+strings.Join(s.Components, " "))
		}
	}
	return out
}

// redactURI removes a password from a URI.
func redactURI(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// hasCredentials reports whether a URI carries user information.
func hasCredentials(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.User != nil
}
