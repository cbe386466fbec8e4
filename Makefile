# agentbox — build, run, test.
#
#   make run     build and serve on 127.0.0.1:8000 with the embedded defaults
#   make test    install what the tests need (Debian/Ubuntu, as root) and run them all
#   make bench   benchmarks (see docs/benchmarks.md)
#   make templates  build the built-in templates (templates/) on a running daemon

GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/agentbox/agentbox/internal/version.Version=$(VERSION)
GOFLAGS_TEST ?= -count=1
TEST_TIMEOUT ?= 40m

export AGENTBOX_AGENT_PATH := $(CURDIR)/$(BIN)/agentbox-agent
export AGENTBOX_BIN := $(CURDIR)/$(BIN)/agentbox

.PHONY: all build run test deps vet bench clean agent daemon templates

all: build

build: agent daemon

# The agent runs inside every sandbox, whatever its root filesystem: static.
agent:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/agentbox-agent ./cmd/agentbox-agent

# The daemon links libcontainer's nsenter (cgo) and libseccomp.
daemon:
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agentbox ./cmd/agentbox

# State goes to /var/lib/agentbox unless AGENTBOX_DATA_DIR says otherwise:
# sandboxes run as unprivileged host ids that must pass through the data
# dir's parents, which a checkout under /root (mode 0700) does not allow.
run: build
	AGENTBOX_DATA_DIR="$${AGENTBOX_DATA_DIR:-/var/lib/agentbox}" $(BIN)/agentbox serve

deps:
	./scripts/install-deps.sh

vet:
	$(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "not gofmt-clean: $$unformatted"; exit 1; fi

test: deps build vet
	./scripts/test.sh

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
# A host without a deb822 debian.sources gives none by default: a
# bootstrapped image already lists the host's Debian sources.
TEMPLATE_SECRETS = $(if $(APT_SOURCES),--secret id=apt-sources$(comma)src=$(APT_SOURCES)) $(if $(APT_CONF),--secret id=apt-conf$(comma)src=$(APT_CONF))

templates: build
	$(BIN)/agentbox template bootstrap debian:bookworm
	$(BIN)/agentbox template build -t base $(TEMPLATE_SECRETS) templates/base
	$(BIN)/agentbox template build -t code-interpreter $(TEMPLATE_SECRETS) templates/code-interpreter
	$(BIN)/agentbox template build -t browser $(TEMPLATE_SECRETS) templates/browser

clean:
	rm -rf $(BIN)
