// Package client is the Go SDK for the agentbox native HTTP API
// (api/openapi.yaml): create sandboxes, run commands in them, move files in
// and out, and attach interactive terminals.
//
// A Client is safe for concurrent use. Every method takes a context first;
// cancelling it aborts the request, and for a running command (Exec,
// ExecStream, Run) it makes the server kill the command.
//
// Errors returned by the server become *Error values carrying the stable
// error code of the API; test them with errors.Is against the sentinel
// errors (ErrNotFound, ErrConflict, ...) or the IsNotFound-style helpers.
// Transport failures are returned wrapped with the operation that failed,
// so errors.Is(err, context.Canceled) and similar checks keep working.
//
// Durations are time.Duration values in Go and seconds on the wire; sizes
// are bytes (see ParseSize for "512M"-style strings).
package client
