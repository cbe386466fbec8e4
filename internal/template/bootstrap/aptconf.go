package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// hostApt is what a bootstrap takes from the host's apt: where the host
// reaches Debian and how.
type hostApt struct {
	Sources []source
	// Options are apt options (one "Key "value";" line each) that carry no
	// secret; they stay in the image so that apt inside it behaves like the
	// host's (a snapshot mirror needs Check-Valid-Until "false", ...).
	Options []string
	// Secret are options that carry credentials (a proxy URL with a
	// password): apt gets them during the bootstrap, the image never does.
	Secret []string
	// Auth is the content of the host's auth.conf files (apt's netrc),
	// likewise used during the bootstrap only.
	Auth []byte
}

// acquireKeys are the apt options that decide how apt reaches a mirror.
// Other host settings (hooks, autoremove rules, index targets) belong to
// the host and stay out of the image.
var acquireKeys = []string{
	"acquire::http", "acquire::https", "acquire::ftp", "acquire::socks",
	"acquire::check-valid-until", "acquire::check-date", "acquire::max-validtime", "acquire::min-validtime",
	"acquire::retries", "acquire::forceipv4", "acquire::forceipv6", "acquire::queue-mode",
	"acquire::allowinsecurerepositories", "acquire::allowweakrepositories",
	"acquire::allowdowngradetoinsecurerepositories", "acquire::allowreleaseinfochange",
	"acquire::languages", "acquire::gzipindexes", "acquire::compressiontypes", "acquire::pdiffs",
	"acquire::by-hash",
}

// readHostApt reads the host's effective apt configuration with apt-config
// (so APT_CONFIG and every apt.conf.d file count as apt itself sees them)
// and the sources and auth files it names.
func readHostApt(ctx context.Context) (hostApt, error) {
	dump, err := exec.CommandContext(ctx, "apt-config", "dump").Output()
	if err != nil {
		return hostApt{}, fmt.Errorf("read the host's apt configuration (apt-config dump): %w", err)
	}
	conf := parseDump(string(dump))
	h := hostApt{}
	h.Options, h.Secret = selectOptions(string(dump))
	etc := aptPath(conf, "/", "dir", "dir::etc")
	h.Sources, err = readHostSources(aptPath(conf, etc, "dir::etc::sourcelist"), aptPath(conf, etc, "dir::etc::sourceparts"))
	if err != nil {
		return hostApt{}, err
	}
	h.Auth, err = readAuth(aptPath(conf, etc, "dir::etc::netrc"), aptPath(conf, etc, "dir::etc::netrcparts"))
	if err != nil {
		return hostApt{}, err
	}
	return h, nil
}

// parseDump maps apt-config dump's scalar keys (lower-cased, as apt
// compares them) to their values.
func parseDump(dump string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(dump, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || strings.HasSuffix(k, "::") {
			continue
		}
		v = strings.TrimSuffix(strings.TrimSpace(v), ";")
		m[strings.ToLower(k)] = strings.Trim(v, `"`)
	}
	return m
}

// aptPath resolves apt's nested directory settings: each key's value is
// relative to the one before unless absolute (apt's FindDir/FindFile).
func aptPath(conf map[string]string, base string, keys ...string) string {
	p := base
	for _, k := range keys {
		v := conf[k]
		if v == "" {
			continue
		}
		if filepath.IsAbs(v) {
			p = v
		} else {
			p = filepath.Join(p, v)
		}
	}
	return p
}

// selectOptions keeps the dump's lines for acquireKeys, splitting those
// that carry credentials from those that do not.
func selectOptions(dump string) (plain, secret []string) {
	for _, line := range strings.Split(dump, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, " ")
		if !ok || !wanted(strings.ToLower(strings.TrimSuffix(k, "::"))) {
			continue
		}
		if isSecret(k, v) {
			secret = append(secret, line)
		} else {
			plain = append(plain, line)
		}
	}
	return plain, secret
}

func wanted(key string) bool {
	// A proxy auto-detect script is a host program; inside the image it
	// would not exist and apt would fail.
	if strings.HasSuffix(key, "::proxy-auto-detect") {
		return false
	}
	for _, p := range acquireKeys {
		if key == p || strings.HasPrefix(key, p+"::") {
			return true
		}
	}
	return false
}

func isSecret(key, value string) bool {
	k := strings.ToLower(key)
	for _, w := range []string{"pass", "token", "auth", "secret", "sslkey"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	v := strings.Trim(strings.TrimSuffix(strings.TrimSpace(value), ";"), `"`)
	return strings.Contains(v, "://") && hasCredentials(v)
}

// readAuth concatenates apt's auth.conf and the *.conf files of
// auth.conf.d (apt's netrc files).
func readAuth(file, parts string) ([]byte, error) {
	var buf bytes.Buffer
	add := func(p string) error {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read apt auth %s: %w", p, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
		return nil
	}
	if err := add(file); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(parts)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("read apt auth directory %s: %w", parts, err)
	}
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".conf") {
			if err := add(filepath.Join(parts, e.Name())); err != nil {
				return nil, err
			}
		}
	}
	if strings.TrimSpace(buf.String()) == "" {
		return nil, nil
	}
	return buf.Bytes(), nil
}
