package native

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The cache hands back exactly what libseccomp compiles, and anything it
// cannot vouch for (a flipped byte, a torn write, a foreign file) is
// compiled again and replaced.
func TestSeccompCache(t *testing.T) {
	if selfBuildID() == nil {
		t.Skip("this test binary has no Go build ID note: nothing is cached")
	}
	dir := t.TempDir()
	want, err := compileSeccomp(nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRoot, err := compileSeccomp(rootCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	// Another valid program, to plant in the cache.
	prof, err := seccompProfile(nil)
	if err != nil {
		t.Fatal(err)
	}
	other := *prof
	enosys := uint(unix.ENOSYS)
	other.Syscalls = append([]specs.LinuxSyscall{{Names: []string{"getpid"}, Action: specs.ActErrno, ErrnoRet: &enosys}}, prof.Syscalls...)
	otherProg, err := compileSeccompProfile(&other)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(otherProg, want) {
		t.Fatal("an extra rule did not change the program: the test cannot tell them apart")
	}

	user, root, err := seccompPrograms(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(user, want) || !bytes.Equal(root, wantRoot) {
		t.Fatal("first start: programs differ from a direct compile")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.bpf"))
	if len(files) == 0 {
		t.Fatal("nothing was cached")
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is mode %v: readable by others", f, st.Mode())
		}
	}

	// Served from the cache: the files are what is read. A program
	// planted under the user key with a valid checksum is returned as is,
	// which proves the second start compiled nothing.
	key, ok := seccompCacheKey(prof)
	if !ok {
		t.Fatal("no cache key")
	}
	userFile := filepath.Join(dir, key+".bpf")
	if err := writeSeccompCache(userFile, otherProg); err != nil {
		t.Fatal(err)
	}
	if got, err := cachedSeccomp(dir, nil); err != nil || !bytes.Equal(got, otherProg) {
		t.Fatalf("a valid cached program was not used (err %v)", err)
	}

	for name, damage := range map[string]func([]byte) []byte{
		"flipped byte":  func(b []byte) []byte { b[len(b)-3] ^= 0x40; return b },
		"truncated":     func(b []byte) []byte { return b[:len(b)-5] },
		"not ours":      func([]byte) []byte { return []byte("hello\n") },
		"partial instr": func(b []byte) []byte { return b[:len(seccompCacheMagic)+32+3] },
		"empty":         func([]byte) []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			if err := writeSeccompCache(userFile, want); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(userFile)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(userFile, damage(data), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := cachedSeccomp(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("a damaged cache file was used")
			}
			if back, err := readSeccompCache(userFile); err != nil || !bytes.Equal(back, want) {
				t.Fatalf("the damaged file was not replaced by the compiled program (err %v)", err)
			}
		})
	}

	// Another profile is another key.
	if otherKey, _ := seccompCacheKey(&other); otherKey == key {
		t.Fatal("two different profiles share a cache key")
	}
}
