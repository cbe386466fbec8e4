package native

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The sandbox user. Fixed so that workspace files have the same owner in
// every sandbox and on every backend.
const (
	sandboxUser = "user"
	sandboxUID  = 1000
	sandboxGID  = 1000
	sandboxHome = "/home/user"
)

// hostEtcAllowlist is what the host template copies from the host's /etc:
// configuration programs need to run (dynamic loader cache, alternatives
// symlinks, CA bundle, time zone, python and font config). Nothing that
// identifies users or holds credentials: passwd, group, shadow, ssh, sudoers,
// machine-id and the like are generated or left out, and so are files that
// often carry credentials: package manager settings (pip.conf, npmrc, with
// registry tokens), /etc/environment (proxy URLs with passwords) and
// gitconfig (URL rewrites with access tokens, credential helpers). An
// operator who wants a mirror or proxy inside sandboxes mounts its
// configuration explicitly (READONLY_MOUNTS).
var hostEtcAllowlist = []string{
	"alternatives", "ssl", "ca-certificates.conf",
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"localtime", "timezone", "mime.types", "magic", "magic.mime",
	"bash.bashrc", "profile", "profile.d", "inputrc", "shells",
	"python3", "python3.11", "python3.12", "python3.13", "matplotlibrc",
	"fonts", "protocols", "services", "ethertypes", "rpc",
	"os-release", "debian_version", "lsb-release", "issue",
	"locale.alias", "locale.gen", "default", "terminfo", "vim", "xdg",
	"gai.conf", "host.conf",
}

// hostEtcSource is the host's /etc; tests point it at a directory of
// their own.
var hostEtcSource = "/etc"

// Files every sandbox gets a private copy of, bind-mounted over the shared /etc.
var perSandboxEtcFiles = []string{"hosts", "hostname", "resolv.conf"}

func passwdFile() string {
	return "root:x:0:0:root:/root:/bin/bash\n" +
		fmt.Sprintf("%s:x:%d:%d:%s:%s:/bin/bash\n", sandboxUser, sandboxUID, sandboxGID, sandboxUser, sandboxHome) +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
}

func groupFile() string {
	return "root:x:0:\ntty:x:5:\n" +
		fmt.Sprintf("%s:x:%d:\n", sandboxUser, sandboxGID) +
		"nogroup:x:65534:\n"
}

const nsswitchFile = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"

// generatedEtcFiles are written into every generated /etc.
func generatedEtcFiles() map[string]string {
	return map[string]string{
		"passwd":        passwdFile(),
		"group":         groupFile(),
		"nsswitch.conf": nsswitchFile,
		// Placeholders: the real content is a per-sandbox bind mount on top.
		"hosts":       "",
		"hostname":    "",
		"resolv.conf": "",
	}
}

// hostEtcDir returns the shared /etc of the host template under tmplDir,
// building it if needed. The directory is named after a fingerprint of its
// sources, so several processes (a daemon, one-shot runs) share it safely: a
// directory is never rewritten while sandboxes bind-mount it, a changed host
// /etc simply yields a new one.
func hostEtcDir(tmplDir string) (string, error) {
	fp := etcFingerprint()
	dir := filepath.Join(tmplDir, "host-etc-"+fp)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(tmplDir, "host-etc.tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	for _, name := range hostEtcAllowlist {
		src := filepath.Join(hostEtcSource, name)
		if _, err := os.Lstat(src); err != nil {
			continue
		}
		if err := copyTreeWorldReadable(src, filepath.Join(tmp, name)); err != nil {
			return "", fmt.Errorf("copy %s: %w", src, err)
		}
	}
	if err := writeFiles(tmp, generatedEtcFiles()); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr == nil {
			return dir, nil // another process built it first
		}
		return "", err
	}
	return dir, nil
}

// etcFingerprint hashes what hostEtcDir would copy (names, modes, sizes,
// mtimes, link targets) and what it generates.
func etcFingerprint() string {
	h := sha256.New()
	for _, name := range hostEtcAllowlist {
		_ = filepath.WalkDir(filepath.Join(hostEtcSource, name), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			fmt.Fprintf(h, "%s %o %d %d\n", path, info.Mode(), info.Size(), info.ModTime().UnixNano())
			if info.Mode()&fs.ModeSymlink != 0 {
				link, _ := os.Readlink(path)
				fmt.Fprintln(h, link)
			}
			return nil
		})
	}
	gen := generatedEtcFiles()
	names := make([]string, 0, len(gen))
	for n := range gen {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s=%s\n", n, gen[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// writeFiles writes name→content files into dir.
func writeFiles(dir string, files map[string]string) error {
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// genEtcDir returns a directory with the generated passwd, group and
// nsswitch.conf for dir: templates, built once like hostEtcDir.
func genEtcDir(tmplDir string) (string, error) {
	dir := filepath.Join(tmplDir, "gen-etc-"+etcGenFingerprint())
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(tmplDir, "gen-etc.tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := writeFiles(tmp, generatedEtcFiles()); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr == nil {
			return dir, nil
		}
		return "", err
	}
	return dir, nil
}

func etcGenFingerprint() string {
	h := sha256.New()
	for _, n := range []string{"passwd", "group", "nsswitch.conf"} {
		fmt.Fprintf(h, "%s=%s\n", n, generatedEtcFiles()[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// copyTreeWorldReadable copies src to dst, keeping symlinks as symlinks and
// skipping anything that is not readable by everyone: a file the host keeps
// private is never copied into a sandbox.
func copyTreeWorldReadable(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable entries are skipped, not fatal
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return nil
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return nil
			}
			return os.Symlink(link, target)
		case info.IsDir():
			if info.Mode().Perm()&0o005 != 0o005 {
				return fs.SkipDir
			}
			return os.MkdirAll(target, 0o755)
		case info.Mode().IsRegular():
			if info.Mode().Perm()&0o004 == 0 {
				return nil
			}
			return copyFile(path, target, info.Mode().Perm())
		}
		return nil // devices, sockets, fifos: never
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return nil
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeSandboxEtc writes the per-sandbox /etc files into dir.
func writeSandboxEtc(dir, hostname string, nameservers []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n"
	var resolv strings.Builder
	if len(nameservers) == 0 {
		// No network: point at loopback, where nothing listens, so lookups fail
		// at once instead of waiting for a timeout.
		nameservers = []string{"127.0.0.1"}
	}
	for _, ns := range nameservers {
		resolv.WriteString("nameserver " + ns + "\n")
	}
	resolv.WriteString("options timeout:1 attempts:1\n")
	files := map[string]string{
		"hosts":       hosts,
		"hostname":    hostname + "\n",
		"resolv.conf": resolv.String(),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
