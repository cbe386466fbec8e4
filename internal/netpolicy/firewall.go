package netpolicy

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// firewall owns the manager's nftables table. Names of global objects are
// fixed; per-sandbox objects carry the sandbox's address in hex (see
// sandboxKey), which is how Reconcile recognizes them.
type firewall struct {
	table        *nftables.Table
	bridge       string
	bridgeIP     netip.Addr
	subnet       netip.Prefix
	hostPorts    []uint16
	allowPrivate []netip.Prefix
	maxConns     uint32
	hostNets     []netip.Prefix // the host's own networks, denied with the private ranges
	brokerPort   uint16         // 0: no egress broker
}

const (
	setPrivate   = "private4"
	setOpAllow   = "allowprivate4"
	setHostPorts = "hostports"
	setBrokered  = "brokered"        // sandboxes whose HTTP(S) goes to the broker
	mapForward   = "sandbox_forward" // sandbox address -> goto its policy chain
	mapDeny      = "sandbox_deny"    // sandbox address -> goto its reject chain

	chainForward     = "forward"
	chainInput       = "input"
	chainFromSandbox = "from_sandbox"
	chainPrerouting  = "prerouting"
	chainPostrouting = "postrouting"
)

func newFirewall(c Config) *firewall {
	return &firewall{
		table:        &nftables.Table{Name: c.Bridge, Family: nftables.TableFamilyINet},
		bridge:       c.Bridge,
		bridgeIP:     bridgeAddr(c.Subnet),
		subnet:       c.Subnet,
		hostPorts:    c.AllowHostPorts,
		allowPrivate: c.AllowPrivate,
		maxConns:     c.MaxConns,
		brokerPort:   c.BrokerPort,
	}
}

func (f *firewall) set(name string) *nftables.Set {
	return &nftables.Set{Table: f.table, Name: name}
}

// rebuild replaces the whole table in one transaction: the kernel applies
// "add table; delete table; add table; ..." atomically, so packets never see
// a half-built rule set, even when a restarted daemon rebuilds over a live
// table. sandboxes are re-created from the persisted records; addresses the
// DNS filter had learned for them are carried over with their remaining
// lifetime.
func (f *firewall) rebuild(sandboxes map[netip.Addr]policy) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	learned := f.learnedElements(conn, sandboxes)

	conn.AddTable(f.table)
	conn.DelTable(f.table)
	conn.AddTable(f.table)
	if err := f.addGlobal(conn); err != nil {
		return err
	}
	for addr, p := range sandboxes {
		if err := f.addSandbox(conn, addr, p); err != nil {
			return err
		}
		if els := learned[addr]; len(els) > 0 {
			if err := conn.SetAddElements(f.dnsSet(addr), els); err != nil {
				return err
			}
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("install nftables table %s: %w", f.table.Name, err)
	}
	return nil
}

// learnedElements reads the DNS-learned sets of an existing table.
func (f *firewall) learnedElements(conn *nftables.Conn, sandboxes map[netip.Addr]policy) map[netip.Addr][]nftables.SetElement {
	out := map[netip.Addr][]nftables.SetElement{}
	for addr := range sandboxes {
		els, err := conn.GetSetElements(f.dnsSet(addr))
		if err != nil {
			continue
		}
		for _, e := range els {
			if e.Expires > 0 {
				out[addr] = append(out[addr], nftables.SetElement{Key: e.Key, Timeout: e.Expires})
			}
		}
	}
	return out
}

// delete removes the table and everything in it.
func (f *firewall) delete() error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	conn.AddTable(f.table)
	conn.DelTable(f.table)
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("delete nftables table %s: %w", f.table.Name, err)
	}
	return nil
}

func (f *firewall) addGlobal(conn *nftables.Conn) error {
	t := f.table
	sets := []struct {
		s   *nftables.Set
		els []nftables.SetElement
	}{
		{&nftables.Set{Table: t, Name: setPrivate, KeyType: nftables.TypeIPAddr, Interval: true},
			deniedElements(f.hostNets)},
		{&nftables.Set{Table: t, Name: setOpAllow, KeyType: nftables.TypeIPAddr, Interval: true},
			intervalElements(mergePrefixes(f.allowPrivate))},
		{&nftables.Set{Table: t, Name: setHostPorts, KeyType: nftables.TypeInetService}, portElements(f.hostPorts)},
		{&nftables.Set{Table: t, Name: setBrokered, KeyType: nftables.TypeIPAddr}, nil},
		{&nftables.Set{Table: t, Name: mapForward, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict, IsMap: true}, nil},
		{&nftables.Set{Table: t, Name: mapDeny, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict, IsMap: true}, nil},
	}
	for _, s := range sets {
		if err := conn.AddSet(s.s, s.els); err != nil {
			return fmt.Errorf("add set %s: %w", s.s.Name, err)
		}
	}

	policyAccept := nftables.ChainPolicyAccept
	fwd := conn.AddChain(&nftables.Chain{Table: t, Name: chainForward, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &policyAccept})
	in := conn.AddChain(&nftables.Chain{Table: t, Name: chainInput, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &policyAccept})
	fromSB := conn.AddChain(&nftables.Chain{Table: t, Name: chainFromSandbox})
	pre := conn.AddChain(&nftables.Chain{Table: t, Name: chainPrerouting, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &policyAccept})
	post := conn.AddChain(&nftables.Chain{Table: t, Name: chainPostrouting, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &policyAccept})

	br := f.bridge
	ipv4 := matchNfproto(unix.NFPROTO_IPV4)
	add := func(c *nftables.Chain, exprs ...[]expr.Any) {
		conn.AddRule(&nftables.Rule{Table: t, Chain: c, Exprs: concat(exprs...)})
	}
	// reject adds the two rules of a fast rejection after the given matches.
	reject := func(c *nftables.Chain, match ...[]expr.Any) {
		add(c, concat(match...), rejectTCP())
		add(c, concat(match...), one(rejectOther()))
	}

	// Forward: replies of allowed connections pass; sandbox-to-sandbox is
	// rejected; sandbox egress is dispatched to the sandbox's own chain
	// (unknown sources and IPv6 are rejected); nothing may open a connection
	// into a sandbox.
	add(fwd, matchCtEstablished(), one(accept()))
	add(fwd, matchIifname(br), matchOifname(br, true), ipv4, one(loadSaddr(), vmap(mapDeny)))
	reject(fwd, matchIifname(br), matchOifname(br, true))
	add(fwd, matchIifname(br), ipv4, one(loadSaddr(), vmap(mapForward)))
	reject(fwd, matchIifname(br))
	reject(fwd, matchOifname(br, true))

	// Input: from the bridge only DNS to the filter and the operator's host
	// ports are open; the rest of the host is rejected.
	add(in, matchIifname(br), one(jumpChain(chainFromSandbox)))
	add(fromSB, matchCtEstablished(), one(accept()))
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		add(fromSB, ipv4, matchDaddr(f.bridgeIP), matchL4proto(proto), matchDport(53), one(accept()))
		if len(f.hostPorts) > 0 {
			add(fromSB, ipv4, matchL4proto(proto), one(loadDport(), lookupSet(setHostPorts, false), accept()))
		}
	}
	if f.brokerPort != 0 {
		// Connections redirected to the egress broker (below), from the
		// sandboxes it serves.
		add(fromSB, ipv4, matchDaddr(f.bridgeIP), matchL4proto(unix.IPPROTO_TCP), matchDport(f.brokerPort),
			one(loadSaddr(), lookupSet(setBrokered, false), accept()))
	}
	add(fromSB, ipv4, one(loadSaddr(), vmap(mapDeny)))
	reject(fromSB)

	// All sandbox DNS goes to the filter, whichever server it was sent to,
	// so name policy and address learning cannot be bypassed by asking
	// another resolver.
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		add(pre, matchIifname(br), ipv4, matchL4proto(proto), matchDport(53), one(
			&expr.Immediate{Register: 1, Data: ip4Bytes(f.bridgeIP)},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
		))
	}

	// HTTP and HTTPS of sandboxes with egress rules go to the broker,
	// whatever address they were sent to (it reads the original one back
	// with SO_ORIGINAL_DST and applies the sandbox's policy itself), so
	// nothing inside needs proxy settings and nothing can bypass it.
	if f.brokerPort != 0 {
		for _, port := range []uint16{80, 443} {
			add(pre, matchIifname(br), ipv4, one(loadSaddr(), lookupSet(setBrokered, false)),
				matchL4proto(unix.IPPROTO_TCP), matchDport(port), one(
					&expr.Immediate{Register: 1, Data: ip4Bytes(f.bridgeIP)},
					&expr.Immediate{Register: 2, Data: []byte{byte(f.brokerPort >> 8), byte(f.brokerPort)}},
					&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2},
				))
		}
	}

	// Masquerade sandbox traffic leaving through any other interface.
	mask := net4Mask(f.subnet)
	add(post, ipv4, one(
		loadSaddr(),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip4Bytes(f.subnet.Addr())},
	), matchOifname(br, false), one(&expr.Masq{}))
	return nil
}

func net4Mask(p netip.Prefix) []byte {
	m := ^uint32(0) << (32 - p.Bits())
	return ip4Bytes(uintToV4(m))
}

func portElements(ports []uint16) []nftables.SetElement {
	seen := map[uint16]bool{}
	var els []nftables.SetElement
	for _, p := range ports {
		if !seen[p] {
			seen[p] = true
			els = append(els, nftables.SetElement{Key: []byte{byte(p >> 8), byte(p)}})
		}
	}
	return els
}
