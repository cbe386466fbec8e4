package packaging

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadComposeSpec loads deploy/compose/NAME as Docker Compose v2 loads it
// (compose-go, the Compose Specification's own loader: YAML anchors and
// merge keys, interpolation, required variables, schema validation,
// normalization), with env as the whole environment (none of the test
// process's, no .env file).
func loadComposeSpec(t *testing.T, name string, env map[string]string) (*types.Project, error) {
	t.Helper()
	return loadComposePath(t, filepath.Join(repoRoot(t), "deploy", "compose", name), env)
}

func loadComposePath(t *testing.T, path string, env map[string]string) (*types.Project, error) {
	t.Helper()
	dir := filepath.Dir(path)
	var kv []string
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	opts, err := cli.NewProjectOptions([]string{path},
		cli.WithWorkingDirectory(dir), cli.WithEnv(kv), cli.WithDiscardEnvFile,
		cli.WithInterpolation(true), cli.WithNormalization(true), cli.WithConsistency(true))
	if err != nil {
		t.Fatal(err)
	}
	return opts.LoadProject(context.Background())
}

// TestComposeSpec: both compose files are valid Compose v2 projects for
// compose-go (what `docker compose config` checks; Debian 12's Compose
// 1.29 cannot load them), refused with the variable's name when one of
// their required variables is unset, and what compose-go makes of each
// agentbox service is what the strict read (readCompose, which TestImage
// and TestComposeReplicas run the image with) makes of it: the same
// privileges, environment and image.
func TestComposeSpec(t *testing.T) {
	all := map[string]string{"API_KEYS": "k1:alice", "CLUSTER_SECRET": "s3cret", "SECRETS_KEY": strings.Repeat("a7", 32)}
	for _, tc := range []struct {
		file     string
		project  string
		services []string
		required []string
	}{
		{"agentbox.yaml", "agentbox", []string{"agentbox"}, []string{"API_KEYS"}},
		{"replicas.yaml", "agentbox-replicas", []string{"agentbox-1", "agentbox-2", "redis"}, []string{"API_KEYS", "CLUSTER_SECRET", "SECRETS_KEY"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			p, err := loadComposeSpec(t, tc.file, all)
			if err != nil {
				t.Fatalf("compose-go refuses %s: %v", tc.file, err)
			}
			if p.Name != tc.project {
				t.Errorf("project name %q, want %q", p.Name, tc.project)
			}
			if got := p.ServiceNames(); !reflect.DeepEqual(sorted(got), tc.services) {
				t.Errorf("services %v, want %v", got, tc.services)
			}
			strict := readCompose(t, tc.file, all)
			for _, name := range tc.services {
				if name == "redis" {
					continue
				}
				s, err := p.GetService(name)
				if err != nil {
					t.Fatal(err)
				}
				checkSpecService(t, name, s, strict.Services[name], filepath.Join(repoRoot(t), "deploy", "compose"))
			}
			for _, v := range tc.required {
				env := map[string]string{}
				for k, val := range all {
					if k != v {
						env[k] = val
					}
				}
				if _, err := loadComposeSpec(t, tc.file, env); err == nil || !strings.Contains(err.Error(), v) {
					t.Errorf("without %s: compose-go says %v, want a refusal naming it", v, err)
				}
			}
		})
	}

	// The loader validates against the schema: a misspelt key in a copy of
	// the file is refused (so the loads above did check the keys).
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "compose", "agentbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(raw), "    cap_add:\n", "    cap_addd:\n", 1)
	if bad == string(raw) {
		t.Fatal("agentbox.yaml has no cap_add line to misspell")
	}
	path := filepath.Join(t.TempDir(), "agentbox.yaml")
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadComposePath(t, path, all); err == nil || !strings.Contains(err.Error(), "cap_addd") {
		t.Errorf("a misspelt key: compose-go says %v, want a refusal naming it", err)
	}
}

// checkSpecService compares what compose-go loaded of an agentbox service
// with the strict read of the same file.
func checkSpecService(t *testing.T, name string, s types.ServiceConfig, want composeService, dir string) {
	t.Helper()
	if s.Image != "agentbox:latest" || s.Image != want.Image {
		t.Errorf("%s: image %q (strict read %q), want agentbox:latest without AGENTBOX_IMAGE", name, s.Image, want.Image)
	}
	if !reflect.DeepEqual([]string(s.Command), want.Command) {
		t.Errorf("%s: command %v, strict read %v", name, s.Command, want.Command)
	}
	if s.Cgroup != want.Cgroup || s.Cgroup != "private" {
		t.Errorf("%s: cgroup %q, strict read %q", name, s.Cgroup, want.Cgroup)
	}
	if !reflect.DeepEqual(s.CapAdd, want.CapAdd) {
		t.Errorf("%s: cap_add %v, strict read %v", name, s.CapAdd, want.CapAdd)
	}
	if len(s.CapDrop) != 0 || s.Privileged {
		t.Errorf("%s: cap_drop %v, privileged %v: the files drop nothing and are not privileged", name, s.CapDrop, s.Privileged)
	}
	// compose-go resolves the seccomp profile's path against the file's
	// directory, as dockerRunArgs does.
	var opts []string
	for _, o := range want.SecurityOpt {
		if v, ok := strings.CutPrefix(o, "seccomp="); ok && !filepath.IsAbs(v) {
			o = "seccomp=" + filepath.Join(dir, v)
		}
		opts = append(opts, o)
	}
	got := slices.Clone(s.SecurityOpt)
	for i, o := range got {
		if v, ok := strings.CutPrefix(o, "seccomp="); ok && !filepath.IsAbs(v) {
			got[i] = "seccomp=" + filepath.Join(dir, v)
		}
	}
	if !reflect.DeepEqual(got, opts) {
		t.Errorf("%s: security_opt %v, strict read %v", name, s.SecurityOpt, want.SecurityOpt)
	}
	var devices []string
	for _, d := range s.Devices {
		devices = append(devices, d.Source)
	}
	if !reflect.DeepEqual(devices, want.Devices) {
		t.Errorf("%s: devices %v, strict read %v", name, devices, want.Devices)
	}
	if !reflect.DeepEqual(s.DeviceCgroupRules, want.DeviceCgroupRules) {
		t.Errorf("%s: device_cgroup_rules %v, strict read %v", name, s.DeviceCgroupRules, want.DeviceCgroupRules)
	}
	env := map[string]string{}
	for k, v := range s.Environment {
		if v == nil {
			t.Errorf("%s: environment %s has no value", name, k)
			continue
		}
		env[k] = *v
	}
	if !reflect.DeepEqual(env, want.Environment) {
		t.Errorf("%s: environment %v, strict read %v", name, env, want.Environment)
	}
	if d, err := time.ParseDuration(want.StopGracePeriod); err != nil || s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) != d {
		t.Errorf("%s: stop_grace_period %v, strict read %q", name, s.StopGracePeriod, want.StopGracePeriod)
	}
	if len(s.Volumes) != 1 || s.Volumes[0].Type != types.VolumeTypeVolume || s.Volumes[0].Target != "/var/lib/agentbox" {
		t.Errorf("%s: volumes %+v, want one named volume at /var/lib/agentbox", name, s.Volumes)
	}
	if len(s.Ports) != 1 || s.Ports[0].Target != 8000 {
		t.Errorf("%s: ports %+v, want the API's 8000 published", name, s.Ports)
	}
	if s.HealthCheck == nil || !slices.Contains(s.HealthCheck.Test, "http://127.0.0.1:8000/readyz") {
		t.Errorf("%s: healthcheck %+v, want /readyz", name, s.HealthCheck)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
