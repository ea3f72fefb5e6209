// Command coredns-match measures what CoreDNS's template plugin pays, per query and at load
// time, for candidate renderings of ouroboros's hairpin `template` pair at 1k-30k hostnames.
//
// It simulates the plugin's lookup path with the real Go regexp package and miekg/dns's
// IsSubDomain (no CoreDNS code is used):
//
//  1. handler: longest match of the query name over the union of all templates' zones
//     (a linear loop of dns.IsSubDomain); no zone -> next plugin;
//  2. for each template in order: its own zone loop (skip on no zone), the qtype check (skip),
//     then its regexes in order with MatchString; the first match answers; none -> fallthrough
//     (checked against the root zone) and on to the next template; after all -> next plugin.
//
// The rendered text is parsed back (whitespace tokens, one quoted answer) and compiled from
// those tokens, once per template as CoreDNS does. Candidates A-E are the brief's; DL, L and LL
// were added (see README.md, which also has the results).
//
// Build (GOPATH mode, no network): GO111MODULE=off GOPATH=/usr/share/gocode:$HOME/go go build
package main

import (
	"flag"
	"fmt"
	"io/ioutil"
	"math/rand"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"regexp/syntax"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

var (
	flagSizes   = flag.String("sizes", "1000,10000,30000", "hostname counts")
	flagSets    = flag.String("sets", "ingress,mixed", "hostname sets: ingress, mixed")
	flagCands   = flag.String("cands", "A,B,C,D100,D1000,DL,E,L,LL", "candidates: A B C D<K> DL E L LL O (O: the product, see -ouroboros)")
	flagRuns    = flag.Int("runs", 5, "timed runs per query class (the median is reported)")
	flagQueries = flag.Int("queries", 200000, "queries per run when a query is cheap enough")
	flagCheap   = flag.Duration("cheap", 2*time.Second, "a run of -queries queries must fit in this, else the run is time-bounded")
	flagBudget  = flag.Duration("budget", 500*time.Millisecond, "length of a time-bounded run")
	flagCurve   = flag.String("curve", "0,1,16,64,256,1000,10000", "zone-union lengths for the q1 curve ('' to skip)")
	flagVerify  = flag.Bool("verify", true, "brute-force check every rendering against the host set")
	flagMaxLen  = flag.Int("maxlen", 10000, "per-regex length limit for candidates DL and LL (CoreDNS >= 1.14.0 rejects longer)")
	flagOut     = flag.String("out", "", "also write the markdown report to this file")
	flagDump    = flag.String("dump", "", "write each rendering's text into this directory")
	flagBinary  = flag.String("ouroboros", "../../target/release/ouroboros", "the ouroboros binary for candidate O (what the product renders)")
	flagLimits  = flag.Bool("limits", false, "only show where Go's nesting limit starts, then exit")
)

// ---------------------------------------------------------------------------------------------
// Hostname sets (deterministic)

func ingressSet(n int) []string {
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		base := fmt.Sprintf("app-%d.example.com", i)
		for _, h := range []string{base, "www." + base, "api." + base} {
			if len(out) < n {
				out = append(out, h)
			}
		}
	}
	return out
}

// 20 registrable domains over com, net, org and co.uk, some used below a sub-domain.
var fixedBases = []string{
	"example.com", "shop.example.net", "corp.example.org", "foo.co.uk", "bar.co.uk",
	"acme.com", "globex.net", "initech.org", "hooli.com", "umbrella.co.uk",
	"stark.com", "wayne.net", "wonka.org", "tyrell.com", "cyberdyne.net",
	"soylent.org", "aperture.com", "oscorp.net", "blackmesa.org", "massive.co.uk",
}

var words = []string{"www", "api", "shop", "admin", "auth", "grafana", "status", "cdn", "static",
	"mail", "portal", "docs", "blog", "app", "dashboard", "git", "ci", "registry", "vault", "metrics"}

var envs = []string{"dev", "staging", "prod", "qa", "canary"}

const customers = 300

// mixedSet: 1.5% wildcards *.apps-k.example.com; max(n/4, 300) names over customer-0..299.com
// (apex, www, shop, api, then app-j); the rest under the 20 fixed bases in six shapes (apex,
// word, svc-i, env-i.word, deep a.b.c.team-k.example.com, word.svc-j).
func mixedSet(n int) []string {
	r := rand.New(rand.NewSource(20240601))
	seen := map[string]bool{}
	out := make([]string, 0, n)
	add := func(h string) {
		if !seen[h] && len(out) < n {
			seen[h] = true
			out = append(out, h)
		}
	}
	nw := n * 15 / 1000
	if nw < 1 {
		nw = 1
	}
	for k := 0; k < nw; k++ {
		add(fmt.Sprintf("*.apps-%d.example.com", k))
	}
	nc := n / 4
	if nc < customers {
		nc = customers
	}
	forms := []string{"%s", "www.%s", "shop.%s", "api.%s"}
	for j := 0; j < nc; j++ {
		c := fmt.Sprintf("customer-%d.com", j%customers)
		round := j / customers
		if round < len(forms) {
			add(fmt.Sprintf(forms[round], c))
		} else {
			add(fmt.Sprintf("app-%d.%s", round-len(forms), c))
		}
	}
	for i := 0; len(out) < n; i++ {
		b := fixedBases[r.Intn(len(fixedBases))]
		switch r.Intn(6) {
		case 0:
			add(b)
		case 1:
			add(words[r.Intn(len(words))] + "." + b)
		case 2:
			add(fmt.Sprintf("svc-%d.%s", i, b))
		case 3:
			add(fmt.Sprintf("%s-%d.%s.%s", envs[r.Intn(len(envs))], i, words[r.Intn(len(words))], b))
		case 4:
			add(fmt.Sprintf("%c.%c.%c.team-%d.example.com", 'a'+r.Intn(4), 'a'+r.Intn(4), 'a'+r.Intn(4), r.Intn(60)))
		case 5:
			add(fmt.Sprintf("%s.svc-%d.%s", words[r.Intn(len(words))], r.Intn(i+1), b))
		}
	}
	return out
}

// sortHosts orders names label by label from the right (the DNS tree order).
func sortHosts(hs []string) {
	rev := make(map[string][]string, len(hs))
	for _, h := range hs {
		l := strings.Split(h, ".")
		for i, j := 0, len(l)-1; i < j; i, j = i+1, j-1 {
			l[i], l[j] = l[j], l[i]
		}
		rev[h] = l
	}
	sort.Slice(hs, func(a, b int) bool {
		la, lb := rev[hs[a]], rev[hs[b]]
		for i := 0; i < len(la) && i < len(lb); i++ {
			if la[i] != lb[i] {
				return la[i] < lb[i]
			}
		}
		return len(la) < len(lb)
	})
}

// ---------------------------------------------------------------------------------------------
// Candidate generators

const wildRe = "[a-z0-9-]+"

var wildLabel = regexp.MustCompile(`^[a-z0-9-]+$`)

type rendering struct {
	zones   []string // without the trailing dot, as written in the Corefile
	regexes []string // one `match` line
}

func parent(h string) string {
	i := strings.IndexByte(h, '.')
	if i < 0 {
		return "."
	}
	return h[i+1:]
}

func quoteName(s string) string { return regexp.QuoteMeta(s) }

// (A) one zone and one anchored regex per distinct parent, in DNS tree order.
func genA(hosts []string) rendering {
	labels := map[string][]string{}
	var order []string
	for _, h := range hosts {
		p := parent(h)
		l := h[:len(h)-len(p)-1]
		if _, ok := labels[p]; !ok {
			order = append(order, p)
		}
		if l == "*" {
			labels[p] = append(labels[p], wildRe)
		} else {
			labels[p] = append(labels[p], quoteName(l))
		}
	}
	sortHosts(order)
	var r rendering
	for _, p := range order {
		ls := labels[p]
		sort.Strings(ls)
		r.zones = append(r.zones, p)
		r.regexes = append(r.regexes, `^(?:`+strings.Join(ls, "|")+`)\.`+quoteName(p)+`\.$`)
	}
	return r
}

// coarseZones: distinct last-two-labels of each host (a wildcard's base counts), with every zone
// that lies inside another one dropped. tld=true keeps only the last label.
func coarseZones(hosts []string, tld bool) []string {
	set := map[string]bool{}
	for _, h := range hosts {
		l := strings.Split(strings.TrimPrefix(h, "*."), ".")
		k := 2
		if tld {
			k = 1
		}
		if len(l) < k {
			k = len(l)
		}
		set[strings.Join(l[len(l)-k:], ".")] = true
	}
	var zs []string
	for z := range set {
		inside := false
		for o := range set {
			if o != z && dns.IsSubDomain(dns.Fqdn(o), dns.Fqdn(z)) {
				inside = true
				break
			}
		}
		if !inside {
			zs = append(zs, z)
		}
	}
	sortHosts(zs)
	return zs
}

// --- the compressed regex (B): a pattern from the reversed-label tree -------------------------

type node struct {
	kids map[string]*node
	host bool // the name of this node is a host
	wild bool // *.<this node> is a host
}

func buildTree(hosts []string) *node {
	root := &node{}
	for _, h := range hosts {
		l := strings.Split(h, ".")
		wild := l[0] == "*"
		if wild {
			l = l[1:]
		}
		n := root
		for i := len(l) - 1; i >= 0; i-- {
			if n.kids == nil {
				n.kids = map[string]*node{}
			}
			c := n.kids[l[i]]
			if c == nil {
				c = &node{}
				n.kids[l[i]] = c
			}
			n = c
		}
		if wild {
			n.wild = true
		} else {
			n.host = true
		}
	}
	return root
}

// inner is what may stand left of a node's own label, its trailing `\.` included:
// "" for a leaf, `(?:C\.)?` when the node itself is a host, `C\.` when it is not.
func inner(n *node) string {
	c, alt := childAlt(n)
	if c == "" {
		return ""
	}
	if alt {
		c = "(?:" + c + ")"
	}
	if n.host {
		return "(?:" + c + `\.)?`
	}
	return c + `\.`
}

// childAlt: the alternation of the children's patterns. Children with identical inner patterns
// are merged into one item whose labels are factored by common prefixes; a wildcard child is the
// item [a-z0-9-]+ (and subsumes the leaf children that it matches). Reports whether the result
// has a top-level '|'.
func childAlt(n *node) (string, bool) {
	var items []string
	topAlt := false
	if n.wild {
		items = append(items, wildRe)
	}
	groups := map[string][]string{}
	for label, c := range n.kids {
		in := inner(c)
		if n.wild && in == "" && wildLabel.MatchString(label) {
			continue
		}
		groups[in] = append(groups[in], label)
	}
	for in, labels := range groups {
		f, alt := factor(labels)
		if alt {
			if in != "" {
				f = "(?:" + f + ")"
			} else {
				topAlt = true
			}
		}
		items = append(items, in+f)
	}
	sort.Strings(items)
	return strings.Join(items, "|"), topAlt || len(items) > 1
}

type ctrie struct {
	kids map[byte]*ctrie
	end  bool
}

// factor renders a set of labels as one alternation with common character prefixes factored
// out (app-1|app-2 -> app-[12]); reports a top-level '|'.
func factor(labels []string) (string, bool) {
	t := &ctrie{}
	for _, l := range labels {
		n := t
		for i := 0; i < len(l); i++ {
			if n.kids == nil {
				n.kids = map[byte]*ctrie{}
			}
			c := n.kids[l[i]]
			if c == nil {
				c = &ctrie{}
				n.kids[l[i]] = c
			}
			n = c
		}
		n.end = true
	}
	return emitTrie(t)
}

func emitTrie(t *ctrie) (string, bool) {
	keys := make([]int, 0, len(t.kids))
	for k := range t.kids {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	var parts []string
	singles := true
	for _, k := range keys {
		sub, subAlt := emitTrie(t.kids[byte(k)])
		if subAlt {
			sub = "(?:" + sub + ")"
		}
		if sub != "" {
			singles = false
		}
		parts = append(parts, regexp.QuoteMeta(string(rune(k)))+sub)
	}
	if len(parts) == 0 {
		return "", false
	}
	body, alt, atom := "", false, false
	switch {
	case len(parts) == 1:
		body, atom = parts[0], singles
	case singles:
		body, atom = charClass(keys), true
	default: // several parts, some longer than one character: single characters become a class
		var leaves []int
		var rest []string
		for i, k := range keys {
			if len(parts[i]) == len(regexp.QuoteMeta(string(rune(k)))) {
				leaves = append(leaves, k)
			} else {
				rest = append(rest, parts[i])
			}
		}
		if len(leaves) >= 2 {
			rest = append(rest, charClass(leaves))
		} else if len(leaves) == 1 {
			rest = append(rest, regexp.QuoteMeta(string(rune(leaves[0]))))
		}
		body, alt = strings.Join(rest, "|"), true
	}
	if t.end {
		if atom {
			return body + "?", false
		}
		return "(?:" + body + ")?", false
	}
	return body, alt
}

func charClass(keys []int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(keys); {
		j := i
		for j+1 < len(keys) && keys[j+1] == keys[j]+1 && isAlnum(keys[j+1]) && isAlnum(keys[i]) {
			j++
		}
		if j-i >= 2 {
			b.WriteString(classChar(keys[i]) + "-" + classChar(keys[j]))
		} else {
			for k := i; k <= j; k++ {
				b.WriteString(classChar(keys[k]))
			}
		}
		i = j + 1
	}
	b.WriteByte(']')
	return b.String()
}

func isAlnum(c int) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func classChar(c int) string {
	if isAlnum(c) || c == '_' {
		return string(rune(c))
	}
	return `\` + string(rune(c))
}

// compressed renders the whole host list as one anchored regex from the reversed-label tree.
// Merging is done at every level from the root down (so equal sub-trees of different zones, such
// as customer-1.com and customer-2.com, share one item as well).
func compressed(hosts []string) string {
	c, alt := childAlt(buildTree(hosts))
	if alt {
		c = "(?:" + c + ")"
	}
	return "^" + c + `\.$`
}

func genB(hosts []string, tld bool) rendering {
	return rendering{zones: coarseZones(hosts, tld), regexes: []string{compressed(hosts)}}
}

// (D) as B, the DNS-ordered host list cut into chunks of at most k hosts.
func genD(hosts []string, k int) rendering {
	r := rendering{zones: coarseZones(hosts, false)}
	for i := 0; i < len(hosts); i += k {
		j := i + k
		if j > len(hosts) {
			j = len(hosts)
		}
		r.regexes = append(r.regexes, compressed(hosts[i:j]))
	}
	return r
}

// (DL) as B, cut greedily into the longest chunks whose regex stays within maxLen bytes.
func genDL(hosts []string, maxLen int) rendering {
	r := rendering{zones: coarseZones(hosts, false)}
	for i := 0; i < len(hosts); {
		fits := func(j int) bool { return j <= len(hosts) && len(compressed(hosts[i:j])) <= maxLen }
		lo, step := i+1, 1 // lo fits (one host always does); grow, then bisect to the last fit
		for fits(lo + step) {
			lo += step
			step *= 2
		}
		hi := lo + step // does not fit
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if fits(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		r.regexes = append(r.regexes, compressed(hosts[i:lo]))
		i = lo
	}
	return r
}

// (E) one anchored literal per host.
func genE(hosts []string) rendering {
	r := rendering{zones: coarseZones(hosts, false)}
	for _, h := range hosts {
		if strings.HasPrefix(h, "*.") {
			r.regexes = append(r.regexes, "^"+wildRe+`\.`+quoteName(h[2:])+`\.$`)
		} else {
			r.regexes = append(r.regexes, "^"+quoteName(h)+`\.$`)
		}
	}
	return r
}

// (L) not in the brief: the names read left to right. A character trie of the whole names
// ("host." strings), so that at each branch point every alternative starts with a different
// character and Go's matcher keeps about one live thread, with common label-aligned suffixes
// factored out wherever every name below a trie node ends the same way
// (api.app-1.example.com., app-1.example.com. -> (?:api\.)?app-1\.example\.com\.).
// Zones = the TLDs as in C. Literal hosts and wildcards go to separate regexes (a leading
// [a-z0-9-]+ would make the literal trie ambiguous): ^<literal names>$ and ^[a-z0-9-]+\.<bases>$.
// maxLen > 0 cuts the name-sorted list into the longest runs whose regex fits in maxLen bytes.
func leftTrie(names []string) string {
	f, alt := emitL(append([]string{}, names...))
	if alt {
		f = "(?:" + f + ")"
	}
	return "^" + f + "$"
}

// emitL renders a set of distinct strings; reports a top-level '|'.
func emitL(rems []string) (string, bool) {
	if len(rems) == 1 {
		return regexp.QuoteMeta(rems[0]), false
	}
	// longest common suffix, cut to start at a '.'
	suf := rems[0]
	for _, r := range rems[1:] {
		n := 0
		for n < len(suf) && n < len(r) && suf[len(suf)-1-n] == r[len(r)-1-n] {
			n++
		}
		suf = suf[len(suf)-n:]
	}
	if i := strings.IndexByte(suf, '.'); i >= 0 {
		suf = suf[i:]
	} else {
		suf = ""
	}
	if suf != "" {
		pre := make([]string, len(rems))
		for i, r := range rems {
			pre[i] = r[:len(r)-len(suf)]
		}
		f, alt := emitL(pre)
		if alt {
			f = "(?:" + f + ")"
		}
		return f + regexp.QuoteMeta(suf), false
	}
	// split on the first character
	sort.Strings(rems)
	end := false
	var parts []string
	var leaves []int
	for i := 0; i < len(rems); {
		if rems[i] == "" {
			end = true
			i++
			continue
		}
		c := rems[i][0]
		j := i
		var sub []string
		for j < len(rems) && rems[j] != "" && rems[j][0] == c {
			sub = append(sub, rems[j][1:])
			j++
		}
		if len(sub) == 1 && sub[0] == "" {
			leaves = append(leaves, int(c))
		} else {
			f, alt := emitL(sub)
			if alt {
				f = "(?:" + f + ")"
			}
			parts = append(parts, regexp.QuoteMeta(string(c))+f)
		}
		i = j
	}
	atom := len(parts) == 0 // only single characters: one atom (a character or a class)
	if len(leaves) >= 2 {
		parts = append(parts, charClass(leaves))
	} else if len(leaves) == 1 {
		parts = append(parts, regexp.QuoteMeta(string(rune(leaves[0]))))
	}
	if len(parts) == 1 && end {
		if atom {
			return parts[0] + "?", false
		}
		return "(?:" + parts[0] + ")?", false
	}
	if end {
		return "(?:" + strings.Join(parts, "|") + ")?", false
	}
	if len(parts) == 1 {
		return parts[0], false
	}
	return strings.Join(parts, "|"), true
}

func genL(hosts []string, maxLen int) rendering {
	r := rendering{zones: coarseZones(hosts, true)}
	var lit, wild []string
	for _, h := range hosts {
		if strings.HasPrefix(h, "*.") {
			wild = append(wild, h[2:]+".")
		} else {
			lit = append(lit, h+".")
		}
	}
	sort.Strings(lit)
	sort.Strings(wild)
	for _, part := range []struct {
		names []string
		pre   string
	}{{lit, ""}, {wild, wildRe + `\.`}} {
		build := func(ns []string) string {
			re := leftTrie(ns)
			return "^" + part.pre + re[1:]
		}
		ns := part.names
		if maxLen <= 0 {
			if len(ns) > 0 {
				r.regexes = append(r.regexes, build(ns))
			}
			continue
		}
		for i := 0; i < len(ns); {
			fits := func(j int) bool { return j <= len(ns) && len(build(ns[i:j])) <= maxLen }
			lo, step := i+1, 1
			for fits(lo + step) {
				lo += step
				step *= 2
			}
			hi := lo + step
			for hi-lo > 1 {
				mid := (lo + hi) / 2
				if fits(mid) {
					lo = mid
				} else {
					hi = mid
				}
			}
			r.regexes = append(r.regexes, build(ns[i:lo]))
			i = lo
		}
	}
	return r
}

// ---------------------------------------------------------------------------------------------
// Corefile text: render, and read back the way the Corefile lexer splits it (whitespace-separated
// tokens, double-quoted tokens kept whole).

const answerA = `"{{ .Name }} 30 IN A 10.96.0.5"`

func render(r rendering) string {
	var b strings.Builder
	for _, qt := range []string{"A", "AAAA"} {
		b.WriteString("    template IN " + qt)
		for _, z := range r.zones {
			b.WriteString(" " + z)
		}
		b.WriteString(" {\n        match")
		for _, re := range r.regexes {
			b.WriteString(" " + re)
		}
		b.WriteString("\n")
		if qt == "A" {
			b.WriteString("        answer " + answerA + "\n")
		}
		b.WriteString("        fallthrough\n    }\n")
	}
	return b.String()
}

type spec struct {
	qtype   uint16
	zones   []string
	regexes []string
}

func tokens(line string) []string {
	var out []string
	for i := 0; i < len(line); {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i >= len(line) {
			break
		}
		j := i
		if line[i] == '"' {
			j = strings.IndexByte(line[i+1:], '"') + i + 2
		} else {
			for j < len(line) && line[j] != ' ' && line[j] != '\t' {
				j++
			}
		}
		out = append(out, line[i:j])
		i = j
	}
	return out
}

func parseText(text string) ([]spec, error) {
	var specs []spec
	var cur *spec
	for _, line := range strings.Split(text, "\n") {
		t := tokens(line)
		if len(t) == 0 {
			continue
		}
		switch t[0] {
		case "template":
			if len(t) < 4 || t[len(t)-1] != "{" || t[1] != "IN" {
				return nil, fmt.Errorf("bad template line")
			}
			qt, ok := dns.StringToType[t[2]]
			if !ok {
				return nil, fmt.Errorf("bad type %q", t[2])
			}
			specs = append(specs, spec{qtype: qt, zones: t[3 : len(t)-1]})
			cur = &specs[len(specs)-1]
		case "match":
			cur.regexes = append(cur.regexes, t[1:]...)
		case "answer", "fallthrough", "}":
		default:
			return nil, fmt.Errorf("unexpected %q", t[0])
		}
	}
	return specs, nil
}

// ---------------------------------------------------------------------------------------------
// The simulated plugin

type template struct {
	qtype uint16
	zones []string
	regex []*regexp.Regexp
}

type handler struct {
	zones     []string // the union: every template's zones appended, duplicates kept
	templates []template
}

// matchZones: the longest zone that contains qname, "" for none (linear over all zones).
func matchZones(zones []string, qname string) string {
	zone := ""
	for _, z := range zones {
		if dns.IsSubDomain(z, qname) && len(z) > len(zone) {
			zone = z
		}
	}
	return zone
}

var rootZones = []string{"."}

const (
	resNext    = iota // not in the union of zones: next plugin at once
	resAnswer         // a regex of a template of the query's type matched
	resThrough        // zones matched, no template answered: fell through to the next plugin
	resNoFall         // (not reached: every template here has fallthrough)
)

var sink []string

func (h *handler) serve(qname string, qtype uint16, withSubmatch bool) int {
	name := strings.ToLower(dns.Name(qname).String())
	if matchZones(h.zones, name) == "" {
		return resNext
	}
	for i := range h.templates {
		t := &h.templates[i]
		if matchZones(t.zones, name) == "" {
			continue
		}
		if t.qtype != qtype {
			continue
		}
		for _, re := range t.regex {
			if re.MatchString(name) {
				if withSubmatch {
					sink = re.FindStringSubmatch(name)
				}
				return resAnswer
			}
		}
		if matchZones(rootZones, name) == "" {
			return resNoFall
		}
	}
	return resThrough
}

func buildHandler(specs []spec) (*handler, error) {
	h := &handler{}
	for _, s := range specs {
		t := template{qtype: s.qtype}
		for _, z := range s.zones {
			t.zones = append(t.zones, dns.Fqdn(strings.ToLower(z)))
		}
		h.zones = append(h.zones, t.zones...)
		for _, expr := range s.regexes {
			re, err := regexp.Compile(expr)
			if err != nil {
				return nil, fmt.Errorf("%.80s...: %v", expr, err)
			}
			t.regex = append(t.regex, re)
		}
		h.templates = append(h.templates, t)
	}
	return h, nil
}

// ---------------------------------------------------------------------------------------------
// Measurements

type progStats struct {
	n, insts, maxInsts, small, maxLen, maxHeight, overLimit int
	onepass, backtrack, nfa                                 int
	err                                                     string
}

func height(re *syntax.Regexp) int {
	h := 0
	for _, s := range re.Sub {
		if x := height(s); x > h {
			h = x
		}
	}
	return h + 1
}

// programs: regexp/syntax Parse + Simplify + Compile per regex of one template (what
// regexp.Compile does), summed.
func programs(regexes []string, maxLen int) progStats {
	var ps progStats
	for _, expr := range regexes {
		ps.n++
		if len(expr) > ps.maxLen {
			ps.maxLen = len(expr)
		}
		if len(expr) > maxLen {
			ps.overLimit++
		}
		re, err := syntax.Parse(expr, syntax.Perl)
		if err != nil {
			ps.err = err.Error()
			continue
		}
		if h := height(re); h > ps.maxHeight {
			ps.maxHeight = h
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			ps.err = err.Error()
			continue
		}
		n := len(prog.Inst)
		ps.insts += n
		if n > ps.maxInsts {
			ps.maxInsts = n
		}
		if n <= 500 {
			ps.small++
		}
		// which matcher regexp will use for a short input: one-pass, backtracker (<= 500
		// instructions), else the NFA (read from the unexported field, for reporting only)
		if c, err := regexp.Compile(expr); err == nil {
			if !reflect.ValueOf(c).Elem().FieldByName("onepass").IsNil() {
				ps.onepass++
			} else if n <= 500 {
				ps.backtrack++
			} else {
				ps.nfa++
			}
		}
	}
	return ps
}

func memNow() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

type query struct {
	id, name string
	qtype    uint16
	sub      bool
	want     int
}

type timing struct {
	ns     float64
	n      int
	allocs float64
	bytes  float64
}

func timeQuery(h *handler, q query) timing {
	// calibrate: warm up, then take the faster of two 20 ms estimates
	est := 0.0
	for c := 0; c < 3; c++ {
		start := time.Now()
		k := 0
		for time.Since(start) < 20*time.Millisecond || k < 3 {
			h.serve(q.name, q.qtype, q.sub)
			k++
		}
		e := float64(time.Since(start)) / float64(k)
		if c == 1 || (c == 2 && e < est) {
			est = e
		}
	}
	n := *flagQueries
	if est*float64(n) > float64(*flagCheap) {
		n = int(float64(*flagBudget) / est)
		if n < 20 {
			n = 20
		}
	}
	var ns []float64
	var m0, m1 runtime.MemStats
	var allocs, bytes float64
	for r := 0; r < *flagRuns; r++ {
		runtime.ReadMemStats(&m0)
		t0 := time.Now()
		for i := 0; i < n; i++ {
			h.serve(q.name, q.qtype, q.sub)
		}
		d := time.Since(t0)
		runtime.ReadMemStats(&m1)
		ns = append(ns, float64(d)/float64(n))
		allocs = float64(m1.Mallocs-m0.Mallocs) / float64(n)
		bytes = float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n)
	}
	sort.Float64s(ns)
	return timing{ns: ns[len(ns)/2], n: n, allocs: allocs, bytes: bytes}
}

// ---------------------------------------------------------------------------------------------
// Verification

func isHost(set map[string]bool, wild map[string]bool, name string) bool {
	name = strings.TrimSuffix(name, ".")
	if set[name] {
		return true
	}
	p := parent(name)
	return wild[p] && wildLabel.MatchString(name[:len(name)-len(p)-1])
}

// probes: every host (a wildcard instantiated) and the near misses around it.
func probes(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		if strings.HasPrefix(h, "*.") {
			b := h[2:]
			out = append(out, "w1."+b, "x.y."+b, b, "_x."+b, "w1."+b+".evil.com", "a-b."+b)
			continue
		}
		l := strings.Split(h, ".")
		tld := l[len(l)-1]
		swap := "net"
		if tld == "net" {
			swap = "org"
		}
		out = append(out, h, parent(h), "x"+h, h+".evil.com", "_acme-challenge."+h, "www."+h,
			strings.Join(append(append([]string{}, l[:len(l)-1]...), swap), "."), l[0]+"0."+parent(h))
	}
	return out
}

type verdict struct {
	names, wrong int
	full         bool
	e2e, e2eBad  int
	example      string
}

func verify(r rendering, h *handler, hosts []string) verdict {
	set, wild := map[string]bool{}, map[string]bool{}
	for _, x := range hosts {
		if strings.HasPrefix(x, "*.") {
			wild[x[2:]] = true
		} else {
			set[x] = true
		}
	}
	names := probes(hosts)
	res := make([]*regexp.Regexp, 0, len(r.regexes))
	for _, e := range r.regexes {
		res = append(res, regexp.MustCompile(e))
	}
	v := verdict{full: true}
	// regex level: all names when (names x regexes) is small enough, else a fixed sample that
	// keeps the first and last 300 hosts' probes
	sample := names
	if budget := 40_000_000; len(names)*len(res) > budget {
		v.full = false
		keep := budget / len(res)
		if keep < 3000 {
			keep = 3000
		}
		rnd := rand.New(rand.NewSource(7))
		edge := 300 * 8
		sample = append([]string{}, names[:edge]...)
		sample = append(sample, names[len(names)-edge:]...)
		for len(sample) < keep {
			sample = append(sample, names[rnd.Intn(len(names))])
		}
	}
	for _, nm := range sample {
		fq := nm + "."
		got := false
		for _, re := range res {
			if re.MatchString(fq) {
				got = true
				break
			}
		}
		v.names++
		if got != isHost(set, wild, fq) {
			v.wrong++
			if v.example == "" {
				v.example = fmt.Sprintf("%s: regex says %v", fq, got)
			}
		}
	}
	// end to end through the simulated plugin, A queries, on a sample
	rnd := rand.New(rand.NewSource(11))
	for i := 0; i < 1500; i++ {
		fq := names[rnd.Intn(len(names))] + "."
		want := isHost(set, wild, fq)
		got := h.serve(fq, dns.TypeA, false) == resAnswer
		v.e2e++
		if got != want {
			v.e2eBad++
			if v.example == "" {
				v.example = fmt.Sprintf("%s: plugin answers %v", fq, got)
			}
		}
	}
	return v
}

// ---------------------------------------------------------------------------------------------
// Report

var out strings.Builder

func outf(format string, a ...interface{}) {
	s := fmt.Sprintf(format, a...)
	fmt.Print(s)
	out.WriteString(s)
}

func loadavg() string {
	b, err := ioutil.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, _ := ioutil.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			return strings.TrimSpace(l[strings.IndexByte(l, ':')+1:])
		}
	}
	return "?"
}

func fmtNs(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e4:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	case ns >= 1e3:
		return fmt.Sprintf("%.2f µs", ns/1e3)
	default:
		return fmt.Sprintf("%.0f ns", ns)
	}
}

func fmtBytes(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	default:
		return fmt.Sprintf("%d B", b)
	}
}

type row struct {
	set, cand               string
	n                       int
	text                    int
	zones                   int
	ps                      progStats
	compile, concat         time.Duration
	heap, garbage, coldByte int
	err                     string
	t                       map[string]timing
	v                       verdict
}

func generate(cand string, hosts []string) (rendering, error) {
	switch {
	case cand == "A":
		return genA(hosts), nil
	case cand == "B":
		return genB(hosts, false), nil
	case cand == "C":
		return genB(hosts, true), nil
	case cand == "DL":
		return genDL(hosts, *flagMaxLen), nil
	case strings.HasPrefix(cand, "D"):
		k, err := strconv.Atoi(cand[1:])
		if err != nil || k < 1 {
			return rendering{}, fmt.Errorf("bad candidate %q", cand)
		}
		return genD(hosts, k), nil
	case cand == "E":
		return genE(hosts), nil
	case cand == "L":
		return genL(hosts, 0), nil
	case cand == "LL":
		return genL(hosts, *flagMaxLen), nil
	case cand == "O":
		return genO(hosts)
	}
	return rendering{}, fmt.Errorf("unknown candidate %q", cand)
}

// genO: what the product writes. The hosts go into one Ingress (JSON), `ouroboros render
// coredns-import` renders the snippet, and its template lines are read back.
func genO(hosts []string) (rendering, error) {
	dir, err := ioutil.TempDir("", "coredns-match-o")
	if err != nil {
		return rendering{}, err
	}
	defer os.RemoveAll(dir)
	quoted := make([]string, len(hosts))
	for i, h := range hosts {
		quoted[i] = strconv.Quote(h)
	}
	manifest := `{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"name":"bench","namespace":"bench"},"spec":{"tls":[{"hosts":[` +
		strings.Join(quoted, ",") + `]}]}}`
	path := dir + "/ingress.json"
	if err := ioutil.WriteFile(path, []byte(manifest), 0o644); err != nil {
		return rendering{}, err
	}
	out, err := exec.Command(*flagBinary, "--log-level=error", "render", "coredns-import", "--proxy-ip", "10.96.0.5", path).Output()
	if err != nil {
		return rendering{}, fmt.Errorf("%s: %v", *flagBinary, err)
	}
	var r rendering
	for _, line := range strings.Split(string(out), "\n") {
		t := tokens(line)
		switch {
		case len(t) > 3 && t[0] == "template" && t[2] == "A":
			r.zones = t[3 : len(t)-1]
		case len(t) > 1 && t[0] == "match" && r.regexes == nil:
			r.regexes = t[1:]
		}
	}
	if r.regexes == nil {
		return rendering{}, fmt.Errorf("no match line in:\n%s", out)
	}
	return r, nil
}

func inst(h string) string {
	if strings.HasPrefix(h, "*.") {
		return "w1" + h[1:]
	}
	return h
}

var queryIDs = []string{"q1", "q2s", "q2e", "q2e+sub", "q2z", "q3a", "q3b", "q4", "q5"}

func queries(h *handler, hosts []string) []query {
	q5 := "github.com."
	if matchZones(h.zones, q5) != "" {
		q5 = "registry.k8s.io."
	}
	// q2z: the literal host that sorts last as a string (the last chunk of L/LL's match line)
	z := ""
	for _, x := range hosts {
		if !strings.HasPrefix(x, "*.") && x > z {
			z = x
		}
	}
	return []query{
		{"q1", "kubernetes.default.svc.cluster.local.", dns.TypeA, false, resNext},
		{"q2s", inst(hosts[0]) + ".", dns.TypeA, false, resAnswer},
		{"q2e", inst(hosts[len(hosts)-1]) + ".", dns.TypeA, false, resAnswer},
		{"q2e+sub", inst(hosts[len(hosts)-1]) + ".", dns.TypeA, true, resAnswer},
		{"q2z", z + ".", dns.TypeA, false, resAnswer},
		{"q3a", "google-analytics.example.com.", dns.TypeA, false, resThrough},
		{"q3b", "app-123.example.com.evil.example.com.", dns.TypeA, false, resThrough},
		{"q4", "_acme-challenge.app-5.example.com.", dns.TypeTXT, false, resThrough},
		{"q5", q5, dns.TypeA, false, resNext},
	}
}

func measure(set, cand string, hosts []string) row {
	rw := row{set: set, cand: cand, n: len(hosts), t: map[string]timing{}}
	r, err := generate(cand, hosts)
	if err != nil {
		rw.err = err.Error()
		return rw
	}
	text := render(r)
	rw.text = len(text)
	rw.zones = len(r.zones)
	if *flagDump != "" {
		_ = ioutil.WriteFile(fmt.Sprintf("%s/%s-%s-%d.corefile", *flagDump, set, cand, len(hosts)), []byte(text), 0o644)
	}
	specs, err := parseText(text)
	if err != nil || len(specs) != 2 || len(specs[0].regexes) != len(r.regexes) || len(specs[0].zones) != len(r.zones) {
		rw.err = fmt.Sprintf("text does not read back: %v", err)
		return rw
	}
	for i := range r.regexes {
		if specs[0].regexes[i] != r.regexes[i] || specs[1].regexes[i] != r.regexes[i] {
			rw.err = "a regex does not read back"
			return rw
		}
	}
	rw.ps = programs(specs[0].regexes, *flagMaxLen)

	// load: compile both templates, as the plugin's setup does
	m0 := memNow()
	t0 := time.Now()
	h, err := buildHandler(specs)
	rw.compile = time.Since(t0)
	if err != nil {
		rw.err = err.Error()
		return rw
	}
	m1 := memNow()
	rw.heap = int(m1.HeapAlloc) - int(m0.HeapAlloc)
	rw.garbage = int(m1.TotalAlloc - m0.TotalAlloc)

	// the setup also appends every regex of a match line to one growing string
	t0 = time.Now()
	for _, s := range specs {
		prefix := ""
		for _, e := range s.regexes {
			prefix = prefix + e + " "
		}
		sink = []string{prefix}
	}
	rw.concat = time.Since(t0)
	sink = nil

	qs := queries(h, hosts)
	for _, q := range qs {
		if got := h.serve(q.name, q.qtype, q.sub); got != q.want {
			rw.err += fmt.Sprintf(" %s(%s) gave %d want %d;", q.id, q.name, got, q.want)
		}
	}
	// the first answered query after two GCs (the regexp machine pools are emptied): bytes
	m2 := memNow()
	h.serve(qs[2].name, qs[2].qtype, false)
	var m3 runtime.MemStats
	runtime.ReadMemStats(&m3)
	rw.coldByte = int(m3.TotalAlloc - m2.TotalAlloc)

	for _, q := range qs {
		rw.t[q.id] = timeQuery(h, q)
	}
	if *flagVerify {
		rw.v = verify(r, h, hosts)
	}
	runtime.KeepAlive(h)
	return rw
}

// limits: nested alternations (?:a|b(?:a|b(...))) around Go's parse-tree height limit of 1000.
func limits() {
	for _, n := range []int{100, 499, 500, 501, 600} {
		e := strings.Repeat("(?:a|b", n) + strings.Repeat(")", n)
		h := -1
		if re, err := syntax.Parse(e, syntax.Perl); err == nil {
			h = height(re)
		}
		_, err := regexp.Compile(e)
		msg := "compiles"
		if err != nil {
			msg = err.Error()
			if i := strings.Index(msg, ": `"); i >= 0 {
				msg = msg[:i]
			}
		}
		fmt.Printf("nesting depth %d: parse-tree height %d: %s\n", n, h, msg)
	}
}

func main() {
	flag.Parse()
	if *flagLimits {
		limits()
		return
	}
	if *flagDump != "" {
		_ = os.MkdirAll(*flagDump, 0o755)
	}
	var sizes []int
	for _, s := range strings.Split(*flagSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad -sizes")
			os.Exit(2)
		}
		sizes = append(sizes, n)
	}
	start := time.Now()
	outf("machine: %d CPUs (%s), %s %s/%s, GOMAXPROCS %d; load average at start %s\n",
		runtime.NumCPU(), cpuModel(), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), loadavg())
	outf("runs %d (median), %d queries per run, or %v per run when that many would take over %v\n\n",
		*flagRuns, *flagQueries, *flagBudget, *flagCheap)

	var rows []row
	for _, set := range strings.Split(*flagSets, ",") {
		for _, n := range sizes {
			var hosts []string
			switch set {
			case "ingress":
				hosts = ingressSet(n)
			case "mixed":
				hosts = mixedSet(n)
			default:
				fmt.Fprintln(os.Stderr, "bad -sets")
				os.Exit(2)
			}
			sortHosts(hosts)
			for _, cand := range strings.Split(*flagCands, ",") {
				rw := measure(set, cand, hosts)
				rows = append(rows, rw)
				fmt.Fprintf(os.Stderr, "done %s %s %d (%.0fs, load %s) %s\n", set, cand, n, time.Since(start).Seconds(), loadavg(), rw.err)
			}
			runtime.GC()
		}
	}

	outf("### Load cost (one template pair; compile = both templates' regexes)\n\n")
	outf("| set | N | cand | zones | regexes | text | longest regex | regexes > %d B | insts (1 tmpl) | largest prog | onepass/bt/nfa | tree height | compile | concat | heap retained | garbage | 1st hit after GC | verified |\n", *flagMaxLen)
	outf("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, rw := range rows {
		if len(rw.t) == 0 {
			outf("| %s | %d | %s | error: %s |\n", rw.set, rw.n, rw.cand, rw.err)
			continue
		}
		ver := "-"
		if *flagVerify && rw.v.names > 0 {
			kind := "all"
			if !rw.v.full {
				kind = "sample"
			}
			ver = fmt.Sprintf("%d/%d %s ok, e2e %d/%d", rw.v.names-rw.v.wrong, rw.v.names, kind, rw.v.e2e-rw.v.e2eBad, rw.v.e2e)
			if rw.v.example != "" {
				ver += " FIRST WRONG: " + rw.v.example
			}
		}
		outf("| %s | %d | %s | %d | %d | %s | %s | %d | %d | %d | %d/%d/%d | %d | %.1f ms | %.1f ms | %.2f MiB | %.1f MiB | %s | %s |\n",
			rw.set, rw.n, rw.cand, rw.zones, rw.ps.n, fmtBytes(rw.text), fmtBytes(rw.ps.maxLen), rw.ps.overLimit,
			rw.ps.insts, rw.ps.maxInsts, rw.ps.onepass, rw.ps.backtrack, rw.ps.nfa, rw.ps.maxHeight,
			float64(rw.compile)/1e6, float64(rw.concat)/1e6, float64(rw.heap)/(1<<20), float64(rw.garbage)/(1<<20),
			fmtBytes(rw.coldByte), ver)
	}
	outf("\n### ns/query (median of %d runs; [n] = queries per run when time-bounded)\n\n", *flagRuns)
	outf("| set | N | cand |")
	for _, id := range queryIDs {
		outf(" %s |", id)
	}
	outf(" allocs q1 / q3a |\n|---|---:|---|")
	for range queryIDs {
		outf("---:|")
	}
	outf("---:|\n")
	for _, rw := range rows {
		if len(rw.t) == 0 {
			continue
		}
		outf("| %s | %d | %s |", rw.set, rw.n, rw.cand)
		for _, id := range queryIDs {
			t := rw.t[id]
			s := fmtNs(t.ns)
			if t.n != *flagQueries {
				s += fmt.Sprintf(" [%d]", t.n)
			}
			outf(" %s |", s)
		}
		outf(" %.0f / %.0f |\n", rw.t["q1"].allocs, rw.t["q3a"].allocs)
	}
	for _, rw := range rows {
		if rw.err != "" {
			outf("\nERROR %s %s %d: %s\n", rw.set, rw.cand, rw.n, rw.err)
		}
	}

	if strings.TrimSpace(*flagCurve) != "" {
		outf("\n### q1 (kubernetes.default.svc.cluster.local. A) against the length of the zone union\n\n")
		outf("| zones in union | ns/query | allocs/query |\n|---:|---:|---:|\n")
		for _, s := range strings.Split(*flagCurve, ",") {
			L, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				continue
			}
			h := &handler{}
			for i := 0; i < L; i++ {
				h.zones = append(h.zones, fmt.Sprintf("customer-%d.com.", i))
			}
			t := timeQuery(h, query{"q1", "kubernetes.default.svc.cluster.local.", dns.TypeA, false, resNext})
			n := ""
			if t.n != *flagQueries {
				n = fmt.Sprintf(" [%d]", t.n)
			}
			outf("| %d | %s%s | %.0f |\n", L, fmtNs(t.ns), n, t.allocs)
		}
	}
	outf("\nload average at end %s; total %.0f s\n", loadavg(), time.Since(start).Seconds())
	if *flagOut != "" {
		_ = ioutil.WriteFile(*flagOut, []byte(out.String()), 0o644)
	}
}
