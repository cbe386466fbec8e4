package agent

import (
	"bytes"
	"io"
	"mime/multipart"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzResolvePath: whatever path a client sends (traversal, NUL, very
// long, unicode, "~" forms), the agent acts on an absolute, clean path;
// a relative path that is local (no "..") stays under the user's home.
// The sandbox, not this function, confines the agent: the invariant is
// that the path is unambiguous, not that it stays in the home.
func FuzzResolvePath(f *testing.F) {
	for _, p := range []string{"", "~", "~/x", "~user", "a/../../etc/passwd", "/etc//x/./y/", "a\x00b", "ü/🙂", strings.Repeat("a/", 3000), "..", "~/../../root"} {
		f.Add(p)
	}
	u := &User{Name: "user", UID: 1000, GID: 1000, Home: "/home/user"}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := u.resolvePath(p)
		if err != nil {
			if p != "" {
				t.Fatalf("%q: %v", p, err)
			}
			return
		}
		if !filepath.IsAbs(got) || filepath.Clean(got) != got {
			t.Fatalf("%q resolved to %q", p, got)
		}
		rel := p
		if strings.HasPrefix(p, "~/") {
			rel = p[2:]
		}
		if !filepath.IsAbs(p) && p != "~" && filepath.IsLocal(rel) && !strings.HasPrefix(got, u.Home+"/") && got != u.Home {
			t.Fatalf("local %q resolved to %q outside %s", p, got, u.Home)
		}
	})
}

// FuzzUploadMultipart parses arbitrary multipart upload bodies the way
// the agent's /files route does. Each file part yields one destination
// (?path= when given, else the part's raw filename) and its content,
// never more content than the body holds; a body without a file part is
// an error, never an empty success.
func FuzzUploadMultipart(f *testing.F) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	_ = w.SetBoundary("XXbound")
	fw, _ := w.CreateFormFile("file", "/home/user/../../etc/x")
	_, _ = fw.Write([]byte("hello"))
	fw, _ = w.CreateFormFile("file", "dir/ü.txt")
	_, _ = fw.Write(bytes.Repeat([]byte{0}, 4096))
	ow, _ := w.CreateFormField("other")
	_, _ = ow.Write([]byte("skip"))
	_ = w.Close()
	f.Add(b.Bytes(), "XXbound", "")
	f.Add(b.Bytes(), "XXbound", "/tmp/dest")
	f.Add([]byte("--XXbound\r\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''%2e%2e%2Fx\r\n\r\nx\r\n--XXbound--\r\n"), "XXbound", "")
	f.Add([]byte("--XXbound\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--XXbound--\r\n"), "XXbound", "")
	f.Add([]byte("--XXbound--\r\n"), "XXbound", "")
	f.Add([]byte("garbage"), "", "")
	u := &User{Name: "user", UID: 1000, GID: 1000, Home: "/home/user"}
	f.Fuzz(func(t *testing.T, body []byte, boundary, pathParam string) {
		if boundary == "" || len(boundary) > 70 || !utf8.ValidString(boundary) {
			boundary = "XXbound"
		}
		n := 0
		var total int64
		err := eachUploadPart(pathParam, multipart.NewReader(bytes.NewReader(body), boundary), func(dest string, r io.Reader) error {
			n++
			if pathParam != "" && dest != pathParam {
				t.Fatalf("dest %q, ?path= %q", dest, pathParam)
			}
			c, err := io.Copy(io.Discard, r)
			total += c
			if err != nil {
				return err
			}
			if dest == "" {
				return nil // uploadOne refuses it
			}
			if p, err := u.resolvePath(dest); err != nil || !filepath.IsAbs(p) {
				t.Fatalf("dest %q resolves to %q, %v", dest, p, err)
			}
			return nil
		})
		if err == nil && n == 0 {
			t.Fatal("success without a file part")
		}
		if total > int64(len(body)) {
			t.Fatalf("%d content bytes from a %d-byte body", total, len(body))
		}
	})
}

// FuzzShimRequest: any bytes either decode into a request that encodes
// back to the same bytes, or are refused; a decoded request never holds
// more than the bytes could (counts are checked before allocating).
func FuzzShimRequest(f *testing.F) {
	for _, req := range []shimRequest{
		{Path: "/bin/sh", Dir: "/", Argv: []string{"sh", "-c", "true"}},
		{Path: "/usr/bin/env", Dir: "/workspace", Argv: []string{"env"}, Env: []string{"A=1", "B="}, PTY: true,
			Cred: true, UID: 1000, GID: 1000, Groups: []uint32{1000, 27}, NoSetg: true},
	} {
		b, err := req.encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeShimRequest(b)
		if err != nil {
			return
		}
		if len(req.Argv)+len(req.Env)+4*len(req.Groups) > len(b) {
			t.Fatalf("decoded %d strings and %d groups from %d bytes", len(req.Argv)+len(req.Env), len(req.Groups), len(b))
		}
		again, err := req.encode()
		if err != nil {
			t.Fatalf("a decoded request does not encode: %v", err)
		}
		// The reserved bytes and flags outside the known ones are not kept.
		want := bytes.Clone(b)
		want[1] &= shimFlagPTY | shimFlagCred | shimFlagNoSetgroups
		want[2], want[3] = 0, 0
		if !bytes.Equal(again, want) {
			t.Fatalf("round trip changed the request:\n% x\n% x", b, again)
		}
	})
}
