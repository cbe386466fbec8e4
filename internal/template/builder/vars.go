package builder

import (
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// proxyArgs are Docker's predefined build args: usable without an ARG,
// passed to RUN steps, and left out of the cache key.
var proxyArgs = []string{
	"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy",
	"FTP_PROXY", "ftp_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy",
}

// platformArgs are BuildKit's automatic platform args, global like meta
// args (a stage sees them after a bare ARG NAME).
func platformArgs() map[string]string {
	p := "linux/" + runtime.GOARCH
	return map[string]string{
		"TARGETPLATFORM": p, "TARGETOS": "linux", "TARGETARCH": runtime.GOARCH, "TARGETVARIANT": "",
		"BUILDPLATFORM": p, "BUILDOS": "linux", "BUILDARCH": runtime.GOARCH, "BUILDVARIANT": "",
	}
}

// kvList is an ordered KEY=VALUE list where a later set replaces.
type kvList []string

func (l kvList) get(k string) (string, bool) {
	for _, e := range l {
		if kk, v, _ := strings.Cut(e, "="); kk == k {
			return v, true
		}
	}
	return "", false
}

func (l kvList) set(k, v string) kvList {
	for i, e := range l {
		if kk, _, _ := strings.Cut(e, "="); kk == k {
			out := slices.Clone(l)
			out[i] = k + "=" + v
			return out
		}
	}
	return append(slices.Clone(l), k+"="+v)
}

// stageVars are the variables of a stage: declared ARGs with a value and
// the image env. ENV always wins over an ARG of the same name.
type stageVars struct {
	args kvList // ARGs in scope with a value, in declaration order
	env  *[]string
}

// getter is the expansion environment.
func (v stageVars) getter() shell.EnvGetter {
	all := append(slices.Clone([]string(v.args)), (*v.env)...)
	return shell.EnvsFromSlice(all)
}

// runEnv is a RUN step's environment: the image env plus the build args
// it does not override, plus proxy args given on the command line.
func (v stageVars) runEnv(proxies map[string]string) []string {
	env := kvList(slices.Clone(*v.env))
	for _, a := range v.args {
		k, val, _ := strings.Cut(a, "=")
		if _, ok := env.get(k); !ok {
			env = env.set(k, val)
		}
	}
	keys := make([]string, 0, len(proxies))
	for k := range proxies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := env.get(k); !ok {
			env = env.set(k, proxies[k])
		}
	}
	return env
}

// cacheArgs are the build args that make a RUN step's cache key (Docker
// keys RUN on the args in scope, except the proxy ones).
func (v stageVars) cacheArgs() string {
	var out []string
	for _, a := range v.args {
		k, _, _ := strings.Cut(a, "=")
		if !slices.Contains(proxyArgs, k) {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\x00")
}
