package autobuild

import (
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/admission"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Retry-After bounds of a "building" answer.
const (
	minRetry = 5 * time.Second
	maxRetry = time.Minute
)

// NotReadyError is the answer to a create of asked (a template name, or a
// sandbox type whose template is s.Name) while s is not ready: building is
// unavailable (503, Retry-After: the SDKs say "retry"), failed and not
// built are not found (404); both carry a *sandbox.TemplateNotReady with
// the stable reason, and say how long and the command that builds it.
func NotReadyError(s Status, asked string, now time.Time) error {
	what := fmt.Sprintf("template %q", s.Name)
	if asked != "" && asked != s.Name {
		what = fmt.Sprintf("%q uses template %q, which", asked, s.Name)
	} else {
		what += " is a built-in template that"
	}
	switch s.State {
	case StateBuilding:
		elapsed := s.Elapsed(now).Round(time.Second)
		msg := fmt.Sprintf("%s is still being built: building for %s", what, elapsed)
		if s.Estimate > 0 {
			msg += fmt.Sprintf(" of about %s", s.Estimate.Round(time.Second))
		}
		if s.Progress != "" {
			msg += " (" + s.Progress + ")"
		}
		msg += "; retry once `agentbox template ls` shows it ready (built at start: TEMPLATE_AUTO_BUILD)"
		retry := min(max(s.Estimate-elapsed, minRetry), maxRetry)
		return &sandbox.Error{Class: sandbox.ClassUnavailable, Msg: msg, Err: &sandbox.TemplateNotReady{
			Template: s.Name, Reason: sandbox.ReasonTemplateBuilding, Err: &admission.RetryAfterError{After: retry}}}
	case StateFailed:
		msg := fmt.Sprintf("%s failed to build (%s): %s; build it with: %s", what, s.Since.UTC().Format(time.RFC3339), s.Error, s.Command)
		return &sandbox.Error{Class: sandbox.ClassNotFound, Msg: msg, Err: &sandbox.TemplateNotReady{Template: s.Name, Reason: sandbox.ReasonTemplateNotBuilt}}
	default:
		msg := fmt.Sprintf("%s is not built on this server", what)
		if s.Error != "" {
			msg += " (its build was " + s.Error + ")"
		}
		msg += "; build it with: " + s.Command
		return &sandbox.Error{Class: sandbox.ClassNotFound, Msg: msg, Err: &sandbox.TemplateNotReady{Template: s.Name, Reason: sandbox.ReasonTemplateNotBuilt}}
	}
}

// Note is a short word on a state for lists of names ("building 1m20s of
// about 4m", "failed", "not built"); "" when ready.
func Note(s Status, now time.Time) string {
	switch s.State {
	case StateReady, "":
		return ""
	case StateBuilding:
		n := "building " + s.Elapsed(now).Round(time.Second).String()
		if s.Estimate > 0 {
			n += " of about " + s.Estimate.Round(time.Second).String()
		}
		return n
	case StateFailed:
		return "failed"
	}
	return "not built"
}
