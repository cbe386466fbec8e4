package packaging

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// composeFile is what the tests read of a compose file.
type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
	Volumes  map[string]any            `json:"volumes"`
}

// composeService holds every key deploy/compose uses. The files are read
// strictly: a key added there without being added here (and so to the
// `docker run` the image's test makes of it) fails the tests, so the
// privileges the tests run the image with are the files'.
type composeService struct {
	Image             string            `json:"image"`
	Command           []string          `json:"command"`
	Restart           string            `json:"restart"`
	DependsOn         []string          `json:"depends_on"`
	Environment       map[string]string `json:"environment"`
	Ports             []string          `json:"ports"`
	Volumes           []string          `json:"volumes"`
	Cgroup            string            `json:"cgroup"`
	CapAdd            []string          `json:"cap_add"`
	SecurityOpt       []string          `json:"security_opt"`
	Devices           []string          `json:"devices"`
	DeviceCgroupRules []string          `json:"device_cgroup_rules"`
	StopGracePeriod   string            `json:"stop_grace_period"`
	Healthcheck       *struct {
		Test        []string `json:"test"`
		Interval    string   `json:"interval"`
		Timeout     string   `json:"timeout"`
		StartPeriod string   `json:"start_period"`
		Retries     int      `json:"retries"`
	} `json:"healthcheck"`
}

// interpolation is compose's ${NAME}, ${NAME:-default} and ${NAME:?error}.
var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-?])([^}]*))?\}`)

// readCompose reads deploy/compose/NAME with vars as the environment
// compose would interpolate, failing on a required variable that is unset
// (as compose does) and on any key composeFile does not know.
func readCompose(t *testing.T, name string, vars map[string]string) composeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "compose", name))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	text := interpolation.ReplaceAllStringFunc(string(raw), func(m string) string {
		g := interpolation.FindStringSubmatch(m)
		if v, ok := vars[g[1]]; ok && v != "" {
			return v
		}
		switch g[2] {
		case "-":
			return g[3]
		case "?":
			missing = append(missing, g[1]+": "+g[3])
		}
		return ""
	})
	if len(missing) > 0 {
		t.Fatalf("%s: required variables unset: %v", name, missing)
	}
	js, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	// Extension fields (x-...) are anchors for the services; compose
	// ignores them, and so does the strict decode below.
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for k := range top {
		if strings.HasPrefix(k, "x-") {
			delete(top, k)
		}
	}
	js, _ = json.Marshal(top)
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var f composeFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

// dockerRunArgs is the `docker run` of a compose service's privileges,
// environment and stop period (dir: the compose file's directory, which
// relative paths in security_opt are resolved against).
func dockerRunArgs(t *testing.T, s composeService, dir string) []string {
	t.Helper()
	var args []string
	if s.Cgroup != "" {
		args = append(args, "--cgroupns", s.Cgroup)
	}
	for _, c := range s.CapAdd {
		args = append(args, "--cap-add", c)
	}
	for _, o := range s.SecurityOpt {
		if v, ok := strings.CutPrefix(o, "seccomp="); ok && !filepath.IsAbs(v) && v != "unconfined" {
			o = "seccomp=" + filepath.Join(dir, v)
		}
		args = append(args, "--security-opt", o)
	}
	for _, d := range s.Devices {
		args = append(args, "--device", d)
	}
	for _, r := range s.DeviceCgroupRules {
		args = append(args, "--device-cgroup-rule", r)
	}
	for k, v := range s.Environment {
		args = append(args, "-e", k+"="+v)
	}
	if s.StopGracePeriod != "" {
		d, err := time.ParseDuration(s.StopGracePeriod)
		if err != nil {
			t.Fatalf("stop_grace_period %q: %v", s.StopGracePeriod, err)
		}
		args = append(args, "--stop-timeout", fmt.Sprint(int(d.Seconds())))
	}
	return args
}

// privileges is what a service may do beyond Docker's defaults.
func privileges(s composeService) []any {
	return []any{s.Cgroup, s.CapAdd, s.SecurityOpt, s.Devices, s.DeviceCgroupRules}
}

// TestComposeFiles: both compose files read as compose reads them (their
// required variables named); the replicas file's two daemons have exactly
// the one-daemon file's privileges (which TestImage runs the image with),
// share Redis, keys, cluster secret and secrets key, and differ in node id, address,
// port and data volume; and the seccomp profile they name is current.
func TestComposeFiles(t *testing.T) {
	vars := map[string]string{"API_KEYS": "k1:alice", "CLUSTER_SECRET": "s3cret", "SECRETS_KEY": strings.Repeat("a7", 32)}
	one := readCompose(t, "agentbox.yaml", vars)
	d, ok := one.Services["agentbox"]
	if !ok || len(one.Services) != 1 {
		t.Fatalf("agentbox.yaml services: %v, want agentbox alone", one.Services)
	}
	if d.Environment["API_KEYS"] != "k1:alice" {
		t.Errorf("agentbox.yaml: API_KEYS %q", d.Environment["API_KEYS"])
	}
	if len(d.CapAdd) == 0 || d.Cgroup != "private" {
		t.Errorf("agentbox.yaml: cap_add %v, cgroup %q", d.CapAdd, d.Cgroup)
	}

	rep := readCompose(t, "replicas.yaml", vars)
	if _, ok := rep.Services["redis"]; !ok {
		t.Fatal("replicas.yaml: no redis service")
	}
	a, b := rep.Services["agentbox-1"], rep.Services["agentbox-2"]
	for name, s := range map[string]composeService{"agentbox-1": a, "agentbox-2": b} {
		if got, want := privileges(s), privileges(d); !reflect.DeepEqual(got, want) {
			t.Errorf("replicas.yaml %s privileges %v, want agentbox.yaml's %v", name, got, want)
		}
		for _, k := range []string{"API_KEYS", "REDIS_ENABLED", "REDIS_SERVER", "CLUSTER_SECRET", "SECRETS_KEY", "AUTO_CLEANUP"} {
			if s.Environment[k] == "" {
				t.Errorf("replicas.yaml %s: %s unset", name, k)
			}
		}
		if s.Environment["REDIS_SERVER"] != "redis" || s.Environment["NODE_ADDRESS"] != "http://"+name+":8000" {
			t.Errorf("replicas.yaml %s: REDIS_SERVER %q, NODE_ADDRESS %q", name, s.Environment["REDIS_SERVER"], s.Environment["NODE_ADDRESS"])
		}
	}
	for _, k := range []string{"NODE_ID", "NODE_ADDRESS"} {
		if a.Environment[k] == b.Environment[k] {
			t.Errorf("replicas.yaml: both replicas have %s %q", k, a.Environment[k])
		}
	}
	if reflect.DeepEqual(a.Volumes, b.Volumes) || reflect.DeepEqual(a.Ports, b.Ports) {
		t.Errorf("replicas.yaml: replicas share volumes %v or ports %v", a.Volumes, a.Ports)
	}
}

// TestSeccompProfileCurrent: deploy/docker/seccomp.json is what
// tools/seccompgen makes from the pinned moby profile.
func TestSeccompProfileCurrent(t *testing.T) {
	root := repoRoot(t)
	got := run(t, root, nil, "go", "run", "./tools/seccompgen")
	want, err := os.ReadFile(filepath.Join(root, "deploy", "docker", "seccomp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatal("deploy/docker/seccomp.json is not current: go run ./tools/seccompgen > deploy/docker/seccomp.json")
	}
}
