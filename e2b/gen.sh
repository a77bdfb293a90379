#!/bin/sh
# Regenerates e2b/internal/envdpb from e2b/proto with protoc (Debian's
# protobuf-compiler) and the Go plugins at pinned versions from the module
# proxy. Run from anywhere: sh e2b/gen.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.19.1
out=$here/internal/envdpb
rm -rf "$out"
mkdir -p "$out"
PATH=$bin:$PATH protoc -I "$here/proto" -I /usr/include \
	--go_out="$out" --go_opt=module=github.com/sandboxapi/sandboxapi/e2b/internal/envdpb \
	--connect-go_out="$out" --connect-go_opt=module=github.com/sandboxapi/sandboxapi/e2b/internal/envdpb \
	filesystem/filesystem.proto process/process.proto
