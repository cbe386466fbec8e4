package sandbox

import (
	"encoding/json"
	"fmt"
	"strings"
)

// UnmarshalJSON reads a resolved template, and also the plain string that
// sandbox records written before templates were resolved hold ("host",
// "dir:/path"), so a daemon restarted on a newer version recovers the
// sandboxes an older one created.
func (t *Template) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		legacy, err := legacyTemplate(s)
		if err != nil {
			return err
		}
		*t = legacy
		return nil
	}
	type plain Template // no methods: no recursion
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*t = Template(p)
	return nil
}

// legacyTemplate converts a template string of an old record.
func legacyTemplate(s string) (Template, error) {
	switch {
	case s == "" || s == TemplateHost:
		return HostTemplate(), nil
	case strings.HasPrefix(s, "dir:"):
		return Template{Ref: s, Kind: TemplateDir, Dir: strings.TrimPrefix(s, "dir:")}, nil
	}
	return Template{}, fmt.Errorf("unknown template %q in sandbox record", s)
}
