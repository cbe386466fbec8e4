package bootstrap

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestHostSourcesAreReadAsAptReadsThem(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "sources.list")
	parts := filepath.Join(dir, "sources.list.d")
	os.Mkdir(parts, 0o755)
	os.WriteFile(list, []byte(`# comment
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian bookworm main contrib # trailing
deb-src http://mirror.example/debian bookworm main
deb http://u:pw@private.example/debian bookworm-updates main
deb https://vendor.example/apt cloud-sdk-bookworm main
`), 0o644)
	os.WriteFile(filepath.Join(parts, "debian.sources"), []byte(`Types: deb deb-src
URIs: http://a.example/debian http://b.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://sec.example/debian-security
Suites: bookworm-security
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 xyz
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
Enabled: no
URIs: http://off.example/debian
Suites: bookworm
Components: main
`), 0o644)
	os.WriteFile(filepath.Join(parts, "nodesource.sources.disabled"), []byte("Types: deb\nURIs: http://x\nSuites: bookworm\nComponents: main\n"), 0o644)
	os.WriteFile(filepath.Join(parts, "node.sources"), []byte("Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n"), 0o644)

	host, err := readHostSources(list, parts)
	if err != nil {
		t.Fatal(err)
	}
	got := sourceLines(debianSourcesFor(host, "bookworm"), true)
	want := []string{
		"deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian bookworm main contrib",
		"deb http://private.example/debian bookworm-updates main",
		"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://a.example/debian bookworm main",
		"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://a.example/debian bookworm-updates main",
		"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://b.example/debian bookworm main",
		"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://b.example/debian bookworm-updates main",
		// An inline key cannot go on a one-line entry: apt's keyrings apply.
		"deb http://sec.example/debian-security bookworm-security main",
	}
	if !slices.Equal(got, want) {
		t.Errorf("bookworm sources:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Unredacted, the credentials reach apt.
	if raw := sourceLines(debianSourcesFor(host, "bookworm"), false); !slices.Contains(raw, "deb http://u:pw@private.example/debian bookworm-updates main") {
		t.Errorf("unredacted lines lost the credentials: %q", raw)
	}

	// Another suite goes through the same mirrors; a rolling one has no
	// -updates or -security companions.
	trixie := sourceLines(debianSourcesFor(host, "trixie"), true)
	if !slices.Contains(trixie, "deb http://sec.example/debian-security trixie-security main") || len(trixie) != len(want) {
		t.Errorf("trixie sources: %q", trixie)
	}
	for _, l := range sourceLines(debianSourcesFor(host, "sid"), true) {
		if !strings.Contains(l, " sid main") {
			t.Errorf("sid source %q", l)
		}
	}
}

func TestAptOptionsKeepHowToFetchAndSplitSecrets(t *testing.T) {
	dump := `APT "";
APT::NeverAutoRemove:: "^linux-image.*";
Dir "/";
Dir::Etc "etc/apt/";
Dir::Etc::sourcelist "sources.list";
Dir::Etc::netrc "/srv/apt/auth.conf";
DPkg::Post-Invoke:: "/usr/bin/test -e /x";
Acquire::Check-Valid-Until "false";
Acquire::Check-Date "false";
Acquire::IndexTargets::deb::DEP-11::MetaKey "x";
Acquire::http::Proxy "http://proxy.example:3128/";
Acquire::https::Proxy "http://user:secret@proxy.example:3128/";
Acquire::http::Proxy-Auto-Detect "/usr/bin/auto-apt-proxy";
Acquire::Languages "none";
Acquire::httpsX "no";
`
	plain, secret := selectOptions(dump)
	wantPlain := []string{`Acquire::Check-Valid-Until "false";`, `Acquire::Check-Date "false";`,
		`Acquire::http::Proxy "http://proxy.example:3128/";`, `Acquire::Languages "none";`}
	if !slices.Equal(plain, wantPlain) {
		t.Errorf("plain options %q, want %q", plain, wantPlain)
	}
	if !slices.Equal(secret, []string{`Acquire::https::Proxy "http://user:secret@proxy.example:3128/";`}) {
		t.Errorf("secret options %q", secret)
	}
	conf := parseDump(dump)
	etc := aptPath(conf, "/", "dir", "dir::etc")
	if got := aptPath(conf, etc, "dir::etc::sourcelist"); got != "/etc/apt/sources.list" {
		t.Errorf("source list path %q", got)
	}
	if got := aptPath(conf, etc, "dir::etc::netrc"); got != "/srv/apt/auth.conf" {
		t.Errorf("netrc path %q", got)
	}
	if got := aptPath(conf, etc, "dir::etc::sourceparts"); got != "/etc/apt" {
		t.Errorf("unset key changed the path: %q", got)
	}
}

func TestImageAndPackageNamesAreChecked(t *testing.T) {
	for ref, suite := range map[string]string{"debian:bookworm": "bookworm", "debian:12": "bookworm",
		"docker.io/library/debian:trixie": "trixie", "debian:sid": "sid", "debian:stable": "stable"} {
		if got, err := ParseImage(ref); err != nil || got != suite {
			t.Errorf("ParseImage(%q) = %q, %v; want %q", ref, got, err, suite)
		}
	}
	for _, ref := range []string{"debian", "debian:", "ubuntu:jammy", "debian:bookworm-slim", "debian:../x",
		"debian:bookworm main", "evil.example/debian:bookworm", ""} {
		if _, err := ParseImage(ref); err == nil {
			t.Errorf("ParseImage(%q) accepted", ref)
		}
	}
	got, err := CheckInclude([]string{"python3", "git", "python3", "libc6-dev", "g++"})
	if err != nil || !slices.Equal(got, []string{"g++", "git", "libc6-dev", "python3"}) {
		t.Errorf("CheckInclude = %q, %v", got, err)
	}
	// Paths (mmdebstrap installs .deb files named by path), lists, apt
	// patterns and options never pass.
	for _, bad := range []string{"/tmp/evil.deb", "./x.deb", "a,b", "?essential", "~prequired", "-o", "--foo",
		"Python3", "", "pkg=1.0", "pkg:amd64", "a b", strings.Repeat("a", 101)} {
		if _, err := CheckInclude([]string{bad}); err == nil {
			t.Errorf("CheckInclude accepted %q", bad)
		}
	}
	if _, err := CheckInclude(make([]string, MaxInclude+1)); err == nil {
		t.Error("CheckInclude accepted too many packages")
	}
}

func TestShellQuote(t *testing.T) {
	if got := shellQuote(`/a b/it's`); got != `'/a b/it'\''s'` {
		t.Errorf("shellQuote = %s", got)
	}
	if got := unescapeMount(`/a\040b`); got != "/a b" {
		t.Errorf("unescapeMount = %q", got)
	}
}
