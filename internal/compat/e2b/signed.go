package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Signed file URLs: the SDKs' files.uploadUrl and downloadUrl return
// <sandbox URL>/files?path=&username=&signature=v1_...[&signature_expiration=]
// for a secure sandbox, to hand to a client that holds no credential (curl,
// a browser). The signature is
//
//	"v1_" + base64(sha256("<path>:<read|write>:<user>:<envd access token>[:<expiration>]"))
//
// without base64's padding; the expiration is unix seconds. With
// E2B_SANDBOX_URL the URL is the daemon's own /files and names no sandbox:
// the sandbox is the one whose access token the signature verifies with.
// Only this daemon's running sandboxes are searched.

// signedPath reports whether r is a signed /files request (no sandbox
// header: those are the data plane's).
func signedPath(r *http.Request) bool {
	return r.URL.Path == "/files" && r.Header.Get("E2b-Sandbox-Id") == ""
}

// IsSignedUpload selects the POST /files requests of signed upload URLs,
// whose bodies are multipart forms (for the daemon's browser guard: the
// signature, not an ambient credential, authorizes them).
func IsSignedUpload(r *http.Request) bool {
	return r.Method == http.MethodPost && signedPath(r) && r.URL.Query().Get("signature") != ""
}

func (s *Server) registerSigned(mux *http.ServeMux) {
	serve := func(w http.ResponseWriter, r *http.Request) {
		if err := s.serveSigned(w, r); err != nil {
			writeError(w, r, err)
		}
	}
	mux.HandleFunc("GET /files", serve)
	mux.HandleFunc("POST /files", serve)
}

func (s *Server) serveSigned(w http.ResponseWriter, r *http.Request) error {
	if r.URL.Query().Get("signature") == "" {
		return sandbox.Errorf(sandbox.ClassUnauth, "missing signature: /files without a sandbox needs a signed URL (files.uploadUrl, files.downloadUrl)")
	}
	// The expiry first: it needs no sandbox.
	if err := checkSignature(r, ""); err != nil && !errors.Is(err, errBadSignature) {
		return err
	}
	id, ok := s.m.FindByToken(func(_ sandbox.ID, token string) bool { return checkSignature(r, token) == nil })
	if !ok {
		return errBadSignature
	}
	return s.servePort(w, r, id, EnvdPort)
}

var errBadSignature = sandbox.Errorf(sandbox.ClassUnauth, "invalid signature")

// checkSignature verifies a signed /files request's signature and expiry
// against the sandbox's access token (constant-time): nil when they hold.
func checkSignature(r *http.Request, token string) error {
	q := r.URL.Query()
	sig, exp := q.Get("signature"), q.Get("signature_expiration")
	if exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return sandbox.Errorf(sandbox.ClassUnauth, "invalid signature_expiration")
		}
		if time.Now().Unix() > n {
			return sandbox.Errorf(sandbox.ClassUnauth, "signature is expired")
		}
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	want := fileSignature(q.Get("path"), op, q.Get("username"), token, exp)
	if token == "" || sig == "" || subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return errBadSignature
	}
	return nil
}

// fileSignature is the signature the SDKs put on a file URL for path,
// operation (read or write), user (empty for the default) and the
// sandbox's access token, with the expiration (unix seconds) when given.
func fileSignature(path, operation, user, token, expiration string) string {
	raw := strings.Join([]string{path, operation, user, token}, ":")
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}
