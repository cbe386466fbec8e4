package agent

import (
	"sort"
	"strings"
)

// defaultPath is used when neither the agent nor the request sets PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// reservedEnvPrefix marks variables meant for the agent alone (the access
// token, ...). They are removed before anything is spawned or reported.
const reservedEnvPrefix = "AGENTBOX_"

// envMap turns KEY=VALUE pairs into a map, dropping reserved variables.
// Later duplicates win, as in execve.
func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.HasPrefix(k, reservedEnvPrefix) {
			continue
		}
		m[k] = v
	}
	return m
}

// processEnv builds a child's environment: the agent's defaults, then the
// identity of the user it runs as, then the request's variables (which
// win over everything).
func (s *Server) processEnv(u *User, extra map[string]string, pty bool) []string {
	s.envMu.RLock()
	m := make(map[string]string, len(s.defaultEnv)+len(extra)+5)
	for k, v := range s.defaultEnv {
		m[k] = v
	}
	s.envMu.RUnlock()
	m["HOME"], m["USER"], m["LOGNAME"], m["SHELL"] = u.Home, u.Name, u.Name, u.Shell
	if m["PATH"] == "" {
		m["PATH"] = defaultPath
	}
	if pty && m["TERM"] == "" {
		m["TERM"] = "xterm-256color"
	}
	for k, v := range extra {
		if k != "" && !strings.Contains(k, "=") {
			m[k] = v
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, len(keys))
	for i, k := range keys {
		env[i] = k + "=" + m[k]
	}
	return env
}

// envValue returns the value of key in a KEY=VALUE list ("" if absent).
func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}
