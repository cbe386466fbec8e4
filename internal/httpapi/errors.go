package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// errorBody is the one JSON shape of every native API error.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Reason refines the code where a client acts on the difference:
	// "outside_root" for a confined path that leads outside its roots,
	// "executable_not_found" for an exec of a missing executable.
	Reason    string `json:"reason,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// statusOf is the single mapping from error classes to HTTP statuses.
func statusOf(c sandbox.Class) int {
	switch c {
	case sandbox.ClassInvalid:
		return http.StatusBadRequest
	case sandbox.ClassNotFound:
		return http.StatusNotFound
	case sandbox.ClassConflict:
		return http.StatusConflict
	case sandbox.ClassTooLarge:
		return http.StatusRequestEntityTooLarge
	case sandbox.ClassQuota:
		return http.StatusTooManyRequests
	case sandbox.ClassUnauth:
		return http.StatusUnauthorized
	case sandbox.ClassForbidden:
		return http.StatusForbidden
	case sandbox.ClassTimeout:
		return http.StatusGatewayTimeout
	case sandbox.ClassNoSpace:
		return http.StatusInsufficientStorage
	case sandbox.ClassUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// writeError answers with err's class and message. Internal errors get a
// generic message (details go to the log, not to the caller).
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	class := sandbox.ClassOf(err)
	body := errorBody{Code: string(class), Message: err.Error(), RequestID: requestID(r)}
	var se *sandbox.Error
	if errors.As(err, &se) {
		body.Message = se.Msg
	}
	var fe *sandbox.FieldError
	if errors.As(err, &fe) {
		body.Field = fe.Field
	}
	switch {
	case errors.Is(err, dataplane.ErrOutsideRoot):
		body.Reason = ReasonOutsideRoot
	case errors.Is(err, dataplane.ErrExecutableNotFound):
		body.Reason = ReasonExecutableNotFound
	}
	var notReady *sandbox.TemplateNotReady
	if errors.As(err, &notReady) {
		// template_building (503, Retry-After) or template_not_built (404).
		body.Reason = notReady.Reason
	}
	status := statusOf(class)
	SetRetryAfter(w, err)
	if status == http.StatusInternalServerError {
		logger(r).Error("request failed", "err", err)
		body.Message = "internal error (request " + body.RequestID + ")"
	} else {
		logger(r).Debug("request refused", "code", body.Code, "err", err)
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		slog.Debug("write response", "err", err)
	}
}

func badRequest(field, format string, args ...any) error {
	return sandbox.Invalid(field, format, args...)
}

// ReasonOutsideRoot is the error reason of a confined path leading
// outside its roots (see RootHeader).
const ReasonOutsideRoot = "outside_root"

// ReasonExecutableNotFound is the error reason of an exec whose executable
// does not exist in the sandbox (invalid_argument).
const ReasonExecutableNotFound = "executable_not_found"
