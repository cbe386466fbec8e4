package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
)

// fwInventory is what per-sandbox objects exist in the table, by the
// address they belong to.
type fwInventory struct {
	present map[string]bool // "set:NAME", "chain:NAME", "counter:NAME", "map:KEY"
	addrs   map[netip.Addr]bool
}

// inventory lists the per-sandbox objects of the table.
func (f *firewall) inventory(conn *nftables.Conn) (fwInventory, error) {
	inv := fwInventory{present: map[string]bool{}, addrs: map[netip.Addr]bool{}}
	note := func(kind, name string) {
		inv.present[kind+":"+name] = true
		if a, ok := keyAddr(name); ok {
			inv.addrs[a] = true
		}
	}
	sets, err := conn.GetSets(f.table)
	if err != nil {
		return inv, fmt.Errorf("list sets: %w", err)
	}
	for _, s := range sets {
		note("set", s.Name)
	}
	chains, err := conn.ListChainsOfTableFamily(f.table.Family)
	if err != nil {
		return inv, fmt.Errorf("list chains: %w", err)
	}
	for _, c := range chains {
		if c.Table.Name == f.table.Name {
			note("chain", c.Name)
		}
	}
	objs, err := conn.GetObjects(f.table)
	if err != nil {
		return inv, fmt.Errorf("list objects: %w", err)
	}
	for _, o := range objs {
		if c, ok := o.(*nftables.CounterObj); ok {
			note("counter", c.Name)
		}
	}
	els, err := conn.GetSetElements(&nftables.Set{Table: f.table, Name: mapForward, KeyType: nftables.TypeIPAddr,
		DataType: nftables.TypeVerdict, IsMap: true})
	if err != nil {
		return inv, fmt.Errorf("list %s: %w", mapForward, err)
	}
	for _, e := range els {
		if len(e.Key) == 4 {
			a := netip.AddrFrom4([4]byte(e.Key))
			inv.present["map:"+sandboxKey(a)] = true
			inv.addrs[a] = true
		}
	}
	return inv, nil
}

// removeSandboxes deletes the firewall objects of the given sandboxes in
// one transaction. The common case (everything present) needs no listing;
// if that transaction fails because something is missing, it lists what
// exists and deletes only that.
func (f *firewall) removeSandboxes(addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return nil
	}
	all := fwInventory{present: map[string]bool{}}
	for _, a := range addrs {
		for _, n := range []string{"set:" + allowSetName(a), "set:" + denySetName(a), "set:" + dnsSetName(a),
			"chain:" + policyChainName(a), "chain:" + rejectChainName(a), "counter:" + counterName(a), "map:" + sandboxKey(a)} {
			all.present[n] = true
		}
	}
	err := f.removeWith(addrs, all)
	if err == nil {
		return nil
	}
	conn, cerr := nftables.New()
	if cerr != nil {
		return errors.Join(err, cerr)
	}
	inv, ierr := f.inventory(conn)
	if ierr != nil {
		return errors.Join(err, ierr)
	}
	return f.removeWith(addrs, inv)
}

func (f *firewall) removeWith(addrs []netip.Addr, inv fwInventory) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	for _, a := range addrs {
		if err := f.delSandbox(conn, a, inv.present); err != nil {
			return err
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("remove firewall objects: %w", err)
	}
	return nil
}

// denials reads a sandbox's denial counter.
func (f *firewall) denials(a netip.Addr) (uint64, error) {
	conn, err := nftables.New()
	if err != nil {
		return 0, err
	}
	o, err := conn.GetObject(&nftables.CounterObj{Table: f.table, Name: counterName(a)})
	if err != nil {
		return 0, err
	}
	c, ok := o.(*nftables.CounterObj)
	if !ok {
		return 0, fmt.Errorf("object %s is not a counter", counterName(a))
	}
	return c.Packets, nil
}

// allDenials reads every sandbox's denial counter in one dump.
func (f *firewall) allDenials() (map[netip.Addr]uint64, error) {
	conn, err := nftables.New()
	if err != nil {
		return nil, err
	}
	objs, err := conn.GetObjects(f.table)
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]uint64{}
	for _, o := range objs {
		if c, ok := o.(*nftables.CounterObj); ok {
			if a, ok := keyAddr(c.Name); ok {
				out[a] = c.Packets
			}
		}
	}
	return out, nil
}
