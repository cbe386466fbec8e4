package agentscope

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Workspace copies are namespaced per owner: STORAGE_FOLDER/<owner>/<path>.
// A storage_path a caller gives is resolved inside the caller's own area,
// so no value can name another owner's copy, and every host access to a
// copy goes through an os.Root opened on that area (see storageRoot).

// storageLayoutMarker marks a STORAGE_FOLDER already laid out per owner.
// Folders without it hold copies of an earlier version, one directory per
// sandbox with no owner: they are moved aside (see migrateStorage).
const storageLayoutMarker = ".agentbox-storage-v2"

// legacyStorageDir receives the copies of the earlier, flat layout. Its
// leading dot keeps it apart from every owner directory name.
const legacyStorageDir = ".legacy"

// maxStoragePath bounds a caller's storage_path.
const maxStoragePath = 1024

// ownerStorageName is the directory of owner's copies: the name itself
// when it is a plain word, else "~" and a hash of it ("~" never occurs in
// a plain word, so the two forms cannot collide).
func ownerStorageName(owner string) string {
	plain := owner != "" && len(owner) <= 64
	for i := 0; plain && i < len(owner); i++ {
		c := owner[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if plain {
		return owner
	}
	sum := sha256.Sum256([]byte(owner))
	return "~" + hex.EncodeToString(sum[:16])
}

// ownerStorage is the host directory of owner's copies.
func (s *Server) ownerStorage(owner string) string {
	return filepath.Join(s.cfg.StorageFolder, ownerStorageName(owner))
}

// defaultStoragePath is where a sandbox's workspace is copied when its
// creator named no storage_path.
func (s *Server) defaultStoragePath(owner string, id sandbox.ID) string {
	if s.cfg.StorageFolder == "" {
		return ""
	}
	return filepath.Join(s.ownerStorage(owner), string(id))
}

// resolveStoragePath turns a caller's storage_path into a host path in
// owner's area. A relative path is taken inside the area; an absolute one
// must already be in it (the storage_path get_info reported). Anything
// else — another owner's copy, "..", the folder itself — is an error.
func (s *Server) resolveStoragePath(owner, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if s.cfg.StorageFolder == "" {
		return "", sandbox.Errorf(sandbox.ClassInvalid, "storage_path needs STORAGE_FOLDER to be set on the server")
	}
	if len(p) > maxStoragePath || strings.ContainsRune(p, 0) {
		return "", sandbox.Errorf(sandbox.ClassInvalid, "storage_path is longer than %d bytes or contains NUL", maxStoragePath)
	}
	area := s.ownerStorage(owner)
	rel := filepath.Clean(p)
	if filepath.IsAbs(rel) {
		r, err := filepath.Rel(area, rel)
		if err != nil {
			return "", sandbox.Errorf(sandbox.ClassInvalid, "storage_path %q is not in your storage area", p)
		}
		rel = r
	}
	if rel == "." || !filepath.IsLocal(rel) || strings.HasSuffix(rel, savingSuffix) {
		return "", sandbox.Errorf(sandbox.ClassInvalid,
			"storage_path %q is not in your storage area: give a path relative to it or one get_info reported", p)
	}
	return filepath.Join(area, rel), nil
}

// storageRoot opens owner's area (creating it) and returns it with the
// path of r's copy relative to it. A record whose path is not in its
// owner's area (a record of an earlier version) is refused.
func (s *Server) storageRoot(r *record) (*os.Root, string, error) {
	area := s.ownerStorage(r.Owner)
	rel, err := filepath.Rel(area, r.Storage)
	if err != nil || rel == "." || !filepath.IsLocal(rel) {
		return nil, "", fmt.Errorf("storage path %s is not in the owner's storage area %s", r.Storage, area)
	}
	if err := os.MkdirAll(s.cfg.StorageFolder, 0o700); err != nil {
		return nil, "", fmt.Errorf("create the storage folder: %w", err)
	}
	top, err := os.OpenRoot(s.cfg.StorageFolder)
	if err != nil {
		return nil, "", fmt.Errorf("open the storage folder: %w", err)
	}
	defer top.Close()
	name := ownerStorageName(r.Owner)
	if err := top.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, "", fmt.Errorf("create the owner's storage area: %w", err)
	}
	root, err := top.OpenRoot(name)
	if err != nil {
		return nil, "", fmt.Errorf("open the owner's storage area: %w", err)
	}
	return root, rel, nil
}

// migrateStorage moves the copies of the earlier flat layout (one
// directory per sandbox or caller-chosen path, no owner) into
// STORAGE_FOLDER/.legacy once: their owners are unknown, so none is
// handed to any caller; adopt moves a live sandbox's own copy back into
// its owner's area. The operator may move others by hand.
func (s *Server) migrateStorage() error {
	dir := s.cfg.StorageFolder
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the storage folder: %w", err)
	}
	marker := filepath.Join(dir, storageLayoutMarker)
	if _, err := os.Lstat(marker); err == nil {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read the storage folder: %w", err)
	}
	legacy := filepath.Join(dir, legacyStorageDir)
	moved := 0
	for _, e := range entries {
		if e.Name() == legacyStorageDir {
			continue
		}
		if err := os.MkdirAll(legacy, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", legacy, err)
		}
		dst := filepath.Join(legacy, e.Name())
		if _, err := os.Lstat(dst); err == nil {
			dst += "." + time.Now().UTC().Format("20060102T150405.000000000")
		}
		if err := os.Rename(filepath.Join(dir, e.Name()), dst); err != nil {
			return fmt.Errorf("move %s aside: %w", e.Name(), err)
		}
		moved++
	}
	if moved > 0 {
		s.log.Warn("agentscope: workspace copies of the earlier storage layout (no owner) moved aside; "+
			"move one into STORAGE_FOLDER/<owner>/ to give it back to its owner", "dir", legacy, "copies", moved)
	}
	return os.WriteFile(marker, []byte("workspace copies are in <owner>/<storage_path>\n"), 0o600)
}

// adoptStorage is the storage path of a sandbox record found in the
// manager (a daemon restart): the recorded one when it is in the owner's
// area, else the default. A live sandbox's copy from the earlier flat
// layout is moved into its owner's area, its owner now being known.
func (s *Server) adoptStorage(owner string, id sandbox.ID, recorded string) string {
	if s.cfg.StorageFolder == "" {
		return ""
	}
	if recorded != "" {
		if p, err := s.resolveStoragePath(owner, recorded); err == nil && filepath.IsAbs(recorded) {
			return p
		}
		s.log.Warn("agentscope: recorded storage_path is not in its owner's area; using the default",
			"sandbox", id, "storage_path", recorded)
	}
	p := s.defaultStoragePath(owner, id)
	old := filepath.Join(s.cfg.StorageFolder, legacyStorageDir, string(id))
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		if fi, err := os.Lstat(old); err == nil && fi.IsDir() {
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err == nil {
				if err := os.Rename(old, p); err != nil {
					s.log.Warn("agentscope: move an earlier workspace copy to its owner", "from", old, "err", err)
				}
			}
		}
	}
	return p
}
