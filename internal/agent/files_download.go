package agent

import (
	"compress/gzip"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// handleDownload serves GET /files?path=&username=: the file's bytes,
// streamed from disk. With Accept-Encoding: gzip the body is compressed on
// the fly (no Content-Length); otherwise http.ServeContent handles
// Content-Length, Range and conditional requests.
func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	u, err := s.userFromRequest(r.Header, q.Get("username"))
	if err != nil {
		writeErr(w, err)
		return
	}
	conf, err := confinementOf(r.Header)
	if err != nil {
		writeErr(w, err)
		return
	}
	var p string
	if conf != nil {
		p, err = conf.abs(q.Get("path"))
	} else {
		p, err = u.resolvePath(q.Get("path"))
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	var f *os.File
	open := func() error {
		fi, err := os.Stat(p) //nolint:gosec // G703: inside the sandbox, with the request user's fs credentials (u.do); confined requests take openConfinedFile
		if err != nil {
			return fsError(fmt.Sprintf("path %q", p), err)
		}
		if fi.IsDir() {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q is a directory", p))
		}
		if !fi.Mode().IsRegular() {
			// Opening a FIFO would block; devices are not files to download.
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q is not a regular file", p))
		}
		f, err = os.Open(p) //nolint:gosec // G703: as above
		if err != nil {
			return fsError(fmt.Sprintf("open %q", p), err)
		}
		return nil
	}
	if conf != nil {
		err = conf.do(u, func(rs *rootSet) (err error) { f, err = openConfinedFile(rs, p); return err })
	} else {
		err = u.do(open)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeErr(w, fsError(fmt.Sprintf("stat %q", p), err))
		return
	}

	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(p)}))
	h.Add("Vary", "Accept-Encoding")
	if acceptsGzip(r.Header) {
		h.Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if _, err := io.Copy(gz, f); err != nil {
			s.log.Debug("download aborted", "path", p, "err", err)
			return
		}
		_ = gz.Close()
		return
	}
	// Pseudo files (/proc, /sys) report size 0 and cannot seek to their
	// end, which ServeContent needs for Content-Length: stream what reading
	// them gives instead.
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		if _, err := io.Copy(w, f); err != nil {
			s.log.Debug("download aborted", "path", p, "err", err)
		}
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		writeErr(w, fsError(fmt.Sprintf("seek %q", p), err))
		return
	}
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// acceptsGzip reports whether Accept-Encoding allows gzip (q > 0).
func acceptsGzip(h http.Header) bool {
	for _, v := range h.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
				continue
			}
			if qv, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
				if q, err := strconv.ParseFloat(qv, 64); err == nil && q == 0 {
					return false
				}
			}
			return true
		}
	}
	return false
}

// openConfinedFile opens the regular file abs resolves to under rs for
// reading (a final link is followed inside the roots).
func openConfinedFile(rs *rootSet, abs string) (*os.File, error) {
	r, err := rs.resolve(abs, followFinal)
	if err != nil {
		return nil, err
	}
	defer r.close()
	fi, err := statAt(r.dir, r.name)
	if err != nil {
		return nil, fsError(fmt.Sprintf("path %q", abs), err)
	}
	if fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q is a directory", abs))
	}
	if !fi.Mode().IsRegular() {
		// Opening a FIFO would block; devices are not files to download.
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q is not a regular file", abs))
	}
	// O_NONBLOCK: should a FIFO be swapped in after the check, the open
	// returns at once, and the check below refuses it.
	fd, err := unix.Openat(r.dir, r.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fsError(fmt.Sprintf("open %q", abs), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q is not a regular file", abs))
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fsError(fmt.Sprintf("open %q", abs), err)
	}
	return os.NewFile(uintptr(fd), abs), nil
}
