package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

func sandboxTools() []*Tool {
	return []*Tool{
		{
			Name: "sandbox_create",
			Description: "Create a new sandbox (an isolated Linux machine with /workspace) and make it this session's default: later calls without sandbox_id use it. " +
				"You rarely need this: a sandbox is created automatically on first use. Use it for a different template, a longer life, or network access. " +
				"Sandboxes created in this session are destroyed when the session ends.",
			Global: true,
			Schema: object(nil,
				p("template", str("Template (root filesystem), e.g. \"base\" or \"python\"; default: the server's default.")),
				p("timeout", integer("Seconds until the sandbox is destroyed (default: the server's default).", 1, 7*24*3600)),
				p("network", enum("\"none\": no network; \"egress\": outbound access as the server's egress policy allows (default: the server's default).", "none", "egress")),
				p("allow_out", strArray("With network=egress: only these destinations (domain names or CIDRs).", 100)),
				p("env", strMap("Environment variables of the sandbox.")),
			),
			run: runSandboxCreate,
		},
		{
			Name:        "sandbox_list",
			Description: "List this session's sandboxes (id, template, state, time left), marking the default one. Set all=true to list every sandbox your API key can see.",
			Global:      true,
			Schema:      object(nil, p("all", boolean("List every sandbox of your account, not only this session's."))),
			run:         runSandboxList,
		},
		{
			Name:        "sandbox_kill",
			Description: "Destroy a sandbox and everything in it. If it is this session's default, the next call without sandbox_id gets a fresh sandbox.",
			Global:      true,
			Schema:      object(req("sandbox_id"), p("sandbox_id", str("The sandbox to destroy."))),
			run:         runSandboxKill,
		},
	}
}

func runSandboxCreate(ctx context.Context, s *Session, _ string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Template string            `json:"template"`
		Timeout  int               `json:"timeout"`
		Network  string            `json:"network"`
		AllowOut []string          `json:"allow_out"`
		Env      map[string]string `json:"env"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	req := s.opts.Create
	if a.Template != "" {
		req.Template = a.Template
	}
	if a.Timeout > 0 {
		req.Timeout = time.Duration(a.Timeout) * time.Second
	}
	if a.Network != "" || len(a.AllowOut) > 0 {
		req.Network = &client.Network{Mode: a.Network, AllowOut: a.AllowOut}
		if req.Network.Mode == "" {
			req.Network.Mode = "egress"
		}
	}
	if len(a.Env) > 0 {
		req.Env = a.Env
	}
	s.createMu.Lock()
	sb, err := s.create(ctx, req)
	if err == nil {
		s.mu.Lock()
		s.def = sb.ID
		s.mu.Unlock()
	}
	s.createMu.Unlock()
	if err != nil {
		return nil, err
	}
	return textResult("Created sandbox %s (template %s), now this session's default; it ends at %s unless used. Pass sandbox_id=%s to address it explicitly.",
		sb.ID, sb.Template, sb.EndAt.UTC().Format(time.RFC3339), sb.ID), nil
}

func runSandboxList(ctx context.Context, s *Session, _ string, raw json.RawMessage) (*Result, error) {
	var a struct {
		All bool `json:"all"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	opts := client.ListOptions{}
	if !a.All {
		opts.Metadata = map[string]string{MetaSession: s.tag}
	}
	s.mu.Lock()
	def := s.def
	s.mu.Unlock()
	var b strings.Builder
	n := 0
	for sb, err := range s.c.ListAll(ctx, opts) {
		if err != nil {
			return nil, err
		}
		if n == maxListItems {
			b.WriteString("[more sandboxes not shown]\n")
			break
		}
		n++
		mark := ""
		if sb.ID == def {
			mark = " (this session's default)"
		} else if sb.Metadata[MetaSession] == s.tag {
			mark = " (this session's)"
		}
		left := time.Until(sb.EndAt).Round(time.Second)
		fmt.Fprintf(&b, "%s  template=%s  state=%s  ends in %s%s\n", sb.ID, sb.Template, sb.State, left, mark)
	}
	if n == 0 {
		if a.All {
			return textResult("No sandboxes."), nil
		}
		return textResult("This session has no sandbox yet; one is created on the first tool call that needs it (or with sandbox_create)."), nil
	}
	return textResult("%s", strings.TrimSuffix(b.String(), "\n")), nil
}

func runSandboxKill(ctx context.Context, s *Session, _ string, raw json.RawMessage) (*Result, error) {
	var a struct {
		SandboxID string `json:"sandbox_id"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if err := s.c.Delete(ctx, a.SandboxID); err != nil {
		if client.IsNotFound(err) {
			return nil, fail("sandbox %s not found (already gone?). Call sandbox_list to see your sandboxes.", a.SandboxID)
		}
		return nil, err
	}
	s.forget(a.SandboxID)
	return textResult("Destroyed sandbox %s.", a.SandboxID), nil
}

// allTools is the kit, in presentation order.
func allTools() []*Tool {
	var all []*Tool
	for _, g := range [][]*Tool{sandboxTools(), codeTools(), shellTools(), terminalTools(), fileTools(), gitTools(), browserTools()} {
		all = append(all, g...)
	}
	return all
}
