// Package api holds the API contracts: the native API's OpenAPI document
// (served at /v1/openapi.yaml) and the agent protocol's protobuf files.
package api

import _ "embed"

// OpenAPI is api/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
