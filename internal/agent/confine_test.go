package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	fspb "github.com/agentbox/agentbox/api/proto/filesystem"
	"github.com/agentbox/agentbox/api/proto/filesystem/filesystemconnect"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/textedit"
)

// confineTree is a directory layout for confinement tests: two roots, ws
// (like /workspace) and tmp (like /tmp), and a directory out beside them
// that no confined call may read, create, change or remove anything in.
//
//	ws/dir/file          "inside"
//	ws/dir/up         -> ../../out          (relative, out through ..)
//	ws/rel            -> dir                (relative, inside)
//	ws/abs            -> <ws>/dir           (absolute, inside)
//	ws/chain1         -> chain2 -> <ws>/chain3 -> dir
//	ws/filelink       -> dir/file
//	ws/totmp          -> <tmp>/x            (absolute, into the second root)
//	ws/outabs         -> <out>              (absolute, out)
//	ws/outrel         -> ../out             (relative, out)
//	ws/fileout        -> <out>/secret       (a file outside)
//	ws/dangling       -> <out>/missing      (dangling, out)
//	ws/danglingin     -> made/here          (dangling, inside)
//	ws/loop1 -> loop2 -> loop1
//	ws/n0 -> n1 -> ... -> n40 -> dir      (41 links from n0, 40 from n1)
//	tmp/x/file           "in tmp"
//	out/secret           "SECRET", out/dir/file "SECRET2"
type confineTree struct {
	ws, tmp, out string
	c            *agentclient.Client // confined to ws and tmp
	before       map[string]string
}

func newConfineTree(t *testing.T, a *agenttest.Agent, c *agentclient.Client) *confineTree {
	t.Helper()
	base, err := os.MkdirTemp(a.Dir, "tree-")
	if err != nil {
		t.Fatal(err)
	}
	// Reachable by other users (MkdirTemp makes it 0700).
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	tr := &confineTree{ws: filepath.Join(base, "ws"), tmp: filepath.Join(base, "tmp"), out: filepath.Join(base, "out")}
	for _, d := range []string{tr.ws + "/dir", tr.tmp + "/x", tr.out + "/dir"} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		tr.ws + "/dir/file":  "inside",
		tr.tmp + "/x/file":   "in tmp",
		tr.out + "/secret":   "SECRET",
		tr.out + "/dir/file": "SECRET2",
	}
	for p, content := range files {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := [][2]string{
		{"dir/up", "../../out"},
		{"rel", "dir"},
		{"abs", tr.ws + "/dir"},
		{"chain1", "chain2"},
		{"chain2", tr.ws + "/chain3"},
		{"chain3", "dir"},
		{"filelink", "dir/file"},
		{"totmp", tr.tmp + "/x"},
		{"outabs", tr.out},
		{"outrel", "../out"},
		{"fileout", tr.out + "/secret"},
		{"dangling", tr.out + "/missing"},
		{"danglingin", "made/here"},
		{"loop1", "loop2"},
		{"loop2", "loop1"},
		{"n40", "dir"},
	}
	for i := 0; i < 40; i++ {
		links = append(links, [2]string{fmt.Sprintf("n%d", i), fmt.Sprintf("n%d", i+1)})
	}
	for _, l := range links {
		if err := os.Symlink(l[1], filepath.Join(tr.ws, l[0])); err != nil {
			t.Fatal(err)
		}
	}
	tr.c = c.Confined(tr.ws, tr.tmp)
	tr.before = snapshotTree(t, tr.out)
	t.Cleanup(func() { tr.checkOutside(t) })
	return tr
}

// snapshotTree describes every entry below dir: type, mode, size, content
// or link target.
func snapshotTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v %d", fi.Mode(), fi.Size())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkOutside fails the test if anything below out changed, appeared or
// went away.
func (tr *confineTree) checkOutside(t *testing.T) {
	t.Helper()
	after := snapshotTree(t, tr.out)
	for p, d := range tr.before {
		if after[p] != d {
			t.Errorf("outside the roots, %s changed: %q, was %q", p, after[p], d)
		}
	}
	for p, d := range after {
		if _, ok := tr.before[p]; !ok {
			t.Errorf("outside the roots, %s appeared: %q", p, d)
		}
	}
}

func (tr *confineTree) p(rel string) string { return filepath.Join(tr.ws, rel) }

// wantOutside checks that err is the refusal of a path leaving the roots.
func wantOutside(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, agentclient.ErrOutsideRoot) || sandbox.ClassOf(err) != sandbox.ClassForbidden {
		t.Errorf("%s: %v, want a refusal for leaving the roots (ClassForbidden, ErrOutsideRoot)", what, err)
	}
}

// wantClass checks err's class and that it is not a refusal for leaving
// the roots.
func wantClass(t *testing.T, what string, err error, class sandbox.Class) {
	t.Helper()
	if sandbox.ClassOf(err) != class || errors.Is(err, agentclient.ErrOutsideRoot) {
		t.Errorf("%s: %v, want %s", what, err, class)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func download(ctx context.Context, c *agentclient.Client, p string) (string, error) {
	rc, _, err := c.Download(ctx, p, "")
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// outsidePaths are paths that lead out of the tree's roots, each in its
// own way; every one of them must be refused by every operation.
func (tr *confineTree) outsidePaths() []string {
	return []string{
		tr.out + "/secret",           // absolute, lexically out
		"../out/secret",              // relative, lexically out
		tr.ws + "/dir/../../out/dir", // .. leading out
		tr.p("outabs/dir"),           // absolute link out
		tr.p("outrel/dir"),           // relative link out
		tr.p("dir/up/dir"),           // relative link with .. out
		tr.p("rel/up/dir"),           // a link inside, then one out
		tr.p("dangling/sub"),         // dangling link out
	}
}

func TestConfinedStat(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	for _, p := range []string{"dir/file", tr.p("dir/file"), tr.p("dir/../dir/file"), tr.p("rel/file"), tr.p("abs/file"), tr.p("chain1/file"), tr.p("n1/file")} {
		e, err := tr.c.Stat(ctx, p, "")
		if err != nil || e.Type != agentclient.FileTypeFile || e.Size != int64(len("inside")) || e.Name != "file" {
			t.Errorf("stat %s: %+v %v", p, e, err)
		}
	}
	// Relative paths are relative to the first root; answers name the
	// path as asked, made absolute.
	if e, err := tr.c.Stat(ctx, "rel/file", ""); err != nil || e.Path != tr.p("rel/file") {
		t.Errorf("stat rel/file: %+v %v", e, err)
	}
	if e, err := tr.c.Stat(ctx, tr.p("totmp/file"), ""); err != nil || e.Size != int64(len("in tmp")) {
		t.Errorf("stat through the link into the second root: %+v %v", e, err)
	}
	for _, p := range []string{tr.ws, tr.tmp, "."} {
		if e, err := tr.c.Stat(ctx, p, ""); err != nil || e.Type != agentclient.FileTypeDir {
			t.Errorf("stat root %s: %+v %v", p, e, err)
		}
	}
	// A final link is described, not followed; its type is its target's
	// only when that is inside the roots.
	if e, err := tr.c.Stat(ctx, tr.p("filelink"), ""); err != nil || !e.IsSymlink || e.Type != agentclient.FileTypeFile || e.SymlinkTarget != "dir/file" {
		t.Errorf("stat a link inside: %+v %v", e, err)
	}
	if e, err := tr.c.Stat(ctx, tr.p("fileout"), ""); err != nil || !e.IsSymlink || e.Type != agentclient.FileTypeSymlink || e.SymlinkTarget != tr.out+"/secret" {
		t.Errorf("stat a link out: %+v %v", e, err)
	}
	if e, err := tr.c.Stat(ctx, tr.p("outabs"), ""); err != nil || e.Type != agentclient.FileTypeSymlink {
		t.Errorf("stat a link to a directory outside: %+v %v", e, err)
	}
	for _, p := range tr.outsidePaths() {
		_, err := tr.c.Stat(ctx, p, "")
		wantOutside(t, "stat "+p, err)
	}
	_, err := tr.c.Stat(ctx, tr.p("loop1/x"), "")
	wantClass(t, "stat through a link loop", err, sandbox.ClassInvalid)
	_, err = tr.c.Stat(ctx, tr.p("n0/file"), "")
	wantClass(t, "stat through 41 links", err, sandbox.ClassInvalid)
	_, err = tr.c.Stat(ctx, tr.p("missing"), "")
	wantClass(t, "stat missing", err, sandbox.ClassNotFound)
	_, err = tr.c.Stat(ctx, tr.p("dir/file/x"), "")
	wantClass(t, "stat below a file", err, sandbox.ClassInvalid)
	// The message names the link and its target.
	_, err = tr.c.Stat(ctx, tr.p("outabs/secret"), "")
	if msg := fmt.Sprint(err); !strings.Contains(msg, tr.p("outabs")+" -> "+tr.out) {
		t.Errorf("refusal %q does not name the link and its target", msg)
	}
}

func TestConfinedListDir(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	names := func(es []agentclient.EntryInfo, base string) []string {
		var out []string
		for _, e := range es {
			rel, _ := filepath.Rel(base, e.Path)
			out = append(out, rel)
		}
		return out
	}
	for _, p := range []string{"dir", tr.p("rel"), tr.p("abs"), tr.p("chain1"), tr.p("n1")} {
		es, err := tr.c.ListDir(ctx, p, "", 1)
		base := p
		if !filepath.IsAbs(base) {
			base = tr.p(base)
		}
		if got := names(es, base); err != nil || !slices.Equal(got, []string{"file", "up"}) {
			t.Errorf("list %s: %v %v", p, got, err)
		}
	}
	if es, err := tr.c.ListDir(ctx, tr.p("totmp"), "", 1); err != nil || len(es) != 1 || es[0].Path != tr.p("totmp/file") {
		t.Errorf("list through the link into the second root: %+v %v", es, err)
	}
	// Recursive listings never descend into links; link types are their
	// targets' only inside the roots.
	es, err := tr.c.ListDir(ctx, tr.ws, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]agentclient.FileType{}
	for _, e := range es {
		rel, _ := filepath.Rel(tr.ws, e.Path)
		types[rel] = e.Type
		if strings.Contains(rel, "/") && rel != "dir/file" && rel != "dir/up" {
			t.Errorf("recursive listing descended to %s", rel)
		}
	}
	want := map[string]agentclient.FileType{
		"dir": agentclient.FileTypeDir, "dir/file": agentclient.FileTypeFile, "dir/up": agentclient.FileTypeSymlink,
		"rel": agentclient.FileTypeDir, "filelink": agentclient.FileTypeFile, "totmp": agentclient.FileTypeDir,
		"outabs": agentclient.FileTypeSymlink, "outrel": agentclient.FileTypeSymlink, "fileout": agentclient.FileTypeSymlink,
		"dangling": agentclient.FileTypeSymlink, "loop1": agentclient.FileTypeSymlink, "n0": agentclient.FileTypeSymlink,
		"n1": agentclient.FileTypeDir,
	}
	for rel, typ := range want {
		if types[rel] != typ {
			t.Errorf("recursive listing: %s is %q, want %q", rel, types[rel], typ)
		}
	}
	for _, p := range append(tr.outsidePaths(), tr.p("outabs"), tr.p("outrel"), tr.p("dir/up")) {
		_, err := tr.c.ListDir(ctx, p, "", 1)
		wantOutside(t, "list "+p, err)
	}
	_, err = tr.c.ListDir(ctx, tr.p("loop1"), "", 1)
	wantClass(t, "list a link loop", err, sandbox.ClassInvalid)
	_, err = tr.c.ListDir(ctx, tr.p("filelink"), "", 1)
	wantClass(t, "list a file", err, sandbox.ClassInvalid)
	_, err = tr.c.ListDir(ctx, tr.p("nope"), "", 1)
	wantClass(t, "list missing", err, sandbox.ClassNotFound)
}

func TestConfinedMakeDir(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	cases := map[string]string{ // asked -> made
		"new/a/b":               tr.p("new/a/b"),
		tr.p("rel/sub"):         tr.p("dir/sub"),
		tr.p("abs/sub2"):        tr.p("dir/sub2"),
		tr.p("chain1/sub3"):     tr.p("dir/sub3"),
		tr.p("totmp/sub"):       tr.tmp + "/x/sub",
		tr.p("danglingin/sub"):  tr.p("made/here/sub"),
		tr.tmp + "/fresh/a":     tr.tmp + "/fresh/a",
		tr.p("n1/deep/er/than"): tr.p("dir/deep/er/than"),
	}
	for asked, made := range cases {
		e, err := tr.c.MakeDir(ctx, asked, "")
		if err != nil || e.Type != agentclient.FileTypeDir {
			t.Errorf("make dir %s: %+v %v", asked, e, err)
			continue
		}
		if fi, err := os.Lstat(made); err != nil || !fi.IsDir() {
			t.Errorf("make dir %s: %s not made: %v", asked, made, err)
		}
	}
	_, err := tr.c.MakeDir(ctx, tr.p("rel"), "")
	wantClass(t, "make dir over a link to a directory", err, sandbox.ClassConflict)
	_, err = tr.c.MakeDir(ctx, tr.p("filelink"), "")
	wantClass(t, "make dir over a link to a file", err, sandbox.ClassInvalid)
	_, err = tr.c.MakeDir(ctx, tr.ws, "")
	wantClass(t, "make dir of a root", err, sandbox.ClassConflict)
	for _, p := range append(tr.outsidePaths(), tr.p("outabs"), tr.p("dangling"), tr.p("outrel/new/deeper")) {
		_, err := tr.c.MakeDir(ctx, p, "")
		wantOutside(t, "make dir "+p, err)
	}
	_, err = tr.c.MakeDir(ctx, tr.p("loop1/x"), "")
	wantClass(t, "make dir through a link loop", err, sandbox.ClassInvalid)
}

func TestConfinedMove(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	// Both ends through links inside, into the second root and back.
	e, err := tr.c.Move(ctx, tr.p("rel/file"), tr.p("totmp/new/moved"), "")
	if err != nil || e.Path != tr.p("totmp/new/moved") || e.Type != agentclient.FileTypeFile {
		t.Fatalf("move into the second root: %+v %v", e, err)
	}
	if readFile(t, tr.tmp+"/x/new/moved") != "inside" {
		t.Error("moved file not in the second root")
	}
	if _, err := tr.c.Move(ctx, tr.tmp+"/x/new/moved", "chain1/file", ""); err != nil {
		t.Fatalf("move back: %v", err)
	}
	if readFile(t, tr.p("dir/file")) != "inside" {
		t.Error("file not moved back")
	}
	// A final link is moved itself, also one leading out.
	if _, err := tr.c.Move(ctx, tr.p("fileout"), tr.p("fileout2"), ""); err != nil {
		t.Errorf("move a link leading out: %v", err)
	}
	if target, err := os.Readlink(tr.p("fileout2")); err != nil || target != tr.out+"/secret" {
		t.Errorf("moved link: %q %v", target, err)
	}
	for _, p := range tr.outsidePaths() {
		_, err := tr.c.Move(ctx, p, tr.p("got"), "")
		wantOutside(t, "move from "+p, err)
		_, err = tr.c.Move(ctx, tr.p("dir/file"), p, "")
		wantOutside(t, "move to "+p, err)
	}
	if readFile(t, tr.p("dir/file")) != "inside" {
		t.Error("a refused move moved the source")
	}
	_, err = tr.c.Move(ctx, tr.p("dir/file"), tr.p("loop1/x"), "")
	wantClass(t, "move through a link loop", err, sandbox.ClassInvalid)
	_, err = tr.c.Move(ctx, tr.ws, tr.p("elsewhere"), "")
	wantClass(t, "move a root", err, sandbox.ClassInvalid)
	_, err = tr.c.Move(ctx, tr.p("missing"), tr.p("elsewhere"), "")
	wantClass(t, "move missing", err, sandbox.ClassNotFound)
}

func TestConfinedRemove(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	for _, p := range tr.outsidePaths() {
		wantOutside(t, "remove "+p, tr.c.Remove(ctx, p, ""))
	}
	wantOutside(t, "remove a file outside by a link", tr.c.Remove(ctx, tr.p("abs/up/secret"), ""))
	// Links are removed themselves, never what they point to.
	for _, p := range []string{"fileout", "outabs", tr.p("outrel"), tr.p("dangling"), tr.p("filelink")} {
		if err := tr.c.Remove(ctx, p, ""); err != nil {
			t.Errorf("remove the link %s: %v", p, err)
		}
	}
	if readFile(t, tr.p("dir/file")) != "inside" {
		t.Error("removing a link removed its target")
	}
	// A tree holding links out goes, and only it.
	for _, d := range []string{"tree/a/b"} {
		if err := os.MkdirAll(tr.p(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.WriteFile(tr.p("tree/a/b/f"), nil, 0o644)
	_ = os.Symlink(tr.out, tr.p("tree/a/out"))
	_ = os.Symlink("../../../out/dir", tr.p("tree/a/b/outdir"))
	if err := tr.c.Remove(ctx, tr.p("tree"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tr.p("tree")); !os.IsNotExist(err) {
		t.Errorf("tree not removed: %v", err)
	}
	if err := tr.c.Remove(ctx, tr.p("totmp/file"), ""); err != nil {
		t.Errorf("remove through the link into the second root: %v", err)
	}
	if _, err := os.Lstat(tr.tmp + "/x/file"); !os.IsNotExist(err) {
		t.Errorf("file in the second root not removed: %v", err)
	}
	wantClass(t, "remove a root", tr.c.Remove(ctx, tr.tmp, ""), sandbox.ClassInvalid)
	wantClass(t, "remove through a link loop", tr.c.Remove(ctx, tr.p("loop1/x"), ""), sandbox.ClassInvalid)
	wantClass(t, "remove missing", tr.c.Remove(ctx, tr.p("missing"), ""), sandbox.ClassNotFound)
}

func TestConfinedDownload(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	for p, want := range map[string]string{
		"dir/file": "inside", tr.p("filelink"): "inside", tr.p("chain1/file"): "inside", tr.p("n1/file"): "inside",
		tr.p("totmp/file"): "in tmp", tr.tmp + "/x/file": "in tmp",
	} {
		if got, err := download(ctx, tr.c, p); err != nil || got != want {
			t.Errorf("download %s: %q %v", p, got, err)
		}
	}
	for _, p := range append(tr.outsidePaths(), tr.p("fileout"), tr.p("outrel/secret"), tr.p("dir/up/secret")) {
		got, err := download(ctx, tr.c, p)
		wantOutside(t, "download "+p, err)
		if strings.Contains(got, "SECRET") {
			t.Errorf("download %s read outside: %q", p, got)
		}
	}
	_, err := download(ctx, tr.c, tr.p("loop1"))
	wantClass(t, "download a link loop", err, sandbox.ClassInvalid)
	_, err = download(ctx, tr.c, tr.p("rel"))
	wantClass(t, "download a directory", err, sandbox.ClassInvalid)
	_, err = download(ctx, tr.c, tr.p("missing"))
	wantClass(t, "download missing", err, sandbox.ClassNotFound)
}

func TestConfinedUpload(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	cases := map[string]string{ // asked -> written
		"up.txt":                 tr.p("up.txt"),
		tr.p("new/deep/f"):       tr.p("new/deep/f"),
		tr.p("filelink"):         tr.p("dir/file"), // through a final link inside
		tr.p("chain1/c"):         tr.p("dir/c"),
		tr.p("totmp/t"):          tr.tmp + "/x/t",
		tr.p("danglingin"):       tr.p("made/here"), // a dangling link inside: its target is made
		tr.p("n1/viafortylinks"): tr.p("dir/viafortylinks"),
	}
	for asked, written := range cases {
		content := "content of " + asked
		e, err := tr.c.Upload(ctx, asked, "", strings.NewReader(content))
		if err != nil {
			t.Errorf("upload %s: %v", asked, err)
			continue
		}
		if want := asked; filepath.IsAbs(want) && e.Path != want {
			t.Errorf("upload %s answered path %s", asked, e.Path)
		}
		if got := readFile(t, written); got != content {
			t.Errorf("upload %s: %s holds %q", asked, written, got)
		}
	}
	if fi, err := os.Lstat(tr.p("filelink")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("an upload through a link replaced the link: %v", err)
	}
	for _, p := range append(tr.outsidePaths(), tr.p("fileout"), tr.p("dangling"), tr.p("outabs/new")) {
		_, err := tr.c.Upload(ctx, p, "", strings.NewReader("x"))
		wantOutside(t, "upload "+p, err)
	}
	_, err := tr.c.Upload(ctx, tr.p("loop1"), "", strings.NewReader("x"))
	wantClass(t, "upload to a link loop", err, sandbox.ClassInvalid)
	_, err = tr.c.Upload(ctx, tr.p("rel"), "", strings.NewReader("x"))
	wantClass(t, "upload over a directory", err, sandbox.ClassInvalid)

	// Multipart: every part is confined; parts before a refused one are
	// stored, nothing after.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, p := range []string{tr.p("mp1"), tr.p("outabs/mp2"), tr.p("mp3")} {
		fw, _ := mw.CreateFormFile("file", p)
		_, _ = fw.Write([]byte("multi"))
	}
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, "http://agent/files", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Add(agent.RootHeader, tr.ws)
	resp, err := rawHTTP(t, a).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(agent.ErrorHeader) != agent.ErrorOutsideRoot {
		t.Errorf("multipart upload with a part out: %s, %s %q", resp.Status, agent.ErrorHeader, resp.Header.Get(agent.ErrorHeader))
	}
	if readFile(t, tr.p("mp1")) != "multi" {
		t.Error("the part before the refused one was not stored")
	}
	if _, err := os.Lstat(tr.p("mp3")); !os.IsNotExist(err) {
		t.Errorf("a part after the refused one was stored: %v", err)
	}
}

func TestConfinedEditFile(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	edit := func(p, old, new string) error {
		_, err := tr.c.EditFile(ctx, "", textedit.Request{Path: p, Edits: []textedit.Edit{{OldText: old, NewText: new}}})
		return err
	}
	if err := edit(tr.p("filelink"), "inside", "edited"); err != nil {
		t.Fatal(err)
	}
	if readFile(t, tr.p("dir/file")) != "edited" {
		t.Error("an edit through a link inside did not change its target")
	}
	if fi, err := os.Lstat(tr.p("filelink")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("an edit through a link replaced the link: %v", err)
	}
	if err := edit("totmp/file", "in tmp", "tmp edited"); err != nil || readFile(t, tr.tmp+"/x/file") != "tmp edited" {
		t.Errorf("edit in the second root: %v", err)
	}
	for _, p := range append(tr.outsidePaths(), tr.p("fileout"), tr.p("outrel/secret")) {
		wantOutside(t, "edit "+p, edit(p, "SECRET", "x"))
	}
	wantClass(t, "edit a link loop", edit(tr.p("loop1"), "a", "b"), sandbox.ClassInvalid)
	wantClass(t, "edit missing", edit(tr.p("missing"), "a", "b"), sandbox.ClassNotFound)
}

func TestConfinedWatchDir(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	// Watched through a link inside; new subdirectories are watched too.
	w, err := tr.c.WatchDir(ctx, tr.p("chain1"), "", agentclient.WatchOptions{Recursive: true, IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_ = os.WriteFile(tr.p("dir/new"), []byte("1"), 0o644)
	if ev := nextEvent(t, w, "new", agentclient.OpCreate); ev.Entry == nil || ev.Entry.Path != tr.p("chain1/new") {
		t.Errorf("create event entry %+v", ev.Entry)
	}
	_ = os.Mkdir(tr.p("dir/sub"), 0o755)
	nextEvent(t, w, "sub", agentclient.OpCreate)
	_ = os.WriteFile(tr.p("dir/sub/deep"), nil, 0o644)
	nextEvent(t, w, "sub/deep", agentclient.OpCreate)
	_ = os.Symlink(tr.out, tr.p("dir/sub/lnk"))
	if ev := nextEvent(t, w, "sub/lnk", agentclient.OpCreate); ev.Entry == nil || !ev.Entry.IsSymlink || ev.Entry.Type != agentclient.FileTypeSymlink {
		t.Errorf("a new link out: entry %+v", ev.Entry)
	}
	// Nothing outside is watched, through the link in the watched tree
	// (up) or the one just made: inotify keeps one queue in order, so an
	// event for out/ would come before the marker's.
	_ = os.WriteFile(tr.out+"/dir/file", []byte("SECRET2"), 0o644)
	_ = os.WriteFile(tr.p("dir/marker"), nil, 0o644)
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Name == "marker" {
			break
		}
		if strings.HasPrefix(ev.Name, "up/") || strings.HasPrefix(ev.Name, "sub/lnk/") {
			t.Errorf("event from outside the roots: %+v", ev)
		}
	}
	for _, p := range append(tr.outsidePaths(), tr.p("outabs"), tr.p("dir/up")) {
		_, err := tr.c.WatchDir(ctx, p, "", agentclient.WatchOptions{})
		wantOutside(t, "watch "+p, err)
	}
	_, err = tr.c.WatchDir(ctx, tr.p("loop1"), "", agentclient.WatchOptions{})
	wantClass(t, "watch a link loop", err, sandbox.ClassInvalid)
	_, err = tr.c.WatchDir(ctx, tr.p("filelink"), "", agentclient.WatchOptions{})
	wantClass(t, "watch a file", err, sandbox.ClassInvalid)

	// The polling watcher is confined the same way.
	fc := filesystemconnect.NewFilesystemClient(rawHTTP(t, a), "http://agent", connect.WithProtoJSON())
	req := connect.NewRequest(&fspb.CreateWatcherRequest{Path: "outabs"})
	req.Header().Add(agent.RootHeader, tr.ws)
	_, err = fc.CreateWatcher(ctx, req)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodePermissionDenied || ce.Meta().Get(agent.ErrorHeader) != agent.ErrorOutsideRoot {
		t.Errorf("polling watcher of a link out: %v", err)
	}
	req = connect.NewRequest(&fspb.CreateWatcherRequest{Path: "rel"})
	req.Header().Add(agent.RootHeader, tr.ws)
	cw, err := fc.CreateWatcher(ctx, req)
	if err != nil {
		t.Fatalf("polling watcher through a link inside: %v", err)
	}
	rm := connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: cw.Msg.GetWatcherId()})
	if _, err := fc.RemoveWatcher(ctx, rm); err != nil {
		t.Error(err)
	}
}

// TestConfinedWire: the refusal as other clients see it: Connect
// permission_denied with the X-Agentbox-Error header, REST 403 with it.
func TestConfinedWire(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	tr := newConfineTree(t, a, c)
	hc := rawHTTP(t, a)
	post := func(body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, "http://agent"+filesystemconnect.FilesystemStatProcedure, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Add(agent.RootHeader, tr.ws)
		req.Header.Add(agent.RootHeader, tr.tmp)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post(`{"path":"outabs/secret"}`); resp.StatusCode != http.StatusForbidden || resp.Header.Get(agent.ErrorHeader) != agent.ErrorOutsideRoot {
		t.Errorf("connect stat of a link out: %s, %q", resp.Status, resp.Header.Get(agent.ErrorHeader))
	}
	if resp := post(`{"path":"missing"}`); resp.StatusCode != http.StatusNotFound || resp.Header.Get(agent.ErrorHeader) != "" {
		t.Errorf("connect stat of a missing file: %s, %q", resp.Status, resp.Header.Get(agent.ErrorHeader))
	}
	req, _ := http.NewRequest(http.MethodGet, filesURL(tr.p("fileout"), ""), nil)
	req.Header.Add(agent.RootHeader, tr.ws)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(agent.ErrorHeader) != agent.ErrorOutsideRoot || bytes.Contains(b, []byte("SECRET")) {
		t.Errorf("download of a link out: %s, %q, %s", resp.Status, resp.Header.Get(agent.ErrorHeader), b)
	}
	// Without the header, E2B's semantics: the same link is followed.
	if got, err := download(testCtx(t), c, tr.p("fileout")); err != nil || got != "SECRET" {
		t.Errorf("unconfined download: %q %v", got, err)
	}
}

// TestConfinedRootsValidated: roots must be absolute, clean, existing
// directories reached without links; anything else is invalid_argument.
func TestConfinedRootsValidated(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	if err := os.Symlink(tr.ws, tr.tmp+"/wslink"); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{"ws", tr.ws + "/", tr.ws + "/../ws", tr.ws + "/missing", tr.p("dir/file"), tr.tmp + "/wslink", tr.p("rel"), ""} {
		_, err := c.Confined(root).Stat(ctx, tr.p("dir/file"), "")
		wantClass(t, fmt.Sprintf("root %q", root), err, sandbox.ClassInvalid)
	}
	// Several roots: the first is where relative paths start; nested
	// roots are fine.
	if e, err := c.Confined(tr.p("dir"), tr.ws).Stat(ctx, "file", ""); err != nil || e.Path != tr.p("dir/file") {
		t.Errorf("relative to the first root: %+v %v", e, err)
	}
	// Confined() with no roots is an unconfined client.
	if got, err := download(ctx, c.Confined(), tr.p("fileout")); err != nil || got != "SECRET" {
		t.Errorf("Confined(): %q %v", got, err)
	}
}

// TestConfinedAsOtherUser: confined calls run with the requested user's
// permissions, like unconfined ones.
func TestConfinedAsOtherUser(t *testing.T) {
	requireRoot(t)
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	tr := newConfineTree(t, a, c)
	if err := os.Chmod(tr.ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.c.Upload(ctx, "nobody/f", "nobody", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{tr.p("nobody/f"), tr.p("nobody")} {
		fi, err := os.Stat(q)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 {
			t.Errorf("%s owned by %d, want nobody", q, st.Uid)
		}
	}
	locked := tr.p("locked")
	if err := os.Mkdir(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(locked+"/f", []byte("root's"), 0o644)
	_, err := tr.c.Upload(ctx, "locked/g", "nobody", strings.NewReader("x"))
	wantClass(t, "upload into a 0700 root directory as nobody", err, sandbox.ClassForbidden)
	_, err = tr.c.Stat(ctx, "locked/f", "nobody")
	wantClass(t, "stat below a 0700 root directory as nobody", err, sandbox.ClassForbidden)
	if e, err := tr.c.Stat(ctx, "locked/f", ""); err != nil || e.Owner != "root" {
		t.Errorf("stat as root: %+v %v", e, err)
	}
	// A sticky directory: nobody may not remove root's file in it.
	sticky := tr.p("sticky")
	if err := os.Mkdir(sticky, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(sticky, 0o777|os.ModeSticky)
	_ = os.WriteFile(sticky+"/f", nil, 0o666)
	wantClass(t, "remove root's file in a sticky directory as nobody", tr.c.Remove(ctx, "sticky/f", "nobody"), sandbox.ClassForbidden)
	if _, err := os.Lstat(sticky + "/f"); err != nil {
		t.Errorf("the refused remove removed: %v", err)
	}
	// A root whose contents the user cannot reach.
	_, err = c.Confined(locked).Stat(ctx, "f", "nobody")
	wantClass(t, "a root nobody cannot open", err, sandbox.ClassForbidden)
}
