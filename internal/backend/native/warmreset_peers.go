package native

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The kernel's tcp_metrics generic netlink family (linux/tcp_metrics.h).
const (
	tcpMetricsFamily  = "tcp_metrics"
	tcpMetricsVersion = 1
	tcpMetricsCmdDel  = 2
)

// forgetPeers clears what the calling thread's network namespace remembers
// of the hosts its sockets talked to, which any process of the namespace
// may list without privileges: the TCP metrics cache (`ip tcp_metrics`:
// every peer a connection closed to, with its round trip time) and the
// route exceptions (`ip route show cache`: PMTU and redirects learned per
// destination). A warm reset calls it once the previous user's processes
// and sockets are gone.
func forgetPeers() error {
	fam, err := netlink.GenlFamilyGet(tcpMetricsFamily)
	switch {
	case errors.Is(err, unix.ENOENT):
		// A kernel without TCP metrics keeps none.
	case err != nil:
		return fmt.Errorf("find the tcp_metrics netlink family: %w", err)
	default:
		// A delete naming no address flushes the whole cache.
		req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_ACK)
		req.AddData(&nl.Genlmsg{Command: tcpMetricsCmdDel, Version: tcpMetricsVersion})
		if _, err := req.Execute(unix.NETLINK_GENERIC, 0); err != nil {
			return fmt.Errorf("flush the TCP metrics cache: %w", err)
		}
	}
	// /proc/sys/net is the opening thread's network namespace's.
	for _, f := range []string{"/proc/sys/net/ipv4/route/flush", "/proc/sys/net/ipv6/route/flush"} {
		err := os.WriteFile(f, []byte("1"), 0)
		if err != nil && !(errors.Is(err, os.ErrNotExist) && f != "/proc/sys/net/ipv4/route/flush") {
			return fmt.Errorf("flush the route cache (%s): %w", f, err)
		}
	}
	return nil
}
