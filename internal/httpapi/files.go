package httpapi

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// entryOut is the Entry schema of the spec.
type entryOut struct {
	Name          string     `json:"name"`
	Path          string     `json:"path"`
	Type          string     `json:"type"`
	Size          int64      `json:"size"`
	Mode          string     `json:"mode,omitempty"`
	Owner         string     `json:"owner,omitempty"`
	Group         string     `json:"group,omitempty"`
	ModifiedAt    *time.Time `json:"modified_at,omitempty"`
	SymlinkTarget string     `json:"symlink_target,omitempty"`
}

func entryJSON(e dataplane.Entry) entryOut {
	out := entryOut{Name: e.Name, Path: e.Path, Size: e.Size, Mode: e.Permissions, Owner: e.Owner,
		Group: e.Group, SymlinkTarget: e.SymlinkTarget}
	switch {
	case e.IsSymlink:
		out.Type = "symlink"
	case e.Type == dataplane.FileTypeFile:
		out.Type = "file"
	case e.Type == dataplane.FileTypeDir:
		out.Type = "dir"
	default:
		out.Type = "other"
	}
	if !e.ModTime.IsZero() {
		t := e.ModTime.UTC()
		out.ModifiedAt = &t
	}
	return out
}

// filePath returns the required ?path= of a file route.
func filePath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", badRequest("path", "path is required")
	}
	if strings.ContainsRune(p, 0) || len(p) > 4096 {
		return "", badRequest("path", "path is too long or contains NUL")
	}
	return p, nil
}

// fileTarget returns the ?path= of a file route and opens its data-plane
// request; the caller must End it.
func (s *Server) fileTarget(r *http.Request) (string, *dataplane.Request, error) {
	path, err := filePath(r)
	if err != nil {
		return "", nil, err
	}
	dr, err := s.begin(r)
	if err != nil {
		return "", nil, err
	}
	return path, dr, nil
}

// fileUser is the in-sandbox user of a file request (?user=, default the
// sandbox's user).
func fileUser(r *http.Request) string { return r.URL.Query().Get("user") }

func (s *Server) download(w http.ResponseWriter, r *http.Request) error {
	path, dr, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	defer dr.End()
	body, size, err := dr.Read(r.Context(), path, fileUser(r))
	if err != nil {
		return err
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	// Streamed: the file never sits in the daemon's memory.
	_, err = io.Copy(w, body)
	return err
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) error {
	path, err := filePath(r)
	if err != nil {
		return err
	}
	limit := s.cfg.MaxUploadBytes
	if r.ContentLength > limit {
		return sandbox.Errorf(sandbox.ClassTooLarge, "upload of %d bytes is over the limit of %d bytes", r.ContentLength, limit)
	}
	// Streamed to the agent: charged as a request, not by its size.
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	body := http.MaxBytesReader(w, r.Body, limit)
	entry, err := dr.Write(r.Context(), path, fileUser(r), body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			// The agent wrote to a temporary file it removes on a failed
			// upload, so the old content of path is untouched.
			return sandbox.Errorf(sandbox.ClassTooLarge, "upload is over the limit of %d bytes", limit)
		}
		return err
	}
	writeJSON(w, http.StatusCreated, entryJSON(entry))
	return nil
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) error {
	path, dr, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	defer dr.End()
	if err := dr.Remove(r.Context(), path, fileUser(r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) error {
	path, dr, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	defer dr.End()
	e, err := dr.Stat(r.Context(), path, fileUser(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
	return nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	path, err := filePath(r)
	if err != nil {
		return err
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 32 {
			return badRequest("depth", "depth must be an integer from 1 to 32")
		}
		depth = n
	}
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	entries, err := dr.List(r.Context(), path, fileUser(r), depth)
	if err != nil {
		return err
	}
	out := make([]entryOut, 0, len(entries))
	for _, e := range entries {
		out = append(out, entryJSON(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": out})
	return nil
}

func (s *Server) makeDir(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Path string `json:"path"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, false); err != nil {
		return err
	}
	if body.Path == "" {
		return badRequest("path", "path is required")
	}
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	e, err := dr.MakeDir(r.Context(), body.Path, fileUser(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, entryJSON(e))
	return nil
}

func (s *Server) moveFile(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, false); err != nil {
		return err
	}
	if body.Source == "" {
		return badRequest("source", "source is required")
	}
	if body.Destination == "" {
		return badRequest("destination", "destination is required")
	}
	dr, err := s.begin(r)
	if err != nil {
		return err
	}
	defer dr.End()
	e, err := dr.Move(r.Context(), body.Source, body.Destination, fileUser(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
	return nil
}
