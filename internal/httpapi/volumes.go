package httpapi

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/volume"
)

// Volumes: /v1/volumes and their content without a sandbox (volume
// package). Every volume is its owner's: another user's is not found.

func (s *Server) volumeRoutes(v1 func(string, func(http.ResponseWriter, *http.Request) error)) {
	v1("POST /v1/volumes", s.createVolume)
	v1("GET /v1/volumes", s.listVolumes)
	v1("GET /v1/volumes/{name}", s.getVolume)
	v1("DELETE /v1/volumes/{name}", s.deleteVolume)
	v1("GET /v1/volumes/{name}/files", s.volumeDownload)
	v1("PUT /v1/volumes/{name}/files", s.volumeUpload)
	v1("DELETE /v1/volumes/{name}/files", s.volumeRemove)
	v1("GET /v1/volumes/{name}/files/stat", s.volumeStat)
	v1("GET /v1/volumes/{name}/files/list", s.volumeList)
	v1("POST /v1/volumes/{name}/files/mkdir", s.volumeMkdir)
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Count   *int    `json:"count"`
		Timeout float64 `json:"timeout"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, true); err != nil {
		return err
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	timeout, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	recs, err := s.m.Fork(r.Context(), userOf(r), sandboxID(r), count, timeout)
	if err != nil {
		return err
	}
	out := make([]sandboxOut, 0, len(recs))
	for _, rec := range recs {
		out = append(out, sandboxJSON(rec))
	}
	writeJSON(w, http.StatusCreated, map[string]any{"sandboxes": out})
	return nil
}

// volumeOut is the Volume schema of the spec.
type volumeOut struct {
	ID        string       `json:"id"`
	Name      string       `json:"name"`
	Kind      string       `json:"kind"`
	Size      int64        `json:"size"`
	CreatedAt time.Time    `json:"created_at"`
	Node      string       `json:"node,omitempty"`
	Used      *int64       `json:"used,omitempty"`
	MountedBy []sandbox.ID `json:"mounted_by"`
}

func volumeJSON(v manager.VolumeInfo) volumeOut {
	out := volumeOut{ID: v.ID, Name: v.Name, Kind: v.Kind, Size: v.SizeBytes, CreatedAt: v.CreatedAt, Node: v.Node, MountedBy: v.MountedBy}
	if v.Usage != nil {
		used := v.Usage.UsedBytes
		out.Used = &used
	}
	return out
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Name string `json:"name"`
		Kind string `json:"kind"`
		Size size   `json:"size"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, false); err != nil {
		return err
	}
	v, err := s.m.CreateVolume(r.Context(), userOf(r), body.Name, body.Kind, int64(body.Size))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, volumeJSON(v))
	return nil
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) error {
	all, err := s.m.ListVolumes(r.Context(), userOf(r))
	if err != nil {
		return err
	}
	out := make([]volumeOut, 0, len(all))
	for _, v := range all {
		out = append(out, volumeJSON(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) error {
	v, err := s.m.GetVolume(r.Context(), userOf(r), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeJSON(v))
	return nil
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) error {
	force := false
	if f := r.URL.Query().Get("force"); f != "" {
		var err error
		if force, err = strconv.ParseBool(f); err != nil {
			return badRequest("force", "force must be true or false")
		}
	}
	if err := s.m.DeleteVolume(r.Context(), userOf(r), r.PathValue("name"), force); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// volumePath is ?path=, "/" when absent.
func volumePath(r *http.Request) string {
	if p := r.URL.Query().Get("path"); p != "" {
		return p
	}
	return "/"
}

// volumeEntryJSON is the Entry schema, as a sandbox's files API gives it
// (ids named as in every sandbox: 1000 is "user").
func volumeEntryJSON(e volume.Entry) entryOut {
	t := e.ModTime
	mode := fs.FileMode(e.Mode).Perm()
	switch e.Type {
	case "dir":
		mode |= fs.ModeDir
	case "symlink":
		mode |= fs.ModeSymlink
	}
	return entryOut{Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size, Mode: mode.String(),
		Owner: idName(e.UID), Group: idName(e.GID), ModifiedAt: &t, SymlinkTarget: e.Target}
}

func idName(id uint32) string {
	switch id {
	case 0:
		return "root"
	case 1000:
		return "user"
	}
	return strconv.FormatUint(uint64(id), 10)
}

func (s *Server) volumeDownload(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	f, e, release, err := s.m.VolumeOpen(r.Context(), userOf(r), r.PathValue("name"), p)
	if err != nil {
		return err
	}
	defer release()
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(e.Size, 10))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = io.CopyN(w, f, e.Size)
	return nil
}

func (s *Server) volumeUpload(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	limit := s.cfg.MaxUploadBytes
	if r.ContentLength > limit {
		return sandbox.Errorf(sandbox.ClassTooLarge, "upload of %d bytes is over the limit of %d bytes (MAX_UPLOAD_SIZE)", r.ContentLength, limit)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	e, err := s.m.VolumeWrite(r.Context(), userOf(r), r.PathValue("name"), p, body, limit)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return sandbox.Errorf(sandbox.ClassTooLarge, "upload is over the limit of %d bytes (MAX_UPLOAD_SIZE)", limit)
		}
		return err
	}
	writeJSON(w, http.StatusCreated, volumeEntryJSON(e))
	return nil
}

func (s *Server) volumeRemove(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	if err := s.m.VolumeRemove(r.Context(), userOf(r), r.PathValue("name"), p); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) volumeStat(w http.ResponseWriter, r *http.Request) error {
	e, err := s.m.VolumeStat(r.Context(), userOf(r), r.PathValue("name"), volumePath(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeEntryJSON(e))
	return nil
}

func (s *Server) volumeList(w http.ResponseWriter, r *http.Request) error {
	es, err := s.m.VolumeList(r.Context(), userOf(r), r.PathValue("name"), volumePath(r))
	if err != nil {
		return err
	}
	out := make([]entryOut, 0, len(es))
	for _, e := range es {
		out = append(out, volumeEntryJSON(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": out})
	return nil
}

func (s *Server) volumeMkdir(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Path string `json:"path"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, false); err != nil {
		return err
	}
	if body.Path == "" {
		return badRequest("path", "path is required")
	}
	if err := s.m.VolumeMkdir(r.Context(), userOf(r), r.PathValue("name"), body.Path); err != nil {
		return err
	}
	e, err := s.m.VolumeStat(r.Context(), userOf(r), r.PathValue("name"), body.Path)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, volumeEntryJSON(e))
	return nil
}
