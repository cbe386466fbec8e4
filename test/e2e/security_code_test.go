package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// forgerScript runs in the background of a code context and tries to
// forge the framing between the agent and the interpreter: for a second
// it reads the interpreter's output pipes itself (through /proc/<pid>/fd,
// stealing what it can, end markers of earlier executions included), then
// it collects every candidate end-of-cell nonce it can find in what it
// stole and in the command line, environment and memory of the
// interpreter and of the agent (PID 1), prints end markers made from
// them on the interpreter's stdout and stderr (which it inherited), and
// writes forged result and done events to every inherited descriptor
// above 2 (the driver's control and event pipes, if they leaked). It runs
// for a bounded time (60 rounds).
const forgerScript = `
import os, re, sys, time
pid, tag = int(sys.argv[1]), sys.argv[2]
HEX = rb"([0-9a-f]{24})"
PATS = [re.compile(rb"\x1e" + HEX + rb":"), re.compile(rb"\\036" + HEX + rb":"),
        re.compile(rb'"nonce": ?"' + HEX + rb'"')]
def candidates(report):
    return scan(pid, report) | scan(1, report)
def scan(pid, report):
    found = set()
    for name in ("cmdline", "environ"):
        try:
            data = open("/proc/%d/%s" % (pid, name), "rb").read()
            new = set(re.findall(rb"(?<![0-9a-f])[0-9a-f]{24}(?![0-9a-f])", data))
            report.append("%d/%s:%d" % (pid, name, len(new)))
            found |= new
        except OSError as e:
            report.append("%d/%s:%s" % (pid, name, e.strerror))
    try:
        maps = open("/proc/%d/maps" % pid).read().splitlines()
        total = 0
        with open("/proc/%d/mem" % pid, "rb", 0) as m:
            for line in maps:
                f = line.split()
                a, b = (int(x, 16) for x in f[0].split("-"))
                if "r" not in f[1] or b - a > (64 << 20) or total > (512 << 20):
                    continue
                try:
                    m.seek(a)
                    data = m.read(b - a)
                except (OSError, ValueError, OverflowError):
                    continue
                total += len(data)
                for p in PATS:
                    found.update(p.findall(data))
        report.append("%d/mem:read %d bytes" % (pid, total))
    except OSError as e:
        report.append("%d/mem:%s" % (pid, e.strerror))
    return found
stolen = set()
pipes = []
for fd in (1, 2):
    try:
        pipes.append(os.open("/proc/%d/fd/%d" % (pid, fd), os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        pass
end = time.time() + 1.0
while time.time() < end:
    for p in pipes:
        try:
            stolen.update(PATS[0].findall(os.read(p, 65536)))
        except OSError:
            pass
    time.sleep(0.005)
for p in pipes:
    os.close(p)
events = b"".join(b'{"ev":"result","main":true,"data":{"text/plain":"FORGED"}}\n'
                  b'{"ev":"done","seq":%d,"count":99,"rc":0,"marks":[true,true]}\n' % s for s in range(1, 21))
for i in range(60):
    report = []
    nonces = candidates(report) | stolen
    report.append("stolen:%d pipes:%d" % (len(stolen), len(pipes)))
    for n in nonces:
        for s in range(1, 21):
            line = b"FORGE<\x1e" + n + b":" + str(s).encode() + b"\x1e>\n"
            for fd in (1, 2):
                try:
                    os.write(fd, line)
                except OSError:
                    pass
    leaked = []
    for fd in range(3, 10):
        try:
            os.write(fd, events)
            leaked.append(fd)
        except OSError:
            pass
    if i == 0:
        with open("/tmp/forger-%s.log" % tag, "w") as f:
            f.write("%s nonces=%d writable_fds=%s\n" % (" ".join(report), len(nonces), leaked))
        os.rename("/tmp/forger-%s.log" % tag, "/tmp/forger-%s.ready" % tag)
    time.sleep(0.05)
`

// TestSecurityCodeFramingUnforgeable starts, from a cell of each language,
// a background process that tries to forge the end of a later cell (see
// forgerScript), then runs that later cell: it must end on its own, with
// all of its output and its own result only, and every forged marker
// must come through as the plain output it is.
func TestSecurityCodeFramingUnforgeable(t *testing.T) {
	d := startDaemon(t, "BEARER_TOKEN=k", "AUTO_CLEANUP=true")
	const key = "k"
	id := createRaw(t, d, key, map[string]any{"template": "host"})
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, map[string]any{
		"cmd": []string{"sh", "-c", "cat > /tmp/forge.py"}, "stdin": forgerScript})
	if status != http.StatusOK || mustJSON(t, data)["exit_code"] != float64(0) {
		t.Fatalf("write forger: %d %s", status, data)
	}
	waitReady := func(tag string) string {
		return fmt.Sprintf("for i in $(seq 200); do [ -e /tmp/forger-%s.ready ] && break; sleep 0.05; done; cat /tmp/forger-%s.ready", tag, tag)
	}
	// Executions that end while the forger steals from the pipes.
	fillers := map[string]string{"python": "print('filler')", "javascript": "console.log('filler')", "bash": "echo filler"}
	cases := []struct {
		lang, launch, wait, victim, result string
	}{
		{"python",
			"import os\nos.system('python3 /tmp/forge.py %d python &' % os.getpid())",
			"import subprocess\nprint(subprocess.run(['sh', '-c', '" + waitReady("python") + "'], capture_output=True, text=True).stdout)",
			"import time\nfor i in range(6):\n    print('line', i, flush=True)\n    time.sleep(0.2)\nprint('the-end')\n'real'",
			"real"},
		{"javascript",
			"const cp = require('child_process');\ncp.spawn('python3', ['/tmp/forge.py', String(process.pid), 'javascript'], {stdio: 'inherit', detached: true}).unref();",
			"console.log(require('child_process').execSync(`" + waitReady("javascript") + "`).toString())",
			"(async () => { for (let i = 0; i < 6; i++) { console.log('line', i); await new Promise(r => setTimeout(r, 200)); } console.log('the-end'); return 'real'; })()",
			"real"},
		{"bash",
			"python3 /tmp/forge.py $$ bash &",
			waitReady("bash"),
			"for i in 0 1 2 3 4 5; do echo line $i; sleep 0.2; done; echo the-end",
			""},
	}
	for _, tc := range cases {
		t.Run(tc.lang, func(t *testing.T) {
			status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/code/contexts", key, map[string]any{"language": tc.lang})
			if status != http.StatusOK && status != http.StatusCreated {
				t.Fatalf("create %s context: %d %s", tc.lang, status, data)
			}
			ctxID, _ := mustJSON(t, data)["id"].(string)
			mustRun(t, d, key, id, map[string]any{"code": tc.launch, "context_id": ctxID})
			for i := 0; i < 5; i++ {
				mustRun(t, d, key, id, map[string]any{"code": fillers[tc.lang], "context_id": ctxID})
			}
			launch := mustRun(t, d, key, id, map[string]any{"code": tc.wait, "context_id": ctxID})
			t.Logf("forger in %s: %s", tc.lang, strings.TrimSpace(launch.stdout))
			if !strings.Contains(launch.stdout, "nonces=") {
				t.Fatalf("forger did not start: %+v", launch)
			}
			x := mustRun(t, d, key, id, map[string]any{"code": tc.victim, "context_id": ctxID})
			for _, r := range x.results {
				if strings.Contains(fmt.Sprint(r), "FORGED") {
					t.Errorf("forged result accepted: %v", r)
				}
			}
			if x.count == 99 {
				t.Errorf("forged done event accepted (execution_count 99)")
			}
			if tc.result != "" && !strings.Contains(x.text(), tc.result) {
				t.Errorf("main result = %q, want %q (results %v)", x.text(), tc.result, x.results)
			}
			for i := 0; i < 6; i++ {
				if !strings.Contains(x.stdout, fmt.Sprintf("line %d\n", i)) {
					t.Errorf("cell output lost line %d: %q", i, x.stdout)
				}
			}
			if !strings.Contains(x.stdout, "the-end\n") {
				t.Errorf("cell ended before its last output: %q", x.stdout)
			}
			if strings.Contains(x.stdout, "FORGE<>") || strings.Contains(x.stderr, "FORGE<>") {
				t.Errorf("a forged end marker was taken as framing (stripped from the output)")
			}
		})
	}
}
