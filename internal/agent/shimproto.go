package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// The request the agent sends an exec shim, after its uint32 length (see
// ShimArg), in one layout for the Go shim and agentbox-shim (C, cmd/
// agentbox-shim): little-endian integers, then NUL-terminated strings.
//
//	byte     version (shimRequestVersion)
//	byte     flags (shimFlag*)
//	2 bytes  zero
//	uint32   uid, gid (with shimFlagCred)
//	uint32   number of supplementary groups, of argv entries, of env entries
//	uint32   each group
//	strings  path, dir, each argv entry, each env entry

const (
	shimRequestVersion = 1
	shimRequestHeader  = 24
	shimMaxGroups      = 65536

	shimFlagPTY         = 1
	shimFlagCred        = 2
	shimFlagNoSetgroups = 4
)

// encode lays req out for the wire. Strings cannot hold NUL bytes (exec
// could not pass them either): such a request is refused with EINVAL.
func (req shimRequest) encode() ([]byte, error) {
	strs := make([]string, 0, 2+len(req.Argv)+len(req.Env))
	strs = append(append(append(strs, req.Path, req.Dir), req.Argv...), req.Env...)
	size := shimRequestHeader + 4*len(req.Groups)
	for _, s := range strs {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("argument or environment with a NUL byte: %w", unix.EINVAL)
		}
		size += len(s) + 1
	}
	if len(req.Argv) == 0 {
		return nil, fmt.Errorf("empty argv: %w", unix.EINVAL)
	}
	if len(req.Groups) > shimMaxGroups {
		return nil, fmt.Errorf("%d supplementary groups: %w", len(req.Groups), unix.EINVAL)
	}
	if size > shimMaxRequest {
		return nil, fmt.Errorf("command line and environment too large (%d bytes): %w", size, unix.E2BIG)
	}
	b := make([]byte, shimRequestHeader, size)
	b[0] = shimRequestVersion
	if req.PTY {
		b[1] |= shimFlagPTY
	}
	if req.Cred {
		b[1] |= shimFlagCred
	}
	if req.NoSetg {
		b[1] |= shimFlagNoSetgroups
	}
	le := binary.LittleEndian
	le.PutUint32(b[4:], req.UID)
	le.PutUint32(b[8:], req.GID)
	le.PutUint32(b[12:], uint32(len(req.Groups)))
	le.PutUint32(b[16:], uint32(len(req.Argv)))
	le.PutUint32(b[20:], uint32(len(req.Env)))
	for _, g := range req.Groups {
		b = le.AppendUint32(b, g)
	}
	for _, s := range strs {
		b = append(append(b, s...), 0)
	}
	return b, nil
}

var errShimRequest = errors.New("malformed exec shim request")

// decodeShimRequest reads what encode wrote, checking every count against
// what the buffer can hold.
func decodeShimRequest(b []byte) (shimRequest, error) {
	var req shimRequest
	if len(b) < shimRequestHeader || b[0] != shimRequestVersion {
		return req, errShimRequest
	}
	le := binary.LittleEndian
	flags := b[1]
	req.PTY, req.Cred, req.NoSetg = flags&shimFlagPTY != 0, flags&shimFlagCred != 0, flags&shimFlagNoSetgroups != 0
	req.UID, req.GID = le.Uint32(b[4:]), le.Uint32(b[8:])
	ngroups, argc, envc := uint64(le.Uint32(b[12:])), uint64(le.Uint32(b[16:])), uint64(le.Uint32(b[20:]))
	rest := b[shimRequestHeader:]
	if ngroups > shimMaxGroups || 4*ngroups > uint64(len(rest)) || argc == 0 ||
		argc+envc+2 > uint64(len(rest))-4*ngroups {
		return req, errShimRequest
	}
	if ngroups > 0 {
		req.Groups = make([]uint32, ngroups)
		for i := range req.Groups {
			req.Groups[i] = le.Uint32(rest[4*i:])
		}
	}
	rest = rest[4*ngroups:]
	next := func() (string, bool) {
		i := strings.IndexByte(string(rest), 0)
		if i < 0 {
			return "", false
		}
		s := string(rest[:i])
		rest = rest[i+1:]
		return s, true
	}
	var ok bool
	if req.Path, ok = next(); !ok {
		return req, errShimRequest
	}
	if req.Dir, ok = next(); !ok {
		return req, errShimRequest
	}
	req.Argv = make([]string, argc)
	for i := range req.Argv {
		if req.Argv[i], ok = next(); !ok {
			return req, errShimRequest
		}
	}
	req.Env = make([]string, envc)
	for i := range req.Env {
		if req.Env[i], ok = next(); !ok {
			return req, errShimRequest
		}
	}
	if len(rest) != 0 {
		return req, errShimRequest
	}
	return req, nil
}
