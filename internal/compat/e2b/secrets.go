package e2b

import (
	"context"
	"encoding/base64"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/secrets"
)

// E2B's Secret API (Secret.create, update, getInfo, list, exists,
// destroy of the e2b SDK) over the daemon's secrets vault: the same
// secrets as /v1/secrets, the value written and never returned. A rule's
// header value names one with Secret.fill's placeholder,
// ${e2b.secrets.NAME}, which the egress broker resolves at each request
// (docs/secrets.md).

// secretOut is E2B's Secret.
type secretOut struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int               `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      string            `json:"createdAt"`
	UpdatedAt      string            `json:"updatedAt"`
}

func toE2BSecret(m secrets.Meta) secretOut {
	md := m.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return secretOut{SecretID: m.ID, Name: m.Name, CurrentVersion: m.Version, Metadata: md,
		CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: m.UpdatedAt.UTC().Format(time.RFC3339Nano)}
}

func (s *Server) registerSecrets(h func(string, handler)) {
	h("GET /secrets", s.listSecrets)
	h("POST /secrets", s.createSecret)
	h("GET /secrets/{secretID}", s.getSecret)
	h("POST /secrets/{secretID}", s.updateSecret)
	h("DELETE /secrets/{secretID}", s.deleteSecret)
}

func (s *Server) vault() (*secrets.Vault, error) {
	if s.cfg.Secrets == nil {
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "secrets are not available on this server")
	}
	return s.cfg.Secrets, nil
}

// lookupSecret finds user's secret by ID or name; E2B lower-cases names,
// so a name not found as given is tried lower-cased.
func (s *Server) lookupSecret(ctx context.Context, v *secrets.Vault, user, ref string) (secrets.Meta, error) {
	m, err := v.Lookup(ctx, user, ref)
	if sandbox.ClassOf(err) == sandbox.ClassNotFound && strings.ToLower(ref) != ref {
		return v.Lookup(ctx, user, strings.ToLower(ref))
	}
	return m, err
}

type secretIn struct {
	Name     string            `json:"name"`
	Value    *string           `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

// createSecret serves POST /secrets: 201 with the new secret's metadata,
// 409 when the name is taken. Names are lower-cased, as E2B's are.
func (s *Server) createSecret(w http.ResponseWriter, r *http.Request, user string) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	var in secretIn
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Value == nil {
		return sandbox.Invalid("value", "value is required")
	}
	m, err := v.Create(r.Context(), user, strings.ToLower(in.Name), *in.Value, in.Metadata)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toE2BSecret(m))
	return nil
}

// updateSecret serves POST /secrets/{secretID}: a new value (the next
// version) and, when given, new metadata.
func (s *Server) updateSecret(w http.ResponseWriter, r *http.Request, user string) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	var in secretIn
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Value == nil {
		return sandbox.Invalid("value", "value is required")
	}
	m, err := s.lookupSecret(r.Context(), v, user, r.PathValue("secretID"))
	if err != nil {
		return err
	}
	if m, err = v.Update(r.Context(), user, m.Name, *in.Value, in.Metadata); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toE2BSecret(m))
	return nil
}

func (s *Server) getSecret(w http.ResponseWriter, r *http.Request, user string) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	m, err := s.lookupSecret(r.Context(), v, user, r.PathValue("secretID"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toE2BSecret(m))
	return nil
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, user string) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	m, err := s.lookupSecret(r.Context(), v, user, r.PathValue("secretID"))
	if err != nil {
		return err
	}
	if err := v.Delete(r.Context(), user, m.Name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listSecrets serves GET /secrets: pages of at most limit (default 100)
// by name, the next page's token (the last name, encoded) in
// X-Next-Token.
func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, user string) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit := 100
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return sandbox.Invalid("limit", "limit must be an integer from 1 to 100")
		}
		limit = n
	}
	var after string
	if tok := q.Get("nextToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return sandbox.Invalid("nextToken", "invalid nextToken")
		}
		after = string(b)
	}
	list, err := v.List(r.Context(), user)
	if err != nil {
		return err
	}
	out := make([]secretOut, 0, limit)
	for _, m := range list { // sorted by name
		if after != "" && m.Name <= after {
			continue
		}
		if len(out) == limit {
			w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(out[len(out)-1].Name)))
			break
		}
		out = append(out, toE2BSecret(m))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// fillRef is Secret.fill's placeholder in a rule's header value.
var fillRef = regexp.MustCompile(`\$\{e2b\.secrets\.([^{}]*)\}`)

// secretRefs turns Secret.fill placeholders in header values into the
// broker's ${secret:NAME} references to user's secrets: the name as
// given when user has it, else lower-cased (E2B lower-cases names when
// storing them). A name agentbox cannot store is refused; one the user
// does not have is refused when the rules are checked.
func (s *Server) secretRefs(ctx context.Context, user string, rules []sandbox.EgressRule) error {
	for _, rule := range rules {
		for k, val := range rule.Headers {
			var ferr error
			rule.Headers[k] = fillRef.ReplaceAllStringFunc(val, func(m string) string {
				name := fillRef.FindStringSubmatch(m)[1]
				if s.cfg.Secrets != nil && name != strings.ToLower(name) {
					if _, err := s.cfg.Secrets.Get(ctx, user, name); sandbox.ClassOf(err) == sandbox.ClassNotFound {
						name = strings.ToLower(name)
					}
				}
				if err := secrets.CheckName(name); err != nil {
					ferr = sandbox.Invalid("network.rules", "rule for %s: %s is not a secret name agentbox can hold (letters, digits, '_' and '-')", rule.Host, m)
					return m
				}
				return "${secret:" + name + "}"
			})
			if ferr != nil {
				return ferr
			}
		}
	}
	return nil
}
