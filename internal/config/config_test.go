package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c, err := Load("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr() != "127.0.0.1:8000" || len(c.APIKeys) != 0 || !c.AutoCleanup || c.DefaultTimeout != 300*time.Second ||
		c.Templates["base"] != "host" || c.DefaultTypes[0] != "base" || c.Resources.PIDs != 256 || !c.Loopback() {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestPrecedenceAndNames(t *testing.T) {
	dir := t.TempDir()
	env := filepath.Join(dir, ".env")
	os.WriteFile(env, []byte("# agentscope style\nPORT=9000\nexport POOL_SIZE=\"3\"\nBEARER_TOKEN=file-token\nDEFAULT_SANDBOX_TYPE=[\"base\",\"filesystem\"]\nPORT_RANGE=[49152,59152]\n"), 0o600)
	c, err := Load(env, []string{"POOL_SIZE=5", "UNRELATED=1", "API_KEYS=k1:alice,k2:bob"}, map[string]string{"PORT": "9100"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 9100 || c.PoolSize != 5 || c.APIKeys["file-token"] != "default" || c.APIKeys["k2"] != "bob" ||
		len(c.DefaultTypes) != 2 || len(c.Ignored) != 1 || c.Ignored[0] != "PORT_RANGE" {
		t.Fatalf("merged config: %+v", c)
	}
}

func TestErrorsNameTheSetting(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.env")
	os.WriteFile(bad, []byte("PORTT=1\n"), 0o600)
	if _, err := Load(bad, nil, nil); err == nil || !strings.Contains(err.Error(), "PORTT") {
		t.Fatalf("unknown file setting: %v", err)
	}
	for name, value := range map[string]string{
		"PORT": "70000", "POOL_SIZE": "-2", "AUTO_CLEANUP": "maybe", "DEFAULT_MEMORY": "lots",
		"HOST": "not an ip", "API_KEYS": "nouser", "READONLY_MOUNTS": "{not json", "NETWORK_SUBNET": "10.0.0.0/30",
		"DEFAULT_SANDBOX_TYPE": "g/pu", "REGISTRY_MIRRORS": `{"docker.io":["ftp://x"]}`, "AGENTBOX_REGISTRY_AUTH": "[1]",
		"RUNTIME_SANDBOX_IMAGE_TAG": "a:b", "RUNTIME_SANDBOX_REGISTRY": "a b", "TEMPLATE_MAX_PULLS": "0", "SANDBOX_TEMPLATES": `{"x":"a b"}`, "WORKERS": "33", "CONTAINER_DEPLOYMENT": "agentrun", "DEFAULT_TIMEOUT": "999999",
		"K8S_NAMESPACE": "Bad_NS", "K8S_SECCOMP_PROFILE": "Unconfined", "K8S_INSTANCE": "a.b", "K8S_RUNTIME_CLASS": "x y", "K8S_NODE_SELECTOR": "novalue",
	} {
		_, err := Load("", nil, map[string]string{name: value})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v", name, value, err)
		}
	}
}

func TestKubeSettings(t *testing.T) {
	c, err := Load("", nil, map[string]string{"CONTAINER_DEPLOYMENT": "k8s", "K8S_NAMESPACE": "sandboxes", "KUBECONFIG_PATH": "/etc/kube.conf", "K8S_AGENT_IMAGE": "reg/agent:1", "K8S_NODE_SELECTOR": "agentbox.dev/node=true, zone=a"})
	if err != nil {
		t.Fatal(err)
	}
	k := c.Kube
	if c.Deployment != "k8s" || !k.Enabled || k.Namespace != "sandboxes" || k.Kubeconfig != "/etc/kube.conf" || k.AgentImage != "reg/agent:1" ||
		k.Instance != "agentbox" || len(k.NodeSelector) != 2 || k.NodeSelector["agentbox.dev/node"] != "true" || k.SeccompProfile != "RuntimeDefault" || k.UserNamespaces || slices.Contains(c.Ignored, "K8S_NAMESPACE") {
		t.Fatalf("kube config = %+v (deployment %s, ignored %v)", k, c.Deployment, c.Ignored)
	}
	if c, err := Load("", nil, map[string]string{"CONTAINER_DEPLOYMENT": "kube"}); err != nil || c.Deployment != "k8s" || !c.Kube.Enabled {
		t.Fatalf("--backend kube: %+v, %v", c.Kube, err)
	}
	if c, err := Load("", nil, nil); err != nil || c.Kube.Enabled || c.Kube.Namespace != "default" {
		t.Fatalf("default: %+v, %v", c.Kube, err)
	}
}

func TestSizesAndBandwidth(t *testing.T) {
	for in, want := range map[string]int64{"512M": 512 << 20, "1G": 1 << 30, "1.5GiB": 3 << 29, "4096": 4096, "2k": 2048} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v", in, got, err)
		}
	}
	c, err := Load("", nil, map[string]string{"NETWORK_BANDWIDTH": "100M"})
	if err != nil || c.NetworkBandwidth != 100_000_000 {
		t.Fatalf("bandwidth = %d, %v", c.NetworkBandwidth, err)
	}
}

// TestDocumented keeps docs/configuration.md listing every setting.
func TestDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Settings() {
		if !strings.Contains(string(doc), "`"+s[0]+"`") {
			t.Errorf("setting %s is not in docs/configuration.md", s[0])
		}
	}
}

// A sandbox type maps to its SANDBOX_TEMPLATES entry, else to the image
// agentscope names for it.
func TestTypeTemplate(t *testing.T) {
	c, err := Load("", nil, map[string]string{"SANDBOX_TEMPLATES": `{"base":"host","py":"python:3.12"}`, "DEFAULT_SANDBOX_TYPE": "base,browser"})
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string]string{"base": "host", "py": "python:3.12", "browser": "agentscope/runtime-sandbox-browser:latest"} {
		if got := c.TypeTemplate(typ); got != want {
			t.Errorf("type %s: %q, want %q", typ, got, want)
		}
	}
	c, err = Load("", nil, map[string]string{"RUNTIME_SANDBOX_REGISTRY": "registry.example.com:5000/", "RUNTIME_SANDBOX_IMAGE_NAMESPACE": "team/sandboxes", "RUNTIME_SANDBOX_IMAGE_TAG": "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.TypeTemplate("mobile"); got != "registry.example.com:5000/team/sandboxes/runtime-sandbox-mobile:v2" {
		t.Errorf("mobile: %q", got)
	}
	// By default browser is the browser template's (templates/browser),
	// gui the desktop template's (templates/desktop: computer on a whole
	// desktop, and the noVNC desktop URL).
	if c.TypeTemplate("browser") != "browser" || c.TypeTemplate("gui") != "desktop" {
		t.Errorf("browser, gui: %q, %q", c.TypeTemplate("browser"), c.TypeTemplate("gui"))
	}
	c, err = Load("", nil, map[string]string{"RUNTIME_SANDBOX_IMAGE_NAMESPACE": ""})
	if err != nil || c.TypeTemplate("mobile") != "runtime-sandbox-mobile:latest" {
		t.Errorf("no namespace: %q %v", c.TypeTemplate("mobile"), err)
	}
	c, err = Load("", nil, map[string]string{"REGISTRY_MIRRORS": `{"docker.io":["https://m1.example","http://127.0.0.1:5000"]}`,
		"TEMPLATE_ADMIN_USERS": "default, ops", "AGENTBOX_REGISTRY_AUTH": `{"r.example":{"token":"x"}}`})
	if err != nil || len(c.RegistryMirrors["docker.io"]) != 2 || len(c.TemplateAdmins) != 2 || c.TemplateAdmins[1] != "ops" || c.RegistryAuth == "" {
		t.Errorf("template settings: %+v %v", c, err)
	}
}

// agentscope's sandbox server .env, as its documentation writes it, loads
// with every REDIS_* setting in the meaning agentscope gives it.
func TestAgentscopeRedisSettings(t *testing.T) {
	env := filepath.Join(t.TempDir(), ".env")
	os.WriteFile(env, []byte(`# .env
# Service settings
HOST="0.0.0.0"
PORT=8000
WORKERS=4
DEBUG=False
BEARER_TOKEN=your-secret-token

# Sandbox Manager settings
DEFAULT_SANDBOX_TYPE=base
POOL_SIZE=10
AUTO_CLEANUP=True
CONTAINER_PREFIX_KEY=agent-runtime-container-
PORT_RANGE=[49152,59152]

# Redis settings
REDIS_ENABLED=True
REDIS_SERVER=redis.internal
REDIS_PORT=6380
REDIS_DB=2
REDIS_USER=your-redis-user
REDIS_PASSWORD=your-redis-password
REDIS_PORT_KEY=_agent_runtime_container_occupied_ports
REDIS_CONTAINER_POOL_KEY=_agent_runtime_container_container_pool

# K8S settings
K8S_NAMESPACE=default
KUBECONFIG_PATH=
`), 0o600)
	c, err := Load(env, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Redis
	if !r.Enabled || r.Server != "redis.internal" || r.Port != 6380 || r.DB != 2 || r.User != "your-redis-user" ||
		r.Password != "your-redis-password" || r.PoolKey != "_agent_runtime_container_container_pool" || c.Workers != 4 {
		t.Fatalf("redis settings: %+v workers %d", r, c.Workers)
	}
	if !slices.Contains(c.Ignored, "REDIS_PORT_KEY") {
		t.Fatalf("REDIS_PORT_KEY not reported as ignored: %v", c.Ignored)
	}
	// pydantic's other boolean spellings.
	for v, want := range map[string]bool{"t": true, "Y": true, "on": true, "F": false, "n": false, "off": false} {
		c, err := Load("", nil, map[string]string{"REDIS_ENABLED": v})
		if err != nil || c.Redis.Enabled != want {
			t.Errorf("REDIS_ENABLED=%s: %v %v", v, c.Redis.Enabled, err)
		}
	}
}

func TestProviderSettings(t *testing.T) {
	c, err := Load("", nil, map[string]string{"SANDBOX_PROVIDER": "e2b", "E2B_API_KEY": "e2b_k", "E2B_API_URL": "http://127.0.0.1:9/",
		"PROVIDER_ROUTES": `{"gpu":"e2b:gpu","base":"overflow:e2b:base"}`})
	if err != nil {
		t.Fatal(err)
	}
	if c.ProviderAPI() != "http://127.0.0.1:9" || c.ProviderRoutes.Always()["gpu"] != "e2b:gpu" || c.ProviderRoutes.Overflow()["base"] != "e2b:base" ||
		len(c.ProviderRoutes.Always()) != 1 {
		t.Fatalf("resolved: %q %v %v", c.ProviderAPI(), c.ProviderRoutes.Always(), c.ProviderRoutes.Overflow())
	}
	if c, err := Load("", nil, map[string]string{"SANDBOX_PROVIDER": "e2b", "E2B_API_KEY": "k"}); err != nil || c.ProviderAPI() != "https://api.e2b.app" {
		t.Fatalf("default API: %v", err)
	}
	c, err = Load("", nil, map[string]string{"SANDBOX_PROVIDER": "daytona", "DAYTONA_API_KEY": "k", "DAYTONA_TARGET": "eu",
		"PROVIDER_ROUTES": `{"base":"overflow:daytona:base"}`})
	if err != nil || c.DaytonaAPI() != "https://app.daytona.io/api" || c.DaytonaTarget != "eu" || c.ProviderRoutes.Overflow()["base"] != "daytona:base" {
		t.Fatalf("daytona: %v", err)
	}
	if c, err := Load("", nil, map[string]string{"SANDBOX_PROVIDER": "daytona", "DAYTONA_API_KEY": "k", "DAYTONA_SERVER_URL": "http://a/api",
		"DAYTONA_API_URL": "http://b/api"}); err != nil || c.DaytonaAPI() != "http://b/api" {
		t.Fatalf("DAYTONA_API_URL wins: %v", err)
	}
	for _, bad := range []map[string]string{
		{"SANDBOX_PROVIDER": "e2b"},     // no key
		{"SANDBOX_PROVIDER": "daytona"}, // no key
		{"SANDBOX_PROVIDER": "daytona", "DAYTONA_API_KEY": "k", "PROVIDER_ROUTES": `{"base":"e2b:base"}`}, // another provider's route
		{"SANDBOX_PROVIDER": "daytona", "DAYTONA_API_KEY": "k", "DAYTONA_SERVER_URL": "ftp://x"},
		{"PROVIDER_ROUTES": `{"base":"e2b:base"}`}, // no provider
		{"SANDBOX_PROVIDER": "e2b", "E2B_API_KEY": "k", "PROVIDER_ROUTES": `{"base":"host"}`},
		{"SANDBOX_PROVIDER": "e2b", "E2B_API_KEY": "k", "E2B_API_URL": "ftp://x"},
		{"SANDBOX_PROVIDER": "e2b", "E2B_API_KEY": "k", "PROVIDER_LEASE": "10"},
	} {
		if _, err := Load("", nil, bad); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}
