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

// The plugins compiled in, by directive name (metrics' is `prometheus`, onevent's `on`).
var compiled = map[string]bool{
	"autopath": true, "bind": true, "bufsize": true, "cache": true, "errors": true,
	"file": true, "forward": true, "health": true, "hosts": true, "kubernetes": true,
	"loadbalance": true, "log": true, "loop": true, "prometheus": true, "ready": true,
	"reload": true, "rewrite": true, "template": true, "view": true, "whoami": true, "on": true,
}

// The execution order is the linked CoreDNS version's own (its core/dnsserver/zdirectives.go,
// generated from its plugin.cfg) restricted to the plugins above: each build runs them in its
// version's order (1.11 runs cache before rewrite, 1.15 after), as a release binary does.
// Directives of plugins not compiled in are dropped, so a Corefile naming one fails to parse
// ("unknown directive") as with a release binary that lacks the plugin.
func init() {
	var order []string
	for _, d := range dnsserver.Directives {
		if compiled[d] {
			order = append(order, d)
		}
	}
	dnsserver.Directives = order
}

func main() { coremain.Run() }
