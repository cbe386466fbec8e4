package fakeserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// template is a fake template: a record, plus the bytes an import sent
// (exported back as they came).
type template struct {
	Name    string           `json:"name"`
	Tag     string           `json:"tag"`
	Kind    string           `json:"kind"`
	Digest  string           `json:"digest,omitempty"`
	Source  string           `json:"source,omitempty"`
	Layers  []map[string]any `json:"layers"`
	Size    int64            `json:"size"`
	Created time.Time        `json:"created"`
	InUse   int              `json:"in_use"`
	Config  map[string]any   `json:"config"`
	data    []byte
}

// splitRef splits NAME[:TAG], the tag defaulting to latest.
func splitRef(ref string) (string, string) {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}

// AddTemplate adds an image template name[:tag] with the given number of
// live sandboxes using it.
func (s *Server) AddTemplate(ref string, size int64, layers, inUse int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putTemplate(ref, size, layers, "test", nil).InUse = inUse
}

// TemplateData returns the bytes imported as template ref (nil if none).
func (s *Server) TemplateData(ref string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, tag := splitRef(ref)
	if t := s.templatesByRef()[name+":"+tag]; t != nil {
		return t.data
	}
	return nil
}

func (s *Server) templatesByRef() map[string]*template {
	if s.templates == nil {
		s.templates = map[string]*template{"host:latest": {Name: "host", Tag: "latest", Kind: "host",
			Layers: []map[string]any{}, Config: map[string]any{}}}
	}
	return s.templates
}

func (s *Server) putTemplate(ref string, size int64, layers int, source string, data []byte) *template {
	name, tag := splitRef(ref)
	sum := sha256.Sum256([]byte(ref))
	t := &template{Name: name, Tag: tag, Kind: "image", Digest: "sha256:" + hex.EncodeToString(sum[:]), Source: source,
		Size: size, Created: time.Now().UTC(), Layers: []map[string]any{}, Config: map[string]any{}, data: data}
	for i := range layers {
		t.Layers = append(t.Layers, map[string]any{"diff_id": fmt.Sprintf("sha256:%064d", i), "size": size / int64(layers)})
	}
	s.templatesByRef()[name+":"+tag] = t
	return t
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*template{}
	for _, t := range s.templatesByRef() {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name+":"+out[i].Tag < out[j].Name+":"+out[j].Tag })
	writeJSON(w, 200, map[string]any{"templates": out})
}

func (s *Server) findTemplate(w http.ResponseWriter, r *http.Request) *template {
	name, tag := splitRef(r.PathValue("name"))
	t := s.templatesByRef()[name+":"+tag]
	if t == nil {
		writeError(w, errf(404, "not_found", "no template %q", r.PathValue("name")))
	}
	return t
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.findTemplate(w, r); t != nil {
		writeJSON(w, 200, t)
	}
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.findTemplate(w, r)
	switch {
	case t == nil:
	case t.InUse > 0:
		writeError(w, errf(409, "conflict", "template %s:%s is in use by %d sandboxes", t.Name, t.Tag, t.InUse))
	default:
		delete(s.templates, t.Name+":"+t.Tag)
		w.WriteHeader(204)
	}
}

func (s *Server) exportTemplate(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	t := s.findTemplate(w, r)
	s.mu.Unlock()
	if t == nil {
		return
	}
	format := r.URL.Query().Get("format")
	if format != "" && format != "docker" && format != "oci" {
		writeError(w, invalid("format", "format %q: want docker or oci", format))
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(200)
	if t.data != nil {
		_, _ = w.Write(t.data)
		return
	}
	fmt.Fprintf(w, "%s tar of %s:%s", format, t.Name, t.Tag) //nolint:gosec // G705: a test server's application/x-tar body
}

// pullTemplate "pulls" by making a template of the image's name, with
// two layers' progress streamed when asked for.
func (s *Server) pullTemplate(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Image, Name, Platform string
	}
	if e := decodeBody(r, &body); e != nil {
		writeError(w, e)
		return
	}
	if body.Image == "" {
		writeError(w, invalid("image", "image is required"))
		return
	}
	if strings.Contains(body.Image, "missing") {
		s.templateAnswer(w, r, nil, errf(404, "not_found", "image %s: manifest unknown", body.Image))
		return
	}
	name := body.Name
	if name == "" {
		name = body.Image
	}
	s.mu.Lock()
	t := s.putTemplate(name, 3<<20, 2, body.Image, nil)
	s.mu.Unlock()
	s.templateAnswer(w, r, t, nil)
}

// importTemplate keeps the uploaded bytes as the template's content.
func (s *Server) importTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" {
		writeError(w, invalid("name", "name is required"))
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-tar" {
		writeError(w, invalid("", "Content-Type must be application/x-tar, got %s", ct))
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		writeError(w, invalid("", "read body: %v", err))
		return
	}
	s.mu.Lock()
	t := s.putTemplate(name, int64(len(data)), 1, "import", data)
	s.mu.Unlock()
	s.templateAnswer(w, r, t, nil)
}

// templateAnswer answers a pull or an import: NDJSON progress and a done
// (or error) event when asked for, else the template or the error.
func (s *Server) templateAnswer(w http.ResponseWriter, r *http.Request, t *template, fail *apiError) {
	if !strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		if fail != nil {
			writeError(w, fail)
			return
		}
		writeJSON(w, 201, t)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	enc := json.NewEncoder(w)
	for _, layer := range []string{"sha256:aa", "sha256:bb"} {
		for _, st := range []string{"downloading", "unpacking", "done"} {
			_ = enc.Encode(map[string]any{"type": "progress", "layer": layer, "status": st, "current": 1 << 20, "total": 1 << 20})
		}
	}
	if fail != nil {
		fail.RequestID = w.Header().Get("X-Request-Id")
		_ = enc.Encode(map[string]any{"type": "error", "error": fail})
		return
	}
	_ = enc.Encode(map[string]any{"type": "done", "template": t})
}
