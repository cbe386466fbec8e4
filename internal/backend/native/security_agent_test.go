package native

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// agentAttrsScript prints, from inside a sandbox, what the agent (PID 1) and a
// command it starts run with: the agent's resource limits, the nice value,
// scheduling policy and priority, CPU affinity and I/O priority of each of
// its threads (as a set: thread ids come and go), its OOM score
// adjustment and autogroup nice value, and the same of the command itself.
const agentAttrsScript = `set -e
echo "== agent limits"; cat /proc/1/limits
echo "== agent threads"
for t in /proc/1/task/*; do
	echo "$(sed 's/^.*) //' $t/stat | awk '{print "nice", $17, "prio", $38, "policy", $39}') $(grep Cpus_allowed_list $t/status) $(ionice -p ${t##*/})"
done | sort -u
echo "== agent oom"; cat /proc/1/oom_score_adj
echo "== agent autogroup"; sed 's/^.* nice/nice/' /proc/1/autogroup 2>/dev/null || true
echo "== command"; cat /proc/self/limits
echo "nice $(sed 's/^.*) //' /proc/self/stat | awk '{print $17, $38, $39}')"; grep Cpus_allowed_list /proc/self/status; ionice -p $$
`

// agentTamperScript is sandbox code changing its agent: lower resource limits
// (hard ones too, which the agent cannot raise again), the lowest
// priority, one CPU, the idle scheduling class and I/O class, a higher OOM
// score, the lowest priority for the agent's autogroup. PID 1 first, then every thread of the agent by its own id (a
// rule that protected only pid 1 would miss them). Each attempt may fail;
// the script reports which succeeded.
const agentTamperScript = `
try() { if "$@" >/dev/null 2>&1; then echo "changed: $*"; else echo "refused: $*"; fi; }
for p in 1 $(ls /proc/1/task); do
	try prlimit --pid $p --fsize=1048576:1048576 --nproc=5:5 --nofile=64:64 --core=0:0 --stack=1048576:1048576 --nice=0:0
	try renice -n 19 -p $p
	try taskset -p 1 $p
	try chrt -i -p 0 $p
	try ionice -c 3 -p $p
done
try renice -n 19 -u $(id -u)
try sh -c 'echo 900 > /proc/1/oom_score_adj'
try sh -c 'echo 19 > /proc/1/autogroup'
`

// TestSecurityAgentAttributesSurviveWarmReset: sandbox code can lower its
// own agent's resource limits and priority (same uid, or root of the
// sandbox), but what it did never reaches the next user of a recycled
// sandbox: after a warm reset (POOL_MAX_USES) the agent and every command
// it starts run with what the agent had at boot.
func TestSecurityAgentAttributesSurviveWarmReset(t *testing.T) {
	testutil.RequireRoot(t)
	be := newTestBackend(t, testutil.ShortTempDir(t))
	for _, tc := range []struct {
		name string
		root bool   // a root sandbox
		as   string // the user the sandbox code runs as
	}{{"User", false, ""}, {"Root", true, ""}, {"RootOnRequest", false, "root"}} {
		root := tc.root
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			id := sandbox.NewID()
			info, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate(), AccessToken: "token-one", Root: root})
			if err != nil {
				t.Fatal(err)
			}
			defer be.Destroy(context.Background(), id)
			c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "token-one")
			defer c.Close()
			before, err := runSh(t, ctx, c, agentAttrsScript)
			if err != nil {
				t.Fatal(err)
			}
			tampered, err := runShAs(t, ctx, c, tc.as, agentTamperScript)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("sandbox code on its agent:\n%s", tampered)
			if strings.Contains(tampered, "changed: prlimit") {
				t.Errorf("sandbox code changed its agent's resource limits:\n%s", tampered)
			}
			during, err := runSh(t, ctx, c, agentAttrsScript)
			if err != nil {
				t.Fatal(err)
			}
			if during == before {
				// Then the check below proves nothing about the reset.
				t.Log("the sandbox changed nothing of its agent")
			}

			if err := be.Recycle(ctx, id, backend.RecycleRequest{AccessToken: "token-two"}); err != nil {
				t.Fatal(err)
			}
			got, err := be.Inspect(ctx, id)
			if err != nil || got.Pid != info.Pid {
				t.Fatalf("not a warm reset: pid %d, was %d (%v)", got.Pid, info.Pid, err)
			}
			c2 := agentclient.New(agentclient.Endpoint{Network: got.Agent.Network, Address: got.Agent.Address}, "token-two")
			defer c2.Close()
			after, err := runSh(t, ctx, c2, agentAttrsScript)
			if err != nil {
				t.Fatal(err)
			}
			if after != before {
				t.Fatalf("the next user's agent and commands run with what the previous user set:\nat boot:\n%s\nafter the warm reset:\n%s", before, after)
			}

			// Limits changed some other way (here by the host, as the owner
			// of the sandbox's user namespace): the reset cannot vouch for
			// the agent, and boots it again.
			uid, gid := nsOwnerOf(t, got.Pid)
			err = asHostUser(uid, gid, func() error {
				return unix.Prlimit(got.Pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 100, Max: 100}, nil)
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := be.Recycle(ctx, id, backend.RecycleRequest{AccessToken: "token-three"}); err != nil {
				t.Fatal(err)
			}
			got, err = be.Inspect(ctx, id)
			if err != nil || got.Pid == info.Pid || got.Pid == 0 {
				t.Fatalf("an agent with changed limits was not booted again: pid %d, was %d (%v)", got.Pid, info.Pid, err)
			}
			c3 := agentclient.New(agentclient.Endpoint{Network: got.Agent.Network, Address: got.Agent.Address}, "token-three")
			defer c3.Close()
			limits, err := runSh(t, ctx, c3, "cat /proc/1/limits")
			if err != nil || !strings.Contains(before, limits) {
				t.Fatalf("limits after the full reset: %v\n%s\nat boot:\n%s", err, limits, before)
			}
		})
	}
}

// nsOwnerOf returns the host uid and gid that root of process pid's user
// namespace maps to: the namespace's owner, which holds every capability
// in it.
func nsOwnerOf(t *testing.T, pid int) (uint32, uint32) {
	t.Helper()
	var ids [2]uint32
	for i, file := range []string{"uid_map", "gid_map"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(data))
		if len(f) < 3 || f[0] != "0" {
			t.Fatalf("/proc/%d/%s: %q", pid, file, data)
		}
		n, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = uint32(n)
	}
	return ids[0], ids[1]
}
