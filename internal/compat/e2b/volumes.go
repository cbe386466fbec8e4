package e2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/volume"
)

// E2B volumes over agentbox's (docs/volumes.md). E2B names a volume by
// its volumeID in every route and by its name in volumeMounts: the ID is
// agentbox's volume ID, the name its name. The lifecycle routes take the
// API key; the content routes (/volumecontent/...) take the volume's
// token, which Volume.create and getInfo hand out and which opens that
// one volume of that one tenant (or the tenant's API key, as a bearer).
//
// Volume tokens are "e2bvt_<owner>.<volume id>.<mac>": the MAC is an
// HMAC-SHA256 of owner and ID under the server's VolumeTokenKey, so a
// token needs no storage, and a volume deleted and created again under
// its name (a new ID) is not opened by the old volume's token.

// volumeTokenPrefix starts every volume token.
const volumeTokenPrefix = "e2bvt_"

// volumeOut is E2B's Volume and VolumeAndToken.
type volumeOut struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
}

// volumeEntryOut is E2B's VolumeEntryStat.
type volumeEntryOut struct {
	Name   string    `json:"name"`
	Path   string    `json:"path"`
	Type   string    `json:"type"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

// maxListDepth bounds a recursive volume listing (E2B's depth).
const maxListDepth = 16

// maxListTotal bounds the entries of one recursive listing.
const maxListTotal = 10000

func (s *Server) registerVolumes(mux *http.ServeMux, h func(string, handler)) {
	h("POST /volumes", s.createVolume)
	h("GET /volumes", s.listVolumes)
	h("GET /volumes/{volumeID}", s.getVolume)
	h("DELETE /volumes/{volumeID}", s.destroyVolume)
	c := func(pattern string, fn volumeHandler) { mux.Handle(pattern, s.volumeAuthenticated(fn)) }
	c("GET /volumecontent/{volumeID}/dir", s.volumeListDir)
	c("POST /volumecontent/{volumeID}/dir", s.volumeMakeDir)
	c("GET /volumecontent/{volumeID}/path", s.volumeStat)
	c("PATCH /volumecontent/{volumeID}/path", s.volumeUpdateMetadata)
	c("DELETE /volumecontent/{volumeID}/path", s.volumeRemove)
	c("GET /volumecontent/{volumeID}/file", s.volumeRead)
	c("PUT /volumecontent/{volumeID}/file", s.volumeWrite)
}

// volumeToken is the content token of owner's volume id.
func (s *Server) volumeToken(owner, id string) string {
	return volumeTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(owner)) + "." + id + "." + s.volumeMAC(owner, id)
}

func (s *Server) volumeMAC(owner, id string) string {
	mac := hmac.New(sha256.New, s.volumeKey)
	mac.Write([]byte("e2b volume token\x00" + owner + "\x00" + id))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:24])
}

// volumeOwner verifies a volume token for volume id: its owner, or an
// error (the same one for every bad token).
func (s *Server) volumeOwner(token, id string) (string, error) {
	bad := sandbox.Errorf(sandbox.ClassUnauth, "invalid volume token")
	rest, ok := strings.CutPrefix(token, volumeTokenPrefix)
	if !ok {
		return "", bad
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || parts[1] != id {
		return "", bad
	}
	owner, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return "", bad
	}
	if subtle.ConstantTimeCompare([]byte(parts[2]), []byte(s.volumeMAC(string(owner), id))) != 1 {
		return "", bad
	}
	return string(owner), nil
}

// volumeRef is a volume the content routes act on: its owner and name.
type volumeRef struct{ owner, name string }

type volumeHandler func(w http.ResponseWriter, r *http.Request, v volumeRef) error

// volumeAuthenticated resolves a content request's bearer (a volume
// token, or the owner's API key) to the volume of the path's ID. Another
// tenant's volume is as unknown as one never made.
func (s *Server) volumeAuthenticated(fn volumeHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := func() error {
			id := r.PathValue("volumeID")
			bearer := ""
			if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
				bearer = strings.TrimSpace(h[7:])
			}
			var owner string
			var err error
			if strings.HasPrefix(bearer, volumeTokenPrefix) {
				owner, err = s.volumeOwner(bearer, id)
			} else {
				owner, err = s.authenticate(r)
			}
			if err != nil {
				return err
			}
			httpapi.SetUser(r, owner)
			v, err := s.volumeByID(r, owner, id)
			if err != nil {
				return err
			}
			return fn(w, r, volumeRef{owner: owner, name: v.Name})
		}()
		if err != nil {
			writeError(w, r, err)
		}
	})
}

// volumeByID finds owner's volume whose ID is id.
func (s *Server) volumeByID(r *http.Request, owner, id string) (manager.VolumeInfo, error) {
	all, err := s.m.ListVolumes(r.Context(), owner)
	if err != nil {
		return manager.VolumeInfo{}, err
	}
	for _, v := range all {
		if v.ID == id {
			return v, nil
		}
	}
	return manager.VolumeInfo{}, sandbox.Errorf(sandbox.ClassNotFound, "volume %q not found", id)
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request, user string) error {
	var in struct {
		Name string `json:"name"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	// E2B volumes have no size: the server's VOLUME_DEFAULT_SIZE.
	v, err := s.m.CreateVolume(r.Context(), user, in.Name, "", 0)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, volumeOut{VolumeID: v.ID, Name: v.Name, Token: s.volumeToken(user, v.ID)})
	return nil
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request, user string) error {
	all, err := s.m.ListVolumes(r.Context(), user)
	if err != nil {
		return err
	}
	out := make([]volumeOut, 0, len(all))
	for _, v := range all {
		out = append(out, volumeOut{VolumeID: v.ID, Name: v.Name})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request, user string) error {
	v, err := s.volumeByID(r, user, r.PathValue("volumeID"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeOut{VolumeID: v.ID, Name: v.Name, Token: s.volumeToken(user, v.ID)})
	return nil
}

// destroyVolume serves DELETE /volumes/{volumeID}: 204, 404, or 409 while
// a sandbox mounts the volume (E2B has no force; the native API has).
func (s *Server) destroyVolume(w http.ResponseWriter, r *http.Request, user string) error {
	v, err := s.volumeByID(r, user, r.PathValue("volumeID"))
	if err != nil {
		return err
	}
	if err := s.m.DeleteVolume(r.Context(), user, v.Name, false); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// contentPath is ?path= ("/" when absent).
func contentPath(r *http.Request) string {
	if p := r.URL.Query().Get("path"); p != "" {
		return p
	}
	return "/"
}

// entryJSON is E2B's VolumeEntryStat of e. agentbox keeps no access or
// change time apart: both are the modification time.
func entryJSON(e volume.Entry) volumeEntryOut {
	typ := e.Type
	switch typ {
	case "dir":
		typ = "directory"
	case "file", "symlink":
	default:
		typ = "unknown"
	}
	return volumeEntryOut{Name: e.Name, Path: e.Path, Type: typ, Size: e.Size, Mode: e.Mode, UID: e.UID, GID: e.GID,
		Atime: e.ModTime, Mtime: e.ModTime, Ctime: e.ModTime, Target: e.Target}
}

// volumeListDir serves GET /volumecontent/{id}/dir?path=&depth=: the
// entries under path, depth levels down (default 1).
func (s *Server) volumeListDir(w http.ResponseWriter, r *http.Request, v volumeRef) error {
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > maxListDepth {
			return sandbox.Invalid("depth", "depth must be between 1 and %d", maxListDepth)
		}
		depth = n
	}
	out := []volumeEntryOut{}
	var walk func(p string, level int) error
	walk = func(p string, level int) error {
		entries, err := s.m.VolumeList(r.Context(), v.owner, v.name, p)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if len(out) >= maxListTotal {
				return sandbox.Errorf(sandbox.ClassTooLarge, "the listing has more than %d entries; list a smaller depth", maxListTotal)
			}
			out = append(out, entryJSON(e))
			if e.Type == "dir" && level < depth {
				if err := walk(e.Path, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(contentPath(r), 1); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// volumeMakeDir serves POST /volumecontent/{id}/dir?path=: the directory
// and its parents. uid, gid and mode are not taken: a volume's files are
// the sandbox user's (docs/volumes.md).
func (s *Server) volumeMakeDir(w http.ResponseWriter, r *http.Request, v volumeRef) error {
	p := contentPath(r)
	if err := s.m.VolumeMkdir(r.Context(), v.owner, v.name, p); err != nil {
		return err
	}
	e, err := s.m.VolumeStat(r.Context(), v.owner, v.name, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, entryJSON(e))
	return nil
}

func (s *Server) volumeStat(w http.ResponseWriter, r *http.Request, v volumeRef) error {
	e, err := s.m.VolumeStat(r.Context(), v.owner, v.name, contentPath(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
	return nil
}

// volumeUpdateMetadata serves PATCH /volumecontent/{id}/path: refused, a
// volume's files keep the sandbox user as owner and the modes they were
// written with (change them from a sandbox that mounts the volume).
func (s *Server) volumeUpdateMetadata(w http.ResponseWriter, r *http.Request, v volumeRef) error {
	if _, err := s.m.VolumeStat(r.Context(), v.owner, v.name, contentPath(r)); err != nil {
		return err
	}
	return sandbox.Errorf(sandbox.ClassInvalid, "updating a volume file's uid, gid or mode without a sandbox is not supported: change it from a sandbox that mounts the volume")
}

func (s *Server) volumeRemove(w http.ResponseWriter, r *http.Request, v volumeRef) error {
	if err := s.m.VolumeRemove(r.Context(), v.owner, v.name, contentPath(r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) volumeRead(w http.ResponseWriter, r *http.Request, v volumeRef) error {
	p := contentPath(r)
	if path.Clean("/"+p) == "/" {
		return sandbox.Invalid("path", "a file path is required")
	}
	f, e, release, err := s.m.VolumeOpen(r.Context(), v.owner, v.name, p)
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

// volumeWrite serves PUT /volumecontent/{id}/file?path=: the body (at
// most MAX_UPLOAD_SIZE) becomes the file, replacing one there; 201 with
// its stat.
func (s *Server) volumeWrite(w http.ResponseWriter, r *http.Request, v volumeRef) error {
	limit := s.cfg.MaxUploadBytes
	if r.ContentLength > limit {
		return sandbox.Errorf(sandbox.ClassTooLarge, "upload of %d bytes is over the limit of %d bytes (MAX_UPLOAD_SIZE)", r.ContentLength, limit)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	e, err := s.m.VolumeWrite(r.Context(), v.owner, v.name, contentPath(r), body, limit)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return sandbox.Errorf(sandbox.ClassTooLarge, "upload is over the limit of %d bytes (MAX_UPLOAD_SIZE)", limit)
		}
		return err
	}
	writeJSON(w, http.StatusCreated, entryJSON(e))
	return nil
}
