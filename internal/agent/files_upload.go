package agent

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// uploadedFile is one element of the POST /files response.
type uploadedFile struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
	// Metadata is what the upload attached (see metadata.go).
	Metadata map[string]string `json:"metadata,omitempty"`
}

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// handleUpload serves POST /files?path=&username=. The body is either
// multipart/form-data (every "file" part is stored; its filename is the
// destination unless ?path is given, in which case every part goes to
// path, as in upstream envd) or the raw file (application/octet-stream or
// anything else; ?path required). Content-Encoding: gzip is decoded.
// Files are streamed to a temporary file next to the destination and
// renamed into place, so readers never see partial content.
func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	u, err := s.userFromRequest(r.Header, q.Get("username"))
	if err != nil {
		writeErr(w, err)
		return
	}
	body := io.Reader(r.Body)
	if strings.EqualFold(strings.TrimSpace(r.Header.Get("Content-Encoding")), "gzip") {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid gzip body: %v", err))
			return
		}
		defer gz.Close()
		body = gz
	}
	conf, err := confinementOf(r.Header)
	if err != nil {
		writeErr(w, err)
		return
	}
	md, err := metadataFromHeader(r.Header)
	if err != nil {
		writeErr(w, err)
		return
	}
	pathParam := q.Get("path")
	var out []uploadedFile
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		out, err = s.uploadMultipart(u, conf, pathParam, md, multipart.NewReader(body, params["boundary"]))
	} else {
		var f uploadedFile
		f, err = s.uploadOne(u, conf, pathParam, md, body)
		out = []uploadedFile{f}
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) uploadMultipart(u *User, conf *confinement, pathParam string, md map[string]string, mr *multipart.Reader) ([]uploadedFile, error) {
	var out []uploadedFile
	err := eachUploadPart(pathParam, mr, func(dest string, r io.Reader) error {
		f, err := s.uploadOne(u, conf, dest, md, r)
		if err != nil {
			return err
		}
		out = append(out, f)
		return nil
	})
	return out, err
}

// eachUploadPart calls store with the destination and content of every
// "file" part of a multipart upload, in order: ?path= when given, else
// the part's own filename. Other parts are skipped; a body with no file
// part is an error.
func eachUploadPart(pathParam string, mr *multipart.Reader, store func(dest string, r io.Reader) error) error {
	n := 0
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("read multipart body: %w", err))
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		dest := pathParam
		if dest == "" {
			dest = rawFileName(part)
		}
		err = store(dest, part)
		part.Close()
		if err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New(`multipart body has no "file" part`))
	}
	return nil
}

// rawFileName returns a part's filename parameter unmodified:
// Part.FileName strips directories, but E2B clients send the full
// destination path there.
func rawFileName(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// uploadOne stores r at dest (resolved for u, under conf's roots when
// the request is confined) atomically. An existing regular file keeps its
// permission bits; new files get 0644. md, if any, becomes the file's
// metadata.
func (s *Server) uploadOne(u *User, conf *confinement, dest string, md map[string]string, r io.Reader) (uploadedFile, error) {
	if dest == "" {
		return uploadedFile{}, connect.NewError(connect.CodeInvalidArgument, errors.New("destination path is missing (use ?path=)"))
	}
	var t *uploadTarget
	var err error
	if conf != nil {
		var abs string
		if abs, err = conf.abs(dest); err != nil {
			return uploadedFile{}, err
		}
		err = conf.do(u, func(rs *rootSet) error {
			res, err := rs.resolve(abs, followFinal|makeParents)
			if err != nil {
				return err
			}
			if t, err = createUploadAt(res); err != nil {
				res.close()
			}
			return err
		})
	} else {
		t, err = createUpload(u, dest)
	}
	if err != nil {
		return uploadedFile{}, err
	}
	return t.write(u, r, md)
}

// uploadTarget is an upload's temporary file, renamed into place once
// complete.
type uploadTarget struct {
	path    string // the destination, as answered
	tmp     *os.File
	mode    fs.FileMode
	rename  func() error // moves tmp into place
	discard func() error // removes tmp
	release func()       // drops what the target holds (nil: nothing)
}

// createUpload creates the temporary file of an upload to dest (resolved
// for u by path, E2B's way), making the destination's parents.
func createUpload(u *User, dest string) (*uploadTarget, error) {
	p, err := u.resolvePath(dest)
	if err != nil {
		return nil, err
	}
	t := &uploadTarget{path: p, mode: 0o644}
	err = u.do(func() error {
		if fi, err := os.Stat(p); err == nil { //nolint:gosec // G703: inside the sandbox with the request user's credentials
			if fi.IsDir() {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q is a directory", p))
			}
			if fi.Mode().IsRegular() {
				t.mode = fi.Mode().Perm()
			}
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fsError(fmt.Sprintf("create parent of %q", p), err)
		}
		var err error
		t.tmp, err = os.CreateTemp(filepath.Dir(p), ".agentbox-upload-*")
		if err != nil {
			return fsError(fmt.Sprintf("create %q", p), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	tmpName := t.tmp.Name()
	t.rename = func() error { return os.Rename(tmpName, p) }
	t.discard = func() error { return os.Remove(tmpName) }
	return t, nil
}

// createUploadAt creates the temporary file of an upload to res (a
// confined resolution, owned by the target from now on) in res's
// directory, through its descriptor. Call it in User.do.
func createUploadAt(res *resolved) (*uploadTarget, error) {
	t := &uploadTarget{path: res.abs, mode: 0o644}
	fi, err := statAt(res.dir, res.name)
	switch {
	case err == nil && fi.IsDir():
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q is a directory", res.abs))
	case err == nil && fi.Mode().IsRegular():
		t.mode = fi.Mode().Perm()
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fsError(fmt.Sprintf("stat %q", res.abs), err)
	}
	var name string
	fd := -1
	for range 16 {
		name = fmt.Sprintf(".agentbox-upload-%d", rand.Uint32())
		fd, err = unix.Openat(res.dir, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return nil, fsError(fmt.Sprintf("create %q", res.abs), err)
	}
	t.tmp = os.NewFile(uintptr(fd), filepath.Join(res.dirReal, name))
	t.rename = func() error { return unix.Renameat(res.dir, name, res.dir, res.name) }
	t.discard = func() error { return unix.Unlinkat(res.dir, name, 0) }
	t.release = res.close
	return t, nil
}

// write copies r into the temporary file and renames it into place (as
// u); on failure the temporary file is removed.
func (t *uploadTarget) write(u *User, r io.Reader, md map[string]string) (uploadedFile, error) {
	if t.release != nil {
		defer t.release()
	}
	discard := func() { _ = u.do(t.discard) }
	bufp := copyBufPool.Get().(*[]byte)
	_, err := io.CopyBuffer(onlyWriter{t.tmp}, r, *bufp)
	copyBufPool.Put(bufp)
	if err == nil {
		err = t.tmp.Chmod(t.mode)
	}
	if err == nil && len(md) > 0 {
		// On the temporary file's descriptor, as u: what is renamed
		// into place has its metadata from the start.
		if err = setMetadata(int(t.tmp.Fd()), t.path, md); err != nil {
			_ = t.tmp.Close()
			discard()
			return uploadedFile{}, err
		}
	}
	if cerr := t.tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		discard()
		return uploadedFile{}, uploadError(t.path, err)
	}
	if err := u.do(t.rename); err != nil {
		discard()
		return uploadedFile{}, fsError(fmt.Sprintf("rename upload into %q", t.path), err)
	}
	return uploadedFile{Name: filepath.Base(t.path), Type: "file", Path: t.path, Metadata: md}, nil
}

// onlyWriter hides os.File's ReadFrom so io.CopyBuffer uses our large
// buffer instead of a small internal one for non-file sources.
type onlyWriter struct{ io.Writer }

// uploadError classifies a failed copy: a full disk or quota is
// resource_exhausted (HTTP 507), a failed write is internal, anything else
// came from reading the request body and is the client's problem.
func uploadError(p string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("not enough disk space to write %q: %w", p, err))
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fsError(fmt.Sprintf("write %q", p), err)
	}
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("read upload body for %q: %w", p, err))
}
