package daytona

import (
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func ptr[T any](v T) *T { return &v }

// Daytona's settings onto agentbox's policy and back.
func TestNetworkSettings(t *testing.T) {
	for _, c := range []struct {
		name   string
		base   sandbox.Network
		in     netSettings
		egress bool
		want   sandbox.Network
		view   daytonaNetwork
	}{
		{name: "block all", in: netSettings{NetworkBlockAll: ptr(true)}, egress: true,
			want: sandbox.Network{Mode: sandbox.NetworkEgress, DenyOut: []string{denyAll}}, view: daytonaNetwork{blockAll: true}},
		{name: "block all without egress", in: netSettings{NetworkBlockAll: ptr(true)},
			want: sandbox.Network{Mode: sandbox.NetworkNone}, view: daytonaNetwork{blockAll: true}},
		{name: "cidrs and domains", in: netSettings{NetworkAllowList: ptr("10.1.2.3/8, 198.18.77.1"), DomainAllowList: ptr("api.test,*.x.test")}, egress: true,
			want: sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: []string{"10.0.0.0/8", "198.18.77.1/32", "api.test", "*.x.test"}},
			view: daytonaNetwork{cidrs: []string{"10.0.0.0/8", "198.18.77.1/32"}, domains: []string{"api.test", "*.x.test"}}},
		{name: "unblock clears the lists, keeps rules and other denies",
			base: sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: []string{"api.test"}, DenyOut: []string{"10.0.0.0/8", denyAll},
				Rules: []sandbox.EgressRule{{Host: "api.test"}}},
			in: netSettings{NetworkBlockAll: ptr(false)}, egress: true,
			want: sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: []string{}, DenyOut: []string{"10.0.0.0/8"}, Rules: []sandbox.EgressRule{{Host: "api.test"}}}},
		{name: "a list alone replaces that list and unblocks",
			base: sandbox.Network{Mode: sandbox.NetworkEgress, DenyOut: []string{denyAll}},
			in:   netSettings{DomainAllowList: ptr("api.test")}, egress: true,
			want: sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: []string{"api.test"}}, view: daytonaNetwork{domains: []string{"api.test"}}},
	} {
		v, err := networkView(c.base).apply(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := v.policy(c.base, c.egress)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: policy %+v, want %+v", c.name, got, c.want)
		}
		if back := networkView(got); c.view.blockAll != back.blockAll || !reflect.DeepEqual(c.view.cidrs, back.cidrs) || !reflect.DeepEqual(c.view.domains, back.domains) {
			t.Errorf("%s: view %+v, want %+v", c.name, back, c.view)
		}
	}
	for _, bad := range []netSettings{{NetworkAllowList: ptr("nonsense")}, {NetworkAllowList: ptr("2001:db8::/32")}, {DomainAllowList: ptr("10.0.0.0/8")}} {
		if _, err := (daytonaNetwork{}).apply(bad); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("%+v: %v, want invalid", bad, err)
		}
	}
}
