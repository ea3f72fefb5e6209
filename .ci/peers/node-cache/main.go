// node-local-dns's node-cache, as far as a Corefile can tell: CoreDNS at the version node-cache
// 1.26.7 pins (v1.13.1), with only the plugins its cmd/node-cache/main.go compiles in and
// CoreDNS's own directive order (node-cache does not change it). A directive outside this set
// (view, kubernetes, ready, autopath, file) stops it with "Unknown directive", as the real
// node-cache does. Its interface and iptables setup are not part of what we test. The real
// module (k8s.io/dns) is not served by the Go module proxy these machines reach (403), so this
// stand-in is built instead; see ../build.sh and docs/testing.md.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/bufsize"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/debug"
	_ "github.com/coredns/coredns/plugin/dns64"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/pprof"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/template"
	_ "github.com/coredns/coredns/plugin/trace"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func main() { coremain.Run() }
