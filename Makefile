# agentbox — build, run, test.
#
#   make run     build and serve on 127.0.0.1:8000 with the embedded defaults
#   make test    install what the tests need (Debian/Ubuntu, as root) and run them all
#   make bench   benchmarks (see docs/benchmarks.md)
#   make fuzz    every fuzz target for FUZZTIME each (default 30s; docs/reliability.md)
#   make load    the long load test (LOAD_CLIENTS=32, LOAD_DURATION=2m)
#   make soak    the soak test (SOAK_DURATION=30m)
#   make templates  build the built-in templates (templates/) on a running daemon
#   make k8s-tools  build the Kubernetes control plane the kube tests run on (docs/kubernetes.md)
#   make runsc      build gVisor's runsc, pinned, for isolation "gvisor" (docs/gvisor.md)
#   make seaweedfs  build SeaweedFS's weed, pinned: the S3 server of the s3 volume tests
#   make sdk-python build the Python SDK's wheel into dist/ (docs/python.md)
#   make install    binaries, the systemd unit and its env file (docs/install.md)
#   make image      the daemon's container image, agentbox:VERSION (docs/install.md)
#   make release    dist/agentbox-VERSION-linux-ARCH.tar.gz, the wheel, SHA256SUMS, dist/goproxy

GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null)
# The build date (agentbox version): SOURCE_DATE_EPOCH when set, so that
# two builds of one commit are the same bytes (https://reproducible-builds.org).
BUILD_DATE ?= $(shell date -u -d "@$${SOURCE_DATE_EPOCH:-$$(date +%s)}" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
VERSION_PKG := github.com/agentbox/agentbox/internal/version
LDFLAGS  := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT) -X $(VERSION_PKG).Date=$(BUILD_DATE)
GOFLAGS_TEST ?= -count=1
TEST_TIMEOUT ?= 60m

export AGENTBOX_AGENT_PATH := $(CURDIR)/$(BIN)/agentbox-agent
export AGENTBOX_BIN := $(CURDIR)/$(BIN)/agentbox

.PHONY: all build run test test-fresh deps vet bench clean agent init shim daemon daemon-nokube templates console fuzz load soak k8s-tools runsc seaweedfs sdk-python install install-files uninstall image release package-test

all: build

build: agent init shim daemon

# The web console (web/console: TypeScript, vite, xterm.js), built into
# internal/console/static/dist, which the daemon embeds. npm packages are
# pinned by package-lock.json and installed into web/console/node_modules
# (ignored by git) when the lock file changed; npm keeps its download cache
# outside the checkout. A plain `go build` without this step still compiles
# and serves a page saying the console was not built.
CONSOLE := web/console
console:
	@command -v npm >/dev/null || { echo "make: npm is needed to build the web console (scripts/install-deps.sh installs it)" >&2; exit 1; }
	@node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)' || \
		{ echo "make: the web console's build (vite) needs Node.js 20.19 or newer, this is $$(node -v): Debian 13's nodejs or NodeSource's" >&2; exit 1; }
	@if [ ! -f $(CONSOLE)/node_modules/.package-lock.json ] || [ $(CONSOLE)/package-lock.json -nt $(CONSOLE)/node_modules/.package-lock.json ]; then \
		cd $(CONSOLE) && npm ci --no-audit --no-fund --loglevel=error; fi
	cd $(CONSOLE) && npm run --silent build

# The agent runs inside every sandbox, whatever its root filesystem: static.
agent:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/agentbox-agent ./cmd/agentbox-agent

# The exec shim every command in a sandbox runs below (C, static: any
# root filesystem), mounted next to the agent; see cmd/agentbox-shim.
CC ?= cc
shim:
	$(CC) -static -O2 -Wall -Wextra -Werror -o $(BIN)/agentbox-shim cmd/agentbox-shim/shim.c

# Each native sandbox's first process (libcontainer's init), found next to
# the agent: static, small, so a sandbox does not start the daemon's runtime.
init:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/agentbox-init ./cmd/agentbox-init

# The daemon links libcontainer's nsenter (cgo) and libseccomp. bin/agentbox
# leaves out the Kubernetes backend and `agentbox node` (tag nokube): their
# client libraries cost every start of the binary ~25 ms and 100 MB. It
# hands settings that need them to bin/agentbox-kube, the full build.
daemon: daemon-nokube
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agentbox-kube ./cmd/agentbox

daemon-nokube: console
	CGO_ENABLED=1 $(GO) build -tags nokube -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agentbox ./cmd/agentbox

# First what building and serving needs (scripts/install-deps.sh run: as
# root it apt-installs the absent packages, otherwise it names them and
# stops), then the build of what serving needs: bin/agentbox-kube, the
# Kubernetes build, is left to make build (on a fresh machine its client
# libraries are most of a cold build's time; serve names it when a setting
# needs it). State goes to serve's default data dir (/var/lib/agentbox as
# root, the same for every command: internal/config DefaultDataDir) unless
# AGENTBOX_DATA_DIR says otherwise.
run:
	./scripts/install-deps.sh run
	$(MAKE) agent init shim daemon-nokube
	$(BIN)/agentbox serve

deps:
	./scripts/install-deps.sh

vet:
	$(GO) vet ./...
	$(GO) vet -tags nokube ./cmd/agentbox ./internal/daemon
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "not gofmt-clean: $$unformatted"; exit 1; fi
	./scripts/lint.sh

test: deps build vet
	./scripts/test.sh

# make run on a fresh Debian, whole: the dependency step, then `make run`
# until /healthz answers and a first sandbox runs, in a bootstrapped
# debian:bookworm from the test cache with no network (apt reads a local
# source of the packages, npm a cache of the console's, Go this host's
# module cache); it logs clone -> first sandbox (test/e2e
# TestMakeRunDepsFreshDebian; make test runs its dependency step only).
test-fresh:
	AGENTBOX_FRESH_BUILD=1 $(GO) test -count=1 -v -timeout 60m -run '^TestMakeRunDepsFreshDebian$$' ./test/e2e/

bench: build
	./scripts/bench.sh

# The built-in templates, built by the daemon (AGENTBOX_URL) from
# debian:bookworm bootstrapped from the host's apt sources; those sources
# (and optional apt options) reach RUN steps as build secrets, never a layer
# (templates/README.md). `make test` builds them too, in a template store of
# its own cache (test/e2e TestBuiltinTemplates).
APT_SOURCES ?= $(wildcard /etc/apt/sources.list.d/debian.sources)
APT_CONF    ?=
comma := ,
# The browser template's build context, staged outside the checkout with
# its npm packages (scripts/stage-browser.sh).
BROWSER_CONTEXT ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/agentbox/browser-context
# templates/code-server staged with code-server's npm packages (host npm).
CODE_SERVER_CONTEXT ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/agentbox/code-server-context
# templates/coding-agent staged with the coding agents' npm packages (host npm).
CODING_AGENT_CONTEXT ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/agentbox/coding-agent-context
# A host without a deb822 debian.sources gives none by default: a
# bootstrapped image already lists the host's Debian sources.
TEMPLATE_SECRETS = $(if $(APT_SOURCES),--secret id=apt-sources$(comma)src=$(APT_SOURCES)) $(if $(APT_CONF),--secret id=apt-conf$(comma)src=$(APT_CONF))

templates: build
	$(BIN)/agentbox template bootstrap debian:bookworm
	$(BIN)/agentbox template build -t base $(TEMPLATE_SECRETS) templates/base
	$(BIN)/agentbox template build -t code-interpreter $(TEMPLATE_SECRETS) templates/code-interpreter
	$(BIN)/agentbox template build -t data-science $(TEMPLATE_SECRETS) templates/data-science
	./scripts/stage-browser.sh $(BROWSER_CONTEXT)
	$(BIN)/agentbox template build -t browser $(TEMPLATE_SECRETS) $(BROWSER_CONTEXT)
	$(BIN)/agentbox template build -t desktop $(TEMPLATE_SECRETS) templates/desktop
	./scripts/stage-code-server.sh $(CODE_SERVER_CONTEXT)
	$(BIN)/agentbox template build -t code-server $(TEMPLATE_SECRETS) $(CODE_SERVER_CONTEXT)
	./scripts/stage-coding-agent.sh $(CODING_AGENT_CONTEXT)
	$(BIN)/agentbox template build -t coding-agent $(TEMPLATE_SECRETS) $(CODING_AGENT_CONTEXT)

# etcd, kube-apiserver, kube-scheduler and the agent-sandbox controller, from
# the pinned tools modules in tools/k8s, built once into
# $$AGENTBOX_TEST_CACHE/k8s-tools/<versions> (about 15 minutes the first time
# on 2 cores, seconds after); scripts/test.sh runs it too. internal/kubetest
# starts them for the Kubernetes tests.
k8s-tools:
	./scripts/k8s-tools.sh

# gVisor's runsc (tools/runsc, pinned), built once into
# $$AGENTBOX_TEST_CACHE/runsc/<version>-<hash>/runsc (a few minutes the first
# time, nothing after); scripts/test.sh runs it too. Point RUNSC_PATH at it
# (or at an installed runsc) for isolation "gvisor" (docs/gvisor.md).
runsc:
	./scripts/runsc.sh

# SeaweedFS (tools/seaweedfs, pinned, Apache-2.0), built once into
# $$AGENTBOX_TEST_CACHE/seaweedfs/<version>-<hash>/weed (about 9 minutes the
# first time on 2 cores): the real S3 server the s3 volume tests start on
# loopback.
seaweedfs:
	./scripts/seaweedfs.sh

# Reliability suites (docs/reliability.md).
FUZZTIME ?= 30s
fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

# The long load (32 clients, 2 minutes) and the soak (30 minutes, daemon
# restarts): e2e tests with their knobs, against freshly built binaries.
LOAD_CLIENTS  ?= 32
LOAD_DURATION ?= 2m
SOAK_DURATION ?= 30m
load: build
	LOAD_CLIENTS=$(LOAD_CLIENTS) LOAD_DURATION=$(LOAD_DURATION) $(GO) test -count=1 -v -timeout 30m -run '^TestLoad$$' ./test/e2e/

soak: build
	AGENTBOX_SOAK=1 SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -v -timeout 3h -run '^TestSoak$$' ./test/e2e/

# The Python SDK as a wheel, built offline with the distribution's pip,
# setuptools and wheel from a copy of sdk/python (nothing is written into
# the checkout), into DIST (git ignores dist/). Install it into a venv:
# docs/python.md.
DIST ?= dist
sdk-python:
	./scripts/sdk-python.sh $(DIST)

# Install on this host (docs/install.md): the binaries into BINDIR, the
# systemd unit into UNITDIR, the settings file (only when there is none:
# an upgrade keeps yours) into SYSCONFDIR/agentbox, the data dir. DESTDIR
# stages it elsewhere (packaging, tests). Binaries are replaced, never
# written in place, so running sandboxes keep theirs; then
# `systemctl daemon-reload && systemctl restart agentbox`.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR    ?= /etc/systemd/system
STATEDIR   ?= /var/lib/agentbox
INSTALL_BINS := agentbox agentbox-kube agentbox-agent agentbox-init agentbox-shim
install: build install-files
	@echo "installed; now: systemctl daemon-reload && systemctl enable --now agentbox (settings: $(SYSCONFDIR)/agentbox/agentbox.env)"

# install without building (bin/ already built, e.g. by another user).
install-files:
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR)
	install -m 0755 $(addprefix $(BIN)/,$(INSTALL_BINS)) $(DESTDIR)$(BINDIR)/
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' deploy/systemd/agentbox.service > $(DESTDIR)$(UNITDIR)/agentbox.service.tmp
	chmod 0644 $(DESTDIR)$(UNITDIR)/agentbox.service.tmp
	mv $(DESTDIR)$(UNITDIR)/agentbox.service.tmp $(DESTDIR)$(UNITDIR)/agentbox.service
	install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/agentbox
	test -e $(DESTDIR)$(SYSCONFDIR)/agentbox/agentbox.env || install -m 0600 deploy/systemd/agentbox.env $(DESTDIR)$(SYSCONFDIR)/agentbox/agentbox.env
	install -d -m 0711 $(DESTDIR)$(STATEDIR)

# Removes what install put in place but the settings and the data dir.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(INSTALL_BINS)) $(DESTDIR)$(UNITDIR)/agentbox.service

# The daemon's container image for one host (deploy/docker): FROM a Debian
# root filesystem bootstrapped from this host's apt sources (no registry),
# cached in IMAGE_CACHE, with base and code-interpreter from the template
# store IMAGE_TEMPLATES (default IMAGE_CACHE/templates; built there first
# when it lacks them). Run it as deploy/compose shows.
IMAGE       ?= agentbox:$(VERSION)
IMAGE_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/agentbox
image: build
	VERSION=$(VERSION) ./scripts/image.sh $(IMAGE) $(IMAGE_CACHE)

# The packaging tests alone (test/packaging: the systemd unit, the image
# run with the compose files' privileges, one daemon and two replicas over
# Redis, the release tarball, the Helm chart on the test control plane); `make test` runs them with the rest. The
# image's base bootstrap and the image itself are cached by content: the
# first run takes minutes, then about a minute.
package-test: build
	./scripts/start-docker.sh
	export AGENTBOX_TEST_CACHE=$${AGENTBOX_TEST_CACHE:-$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/agentbox-test}; \
	export AGENTBOX_K8S_TOOLS=$$(./scripts/k8s-tools.sh) AGENTBOX_HELM=$$(./scripts/helm-tool.sh) && \
	$(GO) test -count=1 -timeout 30m ./test/packaging

# Versioned tarball, Python wheel and checksums in DIST, and the Go SDK's
# module as a GOPROXY tree in DIST/goproxy (scripts/release.sh).
release: build
	./scripts/release.sh $(VERSION) $(DIST)

clean:
	rm -rf $(BIN) $(DIST)
