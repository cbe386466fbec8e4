package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/textedit"
)

// maxQuotedEdit bounds the text an edit that was not found quotes back.
const maxQuotedEdit = 512 << 10

// maxEditBody bounds the body of POST /fs/edit (the edits' texts).
const maxEditBody = 16 << 20

// editError is the error body of POST /fs/edit: the REST shape plus a
// reason for the failures a caller words itself.
type editError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
}

// handleEdit serves POST /fs/edit: edit_file of the MCP filesystem server
// done here, in the sandbox, so loading, searching and diffing a large
// file is charged to the sandbox's memory and CPU rather than the
// daemon's. The final component of the path is not followed, except in a
// confined request (see RootHeader), where a final link is followed
// inside the roots.
func (s *Server) handleEdit(w http.ResponseWriter, r *http.Request) {
	u, err := s.userFromRequest(r.Header, r.URL.Query().Get("username"))
	if err != nil {
		writeErr(w, err)
		return
	}
	var req textedit.Request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxEditBody)).Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("edits of more than %d MiB", maxEditBody>>20))
			return
		}
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	conf, err := confinementOf(r.Header)
	if err != nil {
		writeErr(w, err)
		return
	}
	var p string
	if conf != nil {
		p, err = conf.abs(req.Path)
	} else {
		p, err = u.resolvePath(req.Path)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	var content []byte
	read := func(f *os.File) error {
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return fsError(fmt.Sprintf("stat %q", p), err)
		}
		switch {
		case fi.IsDir():
			return connect.NewError(connect.CodeInvalidArgument, errors.New("EISDIR: illegal operation on a directory, read"))
		case !fi.Mode().IsRegular():
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q is not a regular file", p))
		case fi.Size() > textedit.MaxFile:
			return connect.NewError(connect.CodeOutOfRange, fmt.Errorf("file %s is %d MiB, more than the %d MiB an edit may load", p, fi.Size()>>20, textedit.MaxFile>>20))
		}
		content, err = io.ReadAll(io.LimitReader(f, textedit.MaxFile+1))
		if err != nil {
			return fsError(fmt.Sprintf("read %q", p), err)
		}
		if len(content) > textedit.MaxFile {
			return connect.NewError(connect.CodeOutOfRange, fmt.Errorf("file %s grew past the %d MiB an edit may load", p, textedit.MaxFile>>20))
		}
		return nil
	}
	// A confined edit holds the file's directory from the read to the
	// write, so both act on the same directory whatever happens to the
	// path meanwhile.
	var res *resolved
	defer func() { res.close() }()
	if conf != nil {
		err = conf.do(u, func(rs *rootSet) (err error) {
			if res, err = rs.resolve(p, followFinal); err != nil {
				return err
			}
			fd, err := unix.Openat(res.dir, res.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				return fsError(fmt.Sprintf("open %q", p), err)
			}
			return read(os.NewFile(uintptr(fd), p))
		})
	} else {
		err = u.do(func() error {
			f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0) //nolint:gosec // G703: p was resolved under the request's root; O_NOFOLLOW keeps the last component from being a link
			if err != nil {
				return fsError(fmt.Sprintf("open %q", p), err)
			}
			return read(f)
		})
	}
	if err != nil {
		writeEditErr(w, err)
		return
	}
	original, modified, err := textedit.Apply(r.Context(), string(content), req.Edits)
	content = nil
	var noMatch *textedit.NoMatchError
	switch {
	case errors.As(err, &noMatch):
		if len(noMatch.OldText) > maxQuotedEdit {
			noMatch.OldText = strings.ToValidUTF8(noMatch.OldText[:maxQuotedEdit], "") + "…"
		}
		writeJSON(w, http.StatusBadRequest, editError{Code: http.StatusBadRequest, Message: err.Error(), Reason: textedit.ReasonNoMatch})
		return
	case err != nil && r.Context().Err() != nil:
		writeError(w, http.StatusGatewayTimeout, "edit stopped: "+err.Error())
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	name := req.DiffName
	if name == "" {
		name = p
	}
	diff := textedit.UnifiedDiff(name, original, modified, "original", "modified")
	if len(diff) > textedit.MaxDiff {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the diff of these edits is %d MiB, more than the %d MiB one answer may carry; nothing was changed: edit in smaller steps, or replace the file with write_file", len(diff)>>20, textedit.MaxDiff>>20))
		return
	}
	if !req.DryRun {
		if res != nil {
			err = s.writeEditAt(u, res, modified)
			res = nil // the upload released it
		} else {
			_, err = s.uploadOne(u, nil, p, nil, strings.NewReader(modified))
		}
		if err != nil {
			writeErr(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, textedit.Response{Diff: diff})
}

// writeEditAt replaces the file res names with content, through res's
// directory (see createUploadAt); res is released.
func (s *Server) writeEditAt(u *User, res *resolved, content string) error {
	var t *uploadTarget
	err := u.do(func() (err error) { t, err = createUploadAt(res); return err })
	if err != nil {
		res.close()
		return err
	}
	_, err = t.write(u, strings.NewReader(content), nil)
	return err
}

// writeEditErr writes err like writeErr; a file over the size limit is
// 413.
func writeEditErr(w http.ResponseWriter, err error) {
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Code() == connect.CodeOutOfRange {
		writeError(w, http.StatusRequestEntityTooLarge, ce.Message())
		return
	}
	writeErr(w, err)
}
