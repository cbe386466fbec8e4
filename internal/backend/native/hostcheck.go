package native

import (
	"errors"
	"strings"
)

// CheckIDRanges reports whether the sandboxes' host id ranges, count
// ranges of 65536 ids from base (SANDBOX_ID_BASE, SANDBOX_ID_RANGES), fit
// in 32 bits and lie clear of every account and subordinate id range in
// the passwd, group, subuid and subgid files of etc and of the ranges its
// login.defs lets useradd allocate from: the check New makes as root.
// agentbox doctor runs it against the host's /etc (or a test's tree).
func CheckIDRanges(etc string, base, count uint32) error {
	if err := validateIDRanges(etc, base, count); err != nil {
		// The caller names the component; "native: " is New's prefix.
		return errors.New(strings.TrimPrefix(err.Error(), "native: "))
	}
	return nil
}
