package sandbox

import (
	"errors"
	"fmt"
)

// Class is a coarse error category. Every layer wraps errors freely; the API
// maps the class (found with errors.As) to an HTTP status in exactly one place.
type Class string

const (
	ClassInvalid     Class = "invalid_argument"   // malformed input (400)
	ClassNotFound    Class = "not_found"          // unknown sandbox, file, process (404)
	ClassConflict    Class = "conflict"           // wrong state, already exists (409)
	ClassTooLarge    Class = "too_large"          // body or file over a cap (413)
	ClassQuota       Class = "quota_exceeded"     // over a sandbox-count limit (429)
	ClassUnauth      Class = "unauthenticated"    // missing or wrong credentials (401)
	ClassForbidden   Class = "permission_denied"  // authenticated but not allowed (403)
	ClassTimeout     Class = "deadline_exceeded"  // an operation ran out of time (504)
	ClassNoSpace     Class = "insufficient_space" // the sandbox's disk is full (507)
	ClassUnavailable Class = "unavailable"        // backend or agent not reachable (503)
	ClassInternal    Class = "internal"           // a bug or an unexpected host failure (500)
)

// Error carries a Class and a message meant for the API caller.
type Error struct {
	Class Class
	Msg   string
	Err   error // optional cause, not shown to callers
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error of class c.
func Errorf(c Class, format string, args ...any) error {
	return &Error{Class: c, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error of class c with msg, keeping err as the cause.
func Wrap(c Class, err error, msg string) error {
	return &Error{Class: c, Msg: msg, Err: err}
}

// FieldError names the request field an invalid_argument error is about
// (the API reports it).
type FieldError struct{ Field string }

func (f *FieldError) Error() string { return "field " + f.Field }

// Invalid returns a ClassInvalid error about field.
func Invalid(field, format string, args ...any) error {
	return &Error{Class: ClassInvalid, Msg: fmt.Sprintf(format, args...), Err: &FieldError{Field: field}}
}

// ClassOf returns the class of the first *Error in err's chain, or
// ClassInternal when there is none.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return ClassInternal
}

// IsNotFound reports whether err is of class ClassNotFound.
func IsNotFound(err error) bool { return err != nil && ClassOf(err) == ClassNotFound }

// ErrNotFound returns a not-found error for sandbox id.
func ErrNotFound(id ID) error { return Errorf(ClassNotFound, "sandbox %s not found", id) }

// Reasons of a create refused because its template is a built-in one that
// is not ready (docs/templates.md): the API's error "reason".
const (
	ReasonTemplateBuilding = "template_building"  // 503 with Retry-After
	ReasonTemplateNotBuilt = "template_not_built" // 404: failed, or not built
)

// TemplateNotReady is the cause of such a refusal; Err (optional) is a
// retry hint the API turns into Retry-After.
type TemplateNotReady struct {
	Template string
	Reason   string // ReasonTemplateBuilding or ReasonTemplateNotBuilt
	Err      error
}

func (e *TemplateNotReady) Error() string { return "template " + e.Template + ": " + e.Reason }

func (e *TemplateNotReady) Unwrap() error { return e.Err }
