package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

type createOptions struct {
	template     string
	timeout      time.Duration
	env, meta    []string
	memory, disk string
	cpus         float64
	pids         int64
	noService    bool
	autoPause    bool
	isolation    string
}

func newCreateCmd() *cobra.Command {
	var o createOptions
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a sandbox and print its id",
		Long: `Creates a sandbox on the server and prints its id (the sandbox as JSON
with --json). Zero-valued flags leave the server's defaults.`,
		Example: `  id=$(agentbox create --timeout 30m --memory 1G --meta owner=ci)
  agentbox exec "$id" -- python3 -c 'print(1)'`,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: clientRunE(cobra.NoArgs, func(ctx context.Context, x *cli, args []string) error {
			req, err := o.request()
			if err != nil {
				return err
			}
			sb, err := x.c.Create(ctx, req)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(sb)
			}
			_, err = x.out.Write([]byte(sb.ID + "\n"))
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.template, "template", "", `root filesystem: "host" or a template name the server registered (default: the server's, "host")`)
	f.DurationVar(&o.timeout, "timeout", 0, "destroy the sandbox after this long, e.g. 30m (default: the server's)")
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&o.meta, "meta", nil, "metadata KEY=VALUE, for ls --meta (repeatable)")
	f.StringVar(&o.memory, "memory", "", "memory limit, e.g. 512M")
	f.Float64Var(&o.cpus, "cpus", 0, "CPU quota in cores, e.g. 0.5")
	f.Int64Var(&o.pids, "pids", 0, "maximum processes and threads")
	f.StringVar(&o.disk, "disk", "", "disk size, e.g. 1G")
	f.BoolVar(&o.noService, "no-service", false, "do not run the template's service (start_cmd, a service CMD); never from a warm pool")
	f.BoolVar(&o.autoPause, "auto-pause", false, "pause the sandbox at its timeout instead of destroying it (agentbox resume brings it back)")
	f.StringVar(&o.isolation, "isolation", "", `isolation level: "container" or "gvisor" (gVisor's user-space kernel, where the server has runsc; default: the server's)`)
	_ = cmd.RegisterFlagCompletionFunc("template", completeTemplates)
	return cmd
}

// request turns the flags into a CreateRequest; bad values are usage
// errors.
func (o createOptions) request() (client.CreateRequest, error) {
	var req client.CreateRequest
	var err error
	if o.timeout < 0 {
		return req, usageErrorf("--timeout must be positive")
	}
	if req.Env, err = parseKV("env", o.env); err != nil {
		return req, err
	}
	if req.Metadata, err = parseKV("meta", o.meta); err != nil {
		return req, err
	}
	res := client.Resources{CPUs: o.cpus, PIDs: o.pids}
	for _, s := range []struct {
		flag, val string
		dst       *int64
	}{{"memory", o.memory, &res.MemoryBytes}, {"disk", o.disk, &res.DiskBytes}} {
		if s.val == "" {
			continue
		}
		if *s.dst, err = client.ParseSize(s.val); err != nil {
			return req, usageErrorf("--%s: %v", s.flag, err)
		}
	}
	if res.CPUs < 0 || res.PIDs < 0 {
		return req, usageErrorf("--cpus and --pids must not be negative")
	}
	if res != (client.Resources{}) {
		req.Resources = &res
	}
	switch o.isolation {
	case "", "container", "gvisor":
	default:
		return req, usageErrorf("--isolation must be container or gvisor, not %q", o.isolation)
	}
	req.Template, req.Timeout, req.NoService, req.AutoPause, req.Isolation = o.template, o.timeout, o.noService, o.autoPause, o.isolation
	return req, nil
}
