package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// The agent's confinement and dialect headers (agent.RootHeader,
// agent.ErrorHeader, agent.ErrorOutsideRoot, agent.ErrorExecutableNotFound,
// agent.DialectHeader, agent.DialectE2B): this package does not import the
// agent's.
const (
	rootHeader              = "X-Agentbox-Root"
	dialectHeader           = "X-Agentbox-Dialect"
	dialectE2B              = "e2b"
	errorHeader             = "X-Agentbox-Error"
	errorOutsideRoot        = "outside-root"
	errorExecutableNotFound = "executable-not-found"
)

// MarkE2B marks a request of E2B's protocol, passed to the agent as it
// came from an E2B client, as one that keeps E2B's conventions (a process
// without a cwd runs in its user's home), whatever the client sent.
func MarkE2B(h http.Header) { h.Set(dialectHeader, dialectE2B) }

// ErrExecutableNotFound is wrapped by the error of a process start (Run,
// Start, a code context's interpreter) whose executable does not exist in
// the sandbox: not in its PATH, or no such file. Test for it with
// errors.Is; the error's class is sandbox.ClassInvalid.
var ErrExecutableNotFound = errors.New("executable not found")

// qualify marks err with the sentinel the agent's ErrorHeader value
// names, if any.
func qualify(header string, err error) error {
	switch header {
	case errorOutsideRoot:
		return outsideRoot(err)
	case errorExecutableNotFound:
		return fmt.Errorf("%w: %w", ErrExecutableNotFound, err)
	}
	return err
}

// ErrOutsideRoot is wrapped by the error of a call of a confined client
// (see Client.Confined) whose path leads outside the client's roots,
// lexically or through a symbolic link. Test for it with errors.Is; the
// error's class is sandbox.ClassForbidden and its message names the path
// (and the link and its target).
var ErrOutsideRoot = errors.New("path leads outside the allowed roots")

// outsideRoot marks err, a refusal the agent qualified with
// errorHeader, as ErrOutsideRoot.
func outsideRoot(err error) error {
	return fmt.Errorf("%w: %w", ErrOutsideRoot, err)
}

// mapError turns a transport, connect or HTTP error into a *sandbox.Error
// with the matching class; op names the operation for the message. A
// cancelled context is returned unclassified (wrapping context.Canceled):
// the caller cancelled and knows why.
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *sandbox.Error
	if errors.As(err, &se) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("agent %s: %w", op, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return sandbox.Wrap(sandbox.ClassTimeout, err, "agent "+op+": timed out")
	}
	var ce *connect.Error
	if errors.As(err, &ce) && errors.Is(err, ErrOutsideRoot) {
		return sandbox.Wrap(sandbox.ClassForbidden, err, "agent "+op+": "+ce.Message())
	}
	if errors.As(err, &ce) {
		if ce.Code() == connect.CodeCanceled {
			return fmt.Errorf("agent %s: %w", op, context.Canceled)
		}
		if ce.Code() == connect.CodeUnavailable || ce.Code() == connect.CodeUnknown {
			if isConnError(err) {
				return sandbox.Wrap(sandbox.ClassUnavailable, err, "agent "+op+": agent not reachable")
			}
		}
		return sandbox.Wrap(classOfCode(ce.Code()), err, "agent "+op+": "+ce.Message())
	}
	if isConnError(err) {
		return sandbox.Wrap(sandbox.ClassUnavailable, err, "agent "+op+": agent not reachable")
	}
	return sandbox.Wrap(sandbox.ClassInternal, err, "agent "+op)
}

// isConnError recognises failures to reach the agent at all.
func isConnError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE)
}

func classOfCode(c connect.Code) sandbox.Class {
	switch c {
	case connect.CodeNotFound:
		return sandbox.ClassNotFound
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return sandbox.ClassInvalid
	case connect.CodePermissionDenied:
		return sandbox.ClassForbidden
	case connect.CodeAlreadyExists, connect.CodeFailedPrecondition, connect.CodeAborted:
		return sandbox.ClassConflict
	case connect.CodeUnauthenticated:
		return sandbox.ClassUnauth
	case connect.CodeResourceExhausted:
		return sandbox.ClassNoSpace
	case connect.CodeDeadlineExceeded:
		return sandbox.ClassTimeout
	case connect.CodeUnavailable:
		return sandbox.ClassUnavailable
	default:
		return sandbox.ClassInternal
	}
}

func classOfStatus(status int) sandbox.Class {
	switch status {
	case http.StatusBadRequest:
		return sandbox.ClassInvalid
	case http.StatusUnauthorized:
		return sandbox.ClassUnauth
	case http.StatusForbidden:
		return sandbox.ClassForbidden
	case http.StatusNotFound:
		return sandbox.ClassNotFound
	case http.StatusConflict:
		return sandbox.ClassConflict
	case http.StatusRequestEntityTooLarge:
		return sandbox.ClassTooLarge
	case http.StatusTooManyRequests:
		return sandbox.ClassQuota
	case http.StatusInsufficientStorage:
		return sandbox.ClassNoSpace
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return sandbox.ClassTimeout
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return sandbox.ClassUnavailable
	default:
		return sandbox.ClassInternal
	}
}

// statusError reads a REST error body ({"code","message"}) from resp.
func statusError(op string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Message string `json:"message"`
	}
	msg := resp.Status
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		msg = e.Message
	}
	return restError(resp, "agent "+op+": "+msg)
}

// restError is the error of a REST answer (status not 2xx) with message
// msg.
func restError(resp *http.Response, msg string) error {
	if resp.Header.Get(errorHeader) == errorOutsideRoot {
		return sandbox.Wrap(sandbox.ClassForbidden, outsideRoot(fmt.Errorf("HTTP %d", resp.StatusCode)), msg)
	}
	return sandbox.Wrap(classOfStatus(resp.StatusCode), qualify(resp.Header.Get(errorHeader), fmt.Errorf("HTTP %d", resp.StatusCode)), msg)
}
