package netpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// stateFile is the persistent record of a manager: which sandbox has which
// address and policy. It is what makes addresses stable across daemon
// restarts and lets New rebuild the firewall and DNS policy.
type stateFile struct {
	Version int `json:"version"`
	// Bridge and Subnet are what the manager of this state directory uses:
	// it picks them again on its next start (choose.go), and other managers
	// leave a bridge alone while its owner's state names it.
	Bridge    string                       `json:"bridge,omitempty"`
	Subnet    netip.Prefix                 `json:"subnet"`
	Sandboxes map[sandbox.ID]sandboxRecord `json:"sandboxes"`
	// NetnsDirBound records that New bind-mounted the namespace directory
	// on itself, so Close(true) knows to undo it even after a restart.
	NetnsDirBound bool `json:"netns_dir_bound,omitempty"`
}

type sandboxRecord struct {
	Addr    netip.Addr      `json:"addr"`
	Network sandbox.Network `json:"network"`
}

const stateVersion = 1

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// loadState reads the state file, returning an empty state when there is
// none. A state written for another bridge or subnet is discarded: its
// addresses are meaningless now, and Reconcile removes what it described.
// (A file of an older version names no bridge; its subnet decides.)
func loadState(dir, bridge string, subnet netip.Prefix) (*stateFile, error) {
	st := &stateFile{Version: stateVersion, Bridge: bridge, Subnet: subnet, Sandboxes: map[sandbox.ID]sandboxRecord{}}
	b, err := os.ReadFile(statePath(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read network state: %w", err)
	}
	var old stateFile
	if err := json.Unmarshal(b, &old); err != nil {
		return nil, fmt.Errorf("parse network state %s: %w", statePath(dir), err)
	}
	sameBridge := old.Bridge == "" || old.Bridge == bridge
	if sameBridge {
		st.NetnsDirBound = old.NetnsDirBound
	}
	if old.Subnet != subnet || !sameBridge {
		return st, nil
	}
	for id, r := range old.Sandboxes {
		if id.Validate() == nil && subnet.Contains(r.Addr) {
			st.Sandboxes[id] = r
		}
	}
	return st, nil
}

// save writes the state atomically (temp file + rename) so a crash never
// leaves a torn file behind.
func (st *stateFile) save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := statePath(dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write network state: %w", err)
	}
	if err := os.Rename(tmp, statePath(dir)); err != nil {
		return fmt.Errorf("write network state: %w", err)
	}
	return nil
}

// allocate returns the lowest free address of the subnet, skipping the
// network address, the bridge address (first host) and the broadcast address.
func (st *stateFile) allocate() (netip.Addr, error) {
	used := make(map[netip.Addr]bool, len(st.Sandboxes))
	for _, r := range st.Sandboxes {
		used[r.Addr] = true
	}
	first := v4ToUint(st.Subnet.Addr())
	size := uint32(1) << (32 - st.Subnet.Bits())
	for off := uint32(2); off < size-1; off++ {
		a := uintToV4(first + off)
		if !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, sandbox.Errorf(sandbox.ClassUnavailable, "network subnet %s is full", st.Subnet)
}

// bridgeAddr is the first host address of the subnet.
func bridgeAddr(subnet netip.Prefix) netip.Addr {
	return subnet.Masked().Addr().Next()
}
