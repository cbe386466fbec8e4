package daytona

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// maxReplaceFile bounds a file replaceInFiles reads into memory.
const maxReplaceFile = 16 << 20

func (s *Server) registerFiles(t func(string, toolbox)) {
	t("GET /files", s.listFiles)
	t("GET /files/info", s.fileInfo)
	t("DELETE /files", s.deleteFile)
	t("POST /files/folder", s.createFolder)
	t("POST /files/move", s.moveFile)
	t("POST /files/permissions", s.setPermissions)
	t("GET /files/find", s.findInFiles)
	t("GET /files/search", s.searchFiles)
	t("POST /files/replace", s.replaceInFiles)
	t("GET /files/download", s.download)
	t("POST /files/bulk-download", s.bulkDownload)
	t("POST /files/bulk-upload", s.bulkUpload)
}

// IsMultipartUpload reports whether r is a toolbox upload (multipart).
func IsMultipartUpload(r *http.Request) bool {
	p := r.URL.Path
	return strings.HasPrefix(p, Prefix+"/toolbox/") && strings.HasSuffix(p, "/files/bulk-upload")
}

type fileInfo struct {
	Name        string `json:"name"`
	Path        string `json:"path"`
	IsDir       bool   `json:"isDir"`
	Size        int64  `json:"size"`
	Mode        string `json:"mode"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Group       string `json:"group"`
	ModTime     string `json:"modTime"`
	ModifiedAt  string `json:"modifiedAt"`
}

func infoOf(e dataplane.Entry) fileInfo {
	mt := e.ModTime.UTC().Format(time.RFC3339Nano)
	return fileInfo{Name: e.Name, Path: e.Path, IsDir: e.Type == dataplane.FileTypeDir, Size: e.Size,
		Mode: e.Permissions, Permissions: fmt.Sprintf("%#o", uint32(e.Mode.Perm())), Owner: e.Owner, Group: e.Group,
		ModTime: mt, ModifiedAt: mt}
}

// pathParam is the required query parameter name.
func pathParam(r *http.Request, name string) (string, error) {
	p := r.URL.Query().Get(name)
	if p == "" {
		return "", sandbox.Invalid(name, "%s is required", name)
	}
	return p, nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "."
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return sandbox.Invalid("depth", "depth must be at least 1")
		}
		depth = n
	}
	entries, err := req.List(r.Context(), p, s.userOf(r), depth)
	if err != nil {
		return err
	}
	out := make([]fileInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, infoOf(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) fileInfo(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	p, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	e, err := req.Stat(r.Context(), p, s.userOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, infoOf(e))
	return nil
}

// deleteFile removes a file, or a directory when recursive is set (a
// directory without it is refused, as Daytona's toolbox does).
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	p, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	user := s.userOf(r)
	if r.URL.Query().Get("recursive") != "true" {
		e, err := req.Stat(r.Context(), p, user)
		if err != nil {
			return err
		}
		if e.Type == dataplane.FileTypeDir {
			return sandbox.Invalid("recursive", "%s is a directory: set recursive to delete it", p)
		}
	}
	if err := req.Remove(r.Context(), p, user); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) createFolder(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	p, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	mode := r.URL.Query().Get("mode")
	if mode != "" {
		if _, err := strconv.ParseUint(mode, 8, 32); err != nil {
			return sandbox.Invalid("mode", "mode must be octal, like 755")
		}
	}
	user := s.userOf(r)
	if _, err := req.MakeDir(r.Context(), p, user); err != nil && sandbox.ClassOf(err) != sandbox.ClassConflict {
		return err
	}
	if mode != "" {
		if _, err := s.shellOutput(r.Context(), req, user, "chmod "+mode+" -- "+shellQuote(p)); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

func (s *Server) moveFile(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	src, err := pathParam(r, "source")
	if err != nil {
		return err
	}
	dst, err := pathParam(r, "destination")
	if err != nil {
		return err
	}
	if _, err := req.Move(r.Context(), src, dst, s.userOf(r)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// setPermissions is chmod and chown in the sandbox, as its user: the
// agent has no call for them, and they are the sandbox's own tools.
func (s *Server) setPermissions(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	p, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var script []string
	if mode := q.Get("mode"); mode != "" {
		if _, err := strconv.ParseUint(mode, 8, 32); err != nil {
			return sandbox.Invalid("mode", "mode must be octal, like 644")
		}
		script = append(script, "chmod "+mode+" -- "+shellQuote(p))
	}
	owner := q.Get("owner")
	if g := q.Get("group"); g != "" {
		owner += ":" + g
	}
	if owner != "" {
		script = append(script, "chown "+shellQuote(owner)+" -- "+shellQuote(p))
	}
	if len(script) == 0 {
		return sandbox.Invalid("mode", "give mode, owner or group")
	}
	if _, err := s.shellOutput(r.Context(), req, s.userOf(r), strings.Join(script, " && ")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// findInFiles is grep: the lines under path that contain pattern.
func (s *Server) findInFiles(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	p, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	pattern, err := pathParam(r, "pattern")
	if err != nil {
		return err
	}
	res, err := req.ExecBuffered(r.Context(), dataplane.ExecRequest{User: s.userOf(r), Timeout: time.Minute,
		Cmd: []string{"grep", "-rnIF", "--null", "--", pattern, p}})
	if err != nil {
		return err
	}
	matches := []map[string]any{}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		file, rest, ok := strings.Cut(line, "\x00")
		if !ok {
			continue
		}
		num, content, _ := strings.Cut(rest, ":")
		n, _ := strconv.Atoi(num)
		matches = append(matches, map[string]any{"file": file, "line": n, "content": content})
	}
	writeJSON(w, http.StatusOK, matches)
	return nil
}

// searchFiles is find -name: the files under path whose name matches the
// glob pattern.
func (s *Server) searchFiles(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	p, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	pattern, err := pathParam(r, "pattern")
	if err != nil {
		return err
	}
	res, err := req.ExecBuffered(r.Context(), dataplane.ExecRequest{User: s.userOf(r), Timeout: time.Minute,
		Cmd: []string{"find", p, "-name", pattern, "-print0"}})
	if err != nil {
		return err
	}
	files := []string{}
	for _, f := range strings.Split(string(res.Stdout), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": files})
	return nil
}

func (s *Server) replaceInFiles(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	var in struct {
		Files    []string `json:"files"`
		Pattern  string   `json:"pattern"`
		NewValue string   `json:"newValue"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Pattern == "" {
		return sandbox.Invalid("pattern", "pattern is required")
	}
	user := s.userOf(r)
	out := []map[string]any{}
	for _, f := range in.Files {
		err := s.replaceIn(r, req, f, user, in.Pattern, in.NewValue)
		res := map[string]any{"file": f, "success": err == nil}
		if err != nil {
			res["error"] = err.Error()
		}
		out = append(out, res)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) replaceIn(r *http.Request, req *dataplane.Request, path, user, pattern, value string) error {
	if err := req.Reserve(maxReplaceFile); err != nil {
		return err
	}
	body, _, err := req.Read(r.Context(), path, user)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(body, maxReplaceFile+1))
	body.Close()
	if err != nil {
		return err
	}
	if len(data) > maxReplaceFile {
		return sandbox.Errorf(sandbox.ClassTooLarge, "%s is over %d MiB", path, maxReplaceFile>>20)
	}
	_, err = req.Write(r.Context(), path, user, bytes.NewReader(bytes.ReplaceAll(data, []byte(pattern), []byte(value))))
	return err
}

// download streams one file.
func (s *Server) download(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	p, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	body, size, err := req.Read(r.Context(), p, s.userOf(r))
	if err != nil {
		return err
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	_, _ = io.Copy(w, body)
	return nil
}

// bulkDownload answers multipart/form-data: a "file" part per path
// (filename = the path asked for), streamed from the sandbox, or an
// "error" part with Daytona's error body when a file cannot be read.
func (s *Server) bulkDownload(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	var in struct {
		Paths []string `json:"paths"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if len(in.Paths) == 0 {
		return sandbox.Invalid("paths", "paths is required")
	}
	user := s.userOf(r)
	mw := multipart.NewWriter(w)
	w.Header().Set("Content-Type", mw.FormDataContentType())
	w.WriteHeader(http.StatusOK)
	for _, p := range in.Paths {
		if err := s.downloadPart(r, req, mw, p, user); err != nil {
			return nil // the answer has begun: the client sees a cut stream
		}
	}
	_ = mw.Close()
	return nil
}

func (s *Server) downloadPart(r *http.Request, req *dataplane.Request, mw *multipart.Writer, p, user string) error {
	body, size, err := req.Read(r.Context(), p, user)
	if err != nil {
		status := statusOfErr(err)
		msg, _ := json.Marshal(map[string]any{"message": messageOf(err), "statusCode": status,
			"code": strings.ToUpper(strings.ReplaceAll(http.StatusText(status), " ", "_"))})
		part, perr := mw.CreatePart(partHeader("error", p, "application/json", -1))
		if perr != nil {
			return perr
		}
		_, werr := part.Write(msg)
		return werr
	}
	defer body.Close()
	part, err := mw.CreatePart(partHeader("file", p, "application/octet-stream", size))
	if err != nil {
		return err
	}
	_, err = io.Copy(part, body)
	return err
}

func partHeader(field, filename, ctype string, size int64) textproto.MIMEHeader {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": field, "filename": filename}))
	h.Set("Content-Type", ctype)
	if size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	return h
}

// bulkUpload reads the SDK's multipart form (files[i].path, then
// files[i].file) part by part, streaming each file into the sandbox:
// nothing is held whole in the daemon's memory.
func (s *Server) bulkUpload(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return sandbox.Invalid("body", "want a multipart/form-data body: %v", err)
	}
	user := s.userOf(r)
	paths := map[string]string{}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sandbox.Invalid("body", "reading the multipart body: %v", err)
		}
		name := part.FormName()
		idx, field, ok := strings.Cut(strings.TrimPrefix(name, "files["), "].")
		if !ok || !strings.HasPrefix(name, "files[") {
			part.Close()
			continue
		}
		switch field {
		case "path":
			v, err := io.ReadAll(io.LimitReader(part, 4097))
			if err != nil || len(v) > 4096 {
				return sandbox.Invalid(name, "path is too long")
			}
			paths[idx] = string(v)
		case "file":
			dst := paths[idx]
			if dst == "" {
				dst = part.FileName()
			}
			if dst == "" {
				return sandbox.Invalid(name, "files[%s].path must come before its file", idx)
			}
			if _, err := req.Write(r.Context(), dst, user, part); err != nil {
				return err
			}
		}
		part.Close()
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func messageOf(err error) string {
	var se *sandbox.Error
	if errors.As(err, &se) {
		return se.Msg
	}
	return err.Error()
}
