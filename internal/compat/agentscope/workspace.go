package agentscope

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The /workspace routes of the sandbox API. Paths are relative to
// /workspace or absolute inside it; anything else is 403.

const detailOutside = "Permission error. Access restricted to /workspace directory."

// wsEntry is the workspace routes' entry shape.
func wsEntry(e dataplane.Entry) map[string]any {
	typ := "other"
	switch e.Type {
	case dataplane.FileTypeDir:
		typ = "dir"
	case dataplane.FileTypeFile:
		typ = "file"
	case dataplane.FileTypeSymlink:
		typ = "symlink"
	}
	var size any
	if typ == "file" {
		size = e.Size
	}
	return map[string]any{"path": e.Path, "name": e.Name, "type": typ, "size": size, "mtime_ms": e.ModTime.UnixMilli()}
}

// wsPath reads a path (from the query, or given) and confines it.
func wsPath(raw string, present bool) (string, error) {
	if !present || raw == "" {
		return "", detailErr(http.StatusUnprocessableEntity, "path is required")
	}
	abs, ok := resolveWorkspacePath(raw)
	if !ok {
		return "", detailErr(http.StatusForbidden, detailOutside)
	}
	return abs, nil
}

func queryPath(r *http.Request) (string, error) {
	q := r.URL.Query()
	return wsPath(q.Get("path"), q.Has("path"))
}

// agentFor returns the data-plane request serveProxy opened for the
// route.
func (s *Server) agentFor(r *http.Request, rec *record) (*dataplane.Request, error) {
	if dr, ok := r.Context().Value(requestKey{}).(*dataplane.Request); ok && dr.Sandbox() == rec.ID {
		return dr, nil
	}
	return nil, fmt.Errorf("agentscope: workspace route %s without a data-plane request", r.URL.Path)
}

// wsTarget returns the ?path= of a workspace route and its data-plane
// request (confined to /workspace in the agent: a link leading out is
// refused there, and answered 403 by writeSandboxError).
func (s *Server) wsTarget(r *http.Request, rec *record) (string, *dataplane.Request, error) {
	p, err := queryPath(r)
	if err != nil {
		return "", nil, err
	}
	c, err := s.agentFor(r, rec)
	if err != nil {
		return "", nil, err
	}
	return p, c, nil
}

// stat returns the entry at p (a final link itself); found=false when it
// does not exist.
func stat(r *http.Request, c *dataplane.Request, p string) (dataplane.Entry, bool, error) {
	e, err := c.Stat(r.Context(), p, "")
	if sandbox.IsNotFound(err) {
		return e, false, nil
	}
	return e, err == nil, err
}

// wsRead is GET /workspace/file?path=&format=text|bytes.
func (s *Server) wsRead(w http.ResponseWriter, r *http.Request, rec *record) error {
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "text"
	}
	if format != "text" && format != "bytes" {
		return detailErr(http.StatusUnprocessableEntity, "format must be text or bytes")
	}
	c, err := s.agentFor(r, rec)
	if err != nil {
		return err
	}
	e, found, err := stat(r, c, p)
	if err != nil {
		return err
	}
	if !found || e.Type == dataplane.FileTypeDir {
		return detailErr(http.StatusNotFound, "not found")
	}
	body, size, err := c.Read(r.Context(), p, "")
	if err != nil {
		return err
	}
	defer body.Close()
	if format == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	_, err = io.Copy(w, body)
	if err != nil {
		s.log.Debug("agentscope: workspace read interrupted", "sandbox", rec.Name, "err", err)
	}
	return nil
}

// wsWrite is PUT /workspace/file?path= with the raw content as body.
func (s *Server) wsWrite(w http.ResponseWriter, r *http.Request, rec *record) error {
	p, c, err := s.wsTarget(r, rec)
	if err != nil {
		return err
	}
	e, err := s.upload(r, c, p, http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes), "path exists and is a directory")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wsEntry(e))
	return nil
}

// upload writes body to p (parents created) unless p is a directory.
func (s *Server) upload(r *http.Request, c *dataplane.Request, p string, body io.Reader, isDirDetail string) (dataplane.Entry, error) {
	e, found, err := stat(r, c, p)
	if err != nil {
		return e, err
	}
	if found && e.Type == dataplane.FileTypeDir {
		return e, detailErr(http.StatusConflict, isDirDetail)
	}
	if _, err := c.Write(r.Context(), p, "", body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return e, detailErr(http.StatusRequestEntityTooLarge, "file too large")
		}
		return e, err
	}
	return c.Stat(r.Context(), p, "")
}

// wsBatch is POST /workspace/files:batch: multipart "files" parts, each
// written to the matching preceding "paths" field (or its file name).
func (s *Server) wsBatch(w http.ResponseWriter, r *http.Request, rec *record) error {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "multipart/form-data" {
		return detailErr(http.StatusUnprocessableEntity, "want multipart/form-data with files and paths")
	}
	c, err := s.agentFor(r, rec)
	if err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes) // the whole batch
	mr, err := r.MultipartReader()
	if err != nil {
		return detailErr(http.StatusBadRequest, "bad multipart body: "+err.Error())
	}
	var pending []string
	out := []map[string]any{}
	for n := 0; n < 10000; n++ {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return detailErr(http.StatusBadRequest, "bad multipart body: "+err.Error())
		}
		switch part.FormName() {
		case "paths":
			v, err := io.ReadAll(io.LimitReader(part, 4096))
			if err != nil {
				return detailErr(http.StatusBadRequest, "bad multipart body: "+err.Error())
			}
			pending = append(pending, string(v))
		case "files":
			name := part.FileName()
			if len(pending) > 0 {
				name, pending = pending[0], pending[1:]
			}
			if name == "" {
				return detailErr(http.StatusBadRequest, "missing filename for a part")
			}
			p, err := wsPath(name, true)
			if err != nil {
				return err
			}
			e, err := s.upload(r, c, p, part, "target exists and is a directory: "+name)
			if err != nil {
				return err
			}
			out = append(out, wsEntry(e))
		}
		part.Close()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// wsList is GET /workspace/list?path=&depth=1.
func (s *Server) wsList(w http.ResponseWriter, r *http.Request, rec *record) error {
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		depth, err = strconv.Atoi(d)
		if err != nil || depth < 1 {
			return detailErr(http.StatusUnprocessableEntity, "depth must be an integer >= 1")
		}
		depth = min(depth, maxTreeDepth)
	}
	c, err := s.agentFor(r, rec)
	if err != nil {
		return err
	}
	// No stat first: a link leading out of /workspace is refused by the
	// listing itself (403), a missing path or a file is 404.
	entries, err := c.List(r.Context(), p, "", depth)
	if sandbox.IsNotFound(err) || sandbox.ClassOf(err) == sandbox.ClassInvalid {
		return detailErr(http.StatusNotFound, "not found")
	}
	if err != nil {
		return err
	}
	sortEntries(entries)
	out := make([]map[string]any, len(entries))
	for i, e := range entries {
		out[i] = wsEntry(e)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// wsExists is GET /workspace/exists?path=.
func (s *Server) wsExists(w http.ResponseWriter, r *http.Request, rec *record) error {
	p, c, err := s.wsTarget(r, rec)
	if err != nil {
		return err
	}
	_, found, err := stat(r, c, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]bool{"exists": found})
	return nil
}

// wsRemove is DELETE /workspace/entry?path=: 204, also when missing.
func (s *Server) wsRemove(w http.ResponseWriter, r *http.Request, rec *record) error {
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	if p == workspaceRoot {
		return detailErr(http.StatusForbidden, detailOutside)
	}
	c, err := s.agentFor(r, rec)
	if err != nil {
		return err
	}
	if err := c.Remove(r.Context(), p, ""); err != nil && !sandbox.IsNotFound(err) {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// wsMove is POST /workspace/move {source, destination}.
func (s *Server) wsMove(w http.ResponseWriter, r *http.Request, rec *record) error {
	var body struct{ Source, Destination string }
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	if body.Source == "" || body.Destination == "" {
		return detailErr(http.StatusBadRequest, "source and destination are required")
	}
	src, err := wsPath(body.Source, true)
	if err != nil {
		return err
	}
	dst, err := wsPath(body.Destination, true)
	if err != nil {
		return err
	}
	c, err := s.agentFor(r, rec)
	if err != nil {
		return err
	}
	if _, found, err := stat(r, c, src); err != nil || !found {
		if err != nil {
			return err
		}
		return detailErr(http.StatusNotFound, "source not found")
	}
	e, err := c.Move(r.Context(), src, dst, "")
	if err != nil {
		return err
	}
	if e.Path == "" {
		if e, err = c.Stat(r.Context(), dst, ""); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, wsEntry(e))
	return nil
}

// wsMkdir is POST /workspace/mkdir {path}: {"created": bool}.
func (s *Server) wsMkdir(w http.ResponseWriter, r *http.Request, rec *record) error {
	var body struct{ Path string }
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	if body.Path == "" {
		return detailErr(http.StatusBadRequest, "path is required")
	}
	p, err := wsPath(body.Path, true)
	if err != nil {
		return err
	}
	c, err := s.agentFor(r, rec)
	if err != nil {
		return err
	}
	e, found, err := stat(r, c, p)
	if err != nil {
		return err
	}
	if found {
		if e.Type != dataplane.FileTypeDir {
			return detailErr(http.StatusConflict, "path exists and is not a directory")
		}
		writeJSON(w, http.StatusOK, map[string]bool{"created": false})
		return nil
	}
	if _, err := c.MakeDir(r.Context(), p, ""); err != nil && sandbox.ClassOf(err) != sandbox.ClassConflict {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]bool{"created": true})
	return nil
}
