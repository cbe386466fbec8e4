package client

import "time"

// Resources are a sandbox's hard limits. Zero fields mean "the server's
// default" in a request.
type Resources struct {
	MemoryBytes int64   `json:"memory,omitempty"` // bytes of memory (swap is capped alike)
	CPUs        float64 `json:"cpus,omitempty"`   // CPU quota in cores, e.g. 0.5
	PIDs        int64   `json:"pids,omitempty"`   // processes and threads
	DiskBytes   int64   `json:"disk,omitempty"`   // bytes of writable disk
}

// Network is a sandbox's network policy.
type Network struct {
	Mode     string   `json:"mode,omitempty"`      // "none" or "egress"
	AllowOut []string `json:"allow_out,omitempty"` // CIDRs or domain names
	DenyOut  []string `json:"deny_out,omitempty"`
	// Rules send HTTPS to their hosts through the egress broker, which
	// sets headers and replaces secrets' placeholders (docs/secrets.md).
	Rules []EgressRule `json:"rules,omitempty"`
}

// EgressRule is one host's request transformation in the egress broker.
// In header values, ${secret:NAME} is the caller's secret NAME.
type EgressRule struct {
	Host    string            `json:"host"`
	Methods []string          `json:"methods,omitempty"`
	Paths   []string          `json:"paths,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Secrets []string          `json:"secrets,omitempty"`
}

// Sandbox is a sandbox as the server describes it.
type Sandbox struct {
	ID          string            `json:"id"`
	Template    string            `json:"template"`
	Type        string            `json:"type,omitempty"`
	State       string            `json:"state"` // "running", "paused", "stopped" or "lost" (its replica is gone)
	CreatedAt   time.Time         `json:"created_at"`
	EndAt       time.Time         `json:"end_at"` // when the server destroys it
	Metadata    map[string]string `json:"metadata,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Resources   Resources         `json:"resources"`
	Network     *Network          `json:"network,omitempty"`
	SessionKey  string            `json:"session_key,omitempty"`
	AccessToken string            `json:"access_token"` // for the sandbox's data plane (X-Access-Token)
	FromPool    bool              `json:"from_pool,omitempty"`
	AutoPause   bool              `json:"auto_pause,omitempty"`
	// Isolation is the level it runs at: "container" or "gvisor".
	Isolation string `json:"isolation,omitempty"`
	// Volumes are the volumes mounted at create.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// Provider names the remote provider the sandbox runs at ("e2b"),
	// empty for a sandbox of the server's host.
	Provider string `json:"provider,omitempty"`
	// PausedAt and RemainingSeconds are set while the sandbox is paused:
	// when it was paused and the running time Resume gives back (EndAt is
	// then when the server deletes the paused sandbox; zero: never).
	PausedAt         *time.Time `json:"paused_at,omitempty"`
	RemainingSeconds float64    `json:"remaining_seconds,omitempty"`
}

// Stats are a sandbox's current resource usage and limit counters.
type Stats struct {
	MemoryBytes    int64   `json:"memory_bytes"`
	MemoryMaxBytes int64   `json:"memory_max_bytes"` // peak
	MemoryLimit    int64   `json:"memory_limit"`
	CPUSeconds     float64 `json:"cpu_seconds"`
	PIDs           int64   `json:"pids"`
	PIDsLimit      int64   `json:"pids_limit"`
	OOMKills       int64   `json:"oom_kills"`
	PIDsLimitHits  int64   `json:"pids_limit_hits"` // forks refused by the pids limit
	DiskUsedBytes  int64   `json:"disk_used_bytes"`
	DiskTotalBytes int64   `json:"disk_total_bytes"`
	NetworkDenials int64   `json:"network_denials"`  // packets the egress policy rejected
	NetworkTxBytes int64   `json:"network_tx_bytes"` // bytes the sandbox sent
	NetworkRxBytes int64   `json:"network_rx_bytes"` // bytes the sandbox received
}

// LogEntry is one lifecycle event or agent log line of a sandbox.
type LogEntry struct {
	Timestamp time.Time      `json:"timestamp"`
	Level     string         `json:"level"`
	Message   string         `json:"message"`
	Fields    map[string]any `json:"fields,omitempty"`
}

// ServerInfo says what a server is and can do.
type ServerInfo struct {
	Version      string            `json:"version"`
	Backend      string            `json:"backend"`
	Capabilities map[string]any    `json:"capabilities,omitempty"`
	Templates    map[string]string `json:"templates,omitempty"`
	Pools        map[string]int    `json:"pools,omitempty"` // ready sandboxes per warm pool (by template)
	User         string            `json:"user,omitempty"`  // the user the API key belongs to
	// Isolation is the isolation levels the server creates sandboxes at
	// and the one a create of this user naming none gets.
	Isolation *IsolationInfo `json:"isolation,omitempty"`
}

// IsolationInfo is the server's isolation levels ("container",
// "gvisor") and the caller's default.
type IsolationInfo struct {
	Levels  []string `json:"levels"`
	Default string   `json:"default"`
}

// Entry is a file, directory or other filesystem entry inside a sandbox.
type Entry struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"`
	Type          string    `json:"type"` // "file", "dir", "symlink" or "other"
	Size          int64     `json:"size"`
	Mode          string    `json:"mode,omitempty"` // e.g. "-rw-r--r--"
	Owner         string    `json:"owner,omitempty"`
	Group         string    `json:"group,omitempty"`
	ModifiedAt    time.Time `json:"modified_at"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}

// IsDir reports whether e is a directory.
func (e *Entry) IsDir() bool { return e.Type == "dir" }

// seconds converts a duration to the API's wire unit.
func seconds(d time.Duration) float64 { return d.Seconds() }
