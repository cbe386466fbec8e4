package netpolicy

import "testing"

func TestSmoke(t *testing.T) {
	n := newTestNet(t)
	m := n.newManager(n.config())
	_, path := setup(t, m, sandboxNetwork(nil, nil))
	body, err := get(path, n.serverIP)
	t.Logf("body=%q err=%v", body, err)
	rc, addrs, err := resolve(path, m.BridgeIP(), "allowed.test")
	t.Logf("rc=%v addrs=%v err=%v", rc, addrs, err)
}
