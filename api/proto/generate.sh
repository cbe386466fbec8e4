#!/bin/sh
# Regenerates the Go code for the agent protocol (process and filesystem
# services). Needs protoc, protoc-gen-go and protoc-gen-connect-go:
#   apt-get install protobuf-compiler
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@latest
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@latest
set -eu
cd "$(dirname "$0")"
PATH="$(go env GOPATH)/bin:$PATH"
export PATH
for svc in process filesystem; do
	protoc -I . \
		--go_out=. --go_opt=paths=source_relative \
		--connect-go_out=. --connect-go_opt=paths=source_relative \
		"$svc/$svc.proto"
done
