//! Who serves a host, against the real API server: an IngressClass's `spec.controller` picks
//! the target of its Ingresses (Traefik 3.6+ serves `ingressClassName: nginx`), and replacing
//! the class with another controller moves its hosts in one write of the real ConfigMap. The
//! chart renders the flags and the RBAC, as `controller_modes.rs` installs it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use super::cluster;
use super::controller_modes::{
    answered_with, assert_no_refusal, configmap_text, run_controller, runtime, writes_during,
    Install, BEGIN,
};
use super::coredns::corefile_fixture;
use super::wait_for;
use crate::support::temp_dir;

const TRAEFIK: &str = "traefik.io/ingress-controller";
const INGRESS_NGINX: &str = "k8s.io/ingress-nginx";

fn ingress_class(controller: &str) -> IngressClass {
    serde_json::from_value(json!({
        "metadata": {"name": "nginx"},
        "spec": {"controller": controller},
    }))
    .unwrap()
}

#[allow(
    clippy::too_many_lines,
    reason = "one scenario whose steps depend on each other"
)]
#[test]
fn the_ingress_class_controller_picks_the_target_and_a_replaced_class_moves_hosts_in_one_write() {
    let Some(cluster) = cluster::shared() else {
        return;
    };
    let release = "icc";
    let (dns, apps) = (format!("{release}-dns"), format!("{release}-apps"));
    let configmap = "coredns-icc";
    let host = "shop.icc.example.com";
    let install = Install::with_own_coredns(
        release,
        configmap,
        &[
            format!("controller.ingressClassControllers={{{INGRESS_NGINX}}}"),
            "proxies[0].name=traefik".into(),
            "proxies[0].target.host=traefik.traefik".into(),
            format!("proxies[0].ingressClassControllers={{{TRAEFIK}}}"),
        ],
    );
    let args = install.controller_args();
    assert!(
        args.contains(&format!("--ingress-class-controller={INGRESS_NGINX}")),
        "{args:?}"
    );
    let dir = temp_dir("ingress-class-controller");
    let rt = runtime();
    let kubeadm = std::fs::read_to_string(corefile_fixture("kubeadm.Corefile")).unwrap();
    let classes = || async { Api::<IngressClass>::all(cluster.admin().await) };
    let (nginx_ip, traefik_ip, mut controller) = rt.block_on(async {
        cluster.ensure_namespace(&dns).await;
        cluster
            .apply_yaml(
                &json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": configmap, "namespace": dns},
                    "data": {"Corefile": kubeadm},
                })
                .to_string(),
            )
            .await;
        install.apply(cluster).await;
        cluster.ensure_namespace(&apps).await;
        // A leftover of an earlier run of this test would hold the name.
        let _ = classes()
            .await
            .delete("nginx", &DeleteParams::default())
            .await;
        classes()
            .await
            .create(&PostParams::default(), &ingress_class(TRAEFIK))
            .await
            .unwrap();
        // Of class nginx, by name.
        cluster
            .apply_yaml(
                &json!({
                    "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                    "metadata": {"name": "shop", "namespace": apps},
                    "spec": {
                        "ingressClassName": "nginx",
                        "tls": [{"hosts": [host], "secretName": "shop-tls"}],
                        "rules": [{"host": host, "http": {"paths": [{
                            "path": "/", "pathType": "Prefix",
                            "backend": {"service": {"name": "web", "port": {"number": 80}}}
                        }]}}],
                    },
                })
                .to_string(),
            )
            .await;
        let traefik_ip = Api::<Service>::namespaced(cluster.admin().await, release)
            .get(&format!("{}-proxy-traefik", install.fullname()))
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .unwrap();
        let nginx_ip = install.proxy_ip(cluster).await;
        let controller = run_controller(cluster, &install, &args, dir.path(), "a")
            .await
            .0;
        (nginx_ip, traefik_ip, controller)
    });
    assert_ne!(nginx_ip, traefik_ip);
    let corefile = |rt: &tokio::runtime::Runtime| {
        rt.block_on(async {
            configmap_text(&cluster.admin().await, &dns, configmap, "Corefile").await
        })
    };

    // Class nginx is Traefik's: the host is the traefik target's, not the main proxy's.
    let first = wait_for(
        "the host answered by the traefik proxy",
        &mut controller,
        Duration::from_secs(60),
        || corefile(&rt).filter(|c| c.contains(BEGIN) && answered_with(c, &traefik_ip, host)),
    );
    assert!(!answered_with(&first, &nginx_ip, host), "{first}");

    // Replaced (spec.controller is immutable) with ingress-nginx's: watched from here, every
    // write of the ConfigMap is seen.
    let writes = rt.block_on(async {
        let replace = async {
            classes()
                .await
                .delete("nginx", &DeleteParams::default())
                .await
                .unwrap();
            classes()
                .await
                .create(&PostParams::default(), &ingress_class(INGRESS_NGINX))
                .await
                .unwrap();
        };
        writes_during(
            &cluster.admin().await,
            (&dns, configmap, "Corefile"),
            replace,
            |text| answered_with(text, &nginx_ip, host),
        )
        .await
    });
    assert_eq!(writes.len(), 1, "one write moves the host: {writes:#?}");
    assert!(answered_with(&writes[0], &nginx_ip, host), "{}", writes[0]);
    assert!(
        !answered_with(&writes[0], &traefik_ip, host),
        "{}",
        writes[0]
    );
    assert!(controller.running(), "{}", controller.tail());
    assert_no_refusal(&controller);
    rt.block_on(async {
        let _ = classes()
            .await
            .delete("nginx", &DeleteParams::default())
            .await;
    });
}
