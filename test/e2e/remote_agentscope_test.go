package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestRemoteAgentscopeSuite runs part of the agentscope client suite
// (test/compat/agentscope) against a front daemon whose base type runs at
// a remote provider (SANDBOX_TEMPLATES maps it to e2b:base, daytona:base),
// another agentbox daemon on loopback: the agentscope client does not
// change, only where its sandboxes run. The tests named are those a
// provider's data plane can hold (see docs/providers.md).
func TestRemoteAgentscopeSuite(t *testing.T) {
	requirePythonRequests(t)
	for _, tc := range []struct {
		provider string
		settings func(*daemon, ...string) []string
		tests    []string
	}{
		{"e2b", remoteSettings, []string{
			"test_tools.GenericToolsTest.test_list_tools", "test_tools.GenericToolsTest.test_shell_result_shape",
			"test_tools.GenericToolsTest.test_shell_is_error_follows_stderr", "test_tools.GenericToolsTest.test_ipython_state_persists",
			"test_tools.GenericToolsTest.test_ipython_errors", "test_tools.GenericToolsTest.test_tool_errors",
			"test_lifecycle.LifecycleTest.test_create_and_info", "test_lifecycle.LifecycleTest.test_environment",
			"test_lifecycle.LifecycleTest.test_release_keeps_record",
		}},
		{"daytona", daytonaSettings, []string{
			"test_tools.GenericToolsTest.test_list_tools", "test_tools.GenericToolsTest.test_shell_result_shape",
			// Not test_ipython_state_persists: it reads the value of a last
			// expression, which Daytona's interpreter does not give (it streams
			// output; state is kept, as TestRemoteDaytonaProvider checks).
			"test_tools.GenericToolsTest.test_shell_is_error_follows_stderr",
			"test_tools.GenericToolsTest.test_ipython_errors", "test_tools.GenericToolsTest.test_tool_errors",
			"test_lifecycle.LifecycleTest.test_create_and_info", "test_lifecycle.LifecycleTest.test_environment",
			"test_lifecycle.LifecycleTest.test_release_keeps_record",
		}},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			prov := startProvider(t)
			front := startDaemon(t, tc.settings(prov, "BEARER_TOKEN="+asToken, `SANDBOX_TEMPLATES={"base":"`+tc.provider+`:base"}`,
				"DEFAULT_SANDBOX_TYPE=base", "PROVIDER_MAX_PER_USER=0")...)
			root, err := testutil.ModuleRoot()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "/usr/bin/python3", append([]string{"-m", "unittest", "-v"}, tc.tests...)...)
			cmd.Dir = filepath.Join(root, "test", "compat", "agentscope")
			cmd.Env = append(cleanEnv(), "AGENTBOX_URL="+front.url, "AGENTBOX_TOKEN="+asToken, "PYTHONDONTWRITEBYTECODE=1")
			out, err := cmd.CombinedOutput()
			t.Logf("agentscope suite at %s:\n%s", tc.provider, out)
			if err != nil {
				t.Fatalf("the suite failed: %v\nfront log tail:\n%s", err, tail(front.logs.String(), 40))
			}
		})
	}
}
