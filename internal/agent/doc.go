// Package agent is the in-sandbox agent: the process that runs as PID 1 of
// every sandbox and serves E2B's envd protocol over HTTP (usually on a unix
// socket the host daemon connects to).
//
// It offers the Connect RPC services process.Process and
// filesystem.Filesystem (Connect, gRPC and gRPC-Web protocols; JSON and
// binary codecs; gRPC over cleartext HTTP/2 on the same listener), and the
// REST routes GET /health, GET /envs, POST /init (extra default
// environment variables, used when a pooled sandbox is handed over) and
// GET/POST /files, and the code interpreter's routes (POST /execute,
// /contexts...: stateful Python, bash and JavaScript contexts, see
// code*.go). Extra handler sets can be mounted with Server.Mux.
//
// As PID 1 the agent also reaps every zombie in the sandbox: one reaper
// (see Reaper) owns all waiting for children, so nothing in a program that
// embeds this package may use exec.Cmd.Wait or os.Process.Wait. No signal
// a sandbox process can send ends it (IgnoreStraySignals); the host stops
// a sandbox with SIGKILL.
//
// Semantics worth knowing:
//
//   - Users: the E2B user selector is "Authorization: Basic
//     base64(<user>:)" (or ?username= on /files). An empty or own name runs
//     as the agent itself; only an agent running as uid 0 may act as other
//     users (permission_denied otherwise); unknown users are
//     invalid_argument. Relative paths and "~" resolve against that user's
//     home. File operations for another user run on a thread with that
//     user's fsuid/fsgid/groups, so the kernel enforces its permissions and
//     new files belong to it.
//   - Confinement (agentbox's extension): a request carrying
//     X-Agentbox-Root headers has every filesystem path resolved under
//     those roots, descriptor by descriptor, links followed only while
//     they stay inside; leaving them is permission_denied with
//     X-Agentbox-Error: outside-root. See RootHeader.
//   - Processes run in their own process group (their own session with a
//     PTY), below an exec shim (see ShimArg); signals hit the whole group,
//     SIGKILL and the timeout_ms extension everything the process started,
//     also what detached (setsid, double fork). What a process leaves in
//     the background when it exits on its own keeps running. A
//     process killed by a signal ends with exitCode -1 (as upstream envd),
//     status "signal: <name>"; a timed-out one with exited=false, status
//     "killed", error "timeout after <d>".
//   - An absent StartRequest.stdin means true (upstream compatibility):
//     the process gets a stdin pipe. Our client always sends it.
//   - A client leaving Start or Connect does not stop the process.
//     Processes are forgotten once their end event was handed out.
//   - Output is fanned out to every attached stream through bounded queues;
//     a stream whose queue stays full for 10s is disconnected with
//     resource_exhausted (the process is back-pressured meanwhile) rather
//     than silently losing output.
//   - Watchers drop events (and log it) when their consumer falls behind.
package agent
