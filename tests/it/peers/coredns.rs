//! Our blocks loaded and queried in real CoreDNS, the newest release and the oldest we support
//! (`.ci/peers/coredns`): every form `render` and the controller write (the template pair in the
//! root block, the coredns-import snippet, node-local-dns's Corefile, the rewrite form), each
//! queried over UDP and TCP, with the answers a pod would get from the public DNS coming from a
//! stub upstream (`dns::Upstream`) so that what CoreDNS answered itself and what it forwarded
//! can be told apart. The `kubernetes` plugin of the real Corefiles talks to the shared control
//! plane (`cluster`).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use regex::Regex;
use simple_dns::TYPE;

use super::cluster::{self, Cluster};
use super::dns::{query, Reply, Upstream};
use super::{binary, spawn, wait_for, Process};
use crate::common::{command, ok, run};
use crate::support::{free_ports, temp_dir, TempDir, V4};

/// The CoreDNS builds every test loads its Corefiles into.
const VERSIONS: [&str; 2] = ["coredns", "coredns-oldest"];

/// node-local-dns's CoreDNS: node-cache's plugins only, at its CoreDNS version
/// (.ci/peers/node-cache/main.go). Its Corefiles are loaded there too.
const NODE_CACHE: &str = "node-cache";

const PROXY_V4: &str = "10.96.0.20";
const PROXY_V6: &str = "fd00:10:96::20";

pub fn corefile_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corefiles")
        .join(name)
}

/// One Ingress (JSON, which `render` reads like YAML) with `hosts` in its TLS section.
fn ingress(dir: &Path, hosts: &[String]) -> PathBuf {
    let doc = serde_json::json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "hosts", "namespace": "default"},
        "spec": {
            "tls": [{"hosts": hosts, "secretName": "tls"}],
            "rules": [{"host": hosts.iter().find(|h| !h.starts_with('*')), "http": {"paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}}
            }]}}],
        },
    });
    let path = dir.join("ingress.json");
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    path
}

/// `ouroboros render ARGS`; its stdout (the Corefile or the snippet).
fn render(args: &[&str]) -> String {
    ok(run(command("render").args(args), None))
}

fn proxy_args(dual_stack: bool) -> Vec<&'static str> {
    let mut args = vec!["--proxy-ip", PROXY_V4];
    if dual_stack {
        args.extend(["--proxy-ip", PROXY_V6]);
    }
    args
}

/// The address forms of the block: the template pair, and the `view` form's server blocks.
const FORMS: [&str; 2] = ["template", "view"];

/// `ouroboros render coredns` of `corefile` with the block for `manifests` in `form`.
fn render_block(
    corefile: &Path,
    form: &str,
    dual_stack: bool,
    manifests: &Path,
) -> crate::common::Output {
    let mut args = vec![
        "coredns",
        "--corefile",
        corefile.to_str().unwrap(),
        "--coredns-answer",
        form,
    ];
    args.extend(proxy_args(dual_stack));
    args.push(manifests.to_str().unwrap());
    run(command("render").args(&args), None)
}

/// The fixed ports and files of a real Corefile moved where a test can run it: every server
/// block's port 53 (or 5353) to `port`, `health`, `ready` and `prometheus` to ports of their own,
/// `bind` to 127.0.0.1, every `forward` to the stub upstream, node-local-dns's placeholders filled
/// in as node-cache does, imports to `dir`, and the `kubernetes` plugin to the test cluster.
/// Our block is left exactly as rendered.
pub fn runnable(
    corefile: &str,
    dir: &Path,
    upstream: SocketAddr,
    cluster: &Cluster,
    reload: bool,
) -> (String, u16) {
    let ports = free_ports(V4, 4);
    let text = runnable_on(
        corefile,
        dir,
        upstream,
        cluster,
        reload,
        [ports[0], ports[1], ports[2], ports[3]],
    );
    (text, ports[0])
}

/// [`runnable`] on given ports: DNS, health, ready, metrics.
pub fn runnable_on(
    corefile: &str,
    dir: &Path,
    upstream: SocketAddr,
    cluster: &Cluster,
    reload: bool,
    [dns, health, ready, metrics]: [u16; 4],
) -> String {
    let kubeconfig = cluster.admin_kubeconfig();
    let replacements: Vec<(&str, String)> = vec![
        (r":(?:53|5353)(\s*\{)", format!(":{dns}$1")),
        (
            r"(?m)^(\s*)health\b[^{\r\n]*",
            format!("${{1}}health 127.0.0.1:{health} "),
        ),
        (
            r"(?m)^(\s*)ready\b[^{\r\n]*",
            format!("${{1}}ready 127.0.0.1:{ready}"),
        ),
        (
            r"(?m)^(\s*)prometheus\b[^{\r\n]*",
            format!("${{1}}prometheus 127.0.0.1:{metrics}"),
        ),
        (
            r"(?m)^(\s*)bind\b[^{\r\n]*",
            "${1}bind 127.0.0.1".to_string(),
        ),
        (
            r"(?m)^(\s*)forward \S+ [^#{\r\n]*",
            format!("${{1}}forward . {upstream} "),
        ),
        (r"__PILLAR__DNS__DOMAIN__", "cluster.local".to_string()),
        (r"__PILLAR__LOCAL__DNS__", "127.0.0.1".to_string()),
        (
            r"(?m)^(\s*)import (?:/etc/coredns/)?custom/",
            format!("${{1}}import {}/custom/", dir.display()),
        ),
        (
            r"(?m)^import (?:/etc/coredns/)?custom/",
            format!("import {}/custom/", dir.display()),
        ),
        (
            r"(?m)^(\s*)hosts /etc/coredns/NodeHosts",
            format!("${{1}}hosts {}/NodeHosts", dir.display()),
        ),
        (
            r"(?m)^(\s*)kubernetes ([^{\r\n]*)\{",
            format!(
                "${{1}}kubernetes ${{2}}{{\n${{1}}   kubeconfig {}",
                kubeconfig.display()
            ),
        ),
    ];
    let mut text = corefile.to_string();
    for (pattern, with) in replacements {
        text = Regex::new(pattern)
            .unwrap()
            .replace_all(&text, with.as_str())
            .into_owned();
    }
    if reload {
        text = Regex::new(r"(?m)^(\s*)reload\s*$")
            .unwrap()
            .replace_all(&text, "${1}reload 2s 1s")
            .into_owned();
    }
    std::fs::create_dir_all(dir.join("custom")).unwrap();
    std::fs::write(dir.join("NodeHosts"), "").unwrap();
    text
}

pub struct CoreDns {
    process: Process,
    addr: SocketAddr,
    corefile: PathBuf,
}

impl CoreDns {
    /// Runs `binary` on `corefile` (written into `dir`), answering on 127.0.0.1:`port`; waits
    /// until it answers a query.
    pub fn start(binary: &Path, dir: &Path, corefile: &str, port: u16) -> CoreDns {
        let path = dir.join("Corefile");
        std::fs::write(&path, corefile).unwrap();
        let mut cmd = Command::new(binary);
        cmd.arg("-conf")
            .arg(&path)
            .args(["-dns.port", &port.to_string()]);
        cmd.current_dir(dir);
        let mut process = spawn("coredns", cmd, &dir.join("coredns.log"));
        let addr: SocketAddr = (V4, port).into();
        wait_for("answering", &mut process, Duration::from_secs(30), || {
            query(addr, "startup-probe.invalid.", TYPE::A, true).ok()
        });
        CoreDns {
            process,
            addr,
            corefile: path,
        }
    }

    /// Where it answers.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn ask(&self, name: &str, qtype: TYPE, tcp: bool) -> Reply {
        query(self.addr, name, qtype, tcp).unwrap_or_else(|e| {
            panic!(
                "{name} {qtype:?} (tcp: {tcp}): {e}\n{}",
                self.process.tail()
            )
        })
    }
}

/// The hostnames the functional tests hairpin: a plain name, an apex, a deeper name and a
/// wildcard, in three zones.
fn hosts() -> Vec<String> {
    [
        "api.example.com",
        "shop.example.com",
        "*.apps.example.com",
        "example.org",
        "www.example.org",
        "deep.a.b.example.net",
    ]
    .map(String::from)
    .to_vec()
}

/// Asks CoreDNS every question of the contract over UDP and TCP: A and AAAA of the hairpinned
/// names (any case; a wildcard covers one label) answer the proxy; every other type, DNS-01's
/// `_acme-challenge`, names outside the set and near misses get exactly the upstream's answer;
/// in-cluster names still get the cluster's.
fn check_answers(dns: &CoreDns, upstream: &Upstream, dual_stack: bool, what: &str) {
    let proxy_a = vec![format!("A {PROXY_V4}")];
    let proxy_aaaa: Vec<String> = if dual_stack {
        vec![format!("AAAA {PROXY_V6}")]
    } else {
        vec![]
    };
    for tcp in [false, true] {
        let ctx = |q: &str| format!("{what}, tcp={tcp}: {q}");
        for name in [
            "api.example.com.",
            "API.Example.COM.",
            "foo.apps.example.com.",
            "example.org.",
            "www.example.org.",
            "deep.a.b.example.net.",
        ] {
            let a = dns.ask(name, TYPE::A, tcp);
            assert_eq!(
                (a.rcode, &a.answers),
                (simple_dns::RCODE::NoError, &proxy_a),
                "{}",
                ctx(name)
            );
            let aaaa = dns.ask(name, TYPE::AAAA, tcp);
            assert_eq!(aaaa.rcode, simple_dns::RCODE::NoError, "{}", ctx(name));
            assert_eq!(
                aaaa.answers,
                proxy_aaaa,
                "{} AAAA (NODATA on an IPv4-only proxy)",
                ctx(name)
            );
            for qtype in [TYPE::TXT, TYPE::CAA, TYPE::MX, TYPE::SOA] {
                let got = dns.ask(name, qtype, tcp);
                let want = query(upstream.addr, name, qtype, tcp).unwrap();
                assert_eq!(got, want, "{} {qtype:?} is the upstream's", ctx(name));
            }
        }
        let upstream_names = [
            // DNS-01 and the names around the set.
            "_acme-challenge.api.example.com.",
            "_acme-challenge.foo.apps.example.com.",
            "apps.example.com.",
            "a.b.apps.example.com.",
            "xapi.example.com.",
            "api-example.com.",
            "api.example.co.",
            "api.example.com.evil.test.",
            "b.example.net.",
            "other.example.org.",
            "nx-missing.example.com.",
            "unrelated.test.",
        ];
        for name in upstream_names {
            for qtype in [TYPE::A, TYPE::AAAA, TYPE::TXT] {
                let got = dns.ask(name, qtype, tcp);
                let want = query(upstream.addr, name, qtype, tcp).unwrap();
                assert_eq!(got, want, "{} {qtype:?} is the upstream's", ctx(name));
            }
        }
        assert!(
            upstream.was_asked("_acme-challenge.api.example.com", TYPE::TXT),
            "{}",
            ctx("DNS-01 forwarded")
        );
    }
}

/// The in-cluster answer still comes from the real API server through the kubernetes plugin.
fn check_cluster_names(dns: &CoreDns, what: &str) {
    let a = dns.ask("kubernetes.default.svc.cluster.local.", TYPE::A, false);
    assert_eq!(
        a.answers,
        vec!["A 10.96.0.1".to_string()],
        "{what}: the API server's Service"
    );
}

pub struct Scene {
    dir: TempDir,
    upstream: Upstream,
    cluster: &'static Cluster,
}

impl Scene {
    /// A scratch directory, a stub upstream and the shared cluster (`None` without one).
    pub fn new(tag: &str) -> Option<Scene> {
        let cluster = cluster::shared()?;
        Some(Scene {
            dir: temp_dir(tag),
            upstream: Upstream::start(),
            cluster,
        })
    }

    /// A directory of its own for one CoreDNS run.
    fn run_dir(&self, name: &str) -> PathBuf {
        let d = self.dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    pub fn coredns(&self, binary: &Path, name: &str, corefile: &str) -> CoreDns {
        self.coredns_reloading(binary, name, corefile, false)
    }

    fn coredns_reloading(
        &self,
        binary: &Path,
        name: &str,
        corefile: &str,
        reload: bool,
    ) -> CoreDns {
        let dir = self.run_dir(name);
        let (text, port) = runnable(corefile, &dir, self.upstream.addr, self.cluster, reload);
        CoreDns::start(binary, &dir, &text, port)
    }
}

#[test]
fn template_block_in_the_root_block_answers_a_and_aaaa_only() {
    let Some(scene) = Scene::new("coredns-root") else {
        return;
    };
    let manifests = ingress(scene.dir.path(), &hosts());
    let kubeadm = corefile_fixture("kubeadm.Corefile");
    for version in VERSIONS {
        let Some(bin) = binary(version) else { return };
        for dual_stack in [false, true] {
            let corefile = ok(render_block(&kubeadm, "template", dual_stack, &manifests));
            assert!(corefile.contains("template IN A"), "{corefile}");
            let what = format!("{version} root block dual_stack={dual_stack}");
            let dns = scene.coredns(&bin, &format!("{version}-{dual_stack}"), &corefile);
            check_answers(&dns, &scene.upstream, dual_stack, &what);
            check_cluster_names(&dns, &what);
        }
    }
}

/// The `view` form: server blocks of their own before the root block, in the Corefiles of
/// kubeadm and k3s (which has `hosts` and imports in its root block), answer exactly as the
/// template pair does, in both versions.
#[test]
fn view_blocks_before_the_root_block_answer_a_and_aaaa_only() {
    let Some(scene) = Scene::new("coredns-view") else {
        return;
    };
    let manifests = ingress(scene.dir.path(), &hosts());
    for fixture in ["kubeadm.Corefile", "k3s.Corefile"] {
        let path = corefile_fixture(fixture);
        for version in VERSIONS {
            let Some(bin) = binary(version) else { return };
            for dual_stack in [false, true] {
                let corefile = ok(render_block(&path, "view", dual_stack, &manifests));
                assert!(corefile.contains("view ouroboros {"), "{corefile}");
                assert!(
                    corefile.find("com:53 {") < corefile.find(".:53 {"),
                    "{corefile}"
                );
                let what = format!("{version} {fixture} view blocks dual_stack={dual_stack}");
                let dns = scene.coredns(
                    &bin,
                    &format!("{version}-{fixture}-{dual_stack}"),
                    &corefile,
                );
                check_answers(&dns, &scene.upstream, dual_stack, &what);
                check_cluster_names(&dns, &what);
            }
        }
    }
}

/// Another tool's `rewrite name` line left in the root block (hairpin-proxy's form) takes the
/// name before the template pair whatever the order of lines, as `render` warns; the `view`
/// form's blocks never see it, and `render` says nothing then. Checked in real CoreDNS, since
/// the warning rests on its plugin order.
#[test]
fn a_leftover_rewrite_line_takes_the_name_from_the_pair_but_not_from_view() {
    let Some(scene) = Scene::new("coredns-leftover") else {
        return;
    };
    let manifests = ingress(scene.dir.path(), &hosts());
    let kubeadm = std::fs::read_to_string(corefile_fixture("kubeadm.Corefile")).unwrap();
    let left = kubeadm.replacen(
        "    errors\n",
        "    errors\n    rewrite name shop.example.com gone.example.net\n",
        1,
    );
    assert_ne!(left, kubeadm, "the fixture has an `errors` line");
    let path = scene.dir.path().join("leftover.Corefile");
    std::fs::write(&path, &left).unwrap();
    let proxy = vec![format!("A {PROXY_V4}")];
    for version in VERSIONS {
        let Some(bin) = binary(version) else { return };
        for form in FORMS {
            let out = render_block(&path, form, false, &manifests);
            assert_eq!(out.code, 0, "{}", out.stderr);
            let warned = out
                .stderr
                .contains("`rewrite` rule outside the ouroboros block");
            let dns = scene.coredns(&bin, &format!("{version}-{form}"), &out.stdout);
            let what = format!("{version} {form}");
            assert_eq!(
                dns.ask("api.example.com.", TYPE::A, false).answers,
                proxy,
                "{what}"
            );
            let shop = dns.ask("shop.example.com.", TYPE::A, false).answers;
            // The pair: CoreDNS rewrote the query to the other name and forwarded it.
            let taken = form == "template";
            assert_eq!(shop != proxy, taken, "{what}: {shop:?}");
            assert_eq!(warned, taken, "{what}: {}", out.stderr);
            if taken {
                assert!(
                    scene.upstream.was_asked("gone.example.net", TYPE::A),
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn import_snippet_loaded_through_the_import_glob_answers_the_same() {
    let Some(scene) = Scene::new("coredns-import") else {
        return;
    };
    let manifests = ingress(scene.dir.path(), &hosts());
    // k3s's Corefile imports /etc/coredns/custom/*.override into its root block, as AKS's does.
    let k3s = std::fs::read_to_string(corefile_fixture("k3s.Corefile")).unwrap();
    for version in VERSIONS {
        let Some(bin) = binary(version) else { return };
        for dual_stack in [false, true] {
            let mut args = vec!["coredns-import"];
            args.extend(proxy_args(dual_stack));
            args.push(manifests.to_str().unwrap());
            let snippet = render(&args);
            let name = format!("{version}-{dual_stack}");
            let dir = scene.run_dir(&name);
            let (text, port) = runnable(&k3s, &dir, scene.upstream.addr, scene.cluster, false);
            std::fs::write(dir.join("custom/ouroboros.override"), &snippet).unwrap();
            let dns = CoreDns::start(&bin, &dir, &text, port);
            let what = format!("{version} import snippet dual_stack={dual_stack}");
            check_answers(&dns, &scene.upstream, dual_stack, &what);
            check_cluster_names(&dns, &what);
        }
    }
}

/// node-local-dns's Corefiles (the addon's and kubespray's) with our block, in both forms, load
/// and answer in CoreDNS and in node-cache's plugin set. node-cache has no `view` plugin and
/// refuses to start on one ("no action found for directive 'view'"): asked for the view form,
/// `render` writes the template pair there and says so.
#[test]
fn node_local_dns_corefile_with_our_block_answers_the_same() {
    let Some(scene) = Scene::new("coredns-nodelocal") else {
        return;
    };
    let manifests = ingress(scene.dir.path(), &hosts());
    for fixture in ["node-local-dns.Corefile", "nodelocaldns-kubespray.Corefile"] {
        let path = corefile_fixture(fixture);
        for form in FORMS {
            let out = render_block(&path, form, true, &manifests);
            let said = out.stderr.contains("node-cache has no `view` plugin");
            assert_eq!(said, form == "view", "{form} {fixture}: {}", out.stderr);
            let corefile = ok(out);
            assert!(!corefile.contains("view ouroboros"), "{form} {fixture}");
            for version in VERSIONS.into_iter().chain([NODE_CACHE]) {
                let Some(bin) = binary(version) else { return };
                let what = format!("{version} {form} {fixture}");
                let dns = scene.coredns(&bin, &what.replace(' ', "-"), &corefile);
                check_answers(&dns, &scene.upstream, true, &what);
            }
        }
    }
}

#[test]
fn rewrite_form_answers_with_the_proxy_service_of_the_real_cluster() {
    let Some(scene) = Scene::new("coredns-rewrite") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let namespace = "coredns-rewrite";
    let cluster_ip = rt.block_on(proxy_service(scene.cluster, namespace));
    let manifests = ingress(scene.dir.path(), &hosts());
    let kubeadm = corefile_fixture("kubeadm.Corefile");
    let fqdn = format!("ouroboros-proxy.{namespace}.svc.cluster.local.");
    let corefile = render(&[
        "coredns",
        "--corefile",
        kubeadm.to_str().unwrap(),
        "--coredns-answer",
        "rewrite",
        "--proxy-fqdn",
        &fqdn,
        manifests.to_str().unwrap(),
    ]);
    assert!(corefile.contains("rewrite"), "{corefile}");
    for version in VERSIONS {
        let Some(bin) = binary(version) else { return };
        let dns = scene.coredns(&bin, version, &corefile);
        for tcp in [false, true] {
            for name in ["api.example.com.", "foo.apps.example.com.", "example.org."] {
                let a = dns.ask(name, TYPE::A, tcp);
                assert_eq!(a.rcode, simple_dns::RCODE::NoError, "{version} {name}");
                assert!(
                    a.answers.contains(&format!("A {cluster_ip}")),
                    "{version} {name} (tcp={tcp}) answers the proxy Service's ClusterIP {cluster_ip}: {a:?}\n{}",
                    dns.process.tail()
                );
            }
            for name in ["xapi.example.com.", "apps.example.com.", "unrelated.test."] {
                let got = dns.ask(name, TYPE::A, tcp);
                let want = query(scene.upstream.addr, name, TYPE::A, tcp).unwrap();
                assert_eq!(got, want, "{version} {name} is the upstream's");
            }
        }
    }
}

/// Creates `namespace` and the proxy Service in it; its ClusterIP.
async fn proxy_service(cluster: &Cluster, namespace: &str) -> IpAddr {
    use k8s_openapi::api::core::v1::{Namespace, Service};
    use kube::api::{Api, PostParams};
    let client = cluster.admin().await;
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ouroboros-proxy", "namespace": namespace},
        "spec": {"selector": {"app": "proxy"}, "ports": [{"name": "https", "port": 443}]},
    }))
    .unwrap();
    let api = Api::<Service>::namespaced(client, namespace);
    let svc = match api.create(&PostParams::default(), &svc).await {
        Ok(svc) => svc,
        Err(_) => api.get("ouroboros-proxy").await.unwrap(),
    };
    svc.spec.unwrap().cluster_ip.unwrap().parse().unwrap()
}

#[test]
fn every_corefile_our_editor_accepts_loads_in_real_coredns() {
    let Some(scene) = Scene::new("coredns-fixtures") else {
        return;
    };
    let manifests = ingress(scene.dir.path(), &hosts());
    let mut loaded = 0;
    for entry in std::fs::read_dir(corefile_fixture("")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "Corefile") {
            continue;
        }
        for form in FORMS {
            let out = render_block(&path, form, true, &manifests);
            if out.code != 0 {
                // Refused by our editor (the bad/ fixtures live elsewhere): never reaches CoreDNS.
                assert_eq!(
                    out.stdout,
                    "",
                    "{}: a refused Corefile is not printed",
                    path.display()
                );
                continue;
            }
            let corefile = out.stdout;
            let fixture = path.file_name().unwrap().to_string_lossy().into_owned();
            for version in VERSIONS {
                let Some(bin) = binary(version) else { return };
                let dns = scene.coredns(&bin, &format!("{version}-{form}-{fixture}"), &corefile);
                let a = dns.ask("api.example.com.", TYPE::A, false);
                assert_eq!(
                    a.answers,
                    vec![format!("A {PROXY_V4}")],
                    "{version} {form} {fixture}: {a:?}"
                );
                loaded += 1;
            }
        }
    }
    assert!(
        loaded >= 2 * 2 * 12,
        "only {loaded} Corefile loads: the fixtures went missing"
    );
}

/// A reload picks up a changed block, in each form: the controller's next write (one more
/// name), swapped into the running Corefile, is answered within the reload interval.
#[test]
fn reload_picks_up_a_changed_block() {
    let Some(scene) = Scene::new("coredns-reload") else {
        return;
    };
    let kubeadm = corefile_fixture("kubeadm.Corefile");
    for version in VERSIONS {
        let Some(bin) = binary(version) else { return };
        for form in FORMS {
            let what = format!("{version} {form}");
            let run_dir = scene.run_dir(&format!("{version}-{form}-manifests"));
            let before = ingress(&run_dir, &["api.example.com".to_string()]);
            let corefile = ok(render_block(&kubeadm, form, false, &before));
            let dns = scene.coredns_reloading(&bin, &format!("{version}-{form}"), &corefile, true);
            let upstream_a = vec![format!("A {}", super::dns::UPSTREAM_A)];
            assert_eq!(
                dns.ask("new.example.com.", TYPE::A, false).answers,
                upstream_a,
                "{what}"
            );
            // The controller's next write, as the kubelet would project it into the file: our
            // block with one more name, the rest of the (already runnable) Corefile untouched.
            let after = ingress(
                &run_dir,
                &["api.example.com".to_string(), "new.example.com".to_string()],
            );
            let changed = rerender(&dns, &run_dir, &["--coredns-answer", form], &after);
            assert_ne!(changed, std::fs::read_to_string(&dns.corefile).unwrap());
            swap_in(&dns.corefile, &changed);
            // reload 2s 1s: the change is seen within about three seconds.
            let start = std::time::Instant::now();
            while dns.ask("new.example.com.", TYPE::A, false).answers
                != vec![format!("A {PROXY_V4}")]
            {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "{what}: no reload after 20 s:\n{}",
                    dns.process.tail()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            assert_eq!(
                dns.ask("api.example.com.", TYPE::A, true).answers,
                vec![format!("A {PROXY_V4}")],
                "{what}"
            );
        }
    }
}

/// A Corefile CoreDNS cannot load, written over a running one: the reload fails, CoreDNS says
/// so in its log and keeps serving the configuration it has (our block answers, the new name
/// does not). Each form, both versions.
#[test]
fn a_broken_corefile_on_reload_keeps_the_old_one_serving() {
    let Some(scene) = Scene::new("coredns-broken-reload") else {
        return;
    };
    let kubeadm = corefile_fixture("kubeadm.Corefile");
    for version in VERSIONS {
        let Some(bin) = binary(version) else { return };
        for form in FORMS {
            let what = format!("{version} {form}");
            let run_dir = scene.run_dir(&format!("{version}-{form}-manifests"));
            let before = ingress(&run_dir, &["api.example.com".to_string()]);
            let corefile = ok(render_block(&kubeadm, form, false, &before));
            let dns = scene.coredns_reloading(&bin, &format!("{version}-{form}"), &corefile, true);
            let after = ingress(
                &run_dir,
                &["api.example.com".to_string(), "new.example.com".to_string()],
            );
            // The next write with a line no CoreDNS knows, as a hand edit might leave it.
            let broken = rerender(&dns, &run_dir, &["--coredns-answer", form], &after).replacen(
                "    errors\n",
                "    errors\n    no-such-plugin\n",
                1,
            );
            assert!(broken.contains("no-such-plugin"), "{what}");
            let failures = dns.process.log_text().matches("[ERROR]").count();
            swap_in(&dns.corefile, &broken);
            await_log(&dns, "[ERROR]", failures, &what);
            let log = dns.process.log_text();
            assert!(
                log.contains("no-such-plugin"),
                "{what}: the error names it:\n{log}"
            );
            // Well past the next reload tick: still the old configuration.
            std::thread::sleep(Duration::from_secs(4));
            for tcp in [false, true] {
                assert_eq!(
                    dns.ask("api.example.com.", TYPE::A, tcp).answers,
                    vec![format!("A {PROXY_V4}")],
                    "{what}: the old block still answers"
                );
                let got = dns.ask("new.example.com.", TYPE::A, tcp);
                let want = query(scene.upstream.addr, "new.example.com.", TYPE::A, tcp).unwrap();
                assert_eq!(got, want, "{what}: the broken file's name is not in effect");
            }
            check_cluster_names(&dns, &what);
        }
    }
}

/// Each CoreDNS build runs its plugins in its version's order (.ci/peers/coredns/main.go takes
/// it from the version's own `dnsserver.Directives`): before 1.14.7 `cache` runs before
/// `rewrite`, so it keeps a rewritten answer under the name asked; from then on after it, under
/// the rewritten name. Seen from the upstream: asking `a` (rewritten to `b`) and then `b`
/// reaches it for `b` twice in 1.11 and once in 1.15.
#[test]
fn each_build_runs_its_versions_plugin_order() {
    let Some(scene) = Scene::new("coredns-order") else {
        return;
    };
    let corefile = ".:53 {\n    rewrite name a.order.test b.order.test\n    cache 30\n    \
                    forward . 192.0.2.1\n}\n";
    for (version, cache_first) in [("coredns", false), ("coredns-oldest", true)] {
        let Some(bin) = binary(version) else { return };
        let dns = scene.coredns(&bin, &format!("order-{version}"), corefile);
        let before = scene.upstream.times_asked("b.order.test", TYPE::A);
        let a = dns.ask("a.order.test.", TYPE::A, false);
        assert_eq!(
            a.answers,
            vec![format!("A {}", super::dns::UPSTREAM_A)],
            "{version}"
        );
        let b = dns.ask("b.order.test.", TYPE::A, false);
        assert_eq!(
            b.answers,
            vec![format!("A {}", super::dns::UPSTREAM_A)],
            "{version}"
        );
        let asked = scene.upstream.times_asked("b.order.test", TYPE::A) - before;
        assert_eq!(
            asked,
            if cache_first { 2 } else { 1 },
            "{version}: cache {} rewrite",
            if cache_first { "before" } else { "after" }
        );
    }
}

/// xorshift64*: enough spread for names, with no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % bound
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }

    /// A pronounceable label of two to four syllables, a digit or a hyphen now and then.
    fn label(&mut self) -> String {
        const ONSETS: [&str; 16] = [
            "b", "k", "t", "z", "m", "v", "r", "l", "s", "n", "d", "p", "g", "f", "br", "st",
        ];
        const VOWELS: [&str; 6] = ["a", "e", "i", "o", "u", "ie"];
        let mut s = String::new();
        for _ in 0..2 + self.below(3) {
            s.push_str(self.pick(&ONSETS));
            s.push_str(self.pick(&VOWELS));
        }
        match self.below(10) {
            0 => s.push_str(&self.below(10).to_string()),
            1 => {
                s.push('-');
                s.push_str(self.pick(&ONSETS));
                s.push_str(self.pick(&VOWELS));
            }
            _ => {}
        }
        s
    }
}

/// `n` hostnames that look like a hosting platform's: unrelated pronounceable labels, one to three
/// of them under registrable domains of a dozen public suffixes, customers' apexes and their
/// `www.` (deterministic for `seed`; no two alike).
pub fn varied_names(n: usize, seed: u64) -> Vec<String> {
    const SUFFIXES: [&str; 12] = [
        "com", "de", "io", "co.uk", "net", "org", "fr", "nl", "app", "dev", "ch", "com.au",
    ];
    let mut rng = Rng(seed | 1);
    let mut names = std::collections::BTreeSet::new();
    let mut domain = String::new();
    while names.len() < n {
        // A new customer domain every fifteen names or so (about 2,000 at 30,000 names).
        if domain.is_empty() || rng.below(15) == 0 {
            let label = rng.label();
            domain = format!("{label}.{}", rng.pick(&SUFFIXES));
        }
        let name = match rng.below(6) {
            0 => domain.clone(),
            1 => format!("www.{domain}"),
            2 => {
                let (a, b) = (rng.label(), rng.label());
                format!("{a}.{b}.{domain}")
            }
            _ => format!("{}.{domain}", rng.label()),
        };
        names.insert(name);
    }
    let mut names: Vec<String> = names.into_iter().collect();
    // Spread the customers over the list, as their Ingresses would be.
    names.sort_by_key(|n| {
        let mut h = crate::support::Fnv(0xcbf2_9ce4_8422_2325);
        h.update(n.as_bytes());
        h.0
    });
    names
}

#[test]
fn varied_names_at_scale_load_and_answer() {
    let Some(scene) = Scene::new("coredns-scale") else {
        return;
    };
    let kubeadm = corefile_fixture("kubeadm.Corefile");
    for size in [1, 1_000, 30_000] {
        let names = varied_names(size, 7);
        let dir = scene.run_dir(&format!("manifests-{size}"));
        let manifests = ingress(&dir, &names);
        for form in FORMS {
            let args = |extra: &[&'static str]| {
                let mut args = vec![
                    "coredns",
                    "--corefile",
                    kubeadm.to_str().unwrap(),
                    "--coredns-answer",
                    form,
                    "--proxy-ip",
                    PROXY_V4,
                    "--proxy-ip",
                    PROXY_V6,
                    manifests.to_str().unwrap(),
                ];
                args.extend_from_slice(extra);
                args
            };
            let out = run(command("render").args(args(&[])), None);
            if form == "template" && size == 30_000 {
                // Over the 1 MiB a ConfigMap holds: refused unless asked for anyway.
                assert_eq!((out.code, out.stdout.as_str()), (1, ""), "{}", out.stderr);
                assert!(
                    out.stderr.contains("--coredns-answer view"),
                    "{}",
                    out.stderr
                );
            }
            let corefile = match out.code {
                0 => out.stdout,
                _ => render(&args(&["--allow-oversize"])),
            };
            eprintln!(
                "{size} varied names, {form}: a Corefile of {} bytes",
                corefile.len()
            );
            if form == "view" {
                // #28: 30,000 varied names with the rest of kubeadm's Corefile in 0.8 MiB.
                assert!(corefile.len() * 10 <= 8 << 20, "{}", corefile.len());
            }
            let step = (size / 40).max(1);
            for version in VERSIONS {
                let Some(bin) = binary(version) else { return };
                let dns = scene.coredns(&bin, &format!("{version}-{form}-{size}"), &corefile);
                for name in names.iter().step_by(step).chain(names.last()) {
                    let what = format!("{version}, {form}, {size} names: {name}");
                    let a = dns.ask(&format!("{name}."), TYPE::A, false);
                    assert_eq!(a.answers, vec![format!("A {PROXY_V4}")], "{what}");
                    let aaaa = dns.ask(&format!("{name}."), TYPE::AAAA, true);
                    assert_eq!(aaaa.answers, vec![format!("AAAA {PROXY_V6}")], "{what}");
                    // A near miss in the same zone, and the name's TXT, are the upstream's.
                    for (q, qtype) in [
                        (format!("x{name}."), TYPE::A),
                        (format!("{name}."), TYPE::TXT),
                    ] {
                        let got = dns.ask(&q, qtype, false);
                        let want = query(scene.upstream.addr, &q, qtype, false).unwrap();
                        assert_eq!(got, want, "{what}: {q} {qtype:?} is the upstream's");
                    }
                }
            }
        }
    }
}

/// Hairpinned names asked in a loop while CoreDNS reloads: how many were asked, the answers
/// that were not the proxy's, and the queries that got no answer at all.
struct QueryLoop {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(usize, Vec<String>, Vec<String>)>,
}

/// The names the loop asks: a plain name, a wildcard's, an apex, a deep name.
const LOOPED: [&str; 4] = [
    "api.example.com.",
    "foo.apps.example.com.",
    "example.org.",
    "deep.a.b.example.net.",
];

impl QueryLoop {
    /// Asks `LOOPED` over and over (UDP; every fourth round TCP too) until stopped.
    fn start(addr: SocketAddr) -> QueryLoop {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let proxy = vec![format!("A {PROXY_V4}")];
            let (mut asked, mut wrong, mut lost) = (0, Vec::new(), Vec::new());
            let mut round = 0usize;
            while !flag.load(Ordering::Relaxed) {
                for name in LOOPED {
                    for tcp in [false, true] {
                        if tcp && round % 4 != 0 {
                            continue;
                        }
                        asked += 1;
                        match query(addr, name, TYPE::A, tcp) {
                            Ok(r) if r.answers == proxy => {}
                            Ok(r) => wrong.push(format!("{name} (tcp={tcp}): {r:?}")),
                            Err(e) => lost.push(format!("{name} (tcp={tcp}): {e}")),
                        }
                    }
                }
                round += 1;
            }
            (asked, wrong, lost)
        });
        QueryLoop { stop, thread }
    }

    fn finish(self) -> (usize, Vec<String>, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Replaces `path` in one step, as the kubelet swaps a ConfigMap volume's `..data` link: the
/// reload plugin never reads a half-written file.
fn swap_in(path: &Path, text: &str) {
    let tmp = path.with_extension("next");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Waits until CoreDNS's log holds `what` one more time than `before` times.
fn await_log(dns: &CoreDns, what: &str, before: usize, version: &str) {
    let start = std::time::Instant::now();
    while dns.process.log_text().matches(what).count() <= before {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{version}: no {what:?} in 30 s:\n{}",
            dns.process.tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `render coredns` of the Corefile CoreDNS runs now (`dns.corefile`), with `extra` flags and the
/// hostnames of `manifests`: the controller's next write, the rest of the file untouched.
fn rerender(dns: &CoreDns, run_dir: &Path, extra: &[&str], manifests: &Path) -> String {
    let current = run_dir.join("current.Corefile");
    std::fs::copy(&dns.corefile, &current).unwrap();
    let mut args = vec!["coredns", "--corefile", current.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend(["--proxy-ip", PROXY_V4, manifests.to_str().unwrap()]);
    render(&args)
}

/// A change of answer form is one write of the Corefile, and CoreDNS's `reload` swaps the whole
/// configuration: under a continuous query loop, no hairpinned name is ever answered by the
/// upstream (nor goes unanswered) while the template pair becomes the view form (what `auto`
/// writes when it learns CoreDNS is 1.10 or later) and back. Both tested CoreDNS versions.
#[test]
fn a_change_of_form_reloads_without_an_upstream_answer_meanwhile() {
    let Some(scene) = Scene::new("coredns-form-switch") else {
        return;
    };
    let kubeadm = corefile_fixture("kubeadm.Corefile");
    let manifests = ingress(scene.dir.path(), &hosts());
    for version in VERSIONS {
        let Some(bin) = binary(version) else { return };
        let run_dir = scene.run_dir(&format!("{version}-manifests"));
        let corefile = render(&[
            "coredns",
            "--corefile",
            kubeadm.to_str().unwrap(),
            "--coredns-answer",
            "template",
            "--proxy-ip",
            PROXY_V4,
            manifests.to_str().unwrap(),
        ]);
        let dns = scene.coredns_reloading(&bin, version, &corefile, true);
        for (extra, form) in [
            (&["--coredns-version", "1.11.3"][..], "view ouroboros {"),
            (
                &["--coredns-answer", "template"][..],
                "template IN A example.com",
            ),
        ] {
            let next = rerender(&dns, &run_dir, extra, &manifests);
            assert!(next.contains(form), "{version} {extra:?}: {next}");
            let reloads = dns.process.log_text().matches("Reloading complete").count();
            let queries = QueryLoop::start(dns.addr());
            std::thread::sleep(Duration::from_millis(500));
            swap_in(&dns.corefile, &next);
            await_log(&dns, "Reloading complete", reloads, version);
            // Queries on the new configuration too.
            std::thread::sleep(Duration::from_millis(1500));
            let (asked, wrong, lost) = queries.finish();
            eprintln!(
                "{version}, to {form:?}: {asked} queries during the reload, {} answered otherwise \
                 than with the proxy, {} unanswered: {lost:?}",
                wrong.len(),
                lost.len()
            );
            assert!(asked >= 100, "{version}: only {asked} queries");
            assert_eq!(
                wrong,
                Vec::<String>::new(),
                "{version} {extra:?}\n{}",
                dns.process.tail()
            );
            // The old server closes the TCP connections it still holds when it stops: a query
            // in flight on one of them gets no answer (seen: 1 in about 50,000), which the
            // client retries. Never a wrong answer.
            assert!(lost.len() <= 3, "{version} {extra:?}: {lost:?}");
        }
        for name in LOOPED {
            assert!(
                !scene.upstream.was_asked(name, TYPE::A),
                "{version}: {name} A reached the upstream"
            );
        }
        check_answers(
            &dns,
            &scene.upstream,
            false,
            &format!("{version} after the switches"),
        );
    }
}
