package template

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// maxRefLen bounds an image reference from a caller.
const maxRefLen = 512

// Pull fetches image ref from its registry and stores it as template name
// (name "" = the image reference itself, e.g. "python:3.12"). Mirrors of
// the registry are tried first, then the registry itself. The record pins
// the manifest digest: its source is "<repository>@sha256:...".
func (s *Store) Pull(ctx context.Context, ref, tmplName string, opts PullOptions, progress func(Progress)) (Info, error) {
	origin, err := parseImageRef(ref, opts.Insecure)
	if err != nil {
		return Info{}, err
	}
	r, err := s.targetName(ref, tmplName)
	if err != nil {
		return Info{}, err
	}
	if err := s.checkStorable(r); err != nil {
		return Info{}, err
	}
	plat, err := pullPlatform(opts.Platform)
	if err != nil {
		return Info{}, err
	}
	kc, err := newKeychain(s.opts.Auth)
	if err != nil {
		return Info{}, sandbox.Wrap(sandbox.ClassInvalid, err, err.Error())
	}
	img, err := s.fetchImage(ctx, origin, plat, opts, kc)
	if err != nil {
		return Info{}, err
	}
	md, err := img.Digest()
	if err != nil {
		return Info{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	pinned := origin.Context().Name() + "@" + md.String()
	src, err := fromImage(img, pinned)
	if err != nil {
		return Info{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	if err := checkPlatform(src.config, plat); err != nil {
		return Info{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	info, err := s.storeImage(ctx, r, src, progress)
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) {
			err = classify(err)
		}
		return Info{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	return info, nil
}

// targetName is the template name a pull or import stores under.
func (s *Store) targetName(ref, tmplName string) (ref, error) {
	if tmplName != "" {
		return parseRef(tmplName)
	}
	return nameFromImageRef(ref)
}

// parseImageRef parses an image reference strictly.
func parseImageRef(ref string, insecure bool) (name.Reference, error) {
	if ref == "" || len(ref) > maxRefLen || strings.ContainsAny(ref, " \t\r\n") {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "invalid image reference %q", ref)
	}
	var o []name.Option
	if insecure {
		o = append(o, name.Insecure)
	}
	r, err := name.ParseReference(ref, o...)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("invalid image reference %q: %v", ref, err))
	}
	return r, nil
}

// pullPlatform parses os/arch[/variant], "" meaning this host's.
func pullPlatform(s string) (v1.Platform, error) {
	if s == "" {
		p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
		if runtime.GOARCH == "arm64" {
			p.Variant = "v8"
		}
		return p, nil
	}
	p, err := v1.ParsePlatform(s)
	if err != nil || p.OS == "" || p.Architecture == "" || strings.Contains(s, ":") {
		return v1.Platform{}, sandbox.Errorf(sandbox.ClassInvalid, "invalid platform %q (want os/arch[/variant], e.g. linux/arm64)", s)
	}
	if p.OS != "linux" {
		return v1.Platform{}, sandbox.Errorf(sandbox.ClassInvalid, "platform %q: agentbox runs linux images", s)
	}
	return *p, nil
}

// checkPlatform refuses an image (not chosen from an index) that is for
// another platform than the one asked for.
func checkPlatform(cfg *v1.ConfigFile, want v1.Platform) error {
	if cfg.Architecture == "" || cfg.Architecture == want.Architecture {
		return nil
	}
	return sandbox.Errorf(sandbox.ClassInvalid, "image is for linux/%s, not %s; pass platform linux/%s to store it anyway", cfg.Architecture, want.String(), cfg.Architecture)
}

// fetchImage tries each mirror of the reference's registry, then the
// registry itself; the origin's error is the one returned.
func (s *Store) fetchImage(ctx context.Context, origin name.Reference, plat v1.Platform, opts PullOptions, kc *keychain) (v1.Image, error) {
	ropts := []remote.Option{
		remote.WithContext(ctx), remote.WithAuthFromKeychain(kc),
		remote.WithPlatform(plat), remote.WithUserAgent("agentbox"),
	}
	for _, m := range s.mirrorsFor(origin.Context().RegistryStr()) {
		mref, err := mirrorRef(origin, m)
		if err != nil {
			s.log.Warn("template pull: skipping an invalid mirror", "mirror", m, "err", err)
			continue
		}
		img, err := remote.Image(mref, ropts...)
		if err == nil {
			s.log.Info("template pull: from a mirror", "ref", origin.String(), "mirror", m)
			return img, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.log.Warn("template pull: mirror failed, trying the next", "ref", origin.String(), "mirror", m, "err", err)
	}
	img, err := remote.Image(origin, ropts...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", origin.String(), classify(err))
	}
	return img, nil
}

// mirrorsFor returns the configured mirrors of a registry.
func (s *Store) mirrorsFor(registry string) []string {
	want := normalizeRegistry(registry)
	for k, v := range s.opts.Mirrors {
		if normalizeRegistry(k) == want {
			return v
		}
	}
	return nil
}

// mirrorRef rewrites origin to mirror m: "host[:port][/prefix]", with an
// optional http:// (a plain HTTP mirror) or https:// scheme.
func mirrorRef(origin name.Reference, m string) (name.Reference, error) {
	var o []name.Option
	switch {
	case strings.HasPrefix(m, "http://"):
		m, o = strings.TrimPrefix(m, "http://"), append(o, name.Insecure)
	case strings.HasPrefix(m, "https://"):
		m = strings.TrimPrefix(m, "https://")
	}
	m = strings.TrimRight(m, "/")
	s := m + "/" + origin.Context().RepositoryStr()
	switch r := origin.(type) {
	case name.Tag:
		s += ":" + r.TagStr()
	case name.Digest:
		s += "@" + r.DigestStr()
	}
	return name.ParseReference(s, o...)
}

// classify gives registry errors their class: refused credentials,
// unknown images, unreachable registries.
func classify(err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) {
		return err
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch {
		case te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden:
			return sandbox.Wrap(sandbox.ClassForbidden, err, "the registry refused access (check the registry credentials): "+err.Error())
		case te.StatusCode == http.StatusNotFound:
			return sandbox.Wrap(sandbox.ClassNotFound, err, "image not found in the registry: "+err.Error())
		case te.StatusCode >= 500:
			return sandbox.Wrap(sandbox.ClassUnavailable, err, "the registry failed: "+err.Error())
		}
		return sandbox.Wrap(sandbox.ClassInvalid, err, err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return sandbox.Wrap(sandbox.ClassTimeout, err, err.Error())
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	if strings.Contains(err.Error(), "no child with platform") {
		return sandbox.Wrap(sandbox.ClassNotFound, err, err.Error())
	}
	return sandbox.Wrap(sandbox.ClassUnavailable, err, "registry unreachable or answering badly: "+err.Error())
}
