package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// agentscope's Redis .env lines load into the Redis settings; the port
// key, which means nothing here, is reported as ignored; bad values name
// their setting.
func TestRedisSettings(t *testing.T) {
	env := filepath.Join(t.TempDir(), ".env")
	os.WriteFile(env, []byte("REDIS_ENABLED=True\nREDIS_SERVER=redis.internal\nREDIS_PORT=6380\nREDIS_DB=2\n"+
		"REDIS_USER=agent\nREDIS_PASSWORD=pw\nREDIS_PORT_KEY=_ports\nREDIS_CONTAINER_POOL_KEY=_pool\n"), 0o600)
	c, err := Load(env, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := RedisConfig{Enabled: true, Server: "redis.internal", Port: 6380, DB: 2, User: "agent", Password: "pw",
		KeyPrefix: "agentbox", PoolKey: "_pool", Timeout: 2 * time.Second}
	if c.Redis != want || !slices.Contains(c.Ignored, "REDIS_PORT_KEY") {
		t.Fatalf("redis config %+v, ignored %v", c.Redis, c.Ignored)
	}
	def, err := Load("", nil, nil)
	if err != nil || def.Redis.Enabled || def.Redis.Server != "localhost" || def.Redis.Port != 6379 ||
		def.Redis.PoolKey != "_runtime_sandbox_container_container_pool" {
		t.Fatalf("defaults: %+v %v", def.Redis, err)
	}
	for name, v := range map[string]string{"REDIS_PORT": "70000", "REDIS_DB": "-1", "REDIS_SERVER": "unix:/run/redis.sock",
		"REDIS_KEY_PREFIX": "has space", "REDIS_CONTAINER_POOL_KEY": "", "NODE_ID": "a b", "REDIS_TIMEOUT": "x"} {
		if _, err := Load("", nil, map[string]string{name: v}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: %v", name, v, err)
		}
	}
}
