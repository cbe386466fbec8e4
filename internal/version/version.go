// Package version holds the build's version string (set with -ldflags -X).
package version

// Version is the agentbox version; "dev" for untagged builds.
var Version = "dev"
