package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/compat/agentscope"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/s3client"
)

// workspaceObjects is the bucket of agentscope's workspace copies with
// FILE_SYSTEM=oss (nil with local): checked at start, so a wrong endpoint,
// key or bucket stops the daemon with the reason instead of failing each
// release.
func workspaceObjects(ctx context.Context, cfg *config.Config) (*agentscope.Objects, error) {
	if cfg.FileSystem != "oss" {
		return nil, nil
	}
	switch {
	case cfg.StorageFolder == "":
		return nil, errors.New("FILE_SYSTEM=oss: set STORAGE_FOLDER too (the copies are staged there on their way to and from the bucket)")
	case cfg.OSSEndpoint == "" || cfg.OSSBucketName == "":
		return nil, errors.New("FILE_SYSTEM=oss needs OSS_ENDPOINT and OSS_BUCKET_NAME (and OSS_ACCESS_KEY_ID, OSS_ACCESS_KEY_SECRET)")
	}
	c, err := s3client.New(s3client.Options{Setting: "OSS_ENDPOINT", Endpoint: cfg.OSSEndpoint, AccessKey: cfg.OSSAccessKeyID,
		SecretKey: cfg.OSSAccessSecret, Region: cfg.OSSRegion, PathStyle: cfg.OSSPathStyle})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	ok, err := c.BucketExists(cctx, cfg.OSSBucketName)
	if err != nil {
		return nil, fmt.Errorf("FILE_SYSTEM=oss: bucket %s at %s: %w", cfg.OSSBucketName, cfg.OSSEndpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("FILE_SYSTEM=oss: bucket %s does not exist at %s (create it first)", cfg.OSSBucketName, cfg.OSSEndpoint)
	}
	prefix := strings.TrimPrefix(cfg.OSSPrefix, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &agentscope.Objects{Client: c, Bucket: cfg.OSSBucketName, Prefix: prefix}, nil
}
