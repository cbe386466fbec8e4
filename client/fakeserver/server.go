// Package fakeserver is an in-memory FAKE of the agentbox native API, for
// testing code that talks to the API (the Go SDK, the CLI, tools built on
// them) without a daemon, a kernel or root.
//
// It implements the routes of api/openapi.yaml with their wire shapes,
// status codes and error codes, but nothing real happens behind them:
// files live in maps, and "commands" are a handful of scripted programs
// (see Exec). It is not the agentbox server and must never be used as one.
package fakeserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Server is a running fake. Its exported fields may be set before the
// first request; the methods are safe for concurrent use.
type Server struct {
	// URL is the fake's base URL, e.g. "http://127.0.0.1:41234".
	URL string

	// PageSize is the page length of list when the request has no limit
	// (the real default is 100; a small value exercises pagination).
	PageSize int

	// OnUpload, when set, is called each time the upload handler has read
	// a chunk of a request body, with the bytes received so far.
	OnUpload func(path string, received int64)

	ts *httptest.Server

	mu        sync.Mutex
	apiKey    string
	failNext  *apiError
	headers   []http.Header // of every request, in order
	seq       int           // creation counter, for ordering and ids
	reqSeq    int
	sandboxes map[string]*sandbox
	fs        map[string]*fsys // per sandbox id
	sessions  map[string][]string
	killed    []string // commands killed because the client went away
	resizes   [][2]int // PTY resize messages received
	templates map[string]*template
}

// New starts a fake on a loopback port and stops it when the test ends.
func New(t testing.TB) *Server {
	s := Start()
	t.Cleanup(s.Close)
	return s
}

// Start starts a fake on a loopback port; Close stops it. Prefer New in
// tests.
func Start() *Server {
	s := &Server{PageSize: 100, sandboxes: map[string]*sandbox{}, fs: map[string]*fsys{},
		sessions: map[string][]string{}}
	s.ts = httptest.NewServer(s.routes())
	s.URL = s.ts.URL
	return s
}

// Close stops the fake, closing open connections.
func (s *Server) Close() {
	s.ts.CloseClientConnections()
	s.ts.Close()
}

// SetAPIKey makes every /v1 request require "Authorization: Bearer key"
// (an empty key turns auth off, the default).
func (s *Server) SetAPIKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiKey = key
}

// FailNext makes the next /v1 request fail with this error.
func (s *Server) FailNext(status int, code, message, field string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = &apiError{status: status, Code: code, Message: message, Field: field}
}

// Headers returns the headers of every request received so far.
func (s *Server) Headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

// Killed returns the ids of sandboxes whose running command was killed
// because the client went away.
func (s *Server) Killed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.killed...)
}

// Resizes returns the PTY sizes received in resize messages.
func (s *Server) Resizes() [][2]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][2]int(nil), s.resizes...)
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", s.create)
	mux.HandleFunc("GET /v1/sandboxes", s.list)
	mux.HandleFunc("GET /v1/sandboxes/{id}", s.withSandbox(s.get))
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", s.withSandbox(s.delete))
	mux.HandleFunc("POST /v1/sandboxes/{id}/timeout", s.withSandbox(s.setTimeout))
	mux.HandleFunc("POST /v1/sandboxes/{id}/refresh", s.withSandbox(s.refresh))
	mux.HandleFunc("GET /v1/sandboxes/{id}/stats", s.withSandbox(s.stats))
	mux.HandleFunc("GET /v1/sandboxes/{id}/logs", s.withSandbox(s.logs))
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", s.withSandbox(s.exec))
	mux.HandleFunc("GET /v1/sandboxes/{id}/pty", s.withSandbox(s.pty))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", s.withSandbox(s.download))
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", s.withSandbox(s.upload))
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/files", s.withSandbox(s.remove))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/stat", s.withSandbox(s.stat))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/list", s.withSandbox(s.listFiles))
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/mkdir", s.withSandbox(s.mkdir))
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/move", s.withSandbox(s.move))
	mux.HandleFunc("POST /v1/sessions/{session_id}/connect", s.connectSession)
	mux.HandleFunc("POST /v1/sessions/{session_id}/release", s.releaseSession)
	mux.HandleFunc("GET /v1/templates", s.listTemplates)
	mux.HandleFunc("GET /v1/templates/{name}", s.getTemplate)
	mux.HandleFunc("DELETE /v1/templates/{name}", s.deleteTemplate)
	mux.HandleFunc("GET /v1/templates/{name}/export", s.exportTemplate)
	mux.HandleFunc("POST /v1/templates/pulls", s.pullTemplate)
	mux.HandleFunc("POST /v1/templates/imports", s.importTemplate)
	mux.HandleFunc("GET /v1/info", s.info)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	return s.middleware(mux)
}

// middleware records headers, checks the API key and injects FailNext.
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		s.mu.Lock()
		s.reqSeq++
		reqID := fmt.Sprintf("fake-req-%d", s.reqSeq)
		s.headers = append(s.headers, r.Header.Clone())
		key, fail := s.apiKey, s.failNext
		s.failNext = nil
		s.mu.Unlock()
		w.Header().Set("X-Request-Id", reqID)
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			writeError(w, &apiError{status: 401, Code: "unauthenticated", Message: "missing or wrong API key"})
			return
		}
		if fail != nil {
			writeError(w, fail)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// apiError is the spec's Error shape plus its status.
type apiError struct {
	status    int
	Code      string `json:"code"`
	Message   string `json:"message"`
	Field     string `json:"field,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

func errf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func invalid(field, format string, args ...any) *apiError {
	e := errf(400, "invalid_argument", format, args...)
	e.Field = field
	return e
}

func writeError(w http.ResponseWriter, e *apiError) {
	e.RequestID = w.Header().Get("X-Request-Id")
	writeJSON(w, e.status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeBody decodes a JSON request body; an empty body leaves v as is.
func decodeBody(r *http.Request, v any) *apiError {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return invalid("", "bad JSON body: %v", err)
	}
	return nil
}
