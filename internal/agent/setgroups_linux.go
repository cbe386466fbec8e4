package agent

import (
	"os"
	"strings"
	"sync"
)

// setgroupsDenied reports whether setgroups(2) is disabled in our user
// namespace (/proc/self/setgroups says "deny"). Then children and fs
// threads keep the agent's groups, because trying would fail with EPERM.
var setgroupsDenied = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/proc/self/setgroups")
	return err == nil && strings.TrimSpace(string(b)) == "deny"
})
