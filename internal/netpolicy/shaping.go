package netpolicy

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// shape installs a token bucket filter as the root qdisc of link, limiting
// what link transmits to bits per second. On the host end of a sandbox's
// veth that is the sandbox's download; on the sandbox's eth0 it is the
// upload. (Shaping the sandbox side needs no ingress policer or IFB device,
// and the sandbox cannot remove it: it has no capability in its namespace.)
func shape(replace func(netlink.Qdisc) error, link netlink.Link, bits uint64) error {
	rate := bits / 8 // bytes per second
	if rate == 0 {
		rate = 1
	}
	// Burst: 20 ms at full rate, at least a few full-size packets so GSO
	// segments and TCP's initial window are not dropped outright.
	burst := max(rate/50, 32<<10)
	// Queue: up to 100 ms of traffic waits before tail drop.
	limit := burst + max(rate/10, 16<<10)
	q := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: link.Attrs().Index,
			Handle:    netlink.MakeHandle(1, 0),
			Parent:    netlink.HANDLE_ROOT,
		},
		Rate:   rate,
		Limit:  uint32(min(limit, 1<<31)),
		Buffer: netlink.Xmittime(rate, uint32(min(burst, 1<<31))),
	}
	if err := replace(q); err != nil {
		return fmt.Errorf("rate-limit %s: %w", link.Attrs().Name, err)
	}
	return nil
}
