// Package codeinterp runs code contexts: long-lived interpreters (Python,
// Bash, JavaScript) whose state persists between executions, and turns
// each execution into the event stream of E2B's code interpreter
// (stdout, stderr, number_of_executions, result, error, keepalive,
// end_of_execution; see Event).
//
// The package does not start processes itself: the agent provides a Host
// (user and directory resolution, environment, reaper-safe spawning), so
// everything here is independent of how the sandbox is built.
//
// # Interpreters
//
// Python and JavaScript run a driver shipped inside the agent (driver.py,
// driver.js, embedded). The driver is started with a tiny bootstrap
// (python3 -u -c / node -e) that reads the driver source from file
// descriptor 3, so nothing is written to the (read-only) root filesystem.
// The agent and the driver then talk NDJSON: commands on fd 3, events
// (ready, start, result, error, done) on fd 4. The driver's fds 1 and 2
// are plain pipes read by the agent, so output of user code, C extensions
// and subprocesses is streamed as it is written. When the driver reports
// done (after flushing its output), the agent itself appends a marker
// (ASCII RS, a nonce, the execution's sequence number, RS) to both pipes
// through write ends it kept; it strips markers from the output and
// waits for them, so all output of an execution precedes its
// end_of_execution. See marker.go for why the interpreter never learns
// the nonce.
//
// The Python driver uses IPython's InteractiveShell when IPython is
// importable (magics, IPython's display system), otherwise a built-in
// engine on the standard library: last-expression results, display(),
// the _repr_*_ protocol, matplotlib figures (Agg backend) emitted as PNG
// after each execution, pandas DataFrames as html + text + data.
//
// Bash contexts are one persistent bash per context reading commands on
// its stdin; each execution is a here-document evaluated in the shell
// itself (so cd and export persist) with its stdin from /dev/null,
// followed by a done line on fd 4 carrying $?. A non-zero
// status is reported like E2B's bash kernel: an error with an empty name,
// the status as value and an empty traceback.
//
// # Recovery
//
// Executions in one context are serialised; contexts run in parallel.
// When an execution's timeout passes, or its caller goes away, the
// interpreter's process group gets SIGINT; if the execution does not end
// within a grace period the group is killed and the interpreter restarted,
// and the execution ends with an error saying the state was lost. An
// interpreter that dies during an execution (segfault, os._exit, the OOM
// killer) is restarted the same way; one that died while idle is
// restarted on the next execution, which notes it on stderr.
package codeinterp
