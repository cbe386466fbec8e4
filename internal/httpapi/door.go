package httpapi

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// A Door is a protocol front end (E2B, agentscope, ...) mounted on the
// shared server: its routes answer on the daemon's port behind the same
// request context, access log, browser guard and listener as the native
// API. The server knows a door only through this contract; New mounts
// the doors of Config.Doors in their order.
type Door interface {
	// Register adds the door's routes to mux. New calls it once.
	Register(mux *http.ServeMux)
	// Owns reports whether the door words the refusal of r when the
	// browser guard refuses it before any route. The server asks only
	// for requests outside its own routes (/v1/..., /mcp, /metrics,
	// /healthz, /readyz), and asks the doors in their order: the first
	// that owns r answers; a request no door owns gets the native error.
	Owns(r *http.Request) bool
	// WriteRefusal answers a refused request in the door's error shape:
	// status is the HTTP status (400 or 403), msg says why.
	WriteRefusal(w http.ResponseWriter, r *http.Request, status int, msg string)
	// Bodies are the door's POST requests whose body is not JSON
	// (multipart uploads); every other POST must declare
	// application/json (see the browser guard).
	Bodies() []BodyRule
	// Close releases what the door holds (background work, processes it
	// started for sandboxes); sandboxes are the manager's. The server's
	// Close calls it once, after serving.
	Close() error
}

// A PortDoor is a door that also serves requests addressed to a sandbox
// port rather than to a route: by the E2b-Sandbox-Id and E2b-Sandbox-Port
// headers (the daemon's port addressing, which E2B's SDKs and agentbox's
// own agent client use) or by a preview host name <port>-<id>.<domain>.
type PortDoor interface {
	Door
	// ServePort serves r for port of sandbox id. It reports false, having
	// written nothing, for ports it does not serve: those go to the
	// preview proxy. The Host and Origin rules of the guard have passed.
	ServePort(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int) bool
}

// A PreviewTokenDoor is a door whose clients send the preview tokens the
// server signs (Server.PreviewToken) in a header of their protocol's own
// (Daytona's X-Daytona-Preview-Token) rather than agentbox's query
// parameter or cookie. The preview proxy takes the token from those
// headers and removes them, like every other credential, before the
// request reaches the sandbox.
type PreviewTokenDoor interface {
	Door
	PreviewTokenHeaders() []string
}

// A BodyRule lets the POST requests Match selects declare MediaType (the
// one type accepted for them) instead of application/json. An empty
// MediaType marks bodiless POSTs (Daytona's start, stop...): with an
// empty body any Content-Type (or none) passes, so the door must require
// a header a web page cannot send without a CORS preflight
// (Authorization). The Host and Origin rules still apply.
type BodyRule struct {
	MediaType string
	Match     func(r *http.Request) bool
}

// mountDoors registers each door's routes, body rules and sandbox ports,
// in their order.
func (s *Server) mountDoors(doors []Door) {
	for _, d := range doors {
		d.Register(s.mux)
		s.bodyRules = append(s.bodyRules, d.Bodies()...)
		if p, ok := d.(PortDoor); ok {
			s.sandboxPorts = append(s.sandboxPorts, p.ServePort)
		}
		if p, ok := d.(PreviewTokenDoor); ok {
			s.previewHeaders = append(s.previewHeaders, p.PreviewTokenHeaders()...)
		}
	}
	s.doors = doors
}

// Close closes the doors, in the reverse of their order, and returns the
// first error. Call it once the server no longer serves.
func (s *Server) Close() error {
	var first error
	for i := len(s.doors) - 1; i >= 0; i-- {
		if err := s.doors[i].Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// serveSandboxPort offers a request for port of sandbox id to the doors
// that serve sandbox ports; it reports whether one answered.
func (s *Server) serveSandboxPort(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int) bool {
	for _, serve := range s.sandboxPorts {
		if serve(w, r, id, port) {
			return true
		}
	}
	return false
}
