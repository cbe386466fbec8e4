package netpolicy

import (
	"net/netip"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Small builders for the nftables expressions the rules use. Every match
// loads into register 1 and compares; a rule is a concatenation of them.

// ifname pads an interface name to IFNAMSIZ, the width meta iifname loads.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func matchIifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

func matchOifname(name string, eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: ifname(name)},
	}
}

func matchNfproto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

func matchL4proto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// loadSaddr / loadDaddr load the IPv4 source / destination address. Only
// valid after matchNfproto(NFPROTO_IPV4) in an inet table.
func loadSaddr() expr.Any {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
}

func loadDaddr() expr.Any {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}
}

func matchDaddr(a netip.Addr) []expr.Any {
	return []expr.Any{loadDaddr(), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip4Bytes(a)}}
}

// matchDport compares the transport destination port (TCP and UDP share
// the offset).
func matchDport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(port >> 8), byte(port)}},
	}
}

func loadDport() expr.Any {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
}

// lookupSet matches when register 1 is (or with invert, is not) in set.
func lookupSet(set string, invert bool) expr.Any {
	return &expr.Lookup{SourceRegister: 1, SetName: set, Invert: invert}
}

// vmap looks register 1 up in a verdict map and applies the verdict found.
func vmap(set string) expr.Any {
	return &expr.Lookup{SourceRegister: 1, SetName: set, DestRegister: 0, IsDestRegSet: true}
}

func matchCtEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: nativeU32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: nativeU32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: nativeU32(0)},
	}
}

// nativeU32 encodes v in host byte order, the order of ct state.
func nativeU32(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }

func accept() expr.Any { return &expr.Verdict{Kind: expr.VerdictAccept} }
func gotoChain(name string) expr.Any {
	return &expr.Verdict{Kind: expr.VerdictGoto, Chain: name}
}
func jumpChain(name string) expr.Any {
	return &expr.Verdict{Kind: expr.VerdictJump, Chain: name}
}

// rejectFast answers TCP with a reset and everything else with ICMP
// "administratively prohibited", so the sandbox's client fails at once
// instead of waiting for a timeout.
func rejectTCP() []expr.Any {
	return append(matchL4proto(unix.IPPROTO_TCP), &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
}

func rejectOther() expr.Any {
	return &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
}

// counterRef increments the named counter object.
func counterRef(name string) expr.Any {
	return &expr.Objref{Type: 1 /* NFT_OBJECT_COUNTER */, Name: name}
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func one(e ...expr.Any) []expr.Any { return e }
