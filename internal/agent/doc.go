// Package agent is the in-sandbox agent: the process that runs as PID 1 of
// every sandbox and serves E2B's envd protocol over HTTP (usually on a unix
// socket the host daemon connects to).
//
// It offers the Connect RPC services process.Process and
// filesystem.Filesystem (connect, gRPC and gRPC-Web protocols; JSON and
// binary codecs), and the REST routes GET /health, GET /envs and
// GET/POST /files. Extra handler sets can be mounted on the same server
// with Server.Mux.
//
// As PID 1 the agent also reaps every zombie in the sandbox: one reaper
// (see Reaper) owns all waiting for children, so nothing in this package
// may use exec.Cmd.Wait or os.Process.Wait.
package agent
