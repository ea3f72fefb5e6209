//! Each target's answer as doctor picks and explains it, and the rbac check around
//! `--ingress-controller-service`.

use super::*;

/// A Service of `ns/name` with ClusterIP `ip` and, as a load balancer, `ip_mode` on its address.
fn controller_service(ns: &str, name: &str, ip: &str, ip_mode: Option<&str>) -> Value {
    let mut svc = nginx_service(ip_mode);
    svc["metadata"] = meta(ns, name);
    svc["spec"]["clusterIP"] = json!(ip);
    svc["spec"]["clusterIPs"] = json!([ip]);
    svc
}

fn classed(ns: &str, class: &str, hosts: &[&str]) -> Value {
    let mut i = ingress(ns, "web", hosts);
    i["spec"]["ingressClassName"] = json!(class);
    i
}

fn answers_args() -> DoctorArgs {
    let target = |name: &str, extra: &str| {
        format!("name={name},service=proxy-{name},ingress-class={name},{extra}")
    };
    let flags = [
        "--ingress-controller-service".to_string(),
        "ingress-nginx/ingress-nginx-controller".into(),
        "--ingress-controller-kind".into(),
        "ingress-nginx".into(),
        "--ingress-controller-config".into(),
        "ingress-nginx/ingress-nginx-controller".into(),
        "--target".into(),
        target(
            "traefik",
            "ingress-controller=traefik/traefik,ingress-controller-kind=traefik,\
             ingress-controller-config=traefik/traefik",
        ),
        "--target".into(),
        target(
            "plain",
            "ingress-controller=plain/nginx,ingress-controller-kind=ingress-nginx,\
             ingress-controller-config=plain/nginx",
        ),
        "--target".into(),
        target(
            "gone",
            "ingress-controller=gone/nginx,ingress-controller-kind=ingress-nginx,\
             ingress-controller-config=gone/typo",
        ),
        "--target".into(),
        target("hand", "answer=relay,proxy-ip=10.96.0.44"),
        "--target".into(),
        target(
            "lb",
            "ingress-controller=lb/nginx,ingress-controller-kind=ingress-nginx,\
             ingress-controller-config=lb/nginx,proxy-ip=10.96.0.45",
        ),
    ];
    let argv: Vec<&str> = flags.iter().map(String::as_str).collect();
    args(&argv)
}

const NGINX_SVC: &str = "/api/v1/namespaces/ingress-nginx/services/ingress-nginx-controller";
const TRAEFIK_DEPLOY: &str = "/apis/apps/v1/namespaces/traefik/deployments/traefik";

/// The cluster of `answers_args`: each target's ingress controller and configuration.
fn answers_cluster() -> Cluster {
    let ingresses = list(
        "IngressList",
        "networking.k8s.io/v1",
        vec![
            ingress("shop", "web", &["shop.example.com"]),
            classed("news", "traefik", &["news.example.com"]),
            classed("plain", "plain", &["plain.example.com"]),
            classed("lb", "lb", &["lb.example.com"]),
        ],
    );
    let traefik = deployment(
        "traefik",
        "traefik",
        json!({"app.kubernetes.io/name": "traefik"}),
        "traefik:v3.6",
        vec![
            "--entryPoints.websecure.address=:8443",
            "--entryPoints.websecure.proxyProtocol.trustedIPs=10.0.0.0/8",
        ],
    );
    let (default_hosts, traefik_hosts, plain_hosts) = (
        hosts(&["shop.example.com"]),
        hosts(&["news.example.com"]),
        hosts(&["plain.example.com"]),
    );
    let addrs = |ip: &str| Answer::Template(ProxyAddrs::new(&[ip.parse().unwrap()]).unwrap());
    let (relay, to_traefik, to_plain) = (template(), addrs("10.96.5.1"), addrs("10.96.5.2"));
    // What the controller writes: the default's names through the proxy, Traefik's and plain's
    // straight to their ingress controllers, lb's left out.
    let corefile = corefile::splice_groups(
        &corefile_fixture("kubeadm.Corefile"),
        &[
            Group {
                hosts: &default_hosts,
                answer: &relay,
            },
            Group {
                hosts: &traefik_hosts,
                answer: &to_traefik,
            },
            Group {
                hosts: &plain_hosts,
                answer: &to_plain,
            },
        ],
    )
    .unwrap()
    .text;
    healthy()
        .at(INGRESSES, ingresses.clone())
        .at(
            "/apis/networking.k8s.io/v1/ingressclasses?",
            list("IngressClassList", "networking.k8s.io/v1", vec![]),
        )
        .at(NGINX_SVC, nginx_service(None))
        .at(
            "/api/v1/namespaces/traefik/services/traefik",
            controller_service("traefik", "traefik", "10.96.5.1", None),
        )
        .at(TRAEFIK_DEPLOY, traefik.clone())
        .at(
            "/api/v1/namespaces/plain/services/nginx",
            controller_service("plain", "nginx", "10.96.5.2", None),
        )
        .at(
            "/api/v1/namespaces/plain/configmaps/nginx",
            configmap("plain", "nginx", json!({"use-proxy-protocol": "false"})),
        )
        .at(
            "/api/v1/namespaces/lb/services/nginx",
            controller_service("lb", "nginx", "10.96.5.3", Some("Proxy")),
        )
        .at(
            "/api/v1/namespaces/lb/configmaps/nginx",
            configmap("lb", "nginx", json!({"use-proxy-protocol": "true"})),
        )
        .at(
            COREDNS,
            configmap("kube-system", "coredns", json!({"Corefile": corefile})),
        )
}

/// Each target's answer as the controller picks it, with how the header verdict is known: the
/// default target's ingress-nginx requires the header (relay), Traefik takes it optionally and
/// a second ingress-nginx has it off (both direct), one target's ConfigMap is missing (relay,
/// WARN), one is relayed by hand, and one's load balancer reports ipMode Proxy (skip). The
/// block is judged against those answers, and the permissions checked include the reads.
#[tokio::test]
async fn each_targets_answer_is_picked_and_explained() {
    let a = answers_args();
    let cluster = answers_cluster;
    let (report, seen) = run(cluster(), &a).await;
    let answers: Vec<_> = report
        .checks
        .iter()
        .filter(|c| c.id == "answer")
        .cloned()
        .collect();
    let answers = ouroboros::doctor::report::Report::new(report.mode, answers);
    golden("answers.txt", &answers.to_text());
    golden("answers.json", &answers.to_json());
    // Each configuration object is read once, by name (ingress-nginx's ConfigMap a second
    // time by the proxy-protocol check of the ingress controller found by its labels).
    for uri in [TRAEFIK_DEPLOY, "/api/v1/namespaces/gone/configmaps/typo"] {
        assert_eq!(seen.iter().filter(|s| s.uri == uri).count(), 1, "{uri}");
    }
    let b = check(&report, "coredns-block");
    assert_eq!(
        (b.status, b.summary.as_str()),
        (
            Status::Ok,
            "our block is present and current (3 hostname(s))"
        ),
        "{b:?}"
    );
    assert_eq!(check(&report, "rbac").status, Status::Ok);

    // Without the permission to watch Traefik's Deployment (read for the header verdict), the
    // controller could not follow it: the RBAC check says so.
    let (report, _) = run(cluster().deny("watch deployments"), &a).await;
    let r = check(&report, "rbac");
    assert_eq!(r.status, Status::Fail, "{r:?}");
    assert!(
        r.evidence.iter().any(|e| e.contains("watch deployments")
            && e.contains("traefik")
            && e.contains("PROXY header")),
        "{r:?}"
    );
    // Nor without listing the ingress controller Service a direct answer is read from.
    let (report, _) = run(cluster().deny("list services"), &a).await;
    let r = check(&report, "rbac");
    assert_eq!(r.status, Status::Fail, "{r:?}");
    assert!(
        r.evidence
            .iter()
            .any(|e| e.contains("list services") && e.contains("plain")),
        "{r:?}"
    );
}

/// `--ingress-controller-kind probe`: doctor knocks on the ingress controller Service itself
/// (here 127.0.0.1, its port named `http`): a listener that answers only behind a PROXY header
/// is required (relay, OK); a port nothing listens on gets no verdict, which is a WARN saying
/// where the controller's own verdict is, not a failure.
#[tokio::test]
async fn a_probe_target_is_knocked_on_by_doctor_itself() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 512];
                let n = c.read(&mut buf).await.unwrap_or(0);
                if buf[..n].starts_with(b"PROXY ") {
                    let _ = c.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
                }
            });
        }
    });
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let svc = |port: u16| {
        let mut s = nginx_service(None);
        s["spec"]["clusterIP"] = json!("127.0.0.1");
        s["spec"]["clusterIPs"] = json!(["127.0.0.1"]);
        s["spec"]["ports"] = json!([{"name": "http", "port": port}]);
        s
    };
    let a = args(&[
        "--ingress-controller-service",
        "ingress-nginx/ingress-nginx-controller",
        "--ingress-controller-kind",
        "probe",
    ]);
    let (report, _) = run(healthy().at(NGINX_SVC, svc(port)), &a).await;
    let c = check(&report, "answer");
    assert_eq!(
        (c.status, c.summary.as_str()),
        (
            Status::Ok,
            "relay (answer=auto): the ingress controller requires the PROXY header (v1 or v2): \
             through the proxy"
        ),
        "{c:?}"
    );
    let want = format!(
        "header: required: Service ingress-nginx/ingress-nginx-controller: probed \
         127.0.0.1:{port} (HTTP HEAD): without a PROXY header closed without answering"
    );
    assert!(c.evidence.iter().any(|e| e.starts_with(&want)), "{c:?}");

    let (report, _) = run(healthy().at(NGINX_SVC, svc(closed)), &a).await;
    let c = check(&report, "answer");
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(
        c.action
            .as_deref()
            .is_some_and(|a| a.contains("`answer picked`")),
        "{c:?}"
    );
    assert_eq!(check(&report, "coredns-block").status, Status::Ok);

    // The controller, knocking from its pod, may have picked direct where doctor's knocks got
    // nothing: a block answering with the ingress controller Service's ClusterIP is right then,
    // and wrong once doctor's own knocks find the header required.
    let direct = Answer::Template(ProxyAddrs::new(&["127.0.0.1".parse().unwrap()]).unwrap());
    let names = ["shop.example.com", "blog.example.com", "*.blog.example.com"];
    let corefile = with_block(&corefile_fixture("kubeadm.Corefile"), &names, &direct);
    let direct_block = |port: u16| {
        healthy().at(NGINX_SVC, svc(port)).at(
            COREDNS,
            configmap("kube-system", "coredns", json!({"Corefile": corefile})),
        )
    };
    let (report, _) = run(direct_block(closed), &a).await;
    let c = check(&report, "coredns-block");
    assert_eq!(c.status, Status::Ok, "{}", report.to_text());
    let (report, _) = run(direct_block(port), &a).await;
    let c = check(&report, "coredns-block");
    assert_eq!(
        (c.status, c.summary.as_str()),
        (Status::Fail, "our block is stale"),
        "{}",
        report.to_text()
    );
}

/// Section 1 suggests --ingress-controller-service to check an ingress controller; a
/// controller runs with it only when told to (the chart: only for a proxy whose ingress
/// controller Service it names). Lacking only what that flag adds is a WARN saying when it
/// matters; lacking anything else besides is still a FAIL.
#[tokio::test]
async fn the_ingress_controller_flag_alone_does_not_fail_the_rbac_check() {
    let svc = "/api/v1/namespaces/edge/services/my-lb";
    let cluster = || {
        healthy().at(
            svc,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": meta("edge", "my-lb"),
                   "spec": {"type": "NodePort", "selector": {"app": "lb"}}}),
        )
    };
    let flag = args(&["--ingress-controller-service", "edge/my-lb"]);
    // The chart's controller without that flag: no watch on Services.
    let (report, _) = run(cluster().deny("watch services my-lb"), &flag).await;
    let c = check(&report, "rbac");
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(c.summary.contains("--ingress-controller-service"), "{c:?}");
    assert!(
        c.evidence
            .iter()
            .all(|e| e.contains("services") && e.contains("my-lb")),
        "{c:?}"
    );
    // Something else lacking too: FAIL.
    let (report, _) = run(
        cluster()
            .deny("watch services my-lb")
            .deny("update configmaps"),
        &flag,
    )
    .await;
    assert_eq!(check(&report, "rbac").status, Status::Fail);
    // Without the flag nothing asks for the watch.
    let (report, _) = run(cluster().deny("watch services my-lb"), &args(&[])).await;
    assert_eq!(check(&report, "rbac").status, Status::Ok);
}
