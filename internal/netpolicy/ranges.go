package netpolicy

import (
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// privateRanges are the IPv4 ranges a sandbox may never reach unless the
// operator allows them: "this network", RFC 1918, CGNAT, loopback,
// link-local (cloud metadata lives at 169.254.169.254), multicast and
// reserved. The sandbox subnet itself is usually inside 10/8.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// PrivateRanges returns (a copy of) the ranges a sandbox never reaches
// unless the operator allows them: other backends that enforce native's
// egress policy their own way (the kube backend's NetworkPolicy) block the
// same ones.
func PrivateRanges() []netip.Prefix { return slices.Clone(privateRanges) }

// ipRange is an inclusive range of IPv4 addresses as integers.
type ipRange struct{ first, last uint32 }

func v4ToUint(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func uintToV4(u uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], u)
	return netip.AddrFrom4(b)
}

// mergePrefixes turns IPv4 prefixes into sorted, non-overlapping,
// non-adjacent ranges: nftables interval sets reject overlapping elements.
func mergePrefixes(ps []netip.Prefix) []ipRange {
	rs := make([]ipRange, 0, len(ps))
	for _, p := range ps {
		if !p.Addr().Is4() {
			continue
		}
		p = p.Masked()
		first := v4ToUint(p.Addr())
		size := uint64(1) << (32 - p.Bits())
		rs = append(rs, ipRange{first, uint32(uint64(first) + size - 1)})
	}
	slices.SortFunc(rs, func(a, b ipRange) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	var out []ipRange
	for _, r := range rs {
		if n := len(out); n > 0 && uint64(r.first) <= uint64(out[n-1].last)+1 {
			out[n-1].last = max(out[n-1].last, r.last)
			continue
		}
		out = append(out, r)
	}
	return out
}

// intervalElements encodes ranges for an nftables interval set: a start
// element and an end marker one past the last address. A range reaching
// 255.255.255.255 has no end marker; the interval then runs to the top.
func intervalElements(rs []ipRange) []nftables.SetElement {
	els := make([]nftables.SetElement, 0, 2*len(rs))
	for _, r := range rs {
		els = append(els, nftables.SetElement{Key: ip4Bytes(uintToV4(r.first))})
		if r.last != ^uint32(0) {
			els = append(els, nftables.SetElement{Key: ip4Bytes(uintToV4(r.last + 1)), IntervalEnd: true})
		}
	}
	return els
}

func ip4Bytes(a netip.Addr) []byte {
	b := a.As4()
	return b[:]
}
