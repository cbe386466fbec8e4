// Package netpolicy gives sandboxes of the native backend a network: one
// network namespace per sandbox, attached by a veth pair to a host bridge,
// NATed to the host's uplink, and filtered by a per-sandbox egress policy
// that can change while the sandbox runs.
//
// # Topology
//
// The host owns a bridge holding the first address of the sandbox subnet.
// Unless configured, both are picked: agentbox<N> with 10.(88+N).0.0/16, the
// one this state directory used last, else the first whose name is free and
// whose subnet overlaps nothing on the host (choose.go), so several daemons
// run side by side with default settings. Each sandbox gets a named network
// namespace bind-mounted at <NetnsDir>/<id>, a veth pair whose host end is an
// isolated port of the bridge, and one /32 address on its eth0 with an on-link
// default route through the bridge address. The /32 forces every packet,
// including packets for other sandboxes, through the host's forward path,
// where the policy sees it: sandboxes never talk to each other on layer 2.
//
// # Policy
//
// One nftables table (family inet, named after the bridge) holds the rules.
// Packets from a sandbox are dispatched on their source address to that
// sandbox's chain. In order:
//
//   - the sandbox's DenyOut CIDRs are rejected;
//   - private, loopback, link-local (incl. 169.254.169.254), CGNAT,
//     multicast and reserved IPv4 ranges, and the networks of the host's
//     own interfaces (hostnets.go), are rejected unless the operator
//     listed them in Config.AllowPrivate;
//   - with a connection limit, new connections beyond it are rejected;
//   - with an empty AllowOut everything else is accepted; otherwise only the
//     AllowOut CIDRs and the addresses the DNS filter handed out for allowed
//     names (kept for the record's TTL in an nft set with timeouts).
//
// Traffic to the host itself (any address) is rejected except DNS to the
// bridge address and the operator's Config.AllowHostPorts. Sandbox-to-sandbox
// traffic is rejected. Rejections answer with a TCP reset or ICMP
// administratively-prohibited so clients fail at once, and are counted per
// sandbox (Manager.Denials).
//
// IPv6 is not supported: sandboxes get no IPv6 address, IPv6 is disabled in
// their namespace, and any IPv6 packet from the bridge is rejected.
//
// # DNS
//
// A DNS filter listens on the bridge address (UDP and TCP port 53); all
// sandbox DNS traffic, whatever server it was sent to, is redirected to it.
// It identifies the sandbox by source address, answers NXDOMAIN for names the
// policy does not allow, and forwards the others to the upstream resolvers.
// Domain entries are exact names ("example.org") or wildcards
// ("*.example.org", any name below example.org but not example.org itself).
// A denied name only stops resolution: with an empty AllowOut a sandbox can
// still reach the addresses behind a denied name if it knows them.
//
// Policy changes (Manager.UpdatePolicy) apply to new connections; flows
// already established keep going. The connection cap counts from the last
// policy change.
//
// # Host requirements
//
// Root (CAP_NET_ADMIN, CAP_SYS_ADMIN), a kernel with nf_tables (inet family,
// reject, nat/masquerade, ct, connlimit, objref), veth, bridge and the tbf
// qdisc. New sets net.ipv4.ip_forward=1 (and the last Close(true) restores
// 0 if it was 0). No command-line tool is used. With Docker (iptables-nft) present,
// two accept rules for the bridge go into DOCKER-USER; with iptables-legacy
// Docker rules are invisible to nftables and forwarding must be allowed by
// the operator.
//
// # Lifetime
//
// Allocations (sandbox -> address, policy) and the bridge and subnet live
// in a JSON file in Config.StateDir so a restarted daemon gets its bridge
// back and keeps addresses stable. New rebuilds the nftables table from
// that file atomically; Reconcile removes whatever belongs to sandboxes
// that are no longer alive.
//
// # Several managers on one host
//
// Everything global is per bridge: the nftables table is named after it,
// the DOCKER-USER rules carry it in their comment, the DNS filter listens on
// its address, veths carry their (per-subnet) address. A claim file per
// bridge in /run/agentbox/net names the owner's state directory and is
// locked while the owner runs; a manager never adopts, rebuilds or removes
// a bridge (or its table) that another state directory claims or that no
// claim explains, and Close(true) removes only its own. IP forwarding,
// shared by all, is turned back off only by the last agentbox network to
// close, and only if agentbox turned it on.
package netpolicy
