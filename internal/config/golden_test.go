package config

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// The golden files under testdata/golden hold what the settings resolve to
// (every field of Config, by its path), the listing --help-settings prints
// and the error of each bad value, as the settings table made them before
// the settings moved to typed, tagged structs. The tests hold every later
// version of the loader to them; -update-golden rewrites them (only for an
// intended change of behaviour, reviewed in the diff).
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from the current loader")

// richEnv sets every setting to a value other than its default, in the
// spellings agentscope's .env files use where there is a choice.
const richEnv = `# every setting, none at its default
HOST=0.0.0.0
PORT=9123
BEARER_TOKEN=tok-rich
API_KEYS=k1:alice, k2:bob
AGENTBOX_DATA_DIR=/srv/agentbox-rich
AGENT_PATH=/opt/agentbox/agentbox-agent
SANDBOX_TEMPLATES={"base":"host","py":"python:3.12","custom":"dir:/srv/rootfs"}
DEFAULT_SANDBOX_TYPE=["base","py"]
POOL_SIZE=3
POOL_MAX_USES=5
POOL_WARM_RESET=off
AUTO_CLEANUP=no
DEFAULT_MOUNT_DIR=/srv/mounts
READONLY_MOUNTS={"/srv/ro":"/mnt/ro","/srv/a":"/mnt/a"}
MAX_SANDBOX_INSTANCES=50
MAX_SANDBOXES_PER_USER=7
HEARTBEAT_TIMEOUT=12.5
MCP_SESSION_TIMEOUT=600
MCP_TEMPLATE=code-interpreter
SERVICE_START_TIMEOUT=30
DEFAULT_TIMEOUT=600
MAX_TIMEOUT=7200
PAUSED_TTL=0
CGROUP_FAVOR_DYNMODS=F
PAUSE_RECLAIM=n
DEFAULT_MEMORY=1G
DEFAULT_CPUS=0.5
DEFAULT_PIDS=128
SANDBOX_NOFILE_SOFT=512
SANDBOX_NOFILE_HARD=2048
SANDBOX_ID_BASE=2000000000
SANDBOX_ID_RANGES=100
DEFAULT_DISK=2G
DEFAULT_TMP=128M
MAX_MEMORY=4G
MAX_CPUS=4
MAX_PIDS=1024
MAX_DISK=10G
DISK_RESERVE=0
DISK_OVERCOMMIT=2.5
MAX_UPLOAD_SIZE=256M
MAX_EXEC_OUTPUT=8M
MAX_REQUESTS_PER_USER=4
REQUEST_MEMORY=512M
MAX_CONNECTIONS=1000
MAX_CONNECTIONS_PER_IP=50
HEADER_TIMEOUT=5
BODY_TIMEOUT=30
CONTAINER_PREFIX_KEY=agent-runtime-container-
CONTAINER_DEPLOYMENT=docker
DOCKER_BACKEND=true
DOCKER_HOST=unix:///run/docker-rich.sock
KUBE_BACKEND=yes
K8S_NAMESPACE=sandboxes
KUBECONFIG_PATH=/etc/kube.conf
K8S_AGENT_IMAGE=reg.example/agent:1
K8S_INSTANCE=rich
K8S_RUNTIME_CLASS=gvisor
K8S_NODE_SELECTOR=agentbox.dev/node=true, zone=a
K8S_STORAGE_CLASS=fast
K8S_SECCOMP_PROFILE=Localhost/profiles/agentbox.json
K8S_USER_NAMESPACES=true
WORKERS=4
REDIS_ENABLED=True
REDIS_SERVER=redis.internal
REDIS_PORT=6380
REDIS_DB=2
REDIS_USER=ru
REDIS_PASSWORD=rp
REDIS_KEY_PREFIX=rich
REDIS_CONTAINER_POOL_KEY=_pool
REDIS_TIMEOUT=0.25
NODE_ID=node-rich
NODE_MAX_SANDBOXES=40
NODE_ADDRESS=http://10.0.0.5:9123
CLUSTER_SECRET=0123456789abcdef0123456789abcdef
CLUSTER_MAX_CONNS=100
CLUSTER_MAX_PER_USER=10
CLUSTER_PLACEMENT=local
KUBE_NODE_NAME=agentbox-node1
KUBE_NODE_KUBECONFIG=/etc/node.kubeconfig
KUBE_NODE_ADDRESS=10.0.0.6
KUBE_NODE_PORT=10251
KUBE_NODE_TLS_CERT=/etc/tls.crt
KUBE_NODE_TLS_KEY=/etc/tls.key
KUBE_NODE_CLIENT_CA=/etc/ca.crt
STORAGE_FOLDER=/srv/storage
FILE_SYSTEM=
NETWORK=off
DEFAULT_NETWORK_MODE=egress
NETWORK_BRIDGE=abr0
NETWORK_SUBNET=10.99.3.0/16
NETWORK_DNS=1.1.1.1, 9.9.9.9:5353
NETWORK_ALLOW_HOST_PORTS=8080,9090
NETWORK_ALLOW_PRIVATE=192.168.1.7/24,10.1.2.3/8
NETWORK_BANDWIDTH=1.5Gbit
NETWORK_MAX_CONNS=200
PREVIEW_DOMAIN=Sandbox.Example.com:8443
PREVIEW_MAX_PER_USER=8
PREVIEW_HEADER_TIMEOUT=15
DESKTOP_NOVNC_DIR=/opt/novnc
METRICS_TOKEN=mt
TEMPLATE_DIR=/srv/templates/
TEMPLATE_ADMIN_USERS=default, ops
TEMPLATE_MAX_IMPORT=4G
TEMPLATE_MAX_PULLS=3
TEMPLATE_AUTO_BUILD=browser,base,browser
TEMPLATE_AUTO_PULL=1
STORAGE_QUOTA_PER_USER=0
MAX_TEMPLATES_PER_USER=0
SNAPSHOT_MAX_SIZE=512M
AGENTBOX_REGISTRY_AUTH={"r.example":{"token":"x"}}
REGISTRY_MIRRORS={"docker.io":["https://m1.example","http://127.0.0.1:5000"]}
RUNTIME_SANDBOX_REGISTRY=registry.example.com:5000/
RUNTIME_SANDBOX_IMAGE_NAMESPACE=team/sandboxes
RUNTIME_SANDBOX_IMAGE_TAG=v2
DEBUG=False
LOG_LEVEL=WARN
LOG_FORMAT=json
PORT_RANGE=[49152,59152]
REDIS_PORT_KEY=_ports
OSS_ENDPOINT=oss.example
OSS_ACCESS_KEY_ID=id
OSS_ACCESS_KEY_SECRET=secret
OSS_BUCKET_NAME=bucket
`

// goldenCases are the configurations the golden files hold: a .env file
// (or none), environment entries and overrides.
var goldenCases = []struct {
	name      string
	env       string
	environ   []string
	overrides map[string]string
}{
	{name: "default"},
	{name: "rich", env: richEnv},
	// The same settings as environment variables (every one known, and
	// one unknown that is left alone).
	{name: "rich-environ", environ: append(strings.Split(strings.TrimSpace(richEnv[strings.Index(richEnv, "\n")+1:]), "\n"), "UNRELATED=1")},
	{name: "precedence", env: "# agentscope style\nPORT=9000\nexport POOL_SIZE=\"3\"\nBEARER_TOKEN=file-token\nDEFAULT_SANDBOX_TYPE=[\"base\",\"filesystem\"]\nPORT_RANGE=[49152,59152]\nLOG_LEVEL='debug' # a comment\n",
		environ: []string{"POOL_SIZE=5", "UNRELATED=1", "API_KEYS=k1:alice,k2:bob", "LOG_LEVEL=error"}, overrides: map[string]string{"PORT": "9100", "MAX_SANDBOX_INSTANCES": "12"}},
	{name: "spellings", overrides: map[string]string{
		"DEBUG": "yes", "LOG_LEVEL": "error", "CONTAINER_DEPLOYMENT": "kube", "CLUSTER_PLACEMENT": "", "TEMPLATE_AUTO_BUILD": "off",
		"NETWORK_BANDWIDTH": "100M", "DISK_RESERVE": "512M", "FILE_SYSTEM": "local", "DEFAULT_SANDBOX_TYPE": " base, filesystem ,",
		"MAX_SANDBOX_INSTANCES": "10", "DEFAULT_MOUNT_DIR": "relative/mounts", "STORAGE_FOLDER": "./store", "AUTO_CLEANUP": "",
		"POOL_WARM_RESET": "Y", "REDIS_ENABLED": "On", "TEMPLATE_ADMIN_USERS": "", "NETWORK_SUBNET": "", "HOST": "localhost",
		"PREVIEW_DOMAIN": "", "RUNTIME_SANDBOX_IMAGE_NAMESPACE": "", "DEFAULT_CPUS": "2.25", "NETWORK_DNS": "8.8.8.8",
		"READONLY_MOUNTS": "  ", "REGISTRY_MIRRORS": "", "AGENTBOX_REGISTRY_AUTH": "", "SNAPSHOT_MAX_SIZE": " 0 ", "TEMPLATE_DIR": "",
		"DESKTOP_NOVNC_DIR": "", "K8S_NODE_SELECTOR": " , ",
	}},
	{name: "deployment-k8s", overrides: map[string]string{"CONTAINER_DEPLOYMENT": "k8s", "TEMPLATE_AUTO_BUILD": "false", "NETWORK_BANDWIDTH": "250kbps", "MAX_SANDBOX_INSTANCES": "0", "MAX_SANDBOXES_PER_USER": "0"}},
	{name: "deployment-empty", overrides: map[string]string{"CONTAINER_DEPLOYMENT": "", "TEMPLATE_AUTO_BUILD": "", "DEBUG": "t", "MAX_SANDBOX_INSTANCES": "0"}},
}

// goldenErrors are bad values, one at a time, whose errors are golden.
var goldenErrors = [][2]string{
	{"HOST", "not an ip"}, {"PORT", "0"}, {"PORT", "70000"}, {"PORT", "x"}, {"API_KEYS", "nouser"}, {"API_KEYS", ":u"},
	{"AGENTBOX_DATA_DIR", ""}, {"SANDBOX_TEMPLATES", "{not json"}, {"SANDBOX_TEMPLATES", `{"x":"a b"}`}, {"SANDBOX_TEMPLATES", `{"dir:x":"host"}`},
	{"SANDBOX_TEMPLATES", `{"x":"dir:relative"}`}, {"DEFAULT_SANDBOX_TYPE", "g/pu"}, {"DEFAULT_SANDBOX_TYPE", "[1]"}, {"DEFAULT_SANDBOX_TYPE", ""},
	{"POOL_SIZE", "-2"}, {"POOL_SIZE", "1001"}, {"POOL_SIZE", "200"}, {"POOL_MAX_USES", "0"}, {"POOL_WARM_RESET", "maybe"}, {"AUTO_CLEANUP", "maybe"},
	{"READONLY_MOUNTS", "{not json"}, {"READONLY_MOUNTS", `{"rel":"/x"}`}, {"MAX_SANDBOX_INSTANCES", "-1"}, {"MAX_SANDBOXES_PER_USER", "200"},
	{"HEARTBEAT_TIMEOUT", "-1"}, {"HEARTBEAT_TIMEOUT", "soon"}, {"MCP_SESSION_TIMEOUT", "x"}, {"SERVICE_START_TIMEOUT", "-5"},
	{"DEFAULT_TIMEOUT", "999999"}, {"DEFAULT_TIMEOUT", "0"}, {"MAX_TIMEOUT", "1"}, {"PAUSED_TTL", "x"}, {"CGROUP_FAVOR_DYNMODS", "2"},
	{"PAUSE_RECLAIM", "x"}, {"DEFAULT_MEMORY", "lots"}, {"DEFAULT_MEMORY", "16G"}, {"DEFAULT_MEMORY", "0"}, {"DEFAULT_CPUS", "0"}, {"DEFAULT_CPUS", "x"},
	{"DEFAULT_PIDS", "7"}, {"SANDBOX_NOFILE_SOFT", "63"}, {"SANDBOX_NOFILE_SOFT", "8192"}, {"SANDBOX_NOFILE_HARD", "2000000"}, {"SANDBOX_ID_BASE", "10"},
	{"SANDBOX_ID_RANGES", "0"}, {"DEFAULT_DISK", "-1G"}, {"DEFAULT_TMP", "NaN"}, {"MAX_MEMORY", "1e30G"}, {"MAX_CPUS", "-1"}, {"MAX_PIDS", "1"},
	{"MAX_DISK", "x"}, {"DISK_RESERVE", "x"}, {"DISK_RESERVE", ""}, {"DISK_OVERCOMMIT", "0"}, {"DISK_OVERCOMMIT", "101"}, {"MAX_UPLOAD_SIZE", "0"},
	{"MAX_EXEC_OUTPUT", "x"}, {"MAX_EXEC_OUTPUT", "1G"}, {"MAX_REQUESTS_PER_USER", "-1"}, {"REQUEST_MEMORY", "0"}, {"REQUEST_MEMORY", "100M"},
	{"MAX_CONNECTIONS", "-1"}, {"MAX_CONNECTIONS_PER_IP", "x"}, {"HEADER_TIMEOUT", "0"}, {"BODY_TIMEOUT", "0"}, {"BODY_TIMEOUT", "x"},
	{"CONTAINER_DEPLOYMENT", "agentrun"}, {"CONTAINER_DEPLOYMENT", "gvisor"}, {"CONTAINER_DEPLOYMENT", "vm"}, {"DOCKER_BACKEND", "sure"},
	{"DOCKER_HOST", "/var/run/docker.sock"}, {"KUBE_BACKEND", "x"}, {"K8S_NAMESPACE", "Bad_NS"}, {"K8S_NAMESPACE", ""}, {"K8S_INSTANCE", "a.b"},
	{"K8S_RUNTIME_CLASS", "x y"}, {"K8S_NODE_SELECTOR", "novalue"}, {"K8S_NODE_SELECTOR", "a=b c"}, {"K8S_SECCOMP_PROFILE", "Unconfined"},
	{"K8S_USER_NAMESPACES", "x"}, {"WORKERS", "0"}, {"WORKERS", "33"}, {"REDIS_ENABLED", "x"}, {"REDIS_SERVER", ""}, {"REDIS_SERVER", "unix:/run/redis.sock"},
	{"REDIS_PORT", "70000"}, {"REDIS_DB", "-1"}, {"REDIS_KEY_PREFIX", "has space"}, {"REDIS_KEY_PREFIX", ""}, {"REDIS_CONTAINER_POOL_KEY", ""},
	{"REDIS_TIMEOUT", "x"}, {"NODE_ID", "a b"}, {"NODE_MAX_SANDBOXES", "-1"}, {"CLUSTER_SECRET", "short"}, {"CLUSTER_MAX_CONNS", "0"},
	{"CLUSTER_MAX_PER_USER", "256"}, {"CLUSTER_MAX_PER_USER", "-1"}, {"CLUSTER_PLACEMENT", "random"}, {"KUBE_NODE_NAME", "Bad_Name"},
	{"KUBE_NODE_ADDRESS", "node1"}, {"KUBE_NODE_PORT", "0"}, {"FILE_SYSTEM", "nfs"}, {"NETWORK", "maybe"}, {"DEFAULT_NETWORK_MODE", "host"},
	{"NETWORK_BRIDGE", "a-very-long-bridge-name"}, {"NETWORK_SUBNET", "10.0.0.0/30"}, {"NETWORK_SUBNET", "fd00::/64"}, {"NETWORK_DNS", "resolver"},
	{"NETWORK_ALLOW_HOST_PORTS", "0"}, {"NETWORK_ALLOW_HOST_PORTS", "http"}, {"NETWORK_ALLOW_PRIVATE", "10.0.0.1"}, {"NETWORK_BANDWIDTH", "fast"},
	{"NETWORK_MAX_CONNS", "-1"}, {"PREVIEW_DOMAIN", "127.0.0.1"}, {"PREVIEW_DOMAIN", "*.example.com"}, {"PREVIEW_DOMAIN", ".example.com"},
	{"PREVIEW_MAX_PER_USER", "-1"}, {"PREVIEW_HEADER_TIMEOUT", "0"}, {"DESKTOP_NOVNC_DIR", "novnc"}, {"TEMPLATE_DIR", "templates"},
	{"TEMPLATE_MAX_IMPORT", "x"}, {"TEMPLATE_MAX_PULLS", "0"}, {"TEMPLATE_MAX_PULLS", "65"}, {"TEMPLATE_AUTO_BUILD", "base,python"},
	{"TEMPLATE_AUTO_PULL", "x"}, {"STORAGE_QUOTA_PER_USER", "x"}, {"MAX_TEMPLATES_PER_USER", "-1"}, {"SNAPSHOT_MAX_SIZE", "-1"},
	{"AGENTBOX_REGISTRY_AUTH", "[1]"}, {"REGISTRY_MIRRORS", `{"docker.io":["ftp://x"]}`}, {"REGISTRY_MIRRORS", `{"a/b":[]}`}, {"REGISTRY_MIRRORS", "[]"},
	{"RUNTIME_SANDBOX_REGISTRY", "a b"}, {"RUNTIME_SANDBOX_IMAGE_NAMESPACE", "a//b"}, {"RUNTIME_SANDBOX_IMAGE_TAG", "a:b"}, {"RUNTIME_SANDBOX_IMAGE_TAG", ""},
	{"DEBUG", "x"}, {"LOG_LEVEL", "trace"}, {"LOG_FORMAT", "xml"}, {"NO_SUCH_SETTING", "1"},
}

func TestGoldenSettingsListing(t *testing.T) {
	var b strings.Builder
	s := Settings()
	sort.Slice(s, func(i, j int) bool { return s[i][0] < s[j][0] })
	for _, row := range s {
		def := row[1]
		if row[0] == "AGENTBOX_DATA_DIR" {
			def = "<DefaultDataDir>" // root's and a rootless user's differ
		}
		// As agentbox serve --help-settings prints them.
		fmt.Fprintf(&b, "%-24s default %-28q %s\n", row[0], def, row[2])
	}
	checkGolden(t, "settings-listing.txt", b.String())
}

func TestGoldenResolved(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			envFile := ""
			if tc.env != "" {
				envFile = filepath.Join(dir, tc.name+".env")
				if err := os.WriteFile(envFile, []byte(tc.env), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c, err := Load(envFile, tc.environ, tc.overrides)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "resolved-"+tc.name+".txt", dumpConfig(c))
		})
	}
}

func TestGoldenErrors(t *testing.T) {
	var b strings.Builder
	for _, nv := range goldenErrors {
		_, err := Load("", nil, map[string]string{nv[0]: nv[1]})
		fmt.Fprintf(&b, "%s=%q: %v\n", nv[0], nv[1], err)
	}
	dir := t.TempDir()
	for _, f := range [][2]string{{"unknown", "PORTT=1\n"}, {"malformed", "PORT\n"}, {"bad-value", "PORT=99999\n"}} {
		name, content := f[0], f[1]
		p := filepath.Join(dir, name+".env")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(p, nil, nil)
		fmt.Fprintf(&b, "file %s: %v\n", name, strings.ReplaceAll(fmt.Sprint(err), dir, "<dir>"))
	}
	_, err := Load(filepath.Join(dir, "missing.env"), nil, nil)
	fmt.Fprintf(&b, "file missing: %v\n", strings.ReplaceAll(fmt.Sprint(err), dir, "<dir>"))
	checkGolden(t, "errors.txt", b.String())
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got == string(want) {
		return
	}
	// The lines of each side the other lacks (and their order, if the
	// same lines come in another order).
	count := map[string]int{}
	for _, l := range strings.Split(string(want), "\n") {
		count[l]++
	}
	for _, l := range strings.Split(got, "\n") {
		count[l]--
	}
	for l, n := range count {
		switch {
		case n > 0:
			t.Errorf("%s: missing %q", path, l)
		case n < 0:
			t.Errorf("%s: new %q", path, l)
		}
	}
	t.Errorf("%s differs (run with -update-golden to rewrite it)", path)
}

// dumpConfig prints every exported field of c by its path (fields of
// embedded structs by their own names, as Go promotes them; a value with a
// String method as it prints), one a line,
// sorted; paths of this machine are replaced by placeholders.
func dumpConfig(c *Config) string {
	var lines []string
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			fv := v.Field(i)
			if f.Anonymous && fv.Kind() == reflect.Struct {
				walk(prefix, fv)
				continue
			}
			name := prefix + f.Name
			_, stringer := fv.Interface().(fmt.Stringer)
			if fv.Kind() == reflect.Struct && !stringer {
				walk(name+".", fv)
				continue
			}
			lines = append(lines, fmt.Sprintf("%s = %+v", name, fv.Interface()))
		}
	}
	walk("", reflect.ValueOf(c).Elem())
	sort.Strings(lines)
	out := strings.Join(lines, "\n") + "\n"
	if wd, err := os.Getwd(); err == nil {
		out = strings.ReplaceAll(out, wd, "<cwd>")
	}
	return strings.ReplaceAll(out, DefaultDataDir(), "<DefaultDataDir>")
}
