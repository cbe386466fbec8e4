package config

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/settings"
)

// TestDocumentedDefaults holds docs/configuration.md's tables to the
// settings' one source, their tags: every setting has one row, its default
// column is the tag's default (`value`, or no value for an empty one), and
// no row names a setting that does not exist.
func TestDocumentedDefaults(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)` \\|([^|]*)\\|")
	rows := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = append(rows[m[1]], strings.TrimSpace(m[2]))
	}
	var c Config
	var in inputs
	known := map[string]bool{}
	for _, f := range settings.Fields(&c, &in) {
		known[f.Name] = true
		got := rows[f.Name]
		switch {
		case len(got) != 1:
			t.Errorf("%s has %d rows in docs/configuration.md, want 1", f.Name, len(got))
		case f.Default != "" && got[0] != "`"+f.Default+"`":
			t.Errorf("%s: docs/configuration.md says the default is %s, the setting's is `%s`", f.Name, got[0], f.Default)
		case f.Default == "" && strings.HasPrefix(got[0], "`"):
			t.Errorf("%s: docs/configuration.md says the default is %s, the setting has none", f.Name, got[0])
		}
	}
	for name := range rows {
		if !known[name] {
			t.Errorf("docs/configuration.md has a row for %s, which is no setting", name)
		}
	}
}
