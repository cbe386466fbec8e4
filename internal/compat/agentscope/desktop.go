package agentscope

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The desktop URL of agentscope's GUIMixin.desktop_url (browser and gui
// sandboxes): {base_url}/desktop/{id}/vnc/vnc_relay.html?password=
// {runtime_token}, opened by a person in a web browser. agentbox's noVNC
// page is the native API's signed, expiring link
// (/v1/sandboxes/{id}/desktop): this route checks the sandbox's token (or
// an API key of its owner) and redirects there. The browser template
// (Chromium on its screen, as in agentscope's browser image) and the
// desktop template run the VNC servers behind that page; a sandbox whose
// template runs none (another image mapped by SANDBOX_TEMPLATES), or a
// daemon without desktops (Config.DesktopLink nil), answers 409 with a
// clear message rather than a dead link.

// DesktopLinkFunc mints a signed link to the noVNC page of owner's sandbox
// id, on the daemon at base (scheme://host as the caller reached it).
type DesktopLinkFunc func(ctx context.Context, owner string, id sandbox.ID, base string) (string, error)

func (s *Server) serveDesktop(w http.ResponseWriter, r *http.Request) {
	identity := r.PathValue("identity")
	// A person's web browser sends no Authorization header: the token is
	// the "password" parameter, as agentscope's noVNC relay page takes it.
	if _, present := bearer(r); !present {
		if pw := r.URL.Query().Get("password"); pw != "" {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+pw)
		}
	}
	rec, ok := s.proxyTarget(w, r, identity)
	if !ok {
		return
	}
	if !hasBrowserTools(rec.Type) && !hasGUITools(rec.Type) {
		writeDetail(w, http.StatusNotFound, "sandbox "+rec.Name+" has no desktop (only browser and gui sandboxes do)")
		return
	}
	if s.cfg.DesktopLink == nil {
		writeDetail(w, http.StatusConflict, "the desktop (noVNC) of sandbox "+rec.Name+" is not available on this server")
		return
	}
	link, err := s.cfg.DesktopLink(r.Context(), rec.Owner, rec.ID, baseURL(r))
	if errors.Is(err, httpapi.ErrNoDesktop) {
		// Said in agentscope's terms: the sandbox's name and type, not the
		// native API's id and template.
		writeDetail(w, http.StatusConflict, fmt.Sprintf("sandbox %s has no desktop: its template (sandbox type '%s') runs no VNC server; desktop_url needs the browser or desktop template (SANDBOX_TEMPLATES, the defaults of the types 'browser' and 'gui': docs/desktop.md)", rec.Name, rec.Type))
		return
	}
	if err != nil {
		s.writeSandboxError(w, r, rec, err)
		return
	}
	if !strings.HasPrefix(link, "http://") && !strings.HasPrefix(link, "https://") && !strings.HasPrefix(link, "/") {
		writeDetail(w, http.StatusBadGateway, "bad desktop link")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, link, http.StatusFound)
}
