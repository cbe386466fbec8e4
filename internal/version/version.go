// Package version holds the build's version, commit and date (set with
// -ldflags -X by the Makefile).
package version

import (
	"runtime"
	"runtime/debug"
)

var (
	// Version is the agentbox version; "dev" for untagged builds.
	Version = "dev"
	// Commit is the git commit the binary was built from (git rev-parse
	// HEAD); empty when not set, then Get reads it from the Go toolchain's
	// VCS stamp if there is one.
	Commit = ""
	// Date is when the binary was built, RFC 3339 in UTC (the Makefile
	// takes SOURCE_DATE_EPOCH when set, for reproducible builds).
	Date = ""
)

// Info describes the build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Get returns the build's description; unknown fields are "unknown".
func Get() Info {
	info := Info{Version: Version, Commit: Commit, Date: Date, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info.Commit == "" {
		info.Commit = vcsCommit()
	}
	for _, f := range []*string{&info.Commit, &info.Date} {
		if *f == "" {
			*f = "unknown"
		}
	}
	return info
}

// vcsCommit is the commit go build stamped into the binary ("-dirty"
// when the tree had changes), "" without one.
func vcsCommit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
