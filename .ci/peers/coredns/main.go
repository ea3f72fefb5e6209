// A CoreDNS with only the plugins the tests load: those of a kubeadm Corefile, the ones our
// blocks use (view, template, rewrite, hosts, reload; import is built in), node-local-dns's set, and
// the rest of what the Corefiles in tests/fixtures/corefiles load (file).
// Built at two versions (go.mod: the newest; oldest.mod: the oldest we support), see ../build.sh.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/caddy/onevent"
	_ "github.com/coredns/coredns/plugin/autopath"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/bufsize"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/file"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/template"
	_ "github.com/coredns/coredns/plugin/view"
	_ "github.com/coredns/coredns/plugin/whoami"
)

// The execution order is CoreDNS's own (core/dnsserver/zdirectives.go, the same relative order in
// every version built here) restricted to the plugins above.
func init() {
	dnsserver.Directives = []string{
		"reload", "bufsize", "bind", "ready", "health", "prometheus", "errors", "log",
		"loadbalance", "rewrite", "autopath", "cache", "template", "hosts", "kubernetes",
		"file", "loop", "forward", "whoami", "on", "view",
	}
}

func main() { coremain.Run() }
