package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Several managers (daemons) may run on one host. Each needs a bridge
// name, a subnet, an nftables table (named after the bridge), a DNS
// filter address (the subnet's first host) and DOCKER-USER rules (tagged
// with the bridge name) of its own. A bridge with its subnet is a "slot";
// this file picks one.
//
// With Config.Bridge and Config.Subnet unset the manager picks slot N,
// bridge agentbox<N> with subnet 10.(88+N).0.0/16: first the slot its state
// directory recorded on its last start (so a restarted daemon gets its
// bridge back and reattaches its sandboxes), else the lowest N whose
// bridge name is not held and whose subnet overlaps nothing on the host.
// A configured bridge or subnet is never replaced by another one: when it is
// taken, New fails and says what holds it and what is free instead.
//
// Ownership is recorded twice: the state file names the bridge and subnet,
// and a claim file in claimDir (host-wide, under /run) names the bridge,
// subnet and state directory of its owner, and is flock()ed by the running
// owner. A bridge belongs to a manager when its claim names the manager's
// state directory. A bridge claimed for another state directory is held
// while that owner runs (the lock is taken) or while its state file still
// names the bridge (a stopped daemon whose sandboxes keep running); it is
// never adopted or torn down by anyone else. A claimed bridge whose owner
// neither runs nor records it any more (its data directory was deleted) is
// left over: the next manager that picks or is configured with that name
// removes what is left of it and takes it. A bridge, table or address with
// no claim at all (another program, or an agentbox of an older version) is
// held by whatever made it.

const (
	autoBridgePrefix = "agentbox"
	autoSlots        = 40 // 10.88.0.0/16 ... 10.127.0.0/16
	autoSubnetBits   = 16
)

// autoSlot returns the bridge name and subnet of slot i.
func autoSlot(i int) (string, netip.Prefix) {
	return autoBridgePrefix + strconv.Itoa(i),
		netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(88 + i), 0, 0}), autoSubnetBits)
}

// minRouteBits is the shortest route prefix that makes a subnet taken: a
// shorter one (a default route, a VPN's 0/1 and 128/1) covers everything.
const minRouteBits = 8

// hostView is what the choice looks at: the host's interfaces, routes,
// nftables tables, Docker's configured address pools, and agentbox claims.
type hostView struct {
	links    map[string]hostLink
	routes   []hostRoute
	tables   map[string]bool      // inet nftables tables by name
	claims   map[string]claimInfo // by bridge name
	reserved []reservedNet        // networks to stay off when picking (Docker's pools)
}

type hostLink struct {
	kind  string // "bridge", "veth", "device" ...
	addrs []netip.Prefix
}

type hostRoute struct {
	dst  netip.Prefix
	link string // "" for routes without a device (blackhole ...)
}

type reservedNet struct {
	net netip.Prefix
	by  string
}

// claimInfo is a claim file as another manager would see it.
type claimInfo struct {
	claimRecord
	live     bool // its owner runs (holds the claim's lock)
	recorded bool // its owner's state file still names this bridge
}

// choiceRequest is what the manager asks for.
type choiceRequest struct {
	bridge   string       // configured; "" = pick one
	subnet   netip.Prefix // configured; invalid = pick one
	stateDir string       // who is asking (absolute)
	// What the state file recorded on the last start (legacy files have
	// a subnet and no bridge).
	lastBridge string
	lastSubnet netip.Prefix
}

// choice is the outcome.
type choice struct {
	bridge  string
	subnet  netip.Prefix
	how     string   // configured | kept from the last start | first free
	skipped []string // slots passed over, and why (for the start log)
	// reclaim is set when the bridge is left over from a manager that no
	// longer records it: what is left of it must go first.
	reclaim *claimInfo
}

// choose picks the bridge and subnet, or explains why it cannot.
func choose(req choiceRequest, v hostView) (choice, error) {
	autoBridge, autoSubnet := req.bridge == "", !req.subnet.IsValid()
	var ch choice

	// Another process using this very state directory would share and
	// rewrite its records: refuse whatever the settings.
	for _, c := range v.claims {
		if c.StateDir == req.stateDir && c.live {
			return ch, fmt.Errorf("the network state directory %s is in use by another running agentbox daemon (pid %d, bridge %s): two daemons must not share a data directory", req.stateDir, c.PID, c.Bridge)
		}
	}

	if !autoBridge {
		if held := v.bridgeHolder(req.bridge, req); held != "" {
			return ch, fmt.Errorf("NETWORK_BRIDGE=%s is taken: %s; set NETWORK_BRIDGE to a free name%s, or leave it unset to pick a free one",
				req.bridge, held, v.suggestBridge(req))
		}
	}
	if !autoSubnet {
		if held := v.subnetHolder(req.subnet, req.bridge, req, false); held != "" {
			return ch, fmt.Errorf("NETWORK_SUBNET=%s is taken: it overlaps %s; set NETWORK_SUBNET to a free range%s, or leave it unset to pick a free one",
				req.subnet, held, v.suggestSubnet(req))
		}
	}
	if !autoBridge && !autoSubnet {
		return choice{bridge: req.bridge, subnet: req.subnet, how: "configured", reclaim: v.reclaimable(req.bridge)}, nil
	}

	type cand struct {
		bridge string
		subnet netip.Prefix
		how    string
	}
	var cands []cand
	last := func() (string, netip.Prefix) {
		b, s := req.lastBridge, req.lastSubnet
		if b == "" && s.IsValid() {
			// A state file of an older version: it ran the old defaults.
			if b0, s0 := autoSlot(0); s == s0 {
				b = b0
			}
		}
		return b, s
	}
	if lb, ls := last(); lb != "" && ls.IsValid() {
		c := cand{bridge: lb, subnet: ls, how: "kept from the last start"}
		// Only the parts left to pick come from the record.
		if !autoBridge {
			c.bridge = req.bridge
		}
		if !autoSubnet {
			c.subnet = req.subnet
		}
		if (autoBridge || lb == req.bridge) && (autoSubnet || ls == req.subnet) {
			cands = append(cands, c)
		}
	}
	for i := range autoSlots {
		b, s := autoSlot(i)
		if !autoBridge {
			b = req.bridge
		}
		if !autoSubnet {
			s = req.subnet
		}
		cands = append(cands, cand{bridge: b, subnet: s, how: "first free"})
	}
	seen := map[string]bool{}
	for _, c := range cands {
		key := c.bridge + " " + c.subnet.String()
		if seen[key] {
			continue
		}
		seen[key] = true
		var why string
		if autoBridge {
			if held := v.bridgeHolder(c.bridge, req); held != "" {
				why = held
			}
		}
		// Docker's configured pools are stayed off when picking anew, but
		// do not move a daemon (and its running sandboxes) off its subnet.
		if why == "" && autoSubnet {
			if held := v.subnetHolder(c.subnet, c.bridge, req, c.how == "first free"); held != "" {
				why = c.subnet.String() + " overlaps " + held
			}
		}
		if why == "" {
			return choice{bridge: c.bridge, subnet: c.subnet, how: c.how, skipped: ch.skipped, reclaim: v.reclaimable(c.bridge)}, nil
		}
		ch.skipped = append(ch.skipped, c.bridge+" "+c.subnet.String()+": "+why)
	}
	first, _ := autoSlot(0)
	lastB, _ := autoSlot(autoSlots - 1)
	_, firstS := autoSlot(0)
	_, lastS := autoSlot(autoSlots - 1)
	var what []string
	if autoBridge {
		what = append(what, fmt.Sprintf("bridge %s...%s", first, lastB))
	}
	if autoSubnet {
		what = append(what, fmt.Sprintf("subnet %s...%s", firstS, lastS))
	}
	return ch, errors.New("no free " + strings.Join(what, " with ") + " on this host: set NETWORK_BRIDGE and NETWORK_SUBNET to a free name and range")
}

// ours reports whether bridge belongs to the requester: its claim names the
// requester's state directory or, without a claim (claims live under /run;
// older versions kept none), the requester's last state names the bridge
// (an older state file: the configured bridge, or the old default one) and
// the bridge, if it exists, carries that state's gateway address.
func (v hostView) ours(bridge string, req choiceRequest) bool {
	if c, ok := v.claims[bridge]; ok {
		return c.StateDir == req.stateDir
	}
	if !req.lastSubnet.IsValid() {
		return false
	}
	lb := req.lastBridge
	if lb == "" {
		if lb = req.bridge; lb == "" {
			lb, _ = autoSlot(0)
		}
	}
	if bridge != lb {
		return false
	}
	l, ok := v.links[bridge]
	if !ok {
		return true
	}
	want := netip.PrefixFrom(bridgeAddr(req.lastSubnet), req.lastSubnet.Bits())
	return l.kind == "bridge" && slices.Contains(l.addrs, want)
}

// bridgeHolder returns who holds the bridge name, "" when the requester may
// use it (free, or its own).
func (v hostView) bridgeHolder(bridge string, req choiceRequest) string {
	if v.ours(bridge, req) {
		return ""
	}
	if c, ok := v.claims[bridge]; ok {
		switch {
		case c.live:
			return fmt.Sprintf("%s is the bridge of the running agentbox daemon with network state %s (pid %d)", bridge, c.StateDir, c.PID)
		case c.recorded:
			return fmt.Sprintf("%s is the bridge of the stopped agentbox daemon with network state %s (its sandboxes may still use it; it gets it back when it starts)", bridge, c.StateDir)
		}
		// Left over from an owner that no longer records it (its data dir
		// is gone, or it moved): nobody can come back for it, and the claim
		// proves agentbox made it. Free, once removed (choice.reclaim).
		return ""
	}
	if l, ok := v.links[bridge]; ok {
		desc := fmt.Sprintf("an interface %s (%s%s) exists", bridge, l.kind, addrList(l.addrs))
		if v.tables[bridge] {
			desc += fmt.Sprintf(" with nftables table inet %s: an agentbox daemon of an older version, or of another data directory, runs on it", bridge)
		}
		return desc
	}
	if v.tables[bridge] {
		return fmt.Sprintf("an nftables table inet %s exists that agentbox did not record for this data directory", bridge)
	}
	return ""
}

// reclaimable returns the claim of a bridge left over from another
// manager that no longer runs nor records it, nil for any other bridge.
func (v hostView) reclaimable(bridge string) *claimInfo {
	c, ok := v.claims[bridge]
	if !ok || c.live || c.recorded {
		return nil
	}
	return &c
}

// subnetHolder returns what on the host overlaps subnet, "" when nothing
// does. The requester's bridge (named bridge, when it is its own or one it
// would reclaim) does not count. picking adds the networks to stay off
// (Docker's pools).
func (v hostView) subnetHolder(subnet netip.Prefix, bridge string, req choiceRequest, picking bool) string {
	own := bridge != "" && (v.ours(bridge, req) || v.reclaimable(bridge) != nil)
	names := make([]string, 0, len(v.links))
	for n := range v.links {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if own && n == bridge {
			continue
		}
		for _, a := range v.links[n].addrs {
			if a.Overlaps(subnet) {
				return fmt.Sprintf("%s on %s%s", a, n, v.whose(n, req))
			}
		}
	}
	for _, r := range v.routes {
		if r.dst.Bits() < minRouteBits || (own && r.link == bridge) || !r.dst.Overlaps(subnet) {
			continue
		}
		if r.link == "" {
			return fmt.Sprintf("the route %s", r.dst)
		}
		return fmt.Sprintf("the route %s dev %s%s", r.dst, r.link, v.whose(r.link, req))
	}
	claims := make([]string, 0, len(v.claims))
	for b := range v.claims {
		claims = append(claims, b)
	}
	slices.Sort(claims)
	for _, b := range claims {
		c := v.claims[b]
		if c.StateDir == req.stateDir || !(c.live || c.recorded) || !c.Subnet.Overlaps(subnet) || (own && b == bridge) {
			continue
		}
		return fmt.Sprintf("%s, reserved for bridge %s%s", c.Subnet, b, v.whose(b, req))
	}
	if picking {
		for _, r := range v.reserved {
			if r.net.Overlaps(subnet) {
				return fmt.Sprintf("%s (%s)", r.net, r.by)
			}
		}
	}
	return ""
}

// whose says which agentbox daemon holds a link, if one does.
func (v hostView) whose(link string, req choiceRequest) string {
	c, ok := v.claims[link]
	switch {
	case !ok || c.StateDir == req.stateDir:
		if v.tables[link] && !ok {
			return " (an agentbox daemon of an older version or another data directory)"
		}
		return ""
	case c.live:
		return fmt.Sprintf(" (the running agentbox daemon with network state %s, pid %d)", c.StateDir, c.PID)
	default:
		return fmt.Sprintf(" (the stopped agentbox daemon with network state %s)", c.StateDir)
	}
}

// suggestBridge names a free bridge for an error message.
func (v hostView) suggestBridge(req choiceRequest) string {
	for i := range autoSlots {
		b, _ := autoSlot(i)
		if v.bridgeHolder(b, req) == "" {
			return " (" + b + " is free)"
		}
	}
	return ""
}

// suggestSubnet names a free subnet for an error message.
func (v hostView) suggestSubnet(req choiceRequest) string {
	for i := range autoSlots {
		_, s := autoSlot(i)
		if v.subnetHolder(s, req.bridge, req, true) == "" {
			return " (" + s.String() + " is free)"
		}
	}
	return ""
}

func addrList(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return ""
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return ", " + strings.Join(s, " ")
}
