package builder

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestUnsupportedAndBadInputFailWithLine(t *testing.T) {
	cases := []struct {
		name, df string
		line     int
		msg      string
	}{
		{"unknown", "FROM debian:bookworm\nFROBNICATE x\n", 2, "unknown instruction"},
		{"platform", "FROM --platform=linux/arm64 debian:bookworm\n", 1, "--platform is not supported"},
		{"security", "FROM debian:bookworm\nRUN --security=insecure true\n", 2, "RUN --security is not supported"},
		{"ssh", "FROM debian:bookworm\n\nRUN --mount=type=ssh true\n", 3, "type=ssh is not supported"},
		{"bind context", "FROM debian:bookworm\nRUN --mount=type=bind,target=/src true\n", 2, "bind of the build context"},
		{"bad mount key", "FROM debian:bookworm\nRUN --mount=type=cache,bogus=1 true\n", 2, "unexpected key 'bogus'"},
		{"network host", "FROM debian:bookworm\nRUN --network=host true\n", 2, "--network=host is not supported"},
		{"bad flag", "FROM debian:bookworm\nCOPY --bogus=1 a /b\n", 2, "unknown flag: --bogus"},
		{"parents", "FROM debian:bookworm\nCOPY --parents a /b\n", 2, "--parents is not supported"},
		{"heredoc", "FROM debian:bookworm\nRUN <<EOF\necho hi\nEOF\n", 2, "here-document"},
		{"no from", "ARG X\nRUN true\n", 2, "before the first FROM"},
		{"add url", "FROM debian:bookworm\nADD https://example.com/x /x\n", 2, "remote sources are not supported"},
		{"chmod symbolic", "FROM debian:bookworm\nCOPY --chmod=u+x a /a\n", 2, "invalid --chmod"},
		{"chown unknown", "FROM debian:bookworm\nCOPY --chown=nobody a /a\n", 2, `user "nobody"`},
		{"missing file", "FROM debian:bookworm\nCOPY nothere /x\n", 2, "not found in the build context"},
		{"bad signal", "FROM debian:bookworm\nSTOPSIGNAL SIGBOGUS\n", 2, "invalid signal"},
		{"bad port", "FROM debian:bookworm\nEXPOSE 99999\n", 2, "invalid port"},
		{"unknown image", "FROM nosuch:1\n", 1, "pulling it failed"},
		{"multi dest", "FROM debian:bookworm\nCOPY a b /dst\n", 2, "must be a directory and end with a /"},
		{"required secret", "FROM debian:bookworm\nRUN --mount=type=secret,id=tok,required true\n", 2, `secret "tok" is required`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.write(map[string]string{"a": "a", "b": "b"})
			_, out, events, err := h.build(tc.df, nil)
			if err == nil {
				t.Fatalf("no error; output:\n%s", out)
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q (line %v), want line %d containing %q", err, le, tc.line, tc.msg)
			}
			if sandbox.ClassOf(err) != sandbox.ClassInvalid {
				t.Errorf("class %s", sandbox.ClassOf(err))
			}
			if last := events[len(events)-1]; last.Type != EventError || last.Line != tc.line {
				t.Errorf("last event %+v", last)
			}
			if h.runner.count() != 0 {
				t.Errorf("a RUN ran")
			}
		})
	}
}

func TestInstructionsSetTheImageConfig(t *testing.T) {
	h := newHarness(t)
	df := `FROM debian:bookworm
ENV A=1 B="two words"
ENV C=${A}-$B
LABEL org.example.name="demo" version=1
MAINTAINER someone@example.com
EXPOSE 8080 53/udp 9000-9002
USER app:app
WORKDIR /srv
WORKDIR data
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
CMD echo $HOME
ENTRYPOINT ["/entry"]
HEALTHCHECK --interval=5s --timeout=2s --start-period=1s --retries=4 CMD curl -f http://localhost/
STOPSIGNAL SIGINT
VOLUME /data
ONBUILD RUN echo hi
`
	_, out, _ := h.mustBuild(df, nil)
	cfg := h.config()
	want := sandbox.ImageConfig{
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "A=1", "B=two words", "C=1-two words"},
		WorkingDir: "/srv/data",
		User:       "app:app",
		Entrypoint: []string{"/entry"},
		Cmd:        []string{"/bin/bash", "-o", "pipefail", "-c", "echo $HOME"},
		Ports:      []string{"53/udp", "8080/tcp", "9000/tcp", "9001/tcp", "9002/tcp"},
		Labels:     map[string]string{"org.example.name": "demo", "version": "1", "maintainer": "someone@example.com"},
		StopSignal: "SIGINT",
		Healthcheck: &sandbox.Healthcheck{
			Test:     []string{"CMD-SHELL", "curl -f http://localhost/"},
			Interval: 5 * time.Second, Timeout: 2 * time.Second, StartPeriod: time.Second, Retries: 4,
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("config\n got %+v\nwant %+v", cfg, want)
	}
	for _, s := range []string{"Step 1/16 : FROM debian:bookworm", "Step 16/16 : ONBUILD RUN echo hi", "[Warning] line 15: VOLUME is ignored", "ONBUILD is ignored", "Successfully built ", "Successfully tagged out:latest"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	// WORKDIR created the missing directories as layers.
	if e, ok := h.store.lastLayer(t, "out:latest")["srv/data"]; !ok || e.Type != '5' {
		t.Errorf("WORKDIR layer: %+v", h.store.lastLayer(t, "out:latest"))
	}
}

func TestEntrypointDropsInheritedCmd(t *testing.T) {
	h := newHarness(t)
	h.mustBuild("FROM debian:bookworm\nENTRYPOINT [\"/e\"]\n", nil)
	if cfg := h.config(); cfg.Cmd != nil || !slices.Equal(cfg.Entrypoint, []string{"/e"}) {
		t.Fatalf("%+v", cfg)
	}
	h.mustBuild("FROM debian:bookworm\nCMD [\"x\"]\nENTRYPOINT [\"/e\"]\nHEALTHCHECK NONE\n", nil)
	if cfg := h.config(); !slices.Equal(cfg.Cmd, []string{"x"}) || cfg.Healthcheck != nil {
		t.Fatalf("%+v", cfg)
	}
}

func TestBuildArgsAndExpansion(t *testing.T) {
	h := newHarness(t)
	df := `ARG BASE=debian
ARG TAG
FROM ${BASE}:${TAG:-bookworm}
ARG TAG
ARG VERSION=1.0
ARG UNSET
ENV VERSION_ENV=v${VERSION} UNSET_OR=${UNSET:-fallback}
ARG PATH_OVERRIDE=${PATH}
RUN echo $VERSION
`
	_, out, _ := h.mustBuild(df, func(o *Options) {
		o.BuildArgs = map[string]string{"VERSION": "2.0", "HTTP_PROXY": "http://proxy:3128", "EXTRA": "x"}
	})
	cfg := h.config()
	if !slices.Contains(cfg.Env, "VERSION_ENV=v2.0") || !slices.Contains(cfg.Env, "UNSET_OR=fallback") {
		t.Errorf("env %v", cfg.Env)
	}
	// Build args are not in the image's env.
	for _, e := range cfg.Env {
		if strings.HasPrefix(e, "VERSION=") || strings.HasPrefix(e, "HTTP_PROXY") {
			t.Errorf("build arg in the image env: %s", e)
		}
	}
	step := h.runner.steps[0]
	for _, want := range []string{"VERSION=2.0", "HTTP_PROXY=http://proxy:3128", "PATH_OVERRIDE=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"} {
		if !slices.Contains(step.Env, want) {
			t.Errorf("RUN env lacks %s: %v", want, step.Env)
		}
	}
	if slices.ContainsFunc(step.Env, func(e string) bool { return strings.HasPrefix(e, "UNSET=") || strings.HasPrefix(e, "TAG=") }) {
		t.Errorf("RUN env has unset args: %v", step.Env)
	}
	if !slices.Equal(step.Args, []string{"/bin/sh", "-c", "echo $VERSION"}) || step.User != "" || step.WorkingDir != "/" || step.Network != "default" {
		t.Errorf("step %+v", step)
	}
	if !strings.Contains(out, "build-args [EXTRA] were not consumed") {
		t.Errorf("no unused-arg warning:\n%s", out)
	}
	// A different proxy keeps the cache; a different build arg does not.
	h.mustBuild(df, func(o *Options) { o.BuildArgs = map[string]string{"VERSION": "2.0", "HTTP_PROXY": "http://other:1"} })
	if h.runner.count() != 1 {
		t.Fatalf("proxy arg changed the cache key: %d runs", h.runner.count())
	}
	h.mustBuild(df, func(o *Options) { o.BuildArgs = map[string]string{"VERSION": "3.0"} })
	if h.runner.count() != 2 {
		t.Fatalf("a changed build arg hit the cache: %d runs", h.runner.count())
	}
}

func TestCacheReuseAndInvalidation(t *testing.T) {
	h := newHarness(t)
	h.write(map[string]string{"req.txt": "numpy\n", "app.py": "print(1)\n"})
	df := `FROM debian:bookworm
RUN apt-get update
COPY req.txt /app/
RUN pip install -r /app/req.txt
COPY app.py /app/
RUN python3 -m compileall /app
`
	res1, _, _ := h.mustBuild(df, nil)
	if h.runner.count() != 3 || res1.Cached != 0 {
		t.Fatalf("first build: %d runs, %d cached", h.runner.count(), res1.Cached)
	}
	res2, out, events := h.mustBuild(df, nil)
	if h.runner.count() != 3 || res2.Cached != 5 || res2.Digest != res1.Digest {
		t.Fatalf("rebuild ran %d, cached %d, digest %s vs %s", h.runner.count()-3, res2.Cached, res2.Digest, res1.Digest)
	}
	if strings.Count(out, " ---> Using cache") != 5 || strings.Contains(out, "Running in") {
		t.Errorf("rebuild output:\n%s", out)
	}
	cached := 0
	for _, e := range events {
		if e.Type == EventCached {
			cached++
		}
	}
	if cached != 5 {
		t.Errorf("%d cached events", cached)
	}
	// Changing app.py reruns from its COPY on, not before.
	h.write(map[string]string{"app.py": "print(2)\n"})
	res3, out, _ := h.mustBuild(df, nil)
	if h.runner.count() != 4 || res3.Cached != 3 {
		t.Fatalf("after a change: %d runs, %d cached\n%s", h.runner.count(), res3.Cached, out)
	}
	if last := h.runner.steps[3]; last.Args[2] != "python3 -m compileall /app" {
		t.Errorf("reran %v", last.Args)
	}
	// A mode change counts too.
	if err := chmod(h.ctxDir+"/req.txt", 0o600); err != nil {
		t.Fatal(err)
	}
	h.mustBuild(df, nil)
	if h.runner.count() != 6 {
		t.Fatalf("mode change: %d runs", h.runner.count())
	}
	// --no-cache runs everything.
	res4, _, _ := h.mustBuild(df, func(o *Options) { o.NoCache = true })
	if h.runner.count() != 9 || res4.Cached != 0 {
		t.Fatalf("--no-cache: %d runs, %d cached", h.runner.count(), res4.Cached)
	}
	// A config change before a RUN invalidates it, as in Docker.
	h.mustBuild(strings.Replace(df, "RUN apt-get update", "ENV X=1\nRUN apt-get update", 1), nil)
	if h.runner.count() != 12 {
		t.Fatalf("ENV before RUN: %d runs", h.runner.count())
	}
}

func TestRunOutputAndFailure(t *testing.T) {
	h := newHarness(t)
	h.runner.fail = "false"
	_, out, events := h.mustBuild("FROM debian:bookworm\nRUN [\"echo\", \"hi\"]\n", nil)
	for _, s := range []string{"Step 2/2 : RUN [\"echo\", \"hi\"]", " ---> Running in sbx0000", "out: echo hi\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	var sawOutput bool
	for _, e := range events {
		sawOutput = sawOutput || (e.Type == EventOutput && e.Output == "out: echo hi\n")
	}
	if !sawOutput {
		t.Errorf("no output event: %+v", events)
	}
	_, _, _, err := h.build("FROM debian:bookworm\nRUN true\nRUN false\n", nil)
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("error %v", err)
	}
	// A command that fails is the Dockerfile's fault.
	if c := sandbox.ClassOf(err); c != sandbox.ClassInvalid || !strings.Contains(err.Error(), "invalid Dockerfile: Dockerfile:3: RUN") {
		t.Fatalf("failed command: class %s, error %q", c, err)
	}
}

// TestServerFailuresKeepTheirClass: a RUN step the server fails (its
// sandbox over quota or not startable, the store failing to commit) is
// not reported as the Dockerfile's fault: the error keeps its class, its
// message and event keep the line.
func TestServerFailuresKeepTheirClass(t *testing.T) {
	cases := []struct {
		name      string
		runErr    error
		commitErr error
		class     sandbox.Class
		line      int
		msg       string
	}{
		{"quota", sandbox.Errorf(sandbox.ClassQuota, "sandbox limit of 4 reached"), nil, sandbox.ClassQuota, 3, "Dockerfile:3: sandbox limit of 4 reached"},
		{"disk", fmt.Errorf("create build sandbox: %w", sandbox.Errorf(sandbox.ClassQuota, "not enough disk space on the server")), nil, sandbox.ClassQuota, 3, "Dockerfile:3: not enough disk space"},
		{"unavailable", sandbox.Errorf(sandbox.ClassUnavailable, "sandbox networking is not available"), nil, sandbox.ClassUnavailable, 3, "Dockerfile:3: sandbox networking"},
		{"backend", fmt.Errorf("create build sandbox: %w", errors.New("mount: no such device")), nil, sandbox.ClassInternal, 3, "Dockerfile:3: server error"},
		{"timeout", context.DeadlineExceeded, nil, sandbox.ClassTimeout, 3, "Dockerfile:3: the build ran out of time"},
		{"commit", nil, errors.New("disk I/O error"), sandbox.ClassInternal, 2, "Dockerfile:2: server error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.runner.fail, h.runner.err = "make", c.runErr
			h.store.failCommit = c.commitErr
			_, _, events, err := h.build("FROM debian:bookworm\nRUN true\nRUN make\n", nil)
			var se *sandbox.Error
			if !errors.As(err, &se) || se.Class != c.class || !strings.HasPrefix(se.Msg, c.msg) {
				t.Fatalf("error %v (%+v), want class %s, message starting %q", err, se, c.class, c.msg)
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != c.line {
				t.Errorf("line %+v", le)
			}
			if last := events[len(events)-1]; last.Type != EventError || last.Line != le.Line {
				t.Errorf("last event %+v", last)
			}
		})
	}
}

func TestMultiStage(t *testing.T) {
	h := newHarness(t)
	h.runner.files = map[string]string{"out/": "", "out/bin": "binary"}
	df := `FROM debian:bookworm AS unused
RUN echo never

FROM debian:bookworm AS build
RUN make

FROM build AS test
RUN make test

FROM scratch
COPY --from=build /out/bin /app/bin
COPY --from=1 /ran/ /ran-copy/
CMD ["/app/bin"]
`
	_, out, _ := h.mustBuild(df, nil)
	if h.runner.count() != 1 || h.runner.steps[0].Args[2] != "make" {
		t.Fatalf("runs %+v", h.runner.steps)
	}
	if strings.Contains(out, "echo never") || !strings.Contains(out, "Step 1/6 : FROM debian:bookworm AS build") {
		t.Errorf("output:\n%s", out)
	}
	files := h.store.lastLayer(t, "out:latest")
	if files["ran-copy/0"].Data != "/bin/sh -c make" {
		t.Errorf("layer %+v", files)
	}
	tm, _ := h.store.Resolve(t.Context(), "out:latest")
	if len(tm.Layers) != 2 {
		t.Errorf("scratch result has %d layers", len(tm.Layers))
	}
	if cfg := h.config(); cfg.Env != nil || !slices.Equal(cfg.Cmd, []string{"/app/bin"}) {
		t.Errorf("config %+v", cfg)
	}
	// --target builds an intermediate stage, running its dependency from cache.
	h.mustBuild(df, func(o *Options) { o.Target = "test" })
	if h.runner.count() != 2 || h.runner.steps[1].Args[2] != "make test" {
		t.Fatalf("target runs %+v", h.runner.steps)
	}
}

func TestFromPullsUnknownImages(t *testing.T) {
	h := newHarness(t)
	h.store.addImage(t, "registry.example/python:3.12", true, sandbox.ImageConfig{Env: []string{"PY=3.12"}}, map[string]string{"usr/": ""})
	h.mustBuild("FROM registry.example/python:3.12\n", nil)
	if !slices.Equal(h.store.pulls, []string{"registry.example/python:3.12"}) {
		t.Fatalf("pulls %v", h.store.pulls)
	}
	if cfg := h.config(); !slices.Equal(cfg.Env, []string{"PY=3.12"}) {
		t.Errorf("config %+v", cfg)
	}
}

func TestSecretsAndMounts(t *testing.T) {
	h := newHarness(t)
	const secret = "s3cr3t-token-value"
	df := `FROM debian:bookworm AS assets
RUN build-assets

FROM debian:bookworm
RUN --mount=type=secret,id=tok --mount=type=secret,id=tok,env=TOKEN,target=/etc/tok --mount=type=cache,target=/root/.cache/pip,id=pip --mount=type=bind,from=assets,source=/ran,target=/assets --mount=type=tmpfs,target=/scratch,size=1m --network=none pip install
`
	res, out, events := h.mustBuild(df, func(o *Options) { o.Secrets = map[string][]byte{"tok": []byte(secret)} })
	step := h.runner.steps[1]
	if len(step.Secrets) != 2 || string(step.Secrets[0].Data) != secret || step.Secrets[0].Target != "/run/secrets/tok" || step.Secrets[0].Mode != 0o400 {
		t.Fatalf("secrets %+v", step.Secrets)
	}
	if s := step.Secrets[1]; s.Env != "TOKEN" || s.Target != "/etc/tok" {
		t.Errorf("env secret %+v", s)
	}
	if len(step.Caches) != 1 || step.Caches[0].ID != "pip" || step.Caches[0].Target != "/root/.cache/pip" || step.Caches[0].Sharing != "shared" {
		t.Errorf("caches %+v", step.Caches)
	}
	if len(step.Binds) != 1 || step.Binds[0].Source != "/ran" || step.Binds[0].Target != "/assets" || step.Binds[0].ReadWrite || len(step.Binds[0].From.Layers) != 2 {
		t.Errorf("binds %+v", step.Binds)
	}
	if len(step.Tmpfs) != 1 || step.Tmpfs[0].Size != 1<<20 || step.Network != "none" {
		t.Errorf("tmpfs/network %+v", step)
	}
	// The value appears nowhere but in what the runner was handed.
	for _, e := range step.Env {
		if strings.Contains(e, secret) {
			t.Errorf("secret in env %s", e)
		}
	}
	if strings.Contains(out, secret) {
		t.Errorf("secret in output")
	}
	for _, e := range events {
		if strings.Contains(e.Output+e.Message+e.Instruction, secret) {
			t.Errorf("secret in event %+v", e)
		}
	}
	cfg := h.config()
	if strings.Contains(strings.Join(cfg.Env, " "), secret) {
		t.Errorf("secret in config")
	}
	if idx := readAll(t, h.b.cache.file); strings.Contains(idx, secret) {
		t.Errorf("secret in cache index")
	}
	// Another secret value does not invalidate the step.
	res2, _, _ := h.mustBuild(df, func(o *Options) { o.Secrets = map[string][]byte{"tok": []byte("other")} })
	if h.runner.count() != 2 || res2.Digest != res.Digest {
		t.Fatalf("secret value in the cache key: %d runs", h.runner.count())
	}
}
