package netpolicy

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
)

// Docker sets the FORWARD policy of iptables' filter table to DROP. In
// nftables terms that is a separate base chain on the forward hook, and a
// drop there is final whatever our own table accepts, so sandbox traffic
// needs an explicit accept in Docker's world too. Docker's documented place
// for that is the DOCKER-USER chain, which FORWARD jumps to first. With
// iptables-nft it lives in table "ip filter" and nftables can edit it.
// Our accepts there are broad (anything to or from the bridge): the actual
// policy is enforced by our own table, whose rejections still apply.

const (
	dockerTable = "filter"
	dockerChain = "DOCKER-USER"
)

// dockerComment marks our rules in DOCKER-USER so they can be found again.
func (f *firewall) dockerComment() string { return "agentbox:" + f.bridge }

// syncDockerUser installs (install=true) or removes our accept rules in
// Docker's DOCKER-USER chain. Without that chain it does nothing. It
// reports whether the rules are in place afterwards.
func (f *firewall) syncDockerUser(install bool) (bool, error) {
	conn, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("list ip tables: %w", err)
	}
	var table *nftables.Table
	for _, t := range tables {
		if t.Name == dockerTable {
			table = t
		}
	}
	if table == nil {
		return false, nil
	}
	chains, err := conn.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("list ip chains: %w", err)
	}
	var chain *nftables.Chain
	for _, c := range chains {
		if c.Table.Name == dockerTable && c.Name == dockerChain {
			chain = c
		}
	}
	if chain == nil {
		return false, nil
	}
	rules, err := conn.GetRules(table, chain)
	if err != nil {
		return false, fmt.Errorf("list %s rules: %w", dockerChain, err)
	}
	var ours []*nftables.Rule
	for _, r := range rules {
		if c, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok && c == f.dockerComment() {
			ours = append(ours, r)
		}
	}
	if install && len(ours) == 2 {
		return true, nil
	}
	for _, r := range ours {
		if err := conn.DelRule(r); err != nil {
			return false, err
		}
	}
	if install {
		ud := userdata.AppendString(nil, userdata.TypeComment, f.dockerComment())
		// Inserted at the top, before Docker's own rules (and any RETURN).
		conn.InsertRule(&nftables.Rule{Table: table, Chain: chain, UserData: ud,
			Exprs: concat(matchOifname(f.bridge, true), one(&expr.Verdict{Kind: expr.VerdictAccept}))})
		conn.InsertRule(&nftables.Rule{Table: table, Chain: chain, UserData: ud,
			Exprs: concat(matchIifname(f.bridge), one(&expr.Verdict{Kind: expr.VerdictAccept}))})
	}
	if err := conn.Flush(); err != nil {
		return false, fmt.Errorf("update %s: %w", dockerChain, err)
	}
	return install, nil
}
