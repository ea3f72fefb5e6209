//! The hairpin in real pods, fixed by the chart installed with Helm from our image: nginx
//! requiring the PROXY protocol behind a `LoadBalancer` Service (the load balancer's address
//! set by the test, no `ipMode`, so kube-proxy short-circuits it), kubeadm's CoreDNS as two
//! pods reading their Corefile from the `coredns` ConfigMap (with `reload`), and a client pod
//! with curl. Before the install, the client's `https://` request for the Ingress's name fails
//! (nginx logs a broken header); after `helm install` with default values it succeeds over real
//! TLS and nginx sees the client pod's own address; `helm uninstall` leaves the Corefile
//! byte-identical and nothing of ours behind.

use std::process::Command;
use std::time::{Duration, Instant};

use super::images::{CLIENT, COREDNS, NGINX};
use super::{Node, PodSync, DNS_SERVICE_IP};

/// The load balancer's address, which the public DNS answers for every name.
pub const LB_IP: &str = "192.0.2.10";
pub const HOST: &str = "app.example.com";
/// The chart's default proxy target: `ingress-nginx-controller.ingress-nginx`.
pub const INGRESS_NAMESPACE: &str = "ingress-nginx";
pub const RELEASE_NAMESPACE: &str = "ouroboros";

/// Whose CoreDNS the node runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Flavor {
    /// kubeadm's Corefile and Deployment.
    Kubeadm,
    /// k3s's: its Corefile (a `hosts` file from the ConfigMap, `import
    /// /etc/coredns/custom/*.override` and `*.server`) and the optional `coredns-custom`
    /// ConfigMap mounted at `/etc/coredns/custom`.
    K3s,
}

/// The cluster's CoreDNS as `flavor` deploys it: its RBAC, the `coredns` ConfigMap with its
/// Corefile, two replicas mounting it with kubeadm's probes and memory limit, and the kube-dns
/// Service.
/// `reload`, when given, replaces the Corefile's `reload` line (its interval and jitter, e.g.
/// `reload 5s 2s`).
pub fn coredns(node: &Node, flavor: Flavor, reload: Option<&str>) {
    let fixture = match flavor {
        Flavor::Kubeadm => "kubeadm.Corefile",
        Flavor::K3s => "k3s.Corefile",
    };
    let mut corefile =
        std::fs::read_to_string(crate::peers::coredns::corefile_fixture(fixture)).unwrap();
    if let Some(reload) = reload {
        assert!(
            corefile.contains("    reload\n"),
            "{fixture} has a plain reload line"
        );
        corefile = corefile.replace("    reload\n", &format!("    {reload}\n"));
    }
    let mut data = serde_json::json!({"Corefile": corefile});
    let mut items = vec![serde_json::json!({"key": "Corefile", "path": "Corefile"})];
    let mut mounts = vec![serde_json::json!(
        {"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": true}
    )];
    let mut volumes = Vec::new();
    if flavor == Flavor::K3s {
        data["NodeHosts"] = serde_json::json!(format!("{} {}\n", super::NODE_IP, super::NODE_NAME));
        items.push(serde_json::json!({"key": "NodeHosts", "path": "NodeHosts"}));
        mounts.push(serde_json::json!(
            {"name": "custom-config-volume", "mountPath": "/etc/coredns/custom", "readOnly": true}
        ));
        volumes.push(serde_json::json!({"name": "custom-config-volume",
            "configMap": {"name": "coredns-custom", "optional": true}}));
    }
    volumes.push(serde_json::json!({"name": "config-volume",
        "configMap": {"name": "coredns", "items": items}}));
    let objects = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "system:coredns"},
         "rules": [
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
             "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
             "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "coredns", "namespace": "kube-system"},
         "data": data},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "coredns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
         "spec": {"replicas": 2, "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
          "template": {"metadata": {"labels": {"k8s-app": "kube-dns"}}, "spec": {
            "serviceAccountName": "coredns",
            "priorityClassName": "system-cluster-critical",
            "dnsPolicy": "Default",
            "containers": [{
                "name": "coredns", "image": COREDNS, "imagePullPolicy": "IfNotPresent",
                "args": ["-conf", "/etc/coredns/Corefile"],
                "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
                "volumeMounts": mounts,
                "ports": [
                    {"containerPort": 53, "name": "dns", "protocol": "UDP"},
                    {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
                    {"containerPort": 9153, "name": "metrics", "protocol": "TCP"}],
                "livenessProbe": {"httpGet": {"path": "/health", "port": 8080},
                    "initialDelaySeconds": 60, "timeoutSeconds": 5, "failureThreshold": 5},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}},
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}}}],
            "volumes": volumes}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
         "spec": {"clusterIP": DNS_SERVICE_IP, "selector": {"k8s-app": "kube-dns"}, "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}]}},
    ]});
    node.apply(&objects.to_string());
}

/// nginx as the ingress controller: requires the PROXY header on both ports, TLS on 8443 with
/// a certificate for [`HOST`] (`dir` holds it and its CA), and answers with the client address
/// the header carried. Its `LoadBalancer` Service has the load balancer's address, no ipMode.
pub fn ingress_controller(node: &Node, tls_dir: &std::path::Path) {
    let conf = r#"daemon off;
master_process off;
error_log stderr info;
pid /tmp/nginx.pid;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path /tmp/body;
  proxy_temp_path /tmp/proxy;
  fastcgi_temp_path /tmp/fastcgi;
  uwsgi_temp_path /tmp/uwsgi;
  scgi_temp_path /tmp/scgi;
  server {
    listen 8080 proxy_protocol;
    listen 8443 ssl proxy_protocol;
    ssl_certificate /tls/tls.crt;
    ssl_certificate_key /tls/tls.key;
    location / { return 200 "client=$proxy_protocol_addr via=$remote_addr\n"; }
  }
  # An Ingress's backend, as an ingress controller routes it: the whoami of the doctor test
  # (node/doctor.rs), told the client's address the PROXY header carried.
  server {
    listen 8080 proxy_protocol;
    server_name whoami.example.com;
    resolver 10.96.0.10 valid=5s;
    set $backend http://whoami.app.svc.cluster.local:8080;
    location / {
      proxy_set_header X-Real-IP $proxy_protocol_addr;
      proxy_set_header X-Forwarded-For $proxy_protocol_addr;
      proxy_pass $backend;
    }
  }
}
"#;
    let read = |f: &str| std::fs::read_to_string(tls_dir.join(f)).unwrap();
    let labels = serde_json::json!({"app.kubernetes.io/name": "ingress-nginx"});
    let objects = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": INGRESS_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "nginx", "namespace": INGRESS_NAMESPACE}, "data": {"nginx.conf": conf}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "ingress-nginx-controller", "namespace": INGRESS_NAMESPACE},
         "data": {"use-proxy-protocol": "true"}},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
         "metadata": {"name": "tls", "namespace": INGRESS_NAMESPACE},
         "stringData": {"tls.crt": read("serving.crt"), "tls.key": read("serving.key")}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "ingress-nginx-controller", "namespace": INGRESS_NAMESPACE},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
          "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
            "name": "nginx", "image": NGINX, "imagePullPolicy": "IfNotPresent",
            "args": ["-e", "stderr", "-c", "/etc/nginx/nginx.conf"],
            "ports": [{"containerPort": 8080, "name": "http"}, {"containerPort": 8443, "name": "https"}],
            "readinessProbe": {"tcpSocket": {"port": 8443}, "periodSeconds": 2},
            "volumeMounts": [
                {"name": "conf", "mountPath": "/etc/nginx"},
                {"name": "tls", "mountPath": "/tls"}]},
            // What doctor reads of an ingress-nginx pod: the `--configmap` flag of its
            // controller, whose ConfigMap says `use-proxy-protocol`. nginx here is configured
            // directly, so a container that only carries the flag (pause ignores arguments)
            // tells doctor the same as the real controller would.
            {"name": "controller", "image": super::images::PAUSE, "imagePullPolicy": "IfNotPresent",
             "args": [format!("--configmap={INGRESS_NAMESPACE}/ingress-nginx-controller")]}],
            "volumes": [
                {"name": "conf", "configMap": {"name": "nginx"}},
                {"name": "tls", "secret": {"secretName": "tls"}}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "ingress-nginx-controller", "namespace": INGRESS_NAMESPACE,
                      "labels": labels},
         "spec": {"type": "LoadBalancer", "selector": labels, "ports": [
            {"name": "http", "port": 80, "targetPort": "http"},
            {"name": "https", "port": 443, "targetPort": "https"}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
         "metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}},
    ]});
    node.apply(&objects.to_string());
    node.kubectl_ok(&[
        "patch",
        "service",
        "-n",
        INGRESS_NAMESPACE,
        "ingress-nginx-controller",
        "--subresource=status",
        "--type=merge",
        "-p",
        &serde_json::json!({"status": {"loadBalancer": {"ingress": [{"ip": LB_IP}]}}}).to_string(),
    ]);
}

/// An application's Ingress for [`HOST`], with the name in its TLS section (the chart's
/// default `controller.ingressHosts: tls` reads those).
pub fn app_ingress(node: &Node) {
    node.apply(
        &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}},
            {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
             "metadata": {"name": "app", "namespace": "app"},
             "spec": {"ingressClassName": "nginx",
              "tls": [{"hosts": [HOST], "secretName": "app-tls"}],
              "rules": [{"host": HOST, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "app", "port": {"number": 80}}}}]}}]}},
        ]})
        .to_string(),
    );
}

/// The client pod (bash and curl), trusting the test CA; waits until it runs.
pub fn client(node: &Node, tls_dir: &std::path::Path) -> String {
    let ca = std::fs::read_to_string(tls_dir.join("ca.crt")).unwrap();
    node.apply(
        &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "ca", "namespace": "app"}, "data": {"ca.crt": ca}},
            {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "client", "namespace": "app"},
             "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                "name": "client", "image": CLIENT, "imagePullPolicy": "IfNotPresent",
                "args": ["-c", "exec sleep infinity"],
                "volumeMounts": [{"name": "ca", "mountPath": "/ca"}]}],
              "volumes": [{"name": "ca", "configMap": {"name": "ca"}}]}},
        ]})
        .to_string(),
    );
    node.kubectl_ok(&[
        "wait",
        "-n",
        "app",
        "--for=condition=Ready",
        "pod/client",
        "--timeout=120s",
    ]);
    node.kubectl_ok(&[
        "get",
        "-n",
        "app",
        "pod",
        "client",
        "-o",
        "jsonpath={.status.podIP}",
    ])
}

/// The client's `https://HOST/` request: Ok(body) or Err(curl's message).
pub fn client_get(node: &Node) -> Result<String, String> {
    let url = format!("https://{HOST}/");
    client_curl(node, &["--max-time", "5", "--cacert", "/ca/ca.crt", &url])
}

/// `curl -sS ARGS` in the client pod: Ok(body) or Err(curl's message).
pub fn client_curl(node: &Node, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["exec", "-n", "app", "client", "--", "curl", "-sS"];
    all.extend_from_slice(args);
    let out = node.kubectl(&all);
    crate::support::body_or_message(out)
}

/// The Corefile in the `coredns` ConfigMap, as stored.
pub fn corefile(node: &Node) -> String {
    coredns_configmap(node, "{.data.Corefile}")
}

/// A field of the `coredns` ConfigMap (a kubectl JSONPath such as `{.metadata.resourceVersion}`).
pub fn coredns_configmap(node: &Node, jsonpath: &str) -> String {
    node.kubectl_ok(&[
        "get",
        "configmap",
        "-n",
        "kube-system",
        "coredns",
        "-o",
        &format!("jsonpath={jsonpath}"),
    ])
}

/// The proxy Service's ClusterIP.
pub fn proxy_cluster_ip(node: &Node) -> String {
    node.kubectl_ok(&[
        "get",
        "svc",
        "-n",
        RELEASE_NAMESPACE,
        "ouroboros-proxy",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])
}

/// The CoreDNS pods' addresses.
pub fn coredns_pod_ips(node: &Node) -> Vec<String> {
    node.kubectl_ok(&[
        "get",
        "pods",
        "-n",
        "kube-system",
        "-l",
        "k8s-app=kube-dns",
        "-o",
        "jsonpath={.items[*].status.podIP}",
    ])
    .split_whitespace()
    .map(String::from)
    .collect()
}

/// Waits until every pod matching `selector` in `namespace` is Ready (and there is one: `kubectl
/// wait` fails at once while the ReplicaSet has created none yet).
pub fn wait_ready(node: &Node, namespace: &str, selector: &str, timeout: &str) {
    let started = Instant::now();
    while node
        .kubectl_ok(&["get", "pods", "-n", namespace, "-l", selector, "-o", "name"])
        .trim()
        .is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no pod {selector} in {namespace} after 60 s\n{}",
            node.diagnose()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let out = node.kubectl(&[
        "wait",
        "-n",
        namespace,
        "--for=condition=Ready",
        "pod",
        "-l",
        selector,
        &format!("--timeout={timeout}"),
    ]);
    assert!(
        out.status.success(),
        "pods {selector} in {namespace} not Ready: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        node.diagnose()
    );
}

/// A TLS certificate for [`HOST`] and its CA, in `dir`.
pub fn tls(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    crate::peers::cluster::pki(dir, &format!("DNS:{HOST}"));
}

/// A node with the cluster's CoreDNS, the ingress controller behind its load balancer, an
/// application's Ingress and a client pod, all Ready.
pub struct Setup {
    pub node: Node,
    pub client_ip: String,
    /// The Corefile before anything of ours ran.
    pub corefile: String,
    sync: PodSync,
}

impl Setup {
    pub fn start(flavor: Flavor, sync: PodSync) -> Option<Setup> {
        Setup::start_with_reload(flavor, sync, None)
    }

    /// [`Setup::start`] with CoreDNS's `reload` line replaced by `reload` (when given).
    pub fn start_with_reload(flavor: Flavor, sync: PodSync, reload: Option<&str>) -> Option<Setup> {
        let node = Node::start(sync)?;
        let started = Instant::now();
        let tls_dir = node.dir.join("app-tls");
        tls(&tls_dir);
        coredns(&node, flavor, reload);
        ingress_controller(&node, &tls_dir);
        app_ingress(&node);
        wait_ready(&node, "kube-system", "k8s-app=kube-dns", "120s");
        wait_ready(
            &node,
            INGRESS_NAMESPACE,
            "app.kubernetes.io/name=ingress-nginx",
            "120s",
        );
        let client_ip = client(&node, &tls_dir);
        let corefile = corefile(&node);
        eprintln!("node: cluster set up in {:.1?}", started.elapsed());
        Some(Setup {
            node,
            client_ip,
            corefile,
            sync,
        })
    }

    /// `helm ARGS` for the release `ouroboros` in its namespace, which must succeed without a
    /// warning. On a node with [`PodSync::Fast`], an install without `controller.cleanupDrain`
    /// sets it to 0: those tests do not watch clients during the uninstall, and the drain would
    /// add two minutes to each (the tests of the drain run with [`PodSync::Default`] or set it).
    pub fn helm(&self, args: &[&str]) {
        let mut all = args.to_vec();
        if args[0] == "install"
            && self.sync == PodSync::Fast
            && !args.iter().any(|a| a.contains("cleanupDrain"))
        {
            all.extend(["--set", "controller.cleanupDrain=0"]);
        }
        all.extend(["ouroboros", "--namespace", RELEASE_NAMESPACE]);
        if args[0] != "uninstall" {
            all.push("charts/ouroboros");
        }
        all.extend(["--wait", "--timeout", "5m"]);
        let out = self.node.helm(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "helm {}: {stderr}\n{}",
            all.join(" "),
            self.node.diagnose()
        );
        // The API server's warnings (PodSecurity, deprecations) and Helm's own; Helm's client
        // library also logs at info level while `--wait` watches (`I1207 ... "Warning: watch
        // ended with error" ... context canceled` when the wait is over), which is not ours.
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| !is_klog_info(l) && l.to_lowercase().contains("warning"))
            .collect();
        assert!(
            warnings.is_empty(),
            "helm {} printed a warning: {warnings:?}",
            all.join(" ")
        );
    }

    /// Waits until the client's request succeeds through one of our proxy pods, and checks
    /// nginx saw the client pod's own address; returns how long it took.
    pub fn wait_fixed(&self, within: Duration) -> Duration {
        let node = &self.node;
        let started = Instant::now();
        let body = loop {
            match client_get(node) {
                Ok(body) => break body,
                Err(e) => assert!(
                    started.elapsed() < within,
                    "the request still fails after {within:?}: {e}\n{}",
                    node.diagnose()
                ),
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        let took = started.elapsed();
        let proxy_ips = node.kubectl_ok(&[
            "get",
            "pods",
            "-n",
            RELEASE_NAMESPACE,
            "-l",
            "app.kubernetes.io/component=proxy",
            "-o",
            "jsonpath={.items[*].status.podIP}",
        ]);
        let (client_seen, via) = body
            .trim()
            .strip_prefix("client=")
            .and_then(|rest| rest.split_once(" via="))
            .unwrap_or_else(|| panic!("nginx's answer: {body}"));
        assert_eq!(
            client_seen, self.client_ip,
            "nginx sees the client pod's own address"
        );
        assert!(
            proxy_ips.split_whitespace().any(|ip| ip == via),
            "the connection came from a proxy pod ({proxy_ips}), not {via}"
        );
        took
    }

    /// Waits until every CoreDNS replica answers `host` with the proxy Service's ClusterIP
    /// (each replica projects and reloads on its own clock), for at most `within`.
    pub fn wait_every_replica(&self, host: &str, within: Duration) {
        let node = &self.node;
        let want = format!("A {}", proxy_cluster_ip(node));
        let started = Instant::now();
        for pod in coredns_pod_ips(node) {
            while !replica_answers(node, &pod, host).contains(&want) {
                assert!(
                    started.elapsed() < within,
                    "CoreDNS {pod} does not answer {host} with {want} after {within:?}\n{}",
                    node.diagnose()
                );
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    }

    /// Waits until no object of the release is left (pods take their grace period to go after
    /// `helm uninstall`), for at most 90 s.
    pub fn assert_nothing_left(&self) {
        let started = Instant::now();
        loop {
            let left = self.node.kubectl_ok(&[
                "get",
                "deploy,ds,rs,pods,svc,cm,sa,secrets,roles,rolebindings,clusterroles,\
                 clusterrolebindings,jobs,pdb,networkpolicies",
                "-A",
                "-l",
                "app.kubernetes.io/instance=ouroboros",
                "-o",
                "name",
            ]);
            if left.trim().is_empty() {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "objects of the release left 90 s after uninstall:\n{left}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// The client's requests for [`HOST`] every half second while the release is removed, by how
/// each ended. Started before `helm uninstall`, finished after it.
pub struct UninstallWatch {
    child: std::process::Child,
    /// The file whose creation stops the loop (the client image has bash, curl and sleep only:
    /// bash's own `[ -e ]` and `>` do the rest).
    stop: String,
}

/// How the client's requests ended while the release was removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// Served (through the proxy).
    pub served: usize,
    /// Reached the ingress controller without the header (the hairpin is back once the block
    /// is gone, as before the install): nginx closed the connection.
    pub refused_by_nginx: usize,
    /// Blackholed: no answer from the name's address (curl 7 and 28), or no address (6).
    pub blackholed: usize,
    /// The curl exit codes of the blackholed requests, in order.
    pub blackhole_codes: Vec<u32>,
}

impl UninstallWatch {
    pub fn start(node: &Node) -> UninstallWatch {
        let stop = format!(
            "/tmp/stop-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let script = format!(
            "while [ ! -e {stop} ]; do \
               curl -s -o /dev/null --max-time 2 --cacert /ca/ca.crt -w '%{{exitcode}}\\n' \
                 https://{HOST}/; sleep 0.5; done"
        );
        let child = Command::new(super::tool_path("kubectl"))
            .arg("--kubeconfig")
            .arg(&node.kubeconfig)
            .args(["exec", "-n", "app", "client", "--", "bash", "-c", &script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        UninstallWatch { child, stop }
    }

    /// Stops the loop and sorts what it saw.
    pub fn finish(self, node: &Node) -> Outcomes {
        let create = format!(": > {}", self.stop);
        node.kubectl_ok(&["exec", "-n", "app", "client", "--", "bash", "-c", &create]);
        let out = self.child.wait_with_output().unwrap();
        let mut o = Outcomes::default();
        for code in String::from_utf8_lossy(&out.stdout).lines() {
            match code.trim().parse::<u32>() {
                Ok(0) => o.served += 1,
                Ok(c @ (6 | 7 | 28)) => {
                    o.blackholed += 1;
                    o.blackhole_codes.push(c);
                }
                Ok(_) => o.refused_by_nginx += 1,
                Err(_) => panic!("curl's exit code: {code:?}"),
            }
        }
        o
    }
}

/// The A answers of the CoreDNS pod at `pod_ip` for `host`, asked from the node.
pub fn replica_answers(node: &Node, pod_ip: &str, host: &str) -> Vec<String> {
    let server: std::net::SocketAddr = format!("{pod_ip}:53").parse().unwrap();
    node.ns
        .run(|| crate::peers::dns::query(server, host, simple_dns::TYPE::A, false))
        .map(|r| r.answers)
        .unwrap_or_default()
}

/// A klog line at info level: `I` and the date, as `I1207 19:07:41.403619`.
fn is_klog_info(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 5 && b[0] == b'I' && b[1..5].iter().all(u8::is_ascii_digit) && b[5] == b' '
}

/// The release namespace, enforcing Pod Security `restricted` (and warning on it).
pub fn restricted_namespace(node: &Node) {
    node.apply(
        &serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": RELEASE_NAMESPACE,
            "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                       "pod-security.kubernetes.io/warn": "restricted"}}})
        .to_string(),
    );
}

#[test]
fn helm_install_fixes_the_hairpin_in_real_pods_and_uninstall_restores_the_corefile() {
    let Some(setup) = Setup::start(Flavor::Kubeadm, PodSync::Default) else {
        return;
    };
    let node = &setup.node;
    let before = setup.corefile.clone();

    // 1. The hairpin: the name resolves to the load balancer, kube-proxy short-circuits it to
    //    nginx without the header, and nginx refuses the connection.
    let err = client_get(node).expect_err("the hairpinned request fails before the install");
    let nginx_log = node.kubectl_ok(&[
        "logs",
        "-n",
        INGRESS_NAMESPACE,
        "deploy/ingress-nginx-controller",
        "-c",
        "nginx",
    ]);
    assert!(
        nginx_log.contains("broken header"),
        "nginx logs a broken header (curl said {err}):\n{nginx_log}"
    );

    // 2. The chart with its default values, in a namespace that enforces Pod Security
    //    `restricted`: the controller and proxy pods are admitted and become Ready.
    restricted_namespace(node);
    let started = Instant::now();
    setup.helm(&["install"]);
    eprintln!("node: helm install --wait took {:.1?}", started.elapsed());

    // 3. The fix: once each CoreDNS pod has the block (the kubelet projects the ConfigMap on its
    //    next sync, then `reload` reads it), the request goes through our proxy and nginx sees
    //    the client pod's address.
    setup.wait_fixed(Duration::from_secs(240));
    eprintln!(
        "node: first success {:.1?} after helm install began",
        started.elapsed()
    );
    assert_ne!(corefile(node), before, "the controller wrote its block");

    // 4. Uninstall: the hook stops the controller, removes the block and waits while the
    //    proxy still serves, so no request of the client meanwhile is blackholed (each is
    //    served, or refused by nginx once its replica has dropped the block: the hairpin as
    //    before the install). The Corefile is as it was, byte for byte, and no object of the
    //    release is left.
    let watch = UninstallWatch::start(node);
    let started = Instant::now();
    setup.helm(&["uninstall"]);
    eprintln!("node: helm uninstall took {:.1?}", started.elapsed());
    // A few seconds more: any replica still answering the proxy now would blackhole.
    std::thread::sleep(Duration::from_secs(5));
    let outcomes = watch.finish(node);
    eprintln!("node: the client during uninstall: {outcomes:?}");
    assert_eq!(
        outcomes.blackholed, 0,
        "requests blackholed during uninstall: {outcomes:?}"
    );
    assert!(outcomes.served > 0, "{outcomes:?}");
    assert_eq!(corefile(node), before, "the Corefile after uninstall");
    setup.assert_nothing_left();
    // The controller's Lease carries no label of the release: the uninstall hook deletes it.
    let lease = node.kubectl(&[
        "get",
        "lease",
        "-n",
        RELEASE_NAMESPACE,
        "ouroboros-controller",
    ]);
    assert!(
        String::from_utf8_lossy(&lease.stderr).contains("NotFound"),
        "the controller's Lease is left after uninstall: {}",
        String::from_utf8_lossy(&lease.stdout)
    );
}

/// The same uninstall without the drain (`controller.cleanupDrain=0`): Helm deletes the proxy
/// Service right after the block is removed, and every replica that has not reloaded yet
/// answers the deleted ClusterIP: the client's requests time out. What the drain prevents, and
/// proof that the check above can fail.
#[test]
fn uninstall_without_the_drain_blackholes_the_name_until_coredns_reloads() {
    let Some(setup) = Setup::start(Flavor::Kubeadm, PodSync::Fast) else {
        return;
    };
    let node = &setup.node;
    restricted_namespace(node);
    setup.helm(&["install", "--set", "controller.cleanupDrain=0"]);
    setup.wait_fixed(Duration::from_secs(240));
    setup.wait_every_replica(HOST, Duration::from_secs(120));
    let watch = UninstallWatch::start(node);
    setup.helm(&["uninstall"]);
    // Until every replica has reloaded (PodSync::Fast: 10 s, then `reload` 30-45 s).
    let started = Instant::now();
    let lb = format!("A {LB_IP}");
    for pod in coredns_pod_ips(node) {
        while !replica_answers(node, &pod, HOST).contains(&lb) {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{pod} still answers the proxy"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let outcomes = watch.finish(node);
    eprintln!("node: the client during uninstall without the drain: {outcomes:?}");
    assert!(
        outcomes.blackholed > 0,
        "without the drain some requests are blackholed: {outcomes:?}"
    );
    assert_eq!(
        corefile(node),
        setup.corefile,
        "the Corefile after uninstall"
    );
}
