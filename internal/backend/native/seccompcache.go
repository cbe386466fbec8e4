package native

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// libseccomp takes ~15-20 ms of CPU to compile one profile, and a backend
// needs two (the sandbox user's and root's): most of what New cost, paid by
// every `agentbox run` and every daemon start. The programs depend only on
// the profile, the libseccomp that compiled it and the code that drove
// libseccomp, so they are kept in the data dir's cache and compiled again
// when any of those changed. The cache key covers the code through the
// running binary's Go build ID, which changes whenever any of its code
// does: a changed rule conversion can never meet a program the old one
// compiled.
//
// A cached program is trusted as much as the rest of the cache (the disk
// templates every sandbox mounts): it is the daemon's own file in a
// directory only root reaches. It carries a checksum so that a torn or
// truncated write is compiled again rather than loaded.

// seccompCacheMagic starts every cached program file.
const seccompCacheMagic = "agentbox-seccomp-bpf-v1\n"

// bpfInstructionSize is sizeof(struct sock_filter).
const bpfInstructionSize = 8

// seccompPrograms returns the programs for the sandbox user and for root,
// from cacheDir when possible, compiling (in parallel) what is not there.
// An unusable cache is only a slower start: errors of the cache itself are
// ignored, compile errors are not.
func seccompPrograms(cacheDir string) (user, root []byte, err error) {
	var wg sync.WaitGroup
	var rootErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		root, rootErr = cachedSeccomp(cacheDir, rootCapabilities)
	}()
	user, err = cachedSeccomp(cacheDir, nil)
	wg.Wait()
	if err == nil {
		err = rootErr
	}
	return user, root, err
}

// cachedSeccomp returns the program for capabilities from cacheDir, or
// compiles it and stores it there.
func cachedSeccomp(cacheDir string, capabilities []string) ([]byte, error) {
	prof, err := seccompProfile(capabilities)
	if err != nil {
		return nil, err
	}
	key, ok := seccompCacheKey(prof)
	var path string
	if ok && cacheDir != "" {
		path = filepath.Join(cacheDir, key+".bpf")
		if prog, err := readSeccompCache(path); err == nil {
			return prog, nil
		}
	}
	prog, err := compileSeccompProfile(prof)
	if err != nil {
		return nil, err
	}
	if path != "" {
		_ = writeSeccompCache(path, prog)
	}
	return prog, nil
}

// seccompCacheKey names the program of prof as compiled by this binary with
// this libseccomp for this architecture; ok is false when the binary's
// build ID cannot be read (then nothing is cached).
func seccompCacheKey(prof any) (string, bool) {
	id := selfBuildID()
	if id == nil {
		return "", false
	}
	profJSON, err := json.Marshal(prof)
	if err != nil {
		return "", false
	}
	major, minor, micro := libseccomp.GetLibraryVersion()
	h := sha256.New()
	fmt.Fprintf(h, "%s%s\n%d.%d.%d\n", seccompCacheMagic, runtime.GOARCH, major, minor, micro)
	h.Write(id)
	h.Write([]byte{0})
	h.Write(profJSON)
	return hex.EncodeToString(h.Sum(nil)), true
}

var (
	buildIDOnce sync.Once
	buildID     []byte
)

// selfBuildID returns the running executable's Go build ID note (nil when
// it has none or cannot be read).
func selfBuildID() []byte {
	buildIDOnce.Do(func() {
		f, err := elf.Open("/proc/self/exe")
		if err != nil {
			return
		}
		defer f.Close()
		sec := f.Section(".note.go.buildid")
		if sec == nil {
			return
		}
		data, err := sec.Data()
		if err != nil || len(data) == 0 {
			return
		}
		buildID = data
	})
	return buildID
}

// readSeccompCache reads a program written by writeSeccompCache, checking
// its header, checksum and shape.
func readSeccompCache(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rest, ok := bytes.CutPrefix(data, []byte(seccompCacheMagic))
	if !ok || len(rest) < sha256.Size {
		return nil, errors.New("not a cached seccomp program")
	}
	sum, prog := rest[:sha256.Size], rest[sha256.Size:]
	if got := sha256.Sum256(prog); !bytes.Equal(got[:], sum) {
		return nil, errors.New("cached seccomp program: checksum mismatch")
	}
	if len(prog) == 0 || len(prog)%bpfInstructionSize != 0 {
		return nil, errors.New("cached seccomp program: not a whole number of instructions")
	}
	return prog, nil
}

// writeSeccompCache stores prog at path, readable by root only, replacing
// the file in one rename so that a reader never sees half of it.
func writeSeccompCache(path string, prog []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bpf-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	sum := sha256.Sum256(prog)
	data := append(append([]byte(seccompCacheMagic), sum[:]...), prog...)
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
