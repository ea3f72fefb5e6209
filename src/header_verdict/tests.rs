//! The verdicts from configuration objects written as each project's documentation shows users
//! writing them (docs/targets.md cites each).

use super::*;

fn yaml(s: &str) -> Value {
    yaml_serde::from_str(s).unwrap()
}

fn judge(kind: ControllerKind, config: &str, object: &str) -> Verdict {
    let r = ConfigRef::parse(kind, config).unwrap();
    verdict(&r, Some(&yaml(object)))
}

#[test]
fn configmap_kinds() {
    use ControllerKind::*;
    let nginx = |data: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ingress-nginx-controller\n  \
             namespace: ingress-nginx\ndata:\n{data}"
        )
    };
    for (kind, object, want, how) in [
        (
            IngressNginx,
            nginx("  use-proxy-protocol: \"true\"\n  use-forwarded-headers: \"true\"\n"),
            Header::Required,
            "use-proxy-protocol: \"true\"",
        ),
        (
            IngressNginx,
            nginx("  use-proxy-protocol: 'false'\n"),
            Header::Refused,
            "\"false\"",
        ),
        (
            IngressNginx,
            nginx("  use-forwarded-headers: \"true\"\n"),
            Header::Refused,
            "default false",
        ),
        (
            IngressNginx,
            nginx("  use-proxy-protocol: \"yes\"\n"),
            Header::Unknown,
            "not true or false",
        ),
        (
            Haproxy,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: haproxy-kubernetes-ingress\ndata:\n  \
             proxy-protocol: \"10.0.0.0/8, 192.168.0.0/16\"\n"
                .into(),
            Header::Required,
            "10.0.0.0/8, 192.168.0.0/16",
        ),
        (
            Haproxy,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: haproxy-kubernetes-ingress\ndata:\n  \
             syslog-server: \"address:stdout, format: raw\"\n"
                .into(),
            Header::Refused,
            "no proxy-protocol",
        ),
        (
            Cilium,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cilium-config\n  namespace: kube-system\n\
             data:\n  enable-gateway-api: \"true\"\n  enable-gateway-api-proxy-protocol: \"true\"\n"
                .into(),
            Header::Required,
            "enable-gateway-api-proxy-protocol: \"true\"",
        ),
        (
            Cilium,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cilium-config\ndata:\n  \
             enable-gateway-api-proxy-protocol: \"false\"\n"
                .into(),
            Header::Refused,
            "\"false\"",
        ),
    ] {
        let v = judge(kind, "ns/cm", &object);
        assert_eq!(v.header, want, "{kind:?} {object}: {v:?}");
        assert!(v.how.contains(how), "{kind:?}: {}", v.how);
        assert!(v.how.starts_with("ConfigMap ns/cm: "), "{}", v.how);
    }
}

fn workload(kind: &str, args: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: {kind}\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      \
         containers:\n        - name: main\n          image: x\n          args:\n{args}"
    )
}

#[test]
fn traefik_entry_point_args() {
    for (args, want, how) in [
        (
            "            - --entryPoints.web.address=:8000/tcp\n            - \
             --entryPoints.websecure.address=:8443/tcp\n            - \
             --entryPoints.websecure.proxyProtocol.trustedIPs=10.0.0.0/8,127.0.0.1/32\n",
            Header::Optional,
            "--entryPoints.websecure.proxyProtocol.trustedIPs=10.0.0.0/8,127.0.0.1/32",
        ),
        (
            "            - --entrypoints.web.proxyprotocol.insecure\n",
            Header::Optional,
            "insecure",
        ),
        (
            "            - --entryPoints.web.proxyProtocol.insecure=false\n            - \
             --entryPoints.web.address=:8000/tcp\n",
            Header::Refused,
            "no --entryPoints",
        ),
        (
            "            - --configFile=/config/traefik.yml\n",
            Header::Unknown,
            "--configFile=/config/traefik.yml",
        ),
    ] {
        for kind in ["Deployment", "DaemonSet"] {
            let config = if kind == "DaemonSet" {
                "daemonset/traefik/traefik"
            } else {
                "traefik/traefik"
            };
            let v = judge(ControllerKind::Traefik, config, &workload(kind, args));
            assert_eq!(v.header, want, "{args}: {v:?}");
            assert!(v.how.contains(how), "{}", v.how);
            assert!(
                v.how.starts_with(&format!("{kind} traefik/traefik")),
                "{}",
                v.how
            );
        }
    }
}

#[test]
fn contour_serve_flag() {
    let serve = |extra: &str| {
        workload(
            "Deployment",
            &format!(
                "            - serve\n            - --incluster\n            - \
                 --xds-address=0.0.0.0\n{extra}"
            ),
        )
    };
    let v = judge(
        ControllerKind::Contour,
        "projectcontour/contour",
        &serve("            - --use-proxy-protocol\n"),
    );
    assert_eq!(v.header, Header::Required, "{v:?}");
    let v = judge(
        ControllerKind::Contour,
        "projectcontour/contour",
        &serve(""),
    );
    assert_eq!(v.header, Header::Refused, "{v:?}");
}

#[test]
fn envoy_gateway_client_traffic_policy() {
    let ctp = |spec: &str| {
        format!(
            "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: ClientTrafficPolicy\nmetadata:\n  \
             name: enable-proxy-protocol-policy\n  namespace: default\nspec:\n  targetRefs:\n    \
             - group: gateway.networking.k8s.io\n      kind: Gateway\n      name: eg\n{spec}"
        )
    };
    for (spec, want) in [
        ("  proxyProtocol:\n    optional: true\n", Header::Optional),
        ("  proxyProtocol: {}\n", Header::Required),
        ("  proxyProtocol:\n    optional: false\n", Header::Required),
        ("  enableProxyProtocol: true\n", Header::Required),
        ("  tcpKeepalive:\n    idleTime: 20m\n", Header::Refused),
    ] {
        let v = judge(
            ControllerKind::EnvoyGateway,
            "default/enable-proxy-protocol-policy",
            &ctp(spec),
        );
        assert_eq!(v.header, want, "{spec}: {v:?}");
        assert!(
            v.how.starts_with("ClientTrafficPolicy default/"),
            "{}",
            v.how
        );
    }
}

#[test]
fn nginx_gateway_fabric_nginx_proxy() {
    let np = |spec: &str| {
        format!(
            "apiVersion: gateway.nginx.org/v1alpha2\nkind: NginxProxy\nmetadata:\n  \
             name: ngf-proxy-config\nspec:\n{spec}"
        )
    };
    for (spec, want) in [
        (
            "  rewriteClientIP:\n    mode: ProxyProtocol\n    trustedAddresses:\n      - type: CIDR\n        \
             value: \"10.0.0.0/8\"\n",
            Header::Required,
        ),
        (
            "  rewriteClientIP:\n    mode: XForwardedFor\n    trustedAddresses:\n      - type: CIDR\n        \
             value: \"10.0.0.0/8\"\n",
            Header::Refused,
        ),
        ("  logging:\n    errorLevel: info\n", Header::Refused),
    ] {
        let v = judge(
            ControllerKind::NginxGatewayFabric,
            "nginx-gateway/ngf-proxy-config",
            &np(spec),
        );
        assert_eq!(v.header, want, "{spec}: {v:?}");
    }
}

#[test]
fn a_missing_object_says_nothing() {
    let r = ConfigRef::parse(ControllerKind::IngressNginx, "ingress-nginx/typo").unwrap();
    let v = verdict(&r, None);
    assert_eq!(v.header, Header::Unknown);
    assert_eq!(v.how, "ConfigMap ingress-nginx/typo not found");
}

#[test]
fn config_refs() {
    let r = ConfigRef::parse(ControllerKind::Traefik, "daemonset/traefik/traefik").unwrap();
    assert_eq!(r.resource.kind, "DaemonSet");
    let r = ConfigRef::parse(ControllerKind::EnvoyGateway, "default/p").unwrap();
    assert_eq!(
        (r.resource.group, r.resource.plural),
        ("gateway.envoyproxy.io", "clienttrafficpolicies")
    );
    for (kind, s, err) in [
        (
            ControllerKind::IngressNginx,
            "daemonset/a/b",
            "not NAMESPACE/NAME",
        ),
        (ControllerKind::Traefik, "a", "[daemonset/]NAMESPACE/NAME"),
        (ControllerKind::IngressNginx, "A/b", "not a namespace"),
    ] {
        let got = ConfigRef::parse(kind, s).unwrap_err();
        assert!(got.contains(err), "{s}: {got}");
    }
    assert!(ControllerKind::parse("nginx")
        .unwrap_err()
        .contains("ingress-nginx, haproxy"));
    for k in ControllerKind::ALL {
        assert_eq!(ControllerKind::parse(k.as_str()), Ok(k));
    }
}

#[test]
fn choices() {
    let v = |header| Verdict::new(header, "x");
    fn facts(verdict: &Verdict, ipmode_proxy: bool) -> Facts<'_> {
        Facts {
            verdict,
            ipmode_proxy,
        }
    }
    for (pick, header, ipmode, want) in [
        (AnswerPick::Auto, Header::Required, false, Route::Relay),
        (AnswerPick::Auto, Header::Optional, false, Route::Direct),
        (AnswerPick::Auto, Header::Refused, false, Route::Direct),
        (AnswerPick::Auto, Header::Unknown, false, Route::Relay),
        (AnswerPick::Auto, Header::Required, true, Route::Skip),
        (AnswerPick::Relay, Header::Refused, true, Route::Relay),
        (AnswerPick::Direct, Header::Required, false, Route::Direct),
        (AnswerPick::Skip, Header::Unknown, false, Route::Skip),
    ] {
        let verdict = v(header);
        let (got, why) = choose(pick, &facts(&verdict, ipmode));
        assert_eq!(got, want, "{pick:?} {header:?} ipmode={ipmode}: {why}");
        assert!(!why.is_empty());
    }
    let unknown = v(Header::Unknown);
    let (_, why) = choose(AnswerPick::Auto, &facts(&unknown, false));
    assert!(why.contains("unknown"), "{why}");
}
