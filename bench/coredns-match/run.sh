#!/bin/sh
# Installs Go and miekg/dns from Debian (if missing), builds the benchmark in GOPATH mode without
# network, and runs it. Arguments go to the benchmark (see README.md), e.g.
#   bench/coredns-match/run.sh -sizes 1000 -runs 3 -out /tmp/coredns-match.md
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v go >/dev/null 2>&1 || [ ! -f /usr/share/gocode/src/github.com/miekg/dns/defaults.go ]; then
    apt-get update
    apt-get install -y golang-go golang-github-miekg-dns-dev
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$here"
GO111MODULE=off GOPATH=/usr/share/gocode:$HOME/go GOFLAGS='' go build -o "$tmp/coredns-match" .
"$tmp/coredns-match" "$@"
