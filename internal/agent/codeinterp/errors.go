package codeinterp

import (
	"errors"
	"fmt"
)

// Kind classifies the errors of this package so the HTTP layer can map
// them onto statuses.
type Kind int

const (
	// KindInvalid: a bad request (unknown language, both a context and a
	// language, a missing interpreter such as node).
	KindInvalid Kind = iota + 1
	// KindNotFound: no context with that id.
	KindNotFound
	// KindLimit: too many contexts.
	KindLimit
	// KindStart: the interpreter failed to start.
	KindStart
)

// Error is an error of this package with its kind.
type Error struct {
	Kind Kind
	Msg  string
	Err  error // optional cause
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// KindOf returns the kind of err, or 0 when it is not an *Error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}
