package codeinterp

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// envNameRE matches the variable names every language can set.
var envNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// ValidEnvName reports whether name can be set as an environment variable
// of an execution.
func ValidEnvName(name string) bool { return envNameRE().MatchString(name) }

// bashCell renders the script that runs one execution in the persistent
// shell. The code travels in a quoted here-document (no expansion) with a
// fresh delimiter, is evaluated by the shell itself so that cd, export,
// functions and variables persist, with stdin from /dev/null (the shell's
// own stdin carries these scripts) and fd 4 closed (it is the agent's
// event pipe). Then comes the done line with $? (the agent appends the
// output markers itself, see marker.go).
func bashCell(c cell, seq uint64) string {
	var b strings.Builder
	delim := "__AGENTBOX_EOF_" + randomHex(8)
	for strings.Contains(c.code, delim) {
		delim = "__AGENTBOX_EOF_" + randomHex(8)
	}
	fmt.Fprintf(&b, "IFS= read -r -d '' __agentbox_code <<'%s'\n%s\n%s\n", delim, c.code, delim)
	for _, k := range sortedKeys(c.setenv) {
		if v := c.setenv[k]; v != nil {
			fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(*v))
		} else {
			fmt.Fprintf(&b, "unset %s\n", k)
		}
	}
	keys := sortedKeys(c.env)
	for i, k := range keys {
		// Remember whether and how it was set, to restore it afterwards.
		fmt.Fprintf(&b, "__agentbox_set%d=${%s+x}; __agentbox_old%d=${%s-}; export %s=%s\n",
			i, k, i, k, k, shellQuote(c.env[k]))
	}
	b.WriteString("eval \"$__agentbox_code\" </dev/null 4>&-\n__agentbox_rc=$?\n")
	for i, k := range keys {
		fmt.Fprintf(&b, "if [ -n \"$__agentbox_set%d\" ]; then export %s=\"$__agentbox_old%d\"; else unset %s; fi; unset __agentbox_set%d __agentbox_old%d\n",
			i, k, i, k, i, i)
	}
	b.WriteString("unset __agentbox_code\n")
	fmt.Fprintf(&b, "printf '{\"ev\":\"done\",\"seq\":%d,\"rc\":%%d}\\n' \"$__agentbox_rc\" >&4\n", seq)
	return b.String()
}

// shellQuote quotes s for the shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		if ValidEnvName(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
