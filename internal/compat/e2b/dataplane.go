package e2b

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/httpbody"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// ServePort is the data plane (an httpapi.SandboxPortHandler): the envd
// port (49983) and the code-interpreter port (49999) of a sandbox are its
// agent's routes, proxied as they are, streams flushed as they come. Any
// other port is left to the preview proxy.
//
// A request must carry the sandbox's access token (X-Access-Token, as the
// SDKs send it: every sandbox is created "secure") or its owner's API key.
// Only the routes of each port's protocol pass, never the agent's own
// (/init, /service). A client that goes away ends its request, not the
// process it started: the agent keeps processes whose stream was cut.
func (s *Server) ServePort(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int) bool {
	if port != EnvdPort && port != JupyterPort {
		s.trafficToPreview(r, id)
		return false
	}
	if err := s.servePort(w, r, id, port); err != nil {
		if errors.Is(err, errSandboxGone) {
			writeGone(w, id)
			return true
		}
		writeError(w, r, err)
	}
	return true
}

// errSandboxGone: the sandbox a data-plane request names is not there
// (never was, ended at its timeout, killed).
var errSandboxGone = errors.New("sandbox gone")

// writeGone answers for a sandbox that is not there as E2B's sandbox proxy
// does: 502 with the sandbox ID. The SDKs read 502 as "the sandbox ended":
// isRunning() is false, other calls raise TimeoutError ("likely due to
// sandbox timeout"). A 404 would read as a missing file or process
// (files.exists() false, NotFoundError).
func writeGone(w http.ResponseWriter, id sandbox.ID) {
	writeJSON(w, http.StatusBadGateway, struct {
		Code      int    `json:"code"`
		Message   string `json:"message"`
		SandboxID string `json:"sandboxId"`
	}{http.StatusBadGateway, "The sandbox was not found", string(id)})
}

func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int) error {
	if !allowedRoute(port, r.Method, r.URL.Path) {
		return sandbox.Errorf(sandbox.ClassNotFound, "no route %s %s on port %d", r.Method, r.URL.Path, port)
	}
	rec, err := s.m.Lookup(id)
	if sandbox.IsNotFound(err) {
		return errSandboxGone
	}
	if err != nil {
		return err
	}
	switch {
	case s.authorizedFor(r, rec.Owner, rec.AccessToken), port == JupyterPort && trafficTokenOK(r, rec.AccessToken):
	case port == EnvdPort && r.URL.Path == "/files" && r.URL.Query().Get("signature") != "":
		// A signed file URL (files.uploadUrl, downloadUrl): the signature
		// stands for the access token, for this path, operation and user.
		if err := checkSignature(r, rec.AccessToken); err != nil {
			return err
		}
		q := r.URL.Query()
		q.Del("signature")
		q.Del("signature_expiration")
		r.URL.RawQuery = q.Encode()
	default:
		return sandbox.Errorf(sandbox.ClassUnauth, "missing or invalid X-Access-Token for sandbox %s", id)
	}
	httpapi.SetUser(r, rec.Owner)
	switch rec.State {
	case sandbox.StateRunning:
	case sandbox.StatePaused:
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is paused: connect to it (Sandbox.connect) to resume it", id)
	case sandbox.StateError, sandbox.StateLost:
		return errSandboxGone
	default:
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is %s", id, rec.State)
	}
	// Every request is admitted like the native API's (a watch stream is
	// admitted, then lives outside the count of requests in flight, as
	// /v1's watches do); an RPC body is charged as it is held below.
	var weight int64
	if r.URL.Path != "/files" && r.Body != nil && r.Body != http.NoBody {
		weight = r.ContentLength
		if weight < 0 || weight > maxRPCBody {
			weight = maxRPCBody
		}
	}
	dr, err := s.dp.Begin(r.Context(), rec.Owner, id, dataplane.Weight(weight))
	if err != nil {
		return err
	}
	defer dr.End()
	if watchRoute(r.URL.Path) {
		dr.End()
	}
	base, rt, token := dr.EnvdTarget()
	if port == JupyterPort {
		base, rt, token = dr.CodeTarget()
	}
	if r.Method == http.MethodPost && r.URL.Path == "/files" {
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes)
	}
	if r.URL.Path != "/files" && r.Body != nil && r.Body != http.NoBody {
		// RPC messages are small: read them whole first. Streamed, the
		// upstream request would still be reading the client's body
		// while the agent's stream already flows back, and an HTTP/1
		// server refuses body reads once the response has started (no
		// full duplex): the transport then drops the agent connection
		// in the middle of the stream. (An upload's answer comes only
		// after its whole body.)
		// The buffer is charged to the owner's share of the daemon's
		// request memory (REQUEST_MEMORY) by the request's weight.
		buf, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRPCBody))
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return sandbox.Errorf(sandbox.ClassTooLarge, "request body is over %d bytes", maxRPCBody)
		case err != nil:
			return sandbox.Errorf(sandbox.ClassInvalid, "request body: %v", err)
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(buf)), int64(len(buf))
	} else if r.ContentLength > 0 {
		r.Body = httpbody.EndAtLength(r.Body, r.ContentLength)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Host = base.Host
			// What authenticated the caller to the daemon stays here;
			// the agent gets its own token. Basic authorization (E2B's
			// choice of user) passes.
			pr.Out.Header.Del("X-API-Key")
			pr.Out.Header.Del("Cookie")
			pr.Out.Header.Del("E2b-Sandbox-Id")
			pr.Out.Header.Del("E2b-Sandbox-Port")
			if a := pr.Out.Header.Get("Authorization"); a != "" && !strings.HasPrefix(strings.ToLower(a), "basic ") {
				pr.Out.Header.Del("Authorization")
			}
			pr.Out.Header.Del("X-Access-Token")
			pr.Out.Header.Del("E2b-Traffic-Access-Token")
			if token != "" {
				pr.Out.Header.Set("X-Access-Token", token)
			}
			dataplane.MarkE2B(pr.Out.Header)
		},
		Transport: rt,
		ModifyResponse: func(resp *http.Response) error {
			if r.Method == http.MethodGet && r.URL.Path == "/files" {
				// A download is the sandbox's bytes, served on the API's
				// own origin (a signed URL there, the console's origin):
				// whatever the upstream answers (a remote provider's envd
				// may name the file's own type), a browser never renders
				// it as a page of that origin or runs its scripts.
				resp.Header.Set("Content-Type", "application/octet-stream")
				resp.Header.Set("X-Content-Type-Options", "nosniff")
				resp.Header.Set("Content-Security-Policy", "sandbox")
				if resp.Header.Get("Content-Disposition") == "" {
					resp.Header.Set("Content-Disposition", "attachment")
				}
				// A download is bulk data, not a stream of events: pass
				// it on in large pieces (each becomes one HTTP chunk;
				// clients such as Node's fetch slow down badly on tens of
				// thousands of small gzip chunks).
				resp.Body = &fillReader{ReadCloser: resp.Body}
			}
			if connectStream(resp) {
				resp.Body = &endStream{ReadCloser: resp.Body,
					msg: fmt.Sprintf("sandbox %s stopped answering: it was killed or reached its end of life", id)}
			}
			return nil
		},
		BufferPool: bulkBuffers,
		// Stream events (process output, keepalives, code results) reach
		// the client as the agent writes them.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, r, sandbox.Errorf(sandbox.ClassTooLarge, "upload is over %d bytes (MAX_UPLOAD_SIZE)", tooBig.Limit))
				return
			}
			s.log.Debug("data plane proxy", "sandbox", id, "port", port, "err", err)
			writeError(w, r, sandbox.Wrap(sandbox.ClassUnavailable, err, fmt.Sprintf("sandbox %s does not answer", id)))
		},
	}
	proxy.ServeHTTP(w, r)
	return nil
}

// authorizedFor accepts the sandbox's access token or its owner's API key.
func (s *Server) authorizedFor(r *http.Request, owner, token string) bool {
	if tok := r.Header.Get("X-Access-Token"); tok != "" && token != "" {
		return subtle.ConstantTimeCompare([]byte(tok), []byte(token)) == 1
	}
	if len(s.cfg.APIKeys) == 0 || r.Header.Get("X-API-Key") == "" {
		return false
	}
	user, err := httpapi.UserForKey(s.cfg.APIKeys, strings.TrimSpace(r.Header.Get("X-API-Key")))
	return err == nil && user == owner
}

// watchRoute reports whether path opens a long-lived directory watch.
func watchRoute(path string) bool {
	return path == "/filesystem.Filesystem/WatchDir" || path == "/filesystem.Filesystem/CreateWatcher"
}

// allowedRoute reports whether method and path are routes of the protocol
// served on port: envd's (Connect RPC services, /files, /health, /envs)
// on 49983, the code interpreter's on 49999.
func allowedRoute(port int, method, path string) bool {
	switch port {
	case EnvdPort:
		switch {
		case strings.HasPrefix(path, "/process.Process/"), strings.HasPrefix(path, "/filesystem.Filesystem/"):
			return method == http.MethodPost
		case path == "/files":
			return method == http.MethodGet || method == http.MethodPost
		case path == "/health", path == "/envs":
			return method == http.MethodGet
		}
	case JupyterPort:
		switch {
		case path == "/execute":
			return method == http.MethodPost
		case path == "/contexts":
			return method == http.MethodGet || method == http.MethodPost
		case strings.HasPrefix(path, "/contexts/") && strings.HasSuffix(path, "/restart"):
			return method == http.MethodPost
		case strings.HasPrefix(path, "/contexts/"):
			return method == http.MethodDelete
		case path == "/health":
			return method == http.MethodGet
		}
	}
	return false
}

// trafficToken is the sandbox's E2B traffic access token: the
// code-interpreter SDK sends it (E2B-Traffic-Access-Token) instead of the
// envd token on some of its calls. Derived from the access token, it
// needs no storage, and it opens only the code-interpreter port.
func trafficToken(accessToken string) string {
	if accessToken == "" {
		return ""
	}
	mac := hmac.New(sha256.New, []byte(accessToken))
	mac.Write([]byte("e2b traffic access token"))
	return hex.EncodeToString(mac.Sum(nil))
}

func trafficTokenOK(r *http.Request, accessToken string) bool {
	tok := r.Header.Get("E2b-Traffic-Access-Token")
	want := trafficToken(accessToken)
	return tok != "" && want != "" && hmac.Equal([]byte(tok), []byte(want))
}

// bulkBuffers are the proxy's copy buffers: 256 KiB, so a download moves
// in few large chunks.
var bulkBuffers = &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(v []byte) { b.p.Put(&v) }

// fillReader fills the caller's buffer before returning (or returns what
// came before the end or an error).
type fillReader struct{ io.ReadCloser }

func (f *fillReader) Read(p []byte) (int, error) {
	n, err := io.ReadFull(f.ReadCloser, p)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return n, err
}

// maxRPCBody caps a data-plane request other than a file upload, as the
// agent caps an RPC message.
const maxRPCBody = 16 << 20

// trafficToPreview lets E2B's traffic access token (the header E2B's
// docs have clients send to a sandbox's ports) open the preview proxy:
// it stands for the sandbox's access token there, and neither reaches the
// sandbox's server.
func (s *Server) trafficToPreview(r *http.Request, id sandbox.ID) {
	if r.Header.Get("E2b-Traffic-Access-Token") == "" {
		return
	}
	rec, err := s.m.Lookup(id)
	if err != nil {
		return
	}
	if trafficTokenOK(r, rec.AccessToken) && r.Header.Get("X-Access-Token") == "" {
		r.Header.Set("X-Access-Token", rec.AccessToken)
	}
	r.Header.Del("E2b-Traffic-Access-Token")
}
