package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

// maxContexts bounds the named code contexts per sandbox.
const maxContexts = 16

func codeTools() []*Tool {
	return []*Tool{{
		Name: "run_code",
		Description: "Run code in a persistent interpreter in the sandbox, like a notebook cell: variables, imports and functions stay defined for later run_code calls in the same context. " +
			"Returns stdout, stderr, the value of the last expression, and images: matplotlib figures (plt.show() or a figure as the last expression) come back as PNG images. " +
			"An exception is returned as an error result with its traceback. Files are in /workspace; variables saved with env_set are in the environment.",
		Schema: object(req("code"),
			p("code", strMax("The code to run.", 1<<20)),
			p("language", enum("Interpreter (default python).", "python", "javascript", "bash")),
			p("context", strMax("Name of a separate interpreter with its own state, e.g. \"experiment2\". Omit to use the default interpreter of the language.", 64)),
			p("timeout", integer("Seconds before the run is interrupted (default 300).", 1, 3600)),
		),
		run: runCode,
	}}
}

func runCode(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Code     string `json:"code"`
		Language string `json:"language"`
		Context  string `json:"context"`
		Timeout  int    `json:"timeout"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if a.Language == "" {
		a.Language = "python"
	}
	env, err := s.loadEnv(ctx, sb)
	if err != nil {
		return nil, err
	}
	req := client.CodeRequest{Code: a.Code, Env: env, Timeout: time.Duration(a.Timeout) * time.Second}
	note := ""
	if a.Context == "" {
		req.Language = a.Language
	} else {
		id, fresh, err := s.codeContext(ctx, sb, a.Language, a.Context, false)
		if err != nil {
			return nil, err
		}
		req.ContextID = id
		if fresh {
			note = fmt.Sprintf("[started a new %s context %q]\n", a.Language, a.Context)
		}
	}
	res, err := s.c.RunCode(ctx, sb, req)
	if a.Context != "" && client.IsNotFound(err) {
		// The context went away (a restart of the daemon's kit): start
		// it again and say that its state is gone.
		id, _, err2 := s.codeContext(ctx, sb, a.Language, a.Context, true)
		if err2 != nil {
			return nil, err2
		}
		req.ContextID = id
		note = fmt.Sprintf("[context %q was gone and was started again: earlier state is lost]\n", a.Context)
		res, err = s.c.RunCode(ctx, sb, req)
	}
	if err != nil {
		return nil, err
	}
	return codeResult(note, res), nil
}

// codeContext returns the id of the named context of language in sb,
// creating it when missing (or when renew).
func (s *Session) codeContext(ctx context.Context, sb, language, name string, renew bool) (string, bool, error) {
	st := s.kit.state(s.opts.Owner, sb)
	key := language + "\x00" + name
	st.mu.Lock()
	id := st.contexts[key]
	n := len(st.contexts)
	st.mu.Unlock()
	if id != "" && !renew {
		return id, false, nil
	}
	if id == "" && n >= maxContexts {
		return "", false, fail("at most %d named contexts per sandbox; reuse one", maxContexts)
	}
	cc, err := s.c.CreateCodeContext(ctx, sb, language, workspace)
	if err != nil {
		return "", false, err
	}
	st.mu.Lock()
	st.contexts[key] = cc.ID
	st.mu.Unlock()
	return cc.ID, true, nil
}

// codeResult renders an execution for a model: text sections, then
// images.
func codeResult(note string, res *client.CodeResult) *Result {
	var b strings.Builder
	b.WriteString(note)
	section := func(title, body string) {
		if body == "" {
			return
		}
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		text, cut := truncateText(body)
		b.WriteString(title + "\n" + text)
		if cut {
			b.WriteString("\n[output truncated: print less, or write it to a file and read it with file_read offset/limit]")
		}
	}
	section("[stdout]", res.Stdout)
	section("[stderr]", res.Stderr)
	var images []Content
	for _, r := range res.Results {
		switch {
		case r.PNG != "":
			images = append(images, Content{Type: "image", Data: r.PNG, MimeType: "image/png"})
			section("[image]", "image/png result (attached)")
		case r.JPEG != "":
			images = append(images, Content{Type: "image", Data: r.JPEG, MimeType: "image/jpeg"})
			section("[image]", "image/jpeg result (attached)")
		case r.Text != "":
			section("[result]", r.Text)
		case r.Markdown != "":
			section("[result]", r.Markdown)
		case len(r.JSON) > 0:
			section("[result]", string(r.JSON))
		case r.HTML != "":
			section("[result html]", r.HTML)
		}
	}
	out := &Result{}
	if res.Error != nil {
		out.IsError = true
		section("[error]", fmt.Sprintf("%s: %s\n%s", res.Error.Name, res.Error.Value, res.Error.Traceback))
	}
	if b.Len() == 0 {
		b.WriteString("(no output)")
	}
	out.Content = append([]Content{{Type: "text", Text: strings.TrimRight(b.String(), "\n")}}, images...)
	return out
}
