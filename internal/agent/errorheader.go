package agent

import "connectrpc.com/connect"

// ErrorExecutableNotFound is ErrorHeader's value when a process cannot
// start because its executable does not exist (not in PATH, or no such
// file): clients tell it from other invalid arguments without reading the
// message (agentclient.ErrExecutableNotFound).
const ErrorExecutableNotFound = "executable-not-found"

// executableNotFound qualifies err, the refusal of a start whose
// executable does not exist, with ErrorHeader.
func executableNotFound(err *connect.Error) *connect.Error {
	err.Meta().Set(ErrorHeader, ErrorExecutableNotFound)
	return err
}
