package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Error codes of the API's error shape (the "code" field). They are stable.
const (
	CodeInvalidArgument   = "invalid_argument"
	CodeNotFound          = "not_found"
	CodeConflict          = "conflict"
	CodeTooLarge          = "too_large"
	CodeQuotaExceeded     = "quota_exceeded"
	CodeUnauthenticated   = "unauthenticated"
	CodePermissionDenied  = "permission_denied"
	CodeDeadlineExceeded  = "deadline_exceeded"
	CodeInsufficientSpace = "insufficient_space"
	CodeUnavailable       = "unavailable"
	CodeInternal          = "internal"
)

// Error is an error response of the server: any non-2xx status. Code is
// one of the Code* constants (derived from Status when the body was not
// the API's JSON error shape, e.g. from a proxy in between).
type Error struct {
	Status    int    `json:"-"`                    // HTTP status code
	Code      string `json:"code"`                 // stable machine-readable class
	Message   string `json:"message"`              // for people
	Field     string `json:"field,omitempty"`      // request field at fault (invalid_argument)
	Reason    string `json:"reason,omitempty"`     // refines Code: "outside_root", "executable_not_found"
	RequestID string `json:"request_id,omitempty"` // quote it when reporting a problem
}

// Error returns the server's message, naming the field at fault if any.
func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprintf("%s (HTTP %d)", e.Code, e.Status)
	}
	if e.Field != "" && !strings.Contains(msg, e.Field) {
		msg += " (field " + e.Field + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrNotFound) and the like match any *Error with
// the same Code, whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code != "" && t.Code == e.Code
}

// Sentinel errors for errors.Is; each matches every *Error of its code.
var (
	ErrInvalidArgument   = &Error{Code: CodeInvalidArgument, Message: "invalid argument"}
	ErrNotFound          = &Error{Code: CodeNotFound, Message: "not found"}
	ErrConflict          = &Error{Code: CodeConflict, Message: "conflict"}
	ErrTooLarge          = &Error{Code: CodeTooLarge, Message: "too large"}
	ErrQuotaExceeded     = &Error{Code: CodeQuotaExceeded, Message: "quota exceeded"}
	ErrUnauthenticated   = &Error{Code: CodeUnauthenticated, Message: "unauthenticated"}
	ErrPermissionDenied  = &Error{Code: CodePermissionDenied, Message: "permission denied"}
	ErrDeadlineExceeded  = &Error{Code: CodeDeadlineExceeded, Message: "deadline exceeded"}
	ErrInsufficientSpace = &Error{Code: CodeInsufficientSpace, Message: "insufficient space"}
	ErrUnavailable       = &Error{Code: CodeUnavailable, Message: "unavailable"}
	ErrInternal          = &Error{Code: CodeInternal, Message: "internal error"}
)

// IsInvalidArgument reports whether err is a server error of code invalid_argument (400).
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// IsExecutableNotFound reports whether err refused an exec whose
// executable does not exist in the sandbox (not in its PATH, or no such
// file).
func IsExecutableNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeInvalidArgument && e.Reason == "executable_not_found"
}

// IsOutsideRoot reports whether err refused a path of a confined client
// (see Client.Confined) that leads outside its roots.
func IsOutsideRoot(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodePermissionDenied && e.Reason == "outside_root"
}

// IsNotFound reports whether err is a server error of code not_found (404).
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsConflict reports whether err is a server error of code conflict (409).
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsTooLarge reports whether err is a server error of code too_large (413).
func IsTooLarge(err error) bool { return errors.Is(err, ErrTooLarge) }

// IsQuota reports whether err is a server error of code quota_exceeded (429).
func IsQuota(err error) bool { return errors.Is(err, ErrQuotaExceeded) }

// IsUnauthenticated reports whether err is a server error of code unauthenticated (401).
func IsUnauthenticated(err error) bool { return errors.Is(err, ErrUnauthenticated) }

// IsPermissionDenied reports whether err is a server error of code permission_denied (403).
func IsPermissionDenied(err error) bool { return errors.Is(err, ErrPermissionDenied) }

// IsDeadlineExceeded reports whether err is a server error of code deadline_exceeded (504).
// It does not match a client-side context.DeadlineExceeded.
func IsDeadlineExceeded(err error) bool { return errors.Is(err, ErrDeadlineExceeded) }

// IsInsufficientSpace reports whether err is a server error of code insufficient_space (507).
func IsInsufficientSpace(err error) bool { return errors.Is(err, ErrInsufficientSpace) }

// IsUnavailable reports whether err is a server error of code unavailable (503).
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// errorFromResponse turns a non-2xx response into an *Error. It reads at
// most maxErrorBody bytes of the body and does not close it.
func errorFromResponse(resp *http.Response) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return errorFromBody(resp.StatusCode, resp.Header, body)
}

// errorFromBody decodes the API's JSON error shape, falling back to a
// code derived from the status for bodies that are not (proxies, panics).
func errorFromBody(status int, h http.Header, body []byte) *Error {
	e := &Error{}
	if err := json.Unmarshal(body, e); err != nil || e.Code == "" {
		e = &Error{Code: codeForStatus(status), Message: plainMessage(status, body)}
	}
	e.Status = status
	if e.RequestID == "" && h != nil {
		e.RequestID = h.Get("X-Request-Id")
	}
	return e
}

// plainMessage makes a one-line message from a non-JSON error body.
func plainMessage(status int, body []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if len(line) > 200 {
		line = line[:200] + "..."
	}
	text := http.StatusText(status)
	if text == "" {
		text = "error"
	}
	if line == "" {
		return fmt.Sprintf("HTTP %d %s", status, text)
	}
	return fmt.Sprintf("HTTP %d %s: %s", status, text, line)
}

// codeForStatus is the API's class-to-status mapping, inverted.
func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidArgument
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodePermissionDenied
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeConflict
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusTooManyRequests:
		return CodeQuotaExceeded
	case http.StatusGatewayTimeout:
		return CodeDeadlineExceeded
	case http.StatusInsufficientStorage:
		return CodeInsufficientSpace
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return CodeUnavailable
	}
	return CodeInternal
}
