package daytona

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentbox/agentbox/api/proto/filesystem"
	"github.com/agentbox/agentbox/api/proto/filesystem/filesystemconnect"
)

// fsBridge is envd's filesystem service over the toolbox's files routes:
// stat, list (one level), make a directory, move, remove. Watching is not
// bridged (the toolbox has no watch).
type fsBridge struct {
	filesystemconnect.UnimplementedFilesystemHandler
	br *bridge
}

// fileOut is the toolbox's FileInfo, the fields used here.
type fileOut struct {
	Name        string `json:"name"`
	Path        string `json:"path"`
	IsDir       bool   `json:"isDir"`
	Size        int64  `json:"size"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Group       string `json:"group"`
	ModTime     string `json:"modTime"`
}

func entryOf(f fileOut, p string) *filesystem.EntryInfo {
	e := &filesystem.EntryInfo{Name: f.Name, Path: p, Size: f.Size, Permissions: f.Permissions, Owner: f.Owner, Group: f.Group,
		Type: filesystem.FileType_FILE_TYPE_FILE}
	if f.IsDir {
		e.Type = filesystem.FileType_FILE_TYPE_DIRECTORY
	}
	if e.Name == "" {
		e.Name = path.Base(p)
	}
	if t, err := time.Parse(time.RFC3339Nano, f.ModTime); err == nil {
		e.ModifiedTime = timestamppb.New(t)
	}
	return e
}

// files calls a toolbox files route of the sandbox the request names.
func (f *fsBridge) files(ctx context.Context, h http.Header, method, route string, q url.Values, out any) error {
	base, err := f.br.target(h)
	if err != nil {
		return connectErr(err)
	}
	u := base + "/files" + route
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	if err := f.br.b.api.call(ctx, method, u, nil, out); err != nil {
		return connectErr(err)
	}
	return nil
}

func (f *fsBridge) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	var out fileOut
	if err := f.files(ctx, req.Header(), http.MethodGet, "/info", url.Values{"path": {req.Msg.GetPath()}}, &out); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: entryOf(out, req.Msg.GetPath())}), nil
}

func (f *fsBridge) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	dir := req.Msg.GetPath()
	var out []fileOut
	if err := f.files(ctx, req.Header(), http.MethodGet, "", url.Values{"path": {dir}}, &out); err != nil {
		return nil, err
	}
	resp := &filesystem.ListDirResponse{}
	for _, e := range out {
		p := e.Path
		if p == "" || !strings.HasPrefix(p, "/") {
			p = path.Join(dir, e.Name)
		}
		resp.Entries = append(resp.Entries, entryOf(e, p))
	}
	return connect.NewResponse(resp), nil
}

func (f *fsBridge) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	p := req.Msg.GetPath()
	if err := f.files(ctx, req.Header(), http.MethodPost, "/folder", url.Values{"path": {p}, "mode": {"755"}}, nil); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: &filesystem.EntryInfo{Name: path.Base(p), Path: p,
		Type: filesystem.FileType_FILE_TYPE_DIRECTORY}}), nil
}

func (f *fsBridge) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	src, dst := req.Msg.GetSource(), req.Msg.GetDestination()
	if err := f.files(ctx, req.Header(), http.MethodPost, "/move", url.Values{"source": {src}, "destination": {dst}}, nil); err != nil {
		return nil, err
	}
	var out fileOut
	if err := f.files(ctx, req.Header(), http.MethodGet, "/info", url.Values{"path": {dst}}, &out); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entryOf(out, dst)}), nil
}

func (f *fsBridge) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	if err := f.files(ctx, req.Header(), http.MethodDelete, "", url.Values{"path": {req.Msg.GetPath()}, "recursive": {"true"}}, nil); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}
