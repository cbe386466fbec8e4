package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/textedit"
)

// MaxEditAnswer bounds the answer of an edit: the diff (the agent refuses
// larger ones) JSON-escaped.
const MaxEditAnswer = 6*textedit.MaxDiff + 64<<10

// maxEditError bounds an error answer of an edit (a text that was not
// found is quoted in it, cut by the agent).
const maxEditError = 1 << 20

// EditFile applies edit_file's edits to the file at path inside the
// sandbox, as user, and returns the diff; with dryRun the file is left
// unchanged. The agent does the work, under the sandbox's limits. An edit
// whose text is not found is a *textedit.NoMatchError.
func (c *Client) EditFile(ctx context.Context, user string, req textedit.Request) (string, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("encode edit: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+"/fs/edit", bytes.NewReader(body))
	if err != nil {
		return "", mapError("edit", err)
	}
	c.setHeaders(hreq.Header, user)
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hreq)
	if err != nil {
		return "", mapError("edit", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxEditError))
		var e struct {
			Message string `json:"message"`
			Reason  string `json:"reason"`
		}
		if json.Unmarshal(b, &e) != nil {
			// Not the agent's JSON: an agent older than this route
			// answers the mux's plain 404.
			if resp.StatusCode == http.StatusNotFound {
				return "", sandbox.Errorf(sandbox.ClassUnavailable, "this sandbox's agent predates file edits in the sandbox; restart the sandbox")
			}
			e.Message = strings.TrimSpace(string(b))
		}
		if e.Reason == textedit.ReasonNoMatch {
			old, _ := strings.CutPrefix(e.Message, (&textedit.NoMatchError{}).Error())
			return "", &textedit.NoMatchError{OldText: old}
		}
		return "", restError(resp, e.Message)
	}
	var out textedit.Response
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxEditAnswer)).Decode(&out); err != nil {
		return "", mapError("edit", fmt.Errorf("decode answer: %w", err))
	}
	return out.Diff, nil
}
