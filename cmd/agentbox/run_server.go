package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/agentclient"
)

// A run through a server keeps its sandbox alive in slices of runLease,
// renewed every runLease/3 while the command runs: a run that dies
// without deleting it (SIGKILL, a lost connection) leaves a sandbox the
// server destroys within runLease, as the standalone run's next start
// reaps an abandoned one.
const runLease = 2 * time.Minute

// runViaServer is `agentbox run --url`: the server at url creates the
// sandbox (its limits, templates and warm pool apply); the command's
// streams go through the server's data plane to the sandbox's agent, the
// same protocol the standalone run speaks to it directly, so input is
// streamed and output is byte for byte. templateSet says --template was
// given; otherwise the server's default template is used.
func runViaServer(ctx context.Context, o runOptions, templateSet bool, args []string, url, apiKey string) error {
	if o.root {
		return &exitError{code: 125, msg: "--root is for a run without a server (the API creates no root sandboxes): drop --url and AGENTBOX_URL"}
	}
	if o.dataDir != "" {
		return &exitError{code: 125, msg: "--data-dir is for a run without a server: the server keeps its own"}
	}
	req, err := o.createRequest(templateSet)
	if err != nil {
		return &exitError{code: 125, msg: err.Error()}
	}
	c, err := client.New(url, client.WithAPIKey(apiKey), client.WithUserAgent("agentbox-run"))
	if err != nil {
		return &exitError{code: 125, msg: fmt.Sprintf("--%s: %v", flagURL, err)}
	}

	// As the standalone run: a signal or a reader that goes away ends the
	// command, then the deferred delete runs.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)

	sb, err := c.Create(ctx, req)
	if err != nil {
		return &exitError{code: 125, msg: "create sandbox: " + unreachable(err, c.BaseURL(), "").Error()}
	}
	defer func() {
		del, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := c.Delete(del, sb.ID); err != nil {
			fmt.Fprintf(os.Stderr, "agentbox run: delete sandbox %s: %v (the server destroys it within %s)\n", sb.ID, err, runLease)
		}
	}()
	leaseCtx, endLease := context.WithCancel(ctx)
	defer endLease()
	go renewLease(leaseCtx, c, sb.ID)

	ac := agentclient.NewVia(url, http.Header{"E2b-Sandbox-Id": {sb.ID}}, sb.AccessToken)
	defer ac.Close()
	return runCommand(ctx, ac, o, args, func() bool {
		st, err := c.Stats(context.WithoutCancel(ctx), sb.ID)
		return err == nil && st.OOMKills > 0
	})
}

// renewLease keeps sandbox id alive for another runLease every runLease/3
// until ctx ends. A failed renewal is retried at the next tick: the lease
// left covers two more.
func renewLease(ctx context.Context, c *client.Client, id string) {
	t := time.NewTicker(runLease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = c.SetTimeout(ctx, id, runLease)
		}
	}
}

// createRequest is the sandbox of the run's flags as the API takes it.
func (o runOptions) createRequest(templateSet bool) (client.CreateRequest, error) {
	req := client.CreateRequest{Timeout: runLease}
	if templateSet {
		if strings.HasPrefix(o.template, "dir:") {
			return req, fmt.Errorf("--template %s: dir: templates are for a run without a server (a server takes the templates its operator registers): drop --url and AGENTBOX_URL", o.template)
		}
		req.Template = o.template
	}
	memory, disk, env, err := o.limitsAndEnv()
	if err != nil {
		return req, err
	}
	res := client.Resources{CPUs: o.cpus, PIDs: o.pids, MemoryBytes: memory, DiskBytes: disk}
	if res != (client.Resources{}) {
		req.Resources = &res
	}
	if len(env) > 0 {
		req.Env = env
	}
	return req, nil
}
