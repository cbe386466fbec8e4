package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/settings"
)

// RedisSettings are the REDIS_* settings (internal/settings), in
// agentscope's names and meanings. The daemon gives them to RedisConfig.
type RedisSettings struct {
	Enabled   bool          `env:"REDIS_ENABLED" envDefault:"false" help:"keep sandbox records, sessions, pool membership and the node list in Redis (shared by several daemons) instead of the local bbolt file; see docs/scale-out.md"`
	Server    RedisHost     `env:"REDIS_SERVER" envDefault:"localhost" help:"Redis host name or address"`
	Port      int           `env:"REDIS_PORT" envDefault:"6379" min:"1" max:"65535" help:"Redis port"`
	DB        int           `env:"REDIS_DB" envDefault:"0" min:"0" max:"1048576" help:"Redis database number"`
	User      string        `env:"REDIS_USER" envDefault:"" help:"Redis ACL user name (empty: the default user)"`
	Password  string        `env:"REDIS_PASSWORD" envDefault:"" help:"Redis password"`
	KeyPrefix KeyPrefix     `env:"REDIS_KEY_PREFIX" envDefault:"agentbox" help:"first part of every Redis key of records and nodes; deployments sharing one Redis database need different prefixes"`
	PoolKey   KeyPrefix     `env:"REDIS_CONTAINER_POOL_KEY" envDefault:"_runtime_sandbox_container_container_pool" help:"first part of the Redis keys of warm-pool membership (one set per pool), as in agentscope"`
	Timeout   time.Duration `env:"REDIS_TIMEOUT" envDefault:"2" help:"seconds a Redis command may take; with Redis down, requests that need state fail with 503 after it"`
}

var redisDefaults = settings.Defaults[RedisSettings]()

// RedisHost is a Redis host name or address.
type RedisHost string

// UnmarshalText checks the name.
func (h *RedisHost) UnmarshalText(b []byte) error {
	if v := string(b); v == "" || strings.ContainsAny(v, "/ \t") {
		return fmt.Errorf("want a host name or address")
	}
	*h = RedisHost(b)
	return nil
}

// KeyPrefix starts Redis keys: printable, no spaces, 1 to 200 characters.
type KeyPrefix string

// UnmarshalText checks the prefix.
func (p *KeyPrefix) UnmarshalText(b []byte) error {
	v := string(b)
	if v == "" || len(v) > 200 {
		return fmt.Errorf("want 1 to 200 characters")
	}
	for _, r := range v {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("want no spaces or control characters")
		}
	}
	*p = KeyPrefix(v)
	return nil
}
