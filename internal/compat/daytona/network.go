package daytona

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Daytona's network settings map onto agentbox's egress policy:
//
//   - networkBlockAll: egress mode with every IPv4 destination denied
//     (0.0.0.0/0), so updateNetworkSettings can open it again; on a server
//     without egress networking, mode none.
//   - networkAllowList (CIDRs) and domainAllowList (names, "*.x" for the
//     names below x): the policy's allow list, which lets nothing else out
//     (and resolves no other name).
//
// Without any of them the server's default applies (DEFAULT_NETWORK_MODE).

// denyAll is the deny entry networkBlockAll stands for.
const denyAll = "0.0.0.0/0"

// netSettings is Daytona's network settings; nil fields are not given.
type netSettings struct {
	NetworkBlockAll  *bool   `json:"networkBlockAll"`
	NetworkAllowList *string `json:"networkAllowList"`
	DomainAllowList  *string `json:"domainAllowList"`
}

func (n netSettings) given() bool {
	return n.NetworkBlockAll != nil || n.NetworkAllowList != nil || n.DomainAllowList != nil
}

// splitList splits a comma-separated Daytona list.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// cidrList parses networkAllowList: IPv4 CIDRs (a bare address is /32).
func cidrList(s string) ([]string, error) {
	var out []string
	for _, v := range splitList(s) {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return nil, sandbox.Invalid("networkAllowList", "networkAllowList must be comma-separated IPv4 CIDRs: %q is not one", v)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !p.Addr().Is4() {
			return nil, sandbox.Invalid("networkAllowList", "networkAllowList takes IPv4 CIDRs only (sandboxes have no IPv6): %q", v)
		}
		out = append(out, p.Masked().String())
	}
	return out, nil
}

// domainList parses domainAllowList; the names are checked by the
// egress policy.
func domainList(s string) ([]string, error) {
	out := splitList(s)
	for _, v := range out {
		if _, err := netip.ParsePrefix(v); err == nil {
			return nil, sandbox.Invalid("domainAllowList", "domainAllowList takes domain names; put CIDRs such as %q in networkAllowList", v)
		}
		if _, err := netip.ParseAddr(v); err == nil {
			return nil, sandbox.Invalid("domainAllowList", "domainAllowList takes domain names; put addresses such as %q in networkAllowList", v)
		}
	}
	return out, nil
}

// daytonaNetwork is a sandbox's network as Daytona shows it.
type daytonaNetwork struct {
	blockAll bool
	cidrs    []string
	domains  []string
}

// networkView reads Daytona's settings off an agentbox policy.
func networkView(n sandbox.Network) daytonaNetwork {
	var v daytonaNetwork
	if n.Mode == sandbox.NetworkNone {
		v.blockAll = true
		return v
	}
	for _, a := range n.AllowOut {
		if _, err := netip.ParsePrefix(a); err == nil {
			v.cidrs = append(v.cidrs, a)
		} else if _, err := netip.ParseAddr(a); err == nil {
			v.cidrs = append(v.cidrs, a)
		} else {
			v.domains = append(v.domains, a)
		}
	}
	v.blockAll = len(n.AllowOut) == 0 && slices.Contains(n.DenyOut, denyAll)
	return v
}

// apply changes v by the settings given in in: networkBlockAll false
// also clears the allow lists not given with it (the SDK's documented
// "restore outbound access").
func (v daytonaNetwork) apply(in netSettings) (daytonaNetwork, error) {
	if in.NetworkBlockAll != nil {
		v.blockAll = *in.NetworkBlockAll
		if !v.blockAll {
			v.cidrs, v.domains = nil, nil
		}
	}
	if in.NetworkAllowList != nil {
		c, err := cidrList(*in.NetworkAllowList)
		if err != nil {
			return v, err
		}
		v.cidrs = c
	}
	if in.DomainAllowList != nil {
		d, err := domainList(*in.DomainAllowList)
		if err != nil {
			return v, err
		}
		v.domains = d
	}
	if in.NetworkBlockAll == nil && (len(v.cidrs) > 0 || len(v.domains) > 0) {
		// An allow list given alone opens what it lists.
		v.blockAll = false
	}
	return v, nil
}

// policy is v as an agentbox policy on top of base (its rules and
// deny entries other than denyAll are kept). egress: the server has
// egress networking.
func (v daytonaNetwork) policy(base sandbox.Network, egress bool) sandbox.Network {
	n := sandbox.Network{Mode: sandbox.NetworkEgress, Rules: base.Rules}
	for _, d := range base.DenyOut {
		if d != denyAll {
			n.DenyOut = append(n.DenyOut, d)
		}
	}
	if v.blockAll {
		if !egress {
			return sandbox.Network{Mode: sandbox.NetworkNone}
		}
		n.DenyOut = append(n.DenyOut, denyAll)
		return n
	}
	n.AllowOut = append(append([]string{}, v.cidrs...), v.domains...)
	return n
}

// createNetwork is the policy of a create's settings (ok false: none
// given, the server's default applies).
func (s *Server) createNetwork(in netSettings) (n sandbox.Network, ok bool, err error) {
	if !in.given() || (!in.blocks() && in.NetworkAllowList == nil && in.DomainAllowList == nil) {
		return sandbox.Network{}, false, nil
	}
	v, err := daytonaNetwork{}.apply(in)
	if err != nil {
		return sandbox.Network{}, false, err
	}
	if !v.blockAll && len(v.cidrs) == 0 && len(v.domains) == 0 {
		return sandbox.Network{}, false, nil
	}
	return v.policy(sandbox.Network{}, s.m.NetworkAvailable()), true, nil
}

func (n netSettings) blocks() bool { return n.NetworkBlockAll != nil && *n.NetworkBlockAll }

// setNetworkOut fills the record's network fields.
func setNetworkOut(o *sandboxOut, rec *store.Record) {
	v := networkView(rec.Network)
	o.NetworkBlockAll = v.blockAll
	if len(v.cidrs) > 0 {
		s := strings.Join(v.cidrs, ",")
		o.NetworkAllowList = &s
	}
	if len(v.domains) > 0 {
		s := strings.Join(v.domains, ",")
		o.DomainAllowList = &s
	}
}

// updateNetworkSettings is POST /sandbox/{id}/network-settings: the
// running sandbox's policy changes at once (new connections; flows
// already open keep going).
func (s *Server) updateNetworkSettings(w http.ResponseWriter, r *http.Request, user string) error {
	var in netSettings
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if !in.given() {
		return sandbox.Invalid("networkBlockAll", "at least one of networkBlockAll, networkAllowList or domainAllowList must be set")
	}
	rec, err := s.find(r, user, r.PathValue("id"))
	if err != nil {
		return err
	}
	v, err := networkView(rec.Network).apply(in)
	if err != nil {
		return err
	}
	if rec.Network.Mode == sandbox.NetworkNone {
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s was created without network access (network mode none): its network settings cannot change; create it with networkAllowList, domainAllowList or networkBlockAll on a server with egress networking", rec.ID)
	}
	if rec, err = s.m.UpdateNetwork(r.Context(), user, rec.ID, v.policy(rec.Network, true)); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.out(r, rec))
	return nil
}
