package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/agentbox/agentbox/internal/s3client"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestAgentscopeOSSWorkspace: with FILE_SYSTEM=oss a released workspace
// goes to the bucket (one tar object under the owner's name, nothing left
// in STORAGE_FOLDER), and a sandbox created on another daemon — its own
// data dir and STORAGE_FOLDER, the same bucket — with that storage_path
// starts with it; another user naming the same storage_path gets an empty
// workspace of their own.
func TestAgentscopeOSSWorkspace(t *testing.T) {
	s3 := testutil.StartS3(t, "workspaces")
	settings := func(storage string) []string {
		return []string{"API_KEYS=oss-a:alice,oss-b:bob", "POOL_SIZE=0", "DEFAULT_SANDBOX_TYPE=base", "STORAGE_FOLDER=" + storage,
			"FILE_SYSTEM=oss", "OSS_ENDPOINT=" + s3.Endpoint, "OSS_ACCESS_KEY_ID=" + s3.AccessKey, "OSS_ACCESS_KEY_SECRET=" + s3.SecretKey,
			"OSS_BUCKET_NAME=" + s3.Bucket, "OSS_REGION=us-east-1", "OSS_PATH_STYLE=true"}
	}
	c, err := s3client.New(s3client.Options{Setting: "test", Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey,
		Region: "us-east-1", PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The daemon checks the bucket at start: it must exist.
	if err := c.MakeBucket(ctx, s3.Bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatal(err)
	}
	storage1 := filepath.Join(testutil.ShortTempDir(t), "storage")
	d1 := startDaemon(t, settings(storage1)...)
	call := func(d *daemon, key, method string, body map[string]any) any {
		t.Helper()
		status, data := d.call(t, "POST", "/"+method, key, body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", method, status, data)
		}
		var out struct {
			Data any `json:"data"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%s: %v: %s", method, err, data)
		}
		return out.Data
	}
	sid := call(d1, "oss-a", "create", map[string]any{"sandbox_type": "base"}).(string)
	if status, data := d1.call(t, "PUT", "/proxy/"+sid+"/workspace/file?path=kept/it.txt", "oss-a", "in the bucket"); status != http.StatusOK {
		t.Fatalf("write: %d %s", status, data)
	}
	storagePath := call(d1, "oss-a", "get_info", map[string]any{"identity": sid}).(map[string]any)["storage_path"].(string)
	call(d1, "oss-a", "release", map[string]any{"identity": sid})

	// In the bucket, under alice's name; not on the host.
	var keys []string
	for o := range c.ListObjects(ctx, s3.Bucket, minio.ListObjectsOptions{Prefix: "agentbox-workspaces/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	rel := filepath.Base(storagePath)
	if want := "agentbox-workspaces/alice/" + rel + ".tar"; len(keys) != 1 || keys[0] != want {
		t.Fatalf("bucket keys %v, want [%s]", keys, want)
	}
	if _, err := filepath.Glob(storagePath); err == nil {
		if m, _ := filepath.Glob(filepath.Join(storagePath, "*")); len(m) != 0 {
			t.Errorf("the copy stays in STORAGE_FOLDER: %v", m)
		}
	}

	// Another daemon (another replica's data dir and staging folder) restores it.
	d2 := startDaemon(t, settings(filepath.Join(testutil.ShortTempDir(t), "storage"))...)
	sid2 := call(d2, "oss-a", "create", map[string]any{"sandbox_type": "base", "storage_path": rel}).(string)
	status, data := d2.call(t, "GET", "/proxy/"+sid2+"/workspace/file?path=kept/it.txt", "oss-a", nil)
	if status != http.StatusOK || string(data) != "in the bucket" {
		t.Fatalf("restored on the other daemon: %d %q", status, data)
	}
	// Bob's storage_path of the same name is his own area: empty.
	sid3 := call(d2, "oss-b", "create", map[string]any{"sandbox_type": "base", "storage_path": rel}).(string)
	if status, data := d2.call(t, "GET", "/proxy/"+sid3+"/workspace/file?path=kept/it.txt", "oss-b", nil); status == http.StatusOK || strings.Contains(string(data), "in the bucket") {
		t.Fatalf("bob's sandbox has alice's workspace: %d %q", status, data)
	}
	call(d2, "oss-a", "release", map[string]any{"identity": sid2})
	call(d2, "oss-b", "release", map[string]any{"identity": sid3})
}
