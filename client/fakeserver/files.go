package fakeserver

import (
	"errors"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// fsys is a sandbox's fake filesystem: file contents and explicit
// directories, keyed by absolute clean paths.
type fsys struct {
	files map[string][]byte
	dirs  map[string]bool
}

func newFsys() *fsys {
	return &fsys{files: map[string][]byte{}, dirs: map[string]bool{"/": true, "/home": true, "/home/user": true}}
}

// abs resolves a request path the way the spec says: relative to the
// user's home.
func abs(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/home/user/" + p
	}
	return path.Clean(p)
}

func (f *fsys) isDir(p string) bool {
	if f.dirs[p] {
		return true
	}
	for q := range f.files {
		if strings.HasPrefix(q, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

// entry is the spec's Entry.
type entry struct {
	Name       string    `json:"name"`
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	Mode       string    `json:"mode"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	ModifiedAt time.Time `json:"modified_at"`
}

func (f *fsys) entry(p string) (entry, bool) {
	e := entry{Name: path.Base(p), Path: p, Owner: "user", Group: "user", ModifiedAt: time.Unix(1700000000, 0).UTC()}
	if data, ok := f.files[p]; ok {
		e.Type, e.Size, e.Mode = "file", int64(len(data)), "-rw-r--r--"
		return e, true
	}
	if f.isDir(p) {
		e.Type, e.Size, e.Mode = "dir", 4096, "drwxr-xr-x"
		return e, true
	}
	return e, false
}

// PutFile stores a file in sandbox id's fake filesystem.
func (s *Server) PutFile(id, p string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fs[id]; f != nil {
		f.files[abs(p)] = slices.Clone(data)
	}
}

// File returns a file of sandbox id's fake filesystem.
func (s *Server) File(id, p string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fs[id]; f != nil {
		data, ok := f.files[abs(p)]
		return slices.Clone(data), ok
	}
	return nil, false
}

// withFS runs fn on sandbox id's filesystem under the lock.
func (s *Server) withFS(id string, fn func(f *fsys) *apiError) *apiError {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fs[id]
	if f == nil {
		return errf(404, "not_found", "sandbox %s not found", id)
	}
	return fn(f)
}

func pathParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, invalid("path", "path is required"))
		return "", false
	}
	return abs(p), true
}

func (s *Server) download(w http.ResponseWriter, r *http.Request, id string) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	var data []byte
	if e := s.withFS(id, func(f *fsys) *apiError {
		d, ok := f.files[p]
		if !ok {
			if f.isDir(p) {
				return invalid("path", "%s is a directory", p)
			}
			return errf(404, "not_found", "%s: no such file", p)
		}
		data = d
		return nil
	}); e != nil {
		writeError(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request, id string) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	// Read chunk by chunk, reporting progress, as a streaming server does.
	var data []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		data = append(data, buf[:n]...)
		if n > 0 && s.OnUpload != nil {
			s.OnUpload(p, int64(len(data)))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeError(w, invalid("", "reading body: %v", err))
			return
		}
	}
	var out entry
	if e := s.withFS(id, func(f *fsys) *apiError {
		if f.isDir(p) {
			return errf(409, "conflict", "%s is a directory", p)
		}
		f.files[p] = data
		out, _ = f.entry(p)
		return nil
	}); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) stat(w http.ResponseWriter, r *http.Request, id string) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	var out entry
	if e := s.withFS(id, func(f *fsys) *apiError {
		var found bool
		if out, found = f.entry(p); !found {
			return errf(404, "not_found", "%s: no such file or directory", p)
		}
		return nil
	}); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, id string) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 32 {
			writeError(w, invalid("depth", "depth must be 1..32"))
			return
		}
		depth = n
	}
	out := []entry{}
	if e := s.withFS(id, func(f *fsys) *apiError {
		if !f.isDir(p) {
			return errf(404, "not_found", "%s: no such directory", p)
		}
		seen := map[string]bool{}
		var names []string
		for q := range f.files {
			names = append(names, q)
		}
		for q := range f.dirs {
			names = append(names, q)
		}
		prefix := strings.TrimSuffix(p, "/") + "/"
		for _, q := range names {
			if !strings.HasPrefix(q, prefix) {
				continue
			}
			parts := strings.Split(strings.TrimPrefix(q, prefix), "/")
			for i := 1; i <= len(parts) && i <= depth; i++ {
				sub := prefix + strings.Join(parts[:i], "/")
				if !seen[sub] {
					seen[sub] = true
					e, _ := f.entry(sub)
					out = append(out, e)
				}
			}
		}
		return nil
	}); e != nil {
		writeError(w, e)
		return
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.Path, b.Path) })
	writeJSON(w, http.StatusOK, map[string]any{"entries": out})
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		Path string `json:"path"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Path == "" {
		writeError(w, invalid("path", "path is required"))
		return
	}
	p := abs(req.Path)
	var out entry
	if e := s.withFS(id, func(f *fsys) *apiError {
		for q := p; q != "/"; q = path.Dir(q) {
			if _, isFile := f.files[q]; isFile {
				return errf(409, "conflict", "%s exists and is not a directory", q)
			}
		}
		for q := p; q != "/"; q = path.Dir(q) {
			f.dirs[q] = true
		}
		out, _ = f.entry(p)
		return nil
	}); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) move(w http.ResponseWriter, r *http.Request, id string) {
	var req struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	src, dst := abs(req.Source), abs(req.Destination)
	var out entry
	if e := s.withFS(id, func(f *fsys) *apiError {
		if data, ok := f.files[src]; ok {
			delete(f.files, src)
			f.files[dst] = data
		} else if f.isDir(src) {
			// Collect first: inserting while ranging over a map may
			// revisit the new keys.
			dirs, files := map[string]bool{}, map[string][]byte{}
			for q := range f.dirs {
				if q == src || strings.HasPrefix(q, src+"/") {
					delete(f.dirs, q)
					dirs[dst+strings.TrimPrefix(q, src)] = true
				}
			}
			for q, data := range f.files {
				if strings.HasPrefix(q, src+"/") {
					delete(f.files, q)
					files[dst+strings.TrimPrefix(q, src)] = data
				}
			}
			maps.Copy(f.dirs, dirs)
			maps.Copy(f.files, files)
		} else {
			return errf(404, "not_found", "%s: no such file or directory", src)
		}
		out, _ = f.entry(dst)
		return nil
	}); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request, id string) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	if e := s.withFS(id, func(f *fsys) *apiError {
		if _, found := f.entry(p); !found {
			return errf(404, "not_found", "%s: no such file or directory", p)
		}
		for q := range f.files {
			if q == p || strings.HasPrefix(q, p+"/") {
				delete(f.files, q)
			}
		}
		for q := range f.dirs {
			if q == p || strings.HasPrefix(q, p+"/") {
				delete(f.dirs, q)
			}
		}
		return nil
	}); e != nil {
		writeError(w, e)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
