package kubetest

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// ImageConfig is what WriteOCIArchive puts in an image's config.
type ImageConfig struct {
	Entrypoint []string
	Env        []string
	User       string
}

// WriteOCIArchive writes root as a one-layer OCI image named ref (say
// "kubetest.local/agent:1") in an OCI image-layout tar, the form
// `ctr images import` reads: what `docker build` of a FROM scratch
// Dockerfile with one COPY makes, without a Docker engine. Files keep
// their modes; owners are root.
func WriteOCIArchive(path, ref, root string, cfg ImageConfig) error {
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".oci-")
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	defer os.RemoveAll(tmp)
	layer := filepath.Join(tmp, "layer.tar")
	if err := writeLayer(layer, root); err != nil {
		return err
	}
	layerDigest, layerSize, err := digestFile(layer)
	if err != nil {
		return err
	}
	type desc struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Platform    map[string]string `json:"platform,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Entrypoint": cfg.Entrypoint, "Env": cfg.Env, "User": cfg.User},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc{MediaType: "application/vnd.oci.image.config.v1+json", Digest: sum(config), Size: int64(len(config))},
		"layers": []desc{{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: layerDigest, Size: layerSize}},
	})
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []desc{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: sum(manifest), Size: int64(len(manifest)),
			Platform:    map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
			Annotations: map[string]string{"io.containerd.image.name": ref},
		}},
	})

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	blob := func(d string) string { return "blobs/sha256/" + d[len("sha256:"):] }
	for _, e := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(sum(config)), config},
		{blob(sum(manifest)), manifest},
	} {
		if err := add(e.name, e.data); err != nil {
			return fmt.Errorf("kubetest: image archive: %w", err)
		}
	}
	lf, err := os.Open(layer)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	defer lf.Close()
	if err := tw.WriteHeader(&tar.Header{Name: blob(layerDigest), Mode: 0o644, Size: layerSize, Typeflag: tar.TypeReg}); err != nil {
		return fmt.Errorf("kubetest: image archive: %w", err)
	}
	if _, err := io.Copy(tw, lf); err != nil {
		return fmt.Errorf("kubetest: image archive: %w", err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("kubetest: image archive: %w", err)
	}
	return f.Close()
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func digestFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("kubetest: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("kubetest: %w", err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeLayer tars root's tree (regular files, directories, symlinks).
func writeLayer(path, root string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			if _, err := io.Copy(tw, src); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kubetest: layer of %s: %w", root, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	return f.Close()
}
