package httpapi

import (
	"net/http"
)

// pauseSandbox freezes a sandbox and stops its clock (see manager.Pause).
func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	if err := decodeJSON(w, r, maxJSONBody, &struct{}{}, true); err != nil {
		return err
	}
	rec, err := s.m.Pause(r.Context(), userOf(r), sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxJSON(rec))
	return nil
}

// resumeSandbox thaws a paused sandbox; an optional {"timeout": seconds}
// sets how long it then runs (default: the time it had left).
func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Timeout float64 `json:"timeout"`
	}
	if err := decodeJSON(w, r, maxJSONBody, &body, true); err != nil {
		return err
	}
	d, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	rec, err := s.m.Resume(r.Context(), userOf(r), sandboxID(r), d)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxJSON(rec))
	return nil
}
