package builder

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// maxDockerfileBytes bounds the Dockerfile read into memory.
const maxDockerfileBytes = 4 << 20

// dockerfile is a parsed Dockerfile.
type dockerfile struct {
	name     string
	escape   rune
	stages   []instructions.Stage
	metaArgs []instructions.ArgCommand
	warnings []string
}

// LineError is an error tied to a line of the Dockerfile.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return e.where() + ": " + e.Err.Error() }

func (e *LineError) Unwrap() error { return e.Err }

// where is the file and line, as the message starts.
func (e *LineError) where() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	return e.File
}

// parseDockerfile parses and checks src: anything the builder does not
// support fails here, before any step runs, with its line number.
func parseDockerfile(name string, src []byte) (*dockerfile, error) {
	if name == "" {
		name = "Dockerfile"
	}
	if len(src) > maxDockerfileBytes {
		return nil, &LineError{File: name, Err: fmt.Errorf("larger than %d bytes", maxDockerfileBytes)}
	}
	res, err := parser.Parse(bytes.NewReader(src))
	if err != nil {
		return nil, &LineError{File: name, Line: errLine(err), Err: unwrapParse(err)}
	}
	df := &dockerfile{name: name, escape: res.EscapeToken}
	for _, w := range res.Warnings {
		df.warnings = append(df.warnings, fmt.Sprintf("%s:%d: %s", name, w.Location.Start.Line, w.Short))
	}
	if first := firstInstruction(res.AST); first != nil && !strings.EqualFold(first.Value, "from") {
		// BuildKit would say "no build stage in current context".
		err := parser.WithLocation(errors.New("an instruction before the first FROM: a Dockerfile starts with FROM (after optional ARGs)"), nil)
		return nil, &LineError{File: name, Line: first.StartLine, Err: err}
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, &LineError{File: name, Line: errLine(err), Err: unwrapParse(err)}
	}
	if len(stages) == 0 {
		return nil, &LineError{File: name, Err: errors.New("no FROM instruction: a Dockerfile starts with FROM (after optional ARGs)")}
	}
	df.stages, df.metaArgs = stages, metaArgs
	for i := range stages {
		if err := df.check(&stages[i]); err != nil {
			return nil, err
		}
	}
	return df, nil
}

// errLine finds the line number BuildKit attached to err.
func errLine(err error) int {
	var le *parser.LocationError
	if errors.As(err, &le) && len(le.Locations) > 0 && len(le.Locations[0]) > 0 {
		return le.Locations[0][0].Start.Line
	}
	var ue *instructions.UnknownInstructionError
	if errors.As(err, &ue) {
		return ue.Line
	}
	return 0
}

// unwrapParse drops BuildKit's "dockerfile parse error on line N: "
// prefix: LineError says the line itself.
func unwrapParse(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "dockerfile parse error on line "); i == 0 {
		if j := strings.Index(msg, ": "); j > 0 {
			return errors.New(msg[j+2:])
		}
	}
	return err
}

// firstInstruction is the first instruction that is not an ARG, or nil.
func firstInstruction(ast *parser.Node) *parser.Node {
	for _, n := range ast.Children {
		if !strings.EqualFold(n.Value, "arg") {
			return n
		}
	}
	return nil
}

func lineOf(loc []parser.Range) int {
	if len(loc) == 0 {
		return 0
	}
	return loc[0].Start.Line
}

func (df *dockerfile) errAt(loc []parser.Range, format string, args ...any) error {
	return &LineError{File: df.name, Line: lineOf(loc), Err: fmt.Errorf(format, args...)}
}

// check refuses what the builder does not do, with the line.
func (df *dockerfile) check(st *instructions.Stage) error {
	if st.Platform != "" {
		return df.errAt(st.Location, "FROM --platform is not supported: templates are built for the host's platform")
	}
	for _, c := range st.Commands {
		if err := df.checkCommand(c); err != nil {
			return err
		}
	}
	return nil
}

func (df *dockerfile) checkCommand(c instructions.Command) error {
	loc := c.Location()
	switch c := c.(type) {
	case *instructions.RunCommand:
		return df.checkRun(c)
	case *instructions.CopyCommand:
		if c.Parents {
			return df.errAt(loc, "COPY --parents is not supported")
		}
		if len(c.ExcludePatterns) > 0 {
			return df.errAt(loc, "COPY --exclude is not supported")
		}
		if len(c.SourceContents) > 0 {
			return df.errAt(loc, "COPY with a here-document is not supported")
		}
	case *instructions.AddCommand:
		if len(c.ExcludePatterns) > 0 {
			return df.errAt(loc, "ADD --exclude is not supported")
		}
		if c.Checksum != "" || c.KeepGitDir != nil {
			return df.errAt(loc, "ADD --checksum and --keep-git-dir apply to remote sources, which are not supported")
		}
		if len(c.SourceContents) > 0 {
			return df.errAt(loc, "ADD with a here-document is not supported")
		}
	case *instructions.CmdCommand:
		if len(c.Files) > 0 {
			return df.errAt(loc, "CMD with a here-document is not supported")
		}
	case *instructions.EntrypointCommand:
		if len(c.Files) > 0 {
			return df.errAt(loc, "ENTRYPOINT with a here-document is not supported")
		}
	}
	return nil
}

// supportedRunFlags are the RUN flags the builder implements.
var supportedRunFlags = []string{"mount", "network"}

func (df *dockerfile) checkRun(c *instructions.RunCommand) error {
	loc := c.Location()
	// BuildKit parses --mount fields only when expanding: do it once with
	// the words as written to check them now.
	if err := c.Expand(func(w string) (string, error) { return w, nil }); err != nil {
		return df.errAt(loc, "RUN: %v", err)
	}
	for _, f := range c.FlagsUsed {
		if !slices.Contains(supportedRunFlags, f) {
			return df.errAt(loc, "RUN --%s is not supported (supported: --mount, --network)", f)
		}
	}
	if len(c.Files) > 0 {
		return df.errAt(loc, "RUN with a here-document is not supported: write the script with COPY, or use a shell-form RUN")
	}
	if n := instructions.GetNetwork(c); n != instructions.NetworkDefault && n != instructions.NetworkNone {
		return df.errAt(loc, "RUN --network=%s is not supported (default or none)", n)
	}
	for _, m := range instructions.GetMounts(c) {
		switch m.Type {
		case instructions.MountTypeSecret, instructions.MountTypeCache, instructions.MountTypeTmpfs:
		case instructions.MountTypeBind:
			if m.From == "" {
				return df.errAt(loc, "RUN --mount=type=bind of the build context is not supported: COPY the files, or bind from a stage or image with from=")
			}
		default:
			return df.errAt(loc, "RUN --mount=type=%s is not supported (secret, cache, bind, tmpfs)", m.Type)
		}
	}
	return nil
}

// stageIndex finds a stage by name or index ("0", "1", ...), among the
// stages before stage number before.
func (df *dockerfile) stageIndex(ref string, before int) (int, bool) {
	for i := 0; i < before && i < len(df.stages); i++ {
		if strings.EqualFold(df.stages[i].Name, ref) {
			return i, true
		}
	}
	if n, err := strconv.Atoi(ref); err == nil && n >= 0 && n < before {
		return n, true
	}
	return 0, false
}

// target returns the index of the stage to build.
func (df *dockerfile) target(name string) (int, error) {
	if name == "" {
		return len(df.stages) - 1, nil
	}
	i, ok := df.stageIndex(name, len(df.stages))
	if !ok {
		return 0, &LineError{File: df.name, Err: fmt.Errorf("target stage %q not found", name)}
	}
	return i, nil
}
