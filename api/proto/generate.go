// Package proto holds the agent protocol: E2B envd's process and filesystem
// services (see process/ and filesystem/) and the code generated from them.
package proto

//go:generate ./generate.sh
