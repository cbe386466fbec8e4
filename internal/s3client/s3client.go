// Package s3client makes the minio-go client of an S3-compatible endpoint
// (AWS S3, MinIO, Ceph, SeaweedFS, Alibaba OSS's S3 endpoint) from the
// settings the daemon's users write: an endpoint with or without a scheme
// (https when none), keys, a region and path-style addressing.
package s3client

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Options say which endpoint and how.
type Options struct {
	// Setting names the endpoint's setting, for errors (S3_VOLUMES_ENDPOINT).
	Setting              string
	Endpoint             string
	AccessKey, SecretKey string
	Region               string
	PathStyle            bool
	// MaxRetries of one call (0: minio-go's default).
	MaxRetries int
}

// New returns the client of o's endpoint.
func New(o Options) (*minio.Client, error) {
	ep := o.Endpoint
	if !strings.Contains(ep, "://") {
		ep = "https://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("%s %q: want http(s)://host[:port]", o.Setting, o.Endpoint)
	}
	lookup := minio.BucketLookupAuto
	if o.PathStyle {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""),
		Secure:       u.Scheme == "https",
		Region:       o.Region,
		BucketLookup: lookup,
		MaxRetries:   o.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Setting, err)
	}
	return c, nil
}
