package daytona

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Daytona's volumes are agentbox's (internal/volume): a volume's
// Daytona id is its agentbox ID, its name the same name; a volume is
// ready as soon as it is created. A local volume lives on the replica
// that made it and only sandboxes there mount it (docs/volumes.md).

// extraVolumes keeps the volumes a sandbox was created with, as Daytona
// shows them (JSON).
const extraVolumes = "daytona_volumes"

func (s *Server) registerVolumes(h func(string, handler)) {
	h("GET /volumes", s.listVolumes)
	h("POST /volumes", s.createVolume)
	h("GET /volumes/by-name/{name}", s.getVolumeByName)
	h("GET /volumes/{volume}", s.getVolume)
	h("DELETE /volumes/{volume}", s.deleteVolume)
}

// volumeOut is Daytona's VolumeDto.
type volumeOut struct {
	ID             string  `json:"id"`
	Name           string  `json:"name"`
	OrganizationID string  `json:"organizationId"`
	State          string  `json:"state"`
	CreatedAt      string  `json:"createdAt"`
	UpdatedAt      string  `json:"updatedAt"`
	LastUsedAt     *string `json:"lastUsedAt"`
	ErrorReason    *string `json:"errorReason"`
}

func volumeDTO(v manager.VolumeInfo) volumeOut {
	at := v.CreatedAt.UTC().Format(time.RFC3339Nano)
	return volumeOut{ID: v.ID, Name: v.Name, OrganizationID: organizationID, State: "ready", CreatedAt: at, UpdatedAt: at}
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request, user string) error {
	all, err := s.m.ListVolumes(r.Context(), user)
	if err != nil {
		return err
	}
	out := make([]volumeOut, 0, len(all))
	for _, v := range all {
		out = append(out, volumeDTO(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request, user string) error {
	var in struct {
		Name string `json:"name"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Name == "" {
		return sandbox.Invalid("name", "name is required")
	}
	v, err := s.m.CreateVolume(r.Context(), user, in.Name, "", 0)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeDTO(v))
	return nil
}

// findVolume returns user's volume by Daytona id (agentbox ID) or name.
func (s *Server) findVolume(ctx context.Context, user, idOrName string) (manager.VolumeInfo, error) {
	all, err := s.m.ListVolumes(ctx, user)
	if err != nil {
		return manager.VolumeInfo{}, err
	}
	for _, v := range all {
		if v.ID == idOrName {
			return v, nil
		}
	}
	for _, v := range all {
		if v.Name == idOrName {
			return v, nil
		}
	}
	return manager.VolumeInfo{}, notFound("Volume with ID or name %s not found", idOrName)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request, user string) error {
	v, err := s.findVolume(r.Context(), user, r.PathValue("volume"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeDTO(v))
	return nil
}

func (s *Server) getVolumeByName(w http.ResponseWriter, r *http.Request, user string) error {
	v, err := s.m.GetVolume(r.Context(), user, r.PathValue("name"))
	if err != nil {
		if sandbox.ClassOf(err) == sandbox.ClassNotFound {
			return notFound("Volume with name %s not found", r.PathValue("name"))
		}
		return err
	}
	writeJSON(w, http.StatusOK, volumeDTO(v))
	return nil
}

// deleteVolume refuses a volume a sandbox mounts (Daytona's in-use
// conflict).
func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request, user string) error {
	v, err := s.findVolume(r.Context(), user, r.PathValue("volume"))
	if err != nil {
		return err
	}
	if err := s.m.DeleteVolume(r.Context(), user, v.Name, false); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// sandboxVolume is Daytona's SandboxVolume.
type sandboxVolume struct {
	VolumeID  string `json:"volumeId"`
	MountPath string `json:"mountPath"`
	Subpath   string `json:"subpath,omitempty"`
}

// createVolumes resolves a create's volumes to mounts, and what the
// record keeps of them.
func (s *Server) createVolumes(ctx context.Context, user string, in []sandboxVolume) ([]sandbox.VolumeMount, string, error) {
	if len(in) == 0 {
		return nil, "", nil
	}
	mounts := make([]sandbox.VolumeMount, 0, len(in))
	shown := make([]sandboxVolume, 0, len(in))
	for _, sv := range in {
		if sv.VolumeID == "" || sv.MountPath == "" {
			return nil, "", sandbox.Invalid("volumes", "each volume needs a volumeId and a mountPath")
		}
		v, err := s.findVolume(ctx, user, sv.VolumeID)
		if err != nil {
			return nil, "", err
		}
		mounts = append(mounts, sandbox.VolumeMount{Name: v.Name, Path: sv.MountPath, SubPath: sv.Subpath})
		shown = append(shown, sandboxVolume{VolumeID: v.ID, MountPath: sv.MountPath, Subpath: sv.Subpath})
	}
	b, err := json.Marshal(shown)
	if err != nil {
		return nil, "", err
	}
	return mounts, string(b), nil
}

// volumesOut is the record's volumes as Daytona shows them.
func volumesOut(rec *store.Record) []sandboxVolume {
	out := []sandboxVolume{}
	if v := rec.Extra[extraVolumes]; v != "" {
		_ = json.Unmarshal([]byte(v), &out)
		return out
	}
	for _, m := range rec.Volumes {
		out = append(out, sandboxVolume{VolumeID: m.Name, MountPath: m.Path, Subpath: m.SubPath})
	}
	return out
}
