package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// Per-sandbox nftables objects, all named <kind>_<addr as 8 hex digits>:
//
//	set allow_K   AllowOut CIDRs (interval)
//	set deny_K    DenyOut CIDRs (interval)
//	set dns_K     addresses the DNS filter returned for allowed names (timeouts)
//	counter denied_K
//	chain reject_K  counts, then rejects
//	chain policy_K  the egress decision
//
// plus one element in each of the sandbox_forward and sandbox_deny maps.

func sandboxKey(a netip.Addr) string { return fmt.Sprintf("%08x", v4ToUint(a)) }

// keyAddr parses the address back out of an object name; ok is false for
// names that are not per-sandbox objects.
func keyAddr(name string) (netip.Addr, bool) {
	i := strings.LastIndexByte(name, '_')
	if i < 0 || len(name)-i-1 != 8 {
		return netip.Addr{}, false
	}
	switch name[:i] {
	case "allow", "deny", "dns", "denied", "reject", "policy":
	default:
		return netip.Addr{}, false
	}
	u, err := strconv.ParseUint(name[i+1:], 16, 32)
	if err != nil {
		return netip.Addr{}, false
	}
	return uintToV4(uint32(u)), true
}

func allowSetName(a netip.Addr) string    { return "allow_" + sandboxKey(a) }
func denySetName(a netip.Addr) string     { return "deny_" + sandboxKey(a) }
func dnsSetName(a netip.Addr) string      { return "dns_" + sandboxKey(a) }
func counterName(a netip.Addr) string     { return "denied_" + sandboxKey(a) }
func rejectChainName(a netip.Addr) string { return "reject_" + sandboxKey(a) }
func policyChainName(a netip.Addr) string { return "policy_" + sandboxKey(a) }

// addSandbox queues the creation of a sandbox's objects and map entries.
func (f *firewall) addSandbox(conn *nftables.Conn, a netip.Addr, p policy) error {
	t := f.table
	for _, s := range []*nftables.Set{
		{Table: t, Name: allowSetName(a), KeyType: nftables.TypeIPAddr, Interval: true},
		{Table: t, Name: denySetName(a), KeyType: nftables.TypeIPAddr, Interval: true},
		{Table: t, Name: dnsSetName(a), KeyType: nftables.TypeIPAddr, HasTimeout: true},
	} {
		if err := conn.AddSet(s, nil); err != nil {
			return fmt.Errorf("add set %s: %w", s.Name, err)
		}
	}
	conn.AddObj(&nftables.CounterObj{Table: t, Name: counterName(a)})

	rej := conn.AddChain(&nftables.Chain{Table: t, Name: rejectChainName(a)})
	conn.AddRule(&nftables.Rule{Table: t, Chain: rej, Exprs: one(counterRef(counterName(a)))})
	conn.AddRule(&nftables.Rule{Table: t, Chain: rej, Exprs: rejectTCP()})
	conn.AddRule(&nftables.Rule{Table: t, Chain: rej, Exprs: one(rejectOther())})

	conn.AddChain(&nftables.Chain{Table: t, Name: policyChainName(a)})
	if err := f.setPolicy(conn, a, p, false); err != nil {
		return err
	}

	key := ip4Bytes(a)
	if err := conn.SetAddElements(f.set(mapForward), []nftables.SetElement{{Key: key,
		VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: policyChainName(a)}}}); err != nil {
		return err
	}
	return conn.SetAddElements(f.set(mapDeny), []nftables.SetElement{{Key: key,
		VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: rejectChainName(a)}}})
}

// setPolicy queues (re)writing a sandbox's policy: its CIDR sets and the
// rules of its policy chain. With replace, the old contents are flushed
// first, including the DNS-learned addresses (the allowed names may have
// changed; the sandbox re-resolves).
func (f *firewall) setPolicy(conn *nftables.Conn, a netip.Addr, p policy, replace bool) error {
	t := f.table
	allow, deny, dns := f.set(allowSetName(a)), f.set(denySetName(a)), f.set(dnsSetName(a))
	chain := &nftables.Chain{Table: t, Name: policyChainName(a)}
	if replace {
		conn.FlushSet(allow)
		conn.FlushSet(deny)
		conn.FlushSet(dns)
		conn.FlushChain(chain)
	}
	if els := intervalElements(mergePrefixes(p.allowNets)); len(els) > 0 {
		if err := conn.SetAddElements(allow, els); err != nil {
			return err
		}
	}
	if els := intervalElements(mergePrefixes(p.denyNets)); len(els) > 0 {
		if err := conn.SetAddElements(deny, els); err != nil {
			return err
		}
	}

	brokered := []nftables.SetElement{{Key: ip4Bytes(a)}}
	// Adding an element that is there is no error, deleting a missing one
	// fails the transaction: add, then delete when the sandbox has no rules.
	if p.broker || replace {
		if err := conn.SetAddElements(f.set(setBrokered), brokered); err != nil {
			return err
		}
	}
	if !p.broker && replace {
		if err := conn.SetDeleteElements(f.set(setBrokered), brokered); err != nil {
			return err
		}
	}

	rej := gotoChain(rejectChainName(a))
	add := func(exprs ...expr.Any) {
		conn.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: exprs})
	}
	// Order matters: the sandbox's deny list wins, then the private ranges
	// (which no per-sandbox allow entry can open), then the connection cap,
	// then the allow decision.
	add(loadDaddr(), lookupSet(denySetName(a), false), rej)
	add(loadDaddr(), lookupSet(setPrivate, false), lookupSet(setOpAllow, true), rej)
	if f.maxConns > 0 {
		add(&expr.Connlimit{Count: f.maxConns, Flags: expr.NFT_CONNLIMIT_F_INV}, rej)
	}
	if p.open {
		add(accept())
		return nil
	}
	add(loadDaddr(), lookupSet(allowSetName(a), false), accept())
	add(loadDaddr(), lookupSet(dnsSetName(a), false), accept())
	add(rej)
	return nil
}

// delSandbox queues the removal of a sandbox's objects. Every step is
// guarded by a listing (see present) because one missing object would fail
// the whole transaction.
func (f *firewall) delSandbox(conn *nftables.Conn, a netip.Addr, present map[string]bool) error {
	t := f.table
	key := ip4Bytes(a)
	if present["map:"+sandboxKey(a)] {
		brokered := []nftables.SetElement{{Key: key}}
		if err := conn.SetAddElements(f.set(setBrokered), brokered); err != nil {
			return err
		}
		if err := conn.SetDeleteElements(f.set(setBrokered), brokered); err != nil {
			return err
		}
		if err := conn.SetDeleteElements(f.set(mapForward), []nftables.SetElement{{Key: key}}); err != nil {
			return err
		}
		if err := conn.SetDeleteElements(f.set(mapDeny), []nftables.SetElement{{Key: key}}); err != nil {
			return err
		}
	}
	// The policy chain refers to the reject chain and the sets: delete it
	// first (deleting a chain deletes its rules).
	for _, c := range []string{policyChainName(a), rejectChainName(a)} {
		if present["chain:"+c] {
			conn.DelChain(&nftables.Chain{Table: t, Name: c})
		}
	}
	for _, s := range []string{allowSetName(a), denySetName(a), dnsSetName(a)} {
		if present["set:"+s] {
			conn.DelSet(f.set(s))
		}
	}
	if present["counter:"+counterName(a)] {
		conn.DeleteObject(&nftables.CounterObj{Table: t, Name: counterName(a)})
	}
	return nil
}

// dnsSet describes a sandbox's set of learned addresses; HasTimeout makes
// the library send per-element timeouts.
func (f *firewall) dnsSet(a netip.Addr) *nftables.Set {
	return &nftables.Set{Table: f.table, Name: dnsSetName(a), KeyType: nftables.TypeIPAddr, HasTimeout: true}
}

// learn adds addresses returned by the DNS filter to a sandbox's dns set.
func (f *firewall) learn(a netip.Addr, addrs []learnedAddr) error {
	if len(addrs) == 0 {
		return nil
	}
	conn, err := nftables.New()
	if err != nil {
		return err
	}
	els := make([]nftables.SetElement, 0, len(addrs))
	for _, l := range addrs {
		els = append(els, nftables.SetElement{Key: ip4Bytes(l.addr), Timeout: l.ttl})
	}
	if err := conn.SetAddElements(f.dnsSet(a), els); err != nil {
		return err
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("add learned addresses for %s: %w", a, err)
	}
	return nil
}
