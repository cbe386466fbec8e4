package httpapi

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/secrets"
)

// secretRoutes are a tenant's named secrets: written and deleted, listed
// by name, never read back (the egress broker alone uses the values).
func (s *Server) secretRoutes(v1 func(string, func(http.ResponseWriter, *http.Request) error)) {
	v1("GET /v1/secrets", s.listSecrets)
	v1("GET /v1/secrets/{name}", s.getSecret)
	v1("PUT /v1/secrets/{name}", s.putSecret)
	v1("DELETE /v1/secrets/{name}", s.deleteSecret)
}

func (s *Server) vault() (*secrets.Vault, error) {
	if s.cfg.Secrets == nil {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "secrets are not available on this server")
	}
	return s.cfg.Secrets, nil
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	list, err := v.List(r.Context(), userOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"secrets": list})
	return nil
}

func (s *Server) getSecret(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	m, err := v.Get(r.Context(), userOf(r), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	var body struct {
		Value *string `json:"value"`
	}
	if err := decodeJSON(w, r, 2*secrets.MaxValue, &body, false); err != nil {
		return err
	}
	if body.Value == nil {
		return sandbox.Invalid("value", "value is required")
	}
	m, created, err := v.Put(r.Context(), userOf(r), r.PathValue("name"), *body.Value)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, m)
	return nil
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	if err := v.Delete(r.Context(), userOf(r), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
