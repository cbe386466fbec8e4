package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestS3Volumes: an object-storage volume on a real S3 server (SeaweedFS
// on loopback) written in sandbox A is read in sandbox B while A runs
// (close-to-open: A's file is closed before B opens it) and in a sandbox
// created after both are gone; a read-only mount refuses writes; the
// content API reads and writes it; another tenant cannot list, get, mount
// or read it; its size stops a writer with ENOSPC; with the S3 server
// down the daemon stays healthy, file operations fail, and they work
// again once it is back.
func TestS3Volumes(t *testing.T) {
	s3 := testutil.StartS3(t, "agentbox-vols")
	const alice, bob = "s3-key-alice", "s3-key-bob"
	d := startDaemon(t, append(s3.Settings(), "API_KEYS="+alice+":alice,"+bob+":bob", "TEMPLATE_ADMIN_USERS=nobody")...)

	status, data := d.call(t, "POST", "/v1/volumes", alice, map[string]any{"name": "obj", "kind": "s3", "size": "32M"})
	if status != http.StatusCreated {
		t.Fatalf("create s3 volume: %d %s", status, data)
	}
	if v := mustJSON(t, data); v["kind"] != "s3" || v["node"] != nil {
		t.Fatalf("volume = %s", data)
	}
	a := volSandbox(t, d, alice, map[string]any{"name": "obj", "path": "/mnt/obj"})
	b := volSandbox(t, d, alice, map[string]any{"name": "obj", "path": "/data", "read_only": true})
	if code, out, errs := volExec(t, d, alice, a, "mkdir -p /mnt/obj/dir && echo hello-from-a > /mnt/obj/dir/note && stat -c %u /mnt/obj/dir/note && ls /mnt/obj"); code != 0 || out != "1000\ndir\n" {
		t.Fatalf("write in A: %d %q %q", code, out, errs)
	}
	if code, out, errs := volExec(t, d, alice, b, "cat /data/dir/note"); code != 0 || out != "hello-from-a\n" {
		t.Fatalf("read in B while A runs: %d %q %q", code, out, errs)
	}
	// A rewrite in A is what B's next open reads.
	if code, _, errs := volExec(t, d, alice, a, "echo second > /mnt/obj/dir/note && echo more >> /mnt/obj/dir/note && chmod +x /mnt/obj/dir/note"); code != 0 {
		t.Fatalf("rewrite in A: %d %q", code, errs)
	}
	if code, out, errs := volExec(t, d, alice, b, "cat /data/dir/note; test -x /data/dir/note && echo exec"); code != 0 || out != "second\nmore\nexec\n" {
		t.Fatalf("B after A's rewrite: %d %q %q", code, out, errs)
	}
	if code, _, errs := volExec(t, d, alice, b, "echo x > /data/other"); code == 0 || !strings.Contains(errs, "Read-only") {
		t.Fatalf("write to a read-only mount: exit %d %q", code, errs)
	}
	// Renames and removes.
	if code, out, errs := volExec(t, d, alice, a, "cd /mnt/obj && echo r > f1 && mv f1 f2 && cat f2 && rm f2 && ls"); code != 0 || out != "r\ndir\n" {
		t.Fatalf("rename and remove in A: %d %q %q", code, out, errs)
	}

	// The content API.
	q := func(p string) string { return "?path=" + url.QueryEscape(p) }
	if status, data := d.call(t, "GET", "/v1/volumes/obj/files"+q("/dir/note"), alice, nil); status != 200 || string(data) != "second\nmore\n" {
		t.Fatalf("read through the API: %d %q", status, data)
	}
	if status, data := d.call(t, "PUT", "/v1/volumes/obj/files"+q("/api/x.txt"), alice, "from the api"); status != http.StatusCreated {
		t.Fatalf("write through the API: %d %s", status, data)
	}
	if code, out, _ := volExec(t, d, alice, b, "cat /data/api/x.txt"); code != 0 || out != "from the api" {
		t.Fatalf("API write seen in B: %d %q", code, out)
	}
	if status, data := d.call(t, "GET", "/v1/volumes/obj/files/list"+q("/"), alice, nil); status != 200 || !strings.Contains(string(data), `"api"`) || !strings.Contains(string(data), `"dir"`) {
		t.Fatalf("list: %d %s", status, data)
	}

	// Another tenant sees nothing of it.
	if status, data := d.call(t, "GET", "/v1/volumes", bob, nil); status != 200 || strings.Contains(string(data), "obj") {
		t.Fatalf("bob's list: %d %s", status, data)
	}
	for _, p := range []string{"/v1/volumes/obj", "/v1/volumes/obj/files" + q("/dir/note"), "/v1/volumes/obj/files/list"} {
		if status, data := d.call(t, "GET", p, bob, nil); status != http.StatusNotFound {
			t.Fatalf("bob GET %s: %d %s", p, status, data)
		}
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes", bob, map[string]any{"volumes": []map[string]any{{"name": "obj", "path": "/x"}}}); status != http.StatusNotFound {
		t.Fatalf("bob mounts alice's volume: %d %s", status, data)
	}
	// The keys reach no sandbox.
	if code, out, _ := volExec(t, d, alice, a, "env; cat /proc/self/mountinfo"); code != 0 || strings.Contains(out, s3.SecretKey) || strings.Contains(out, s3.AccessKey) {
		t.Fatalf("the bucket's keys are visible in the sandbox: %q", out)
	}

	// The size: a writer past it gets ENOSPC.
	if code, out, _ := volExec(t, d, alice, a, "dd if=/dev/zero of=/mnt/obj/fill bs=1M count=64 2>&1 | head -1"); !strings.Contains(out, "No space left") {
		t.Fatalf("a full s3 volume: exit %d %q", code, out)
	}
	volExec(t, d, alice, a, "rm -f /mnt/obj/fill")

	// The S3 server down: the daemon answers, the volume's files fail.
	s3.Stop()
	if status, _ := d.call(t, "GET", "/v1/info", alice, nil); status != 200 {
		t.Fatalf("daemon with S3 down: %d", status)
	}
	if code, _, _ := volExec(t, d, alice, a, "cat /mnt/obj/dir/note"); code == 0 {
		t.Fatalf("a read with the S3 server down succeeded")
	}
	if status, _ := d.call(t, "GET", "/v1/sandboxes", alice, nil); status != 200 {
		t.Fatalf("daemon after S3 errors: %d", status)
	}
	s3.Start()
	if code, out, errs := volExec(t, d, alice, a, "cat /mnt/obj/dir/note"); code != 0 || out != "second\nmore\n" {
		t.Fatalf("read once S3 is back: %d %q %q", code, out, errs)
	}

	deleteSandbox(t, d, alice, a)
	deleteSandbox(t, d, alice, b)
	c := volSandbox(t, d, alice, map[string]any{"name": "obj", "path": "/home/user/vol"})
	if code, out, _ := volExec(t, d, alice, c, "cat /home/user/vol/dir/note /home/user/vol/api/x.txt"); code != 0 || out != "second\nmore\nfrom the api" {
		t.Fatalf("read in a later sandbox: %d %q", code, out)
	}
	deleteSandbox(t, d, alice, c)
	if status, data := d.call(t, "DELETE", "/v1/volumes/obj", alice, nil); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, data)
	}
}

// TestS3VolumeTwoReplicas: an s3 volume created on one replica is mounted
// by sandboxes on both; what one writes the other reads, both ways, and
// the content API of either serves it.
func TestS3VolumeTwoReplicas(t *testing.T) {
	s3 := testutil.StartS3(t, "agentbox-vols")
	_, _, ds := startReplicas(t, 2, append(s3.Settings(), "CLUSTER_PLACEMENT=local", "POOL_SIZE=0")...)
	if status, data := ds[0].call(t, "POST", "/v1/volumes", "k1", map[string]any{"name": "both", "kind": "s3", "size": "16M"}); status != http.StatusCreated {
		t.Fatalf("create on r0: %d %s", status, data)
	}
	a := volSandbox(t, ds[0], "k1", map[string]any{"name": "both", "path": "/v"})
	b := volSandbox(t, ds[1], "k1", map[string]any{"name": "both", "path": "/v"})
	if code, _, errs := volExec(t, ds[0], "k1", a, "echo from-r0 > /v/a"); code != 0 {
		t.Fatalf("write on r0: %q", errs)
	}
	if code, out, errs := volExec(t, ds[1], "k1", b, "cat /v/a && echo from-r1 > /v/b"); code != 0 || out != "from-r0\n" {
		t.Fatalf("r1 reads r0's file: %d %q %q", code, out, errs)
	}
	if code, out, _ := volExec(t, ds[0], "k1", a, "cat /v/b"); code != 0 || out != "from-r1\n" {
		t.Fatalf("r0 reads r1's file: %d %q", code, out)
	}
	if status, data := ds[1].call(t, "GET", "/v1/volumes/both/files?path=/a", "k1", nil); status != 200 || string(data) != "from-r0\n" {
		t.Fatalf("r1's content API: %d %q", status, data)
	}
	deleteSandbox(t, ds[0], "k1", a)
	deleteSandbox(t, ds[1], "k1", b)
	if status, data := ds[1].call(t, "DELETE", "/v1/volumes/both", "k1", nil); status != http.StatusNoContent {
		t.Fatalf("delete on r1: %d %s", status, data)
	}
}

// BenchmarkS3Volume measures sequential write and read throughput of 64
// MiB with dd in a sandbox on an s3 volume (SeaweedFS on loopback), a
// local volume and the sandbox's own disk. The s3 write includes the
// upload at close; the s3 read includes the download at open (the page
// cache is dropped on every open); the others read with O_DIRECT.
//
//	go test -run '^$' -bench S3Volume -benchtime 3x ./test/e2e/
func BenchmarkS3Volume(b *testing.B) {
	s3 := testutil.StartS3(b, "agentbox-bench")
	base := startBenchDaemon(b, append(s3.Settings(), "MAX_SANDBOXES_PER_USER=0", "STORAGE_QUOTA_PER_USER=0")...)
	api := benchAPI{b: b, url: base}
	api.do("POST", "/v1/volumes", map[string]any{"name": "s3b", "kind": "s3", "size": "1G"})
	api.do("POST", "/v1/volumes", map[string]any{"name": "loc", "size": "1G"})
	var sb struct{ ID string }
	_ = json.Unmarshal(api.do("POST", "/v1/sandboxes", map[string]any{"resources": map[string]any{"disk": "1G"},
		"volumes": []map[string]any{{"name": "s3b", "path": "/s3"}, {"name": "loc", "path": "/vol"}}}), &sb)
	exec := func(script string) string {
		var r struct {
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
			Stderr   string `json:"stderr"`
		}
		_ = json.Unmarshal(api.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"/bin/sh", "-c", script}, "timeout": 300}), &r)
		if r.ExitCode != 0 {
			b.Fatalf("%s: %s", script, r.Stderr)
		}
		return r.Stdout + r.Stderr
	}
	rate := func(out string) float64 {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		f := strings.Fields(lines[len(lines)-1])
		v, _ := strconv.ParseFloat(f[len(f)-2], 64)
		switch f[len(f)-1] {
		case "GB/s":
			v *= 1000
		case "kB/s":
			v /= 1000
		}
		return v
	}
	res := map[string][]float64{}
	for i := 0; i < b.N; i++ {
		for _, dir := range []string{"/s3", "/vol", "/workspace"} {
			direct := " iflag=direct"
			if dir == "/s3" {
				direct = ""
			}
			res[dir+"-write"] = append(res[dir+"-write"], rate(exec("dd if=/dev/zero of="+dir+"/f bs=1M count=64 conv=fsync 2>&1")))
			res[dir+"-read"] = append(res[dir+"-read"], rate(exec("dd if="+dir+"/f of=/dev/null bs=1M"+direct+" 2>&1")))
			exec("rm -f " + dir + "/f")
		}
	}
	for k, v := range res {
		sort.Float64s(v)
		b.ReportMetric(v[len(v)/2], strings.TrimPrefix(k, "/")+"-p50-MB/s")
		b.ReportMetric(v[0], strings.TrimPrefix(k, "/")+"-min-MB/s")
	}
}
