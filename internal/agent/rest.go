package agent

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"connectrpc.com/connect"
)

// restError is the JSON error body of the REST routes (E2B's shape).
type restError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, restError{Code: status, Message: msg})
}

// writeErr writes err (usually a *connect.Error) with the matching status
// and its ErrorHeader, if any.
func writeErr(w http.ResponseWriter, err error) {
	var ce *connect.Error
	if errors.As(err, &ce) {
		if v := ce.Meta().Get(ErrorHeader); v != "" {
			w.Header().Set(ErrorHeader, v)
		}
		writeError(w, httpStatus(ce.Code()), ce.Message())
		return
	}
	writeError(w, http.StatusInternalServerError, err.Error())
}

// httpStatus maps a connect code onto the REST status the E2B SDKs expect;
// resource_exhausted means a full disk on these routes.
func httpStatus(c connect.Code) int {
	switch c {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange:
		return http.StatusBadRequest
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeAlreadyExists, connect.CodeAborted:
		return http.StatusConflict
	case connect.CodeResourceExhausted:
		return http.StatusInsufficientStorage
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	case connect.CodeUnimplemented:
		return http.StatusNotImplemented
	default:
		return http.StatusInternalServerError
	}
}

// handleEnvs serves GET /envs: the default environment of processes.
func (s *Server) handleEnvs(w http.ResponseWriter, r *http.Request) {
	s.envMu.RLock()
	defer s.envMu.RUnlock()
	writeJSON(w, http.StatusOK, s.defaultEnv)
}

// initRequest is the body of POST /init (E2B's envd shape; other fields
// of newer envd versions are accepted and ignored).
type initRequest struct {
	EnvVars map[string]string `json:"envVars"`
	// AccessToken, when set, replaces the access token (as E2B's envd
	// does on /init).
	AccessToken *string `json:"accessToken,omitempty"`
}

// handleInit serves POST /init: it adds variables to the default
// environment of processes started from now on. The daemon uses it to
// personalise a sandbox taken from a warm pool.
func (s *Server) handleInit(w http.ResponseWriter, r *http.Request) {
	var req initRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	for k := range req.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.HasPrefix(k, reservedEnvPrefix) {
			writeError(w, http.StatusBadRequest, "invalid environment variable name "+strconv.Quote(k))
			return
		}
	}
	if req.AccessToken != nil && len(*req.AccessToken) < 16 {
		writeError(w, http.StatusBadRequest, "accessToken: at least 16 characters")
		return
	}
	s.envMu.Lock()
	for k, v := range req.EnvVars {
		s.defaultEnv[k] = v
	}
	s.envMu.Unlock()
	if req.AccessToken != nil {
		s.setAccessToken(*req.AccessToken)
	}
	// A warm pool readies its sandboxes with this call (agentclient.Warm,
	// an empty body) and hands them out with it: a command is likely to
	// follow.
	if s.shims != nil {
		s.shims.prestart()
	}
	w.WriteHeader(http.StatusNoContent)
}
