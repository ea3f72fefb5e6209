//! The idle-watch detector (`--watch-idle-timeout`).

use super::*;

// ---- The idle-watch detector (--watch-idle-timeout) ----

const INGRESSES: &str = "/apis/networking.k8s.io/v1/ingresses?";
/// The Ingress watch as it is opened, up to its resourceVersion.
const INGRESS_WATCH: &str = "/apis/networking.k8s.io/v1/ingresses?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=";

/// [`http_get`] on the real clock: with the clock paused the runtime would move it on while
/// waiting for the socket, firing the controller's timers in between.
async fn http_get_unpaused(port: u16, path: &str) -> (u16, String) {
    tokio::time::resume();
    let got = http_get(port, path).await;
    tokio::time::pause();
    got
}

/// The controller with a 2-minute --watch-idle-timeout and its admin port (for /readyz and
/// /metrics).
fn start_idle_2m(state: State) -> (Running, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let flags = [
        "--leader-elect=false",
        "--listen-health",
        &listen,
        "--watch-idle-timeout",
        "2m",
    ];
    (start(state, &flags), port)
}

fn restarts_line(metrics: &str) -> Option<&str> {
    metrics
        .lines()
        .find(|l| l.starts_with("ouroboros_controller_watch_restarts_total{kind=\"Ingress\"}"))
}

fn ingress_calls(api: &Routed) -> Vec<String> {
    api.calls()
        .into_iter()
        .filter(|(m, u)| m == "GET" && u.starts_with(INGRESSES))
        .map(|(_, u)| u)
        .collect()
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

// Paused clock: minutes of watch silence pass in virtual time.
#[tokio::test(start_paused = true)]
async fn a_quiet_watch_is_relisted_and_what_was_deleted_meanwhile_goes_away() {
    let (r, port) = start_idle_2m(state_with(vec![
        ingress("shop", &["shop.example.com"]),
        ingress("blog", &["blog.example.com"]),
    ]));
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    // The list arrived just before the first write (the 50 ms debounce).
    let listed = tokio::time::Instant::now();
    assert!(r
        .state
        .lock()
        .unwrap()
        .corefile
        .contains("blog.example.com"));

    // A minute later the API server ends the watch at its timeout, without an event: it is
    // resumed, and that is no sign that events arrive.
    tokio::time::sleep_until(listed + Duration::from_secs(60)).await;
    let tasks = alive_tasks();
    assert_eq!(r.api.release(INGRESS_WATCH, &[]), 1);
    assert!(
        r.api
            .wait_for(5, |a| a.count("GET", INGRESS_WATCH) == 2)
            .await
    );
    // Then the watch dies silently; `blog` is deleted and the watch never says so. The next
    // list is held, so readiness can be seen while it is pending.
    {
        let mut st = r.state.lock().unwrap();
        st.ingresses.retain(|i| i["metadata"]["name"] == "shop");
        st.hold_lists = vec![INGRESS_LIST];
    }
    tokio::time::sleep_until(listed + Duration::from_secs(110)).await;
    assert_eq!(r.api.count("GET", INGRESS_LIST), 1, "not before 2 minutes");
    // Two minutes after the last event (the list), not after the resumed watch.
    tokio::time::sleep_until(listed + Duration::from_secs(121)).await;
    assert_eq!(
        r.api.count("GET", INGRESS_LIST),
        2,
        "relisted: {:#?}",
        r.api.calls()
    );
    let (code, reason) = http_get_unpaused(port, "/readyz").await;
    assert_eq!(
        (code, reason.as_str()),
        (503, "relisting Ingress after 2m without events\n")
    );
    let (_, metrics) = http_get_unpaused(port, "/metrics").await;
    assert_eq!(
        restarts_line(&metrics),
        Some("ouroboros_controller_watch_restarts_total{kind=\"Ingress\"} 1"),
        "{metrics}"
    );
    assert_eq!(
        r.api.count("PUT", COREDNS),
        1,
        "nothing written while relisting"
    );

    // The new list arrives: it holds only `shop`, so `blog` leaves the store and the block.
    r.state.lock().unwrap().hold_lists.clear();
    let fresh = list(
        "networking.k8s.io/v1",
        "IngressList",
        "100",
        vec![ingress("shop", &["shop.example.com"])],
    );
    assert_eq!(r.api.release(INGRESS_LIST, &[fresh]), 1);
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await,
        "{:#?}",
        r.api.calls()
    );
    let corefile = r.state.lock().unwrap().corefile.clone();
    assert!(
        corefile.contains("rewrite name shop.example.com "),
        "{corefile}"
    );
    assert!(!corefile.contains("blog.example.com"), "{corefile}");
    let (code, _) = http_get_unpaused(port, "/readyz").await;
    assert_eq!(code, 200, "ready again once the new list is in");
    let (_, metrics) = http_get_unpaused(port, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "ouroboros_controller_desired_hostnames 1"),
        "{metrics}"
    );
    // The restart dropped the old stream and spawned nothing (the admin connections end).
    assert!(
        r.api.wait_for(5, |_| alive_tasks() == tasks).await,
        "{} tasks alive, {tasks} before the restart",
        alive_tasks()
    );

    let api = r.shutdown().await;
    let watch = format!("{INGRESS_WATCH}100");
    assert_eq!(
        ingress_calls(&api),
        [INGRESS_LIST, &watch, &watch, INGRESS_LIST, &watch]
    );
    assert_eq!(
        writes(&api),
        [
            ("PUT".to_string(), COREDNS_PUT.to_string()),
            ("PUT".to_string(), COREDNS_PUT.to_string())
        ]
    );
}

/// The sync engine does not hand a relist's unchanged set to the writer: no read, no write.
#[tokio::test(start_paused = true)]
async fn a_relist_that_finds_the_same_objects_writes_nothing() {
    let (r, port) = start_idle_2m(state_with(vec![ingress("shop", &["shop.example.com"])]));
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    let listed = tokio::time::Instant::now();
    const SKIPPED: &str = "ouroboros_controller_syncs_total{mode=\"coredns\",result=\"skipped\"} ";
    let skipped = |metrics: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(SKIPPED))
            .map_or(0, |n| n.parse().unwrap())
    };
    tokio::time::sleep_until(listed + Duration::from_secs(60)).await;
    let before = skipped(&http_get_unpaused(port, "/metrics").await.1);
    tokio::time::sleep_until(listed + Duration::from_secs(125)).await;
    assert_eq!(r.api.count("GET", INGRESS_LIST), 2, "{:#?}", r.api.calls());
    let (code, _) = http_get_unpaused(port, "/readyz").await;
    assert_eq!(code, 200);
    let (_, metrics) = http_get_unpaused(port, "/metrics").await;
    for line in [
        "ouroboros_controller_watch_restarts_total{kind=\"Ingress\"} 1",
        "ouroboros_controller_syncs_total{mode=\"coredns\",result=\"written\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    // The relist's change was computed and found equal to the set written.
    assert_eq!(skipped(&metrics), before + 1, "{metrics}");
    let api = r.shutdown().await;
    assert_eq!(api.count("GET", COREDNS), 1, "only the first sync read");
    assert_eq!(writes(&api), [("PUT".to_string(), COREDNS_PUT.to_string())]);
}

/// An update to fields the controller never reads (labels, other annotations, kubectl's
/// last-applied copy, http paths, status) is computed and found equal: no read, no write. The
/// next real change is written, so the first one was seen and not merely lost.
#[tokio::test]
async fn a_change_to_fields_never_read_writes_nothing() {
    let r = start(
        state_with(vec![ingress("shop", &["shop.example.com"])]),
        &["--leader-elect=false"],
    );
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    let reads = r.api.count("GET", COREDNS);
    let mut noise = ingress("shop", &["shop.example.com"]);
    noise["metadata"]["resourceVersion"] = json!("11");
    noise["metadata"]["labels"] = json!({"app": "shop", "version": "2"});
    noise["metadata"]["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"rules\":[]}}",
        "cert-manager.io/cluster-issuer": "letsencrypt"
    });
    noise["spec"]["tls"][0]["secretName"] = json!("cert-2");
    noise["spec"]["rules"][0]["http"] = json!({"paths": [{"path": "/", "pathType": "Prefix",
        "backend": {"service": {"name": "shop", "port": {"number": 80}}}}]});
    noise["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}});
    r.api
        .deliver(INGRESS_WATCH, json!({"type": "MODIFIED", "object": noise}))
        .await;
    // Well past the 50 ms debounce.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(r.api.count("PUT", COREDNS), 1, "{:#?}", r.api.calls());
    assert_eq!(
        r.api.count("GET", COREDNS),
        reads,
        "the sink was not even called"
    );
    let mut renamed = ingress("shop", &["shop.example.com", "new.example.com"]);
    renamed["metadata"]["resourceVersion"] = json!("12");
    r.api
        .deliver(
            INGRESS_WATCH,
            json!({"type": "MODIFIED", "object": renamed}),
        )
        .await;
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await,
        "{:#?}",
        r.api.calls()
    );
    let puts = r.puts();
    let api = r.shutdown().await;
    assert_eq!(writes(&api).len(), 2);
    let corefile = puts[1]["data"]["Corefile"].as_str().unwrap();
    assert!(
        corefile.contains("rewrite name new.example.com "),
        "{corefile}"
    );
}

/// Bookmarks alone, then events alone, keep a watch alive well past the timeout; each ends the
/// held watch (as the API server's timeout would), which is resumed from the resourceVersion
/// they carried.
#[tokio::test(start_paused = true)]
async fn a_watch_with_bookmarks_or_events_is_not_restarted() {
    let (r, port) = start_idle_2m(state_with(vec![ingress("shop", &["shop.example.com"])]));
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    let mut versions = vec![100];
    for rv in 201..=210 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let bookmark = json!({"type": "BOOKMARK", "object": {
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"resourceVersion": rv.to_string()}
        }});
        r.api.deliver(INGRESS_WATCH, bookmark).await;
        versions.push(rv);
    }
    for rv in 301..=305 {
        tokio::time::sleep(Duration::from_secs(90)).await;
        let mut shop = ingress("shop", &["shop.example.com"]);
        shop["metadata"]["resourceVersion"] = json!(rv.to_string());
        r.api
            .deliver(INGRESS_WATCH, json!({"type": "MODIFIED", "object": shop}))
            .await;
        versions.push(rv);
    }
    // The last resumed watch is open.
    assert!(
        r.api
            .wait_for(5, |a| a.count("GET", &format!("{INGRESS_WATCH}305")) == 1)
            .await
    );
    let (_, metrics) = http_get_unpaused(port, "/metrics").await;
    // Exported at 0 from the start (so an alert sees the first restart), and still 0.
    assert_eq!(
        restarts_line(&metrics),
        Some("ouroboros_controller_watch_restarts_total{kind=\"Ingress\"} 0"),
        "{metrics}"
    );
    let api = r.shutdown().await;
    let mut want = vec![INGRESS_LIST.to_string()];
    want.extend(versions.iter().map(|v| format!("{INGRESS_WATCH}{v}")));
    assert_eq!(ingress_calls(&api), want, "one list in 17.5 minutes");
    assert_eq!(api.count("PUT", COREDNS), 1);
}

/// A LoadBalancer Service whose every address reports `ipMode: Proxy` (KEP-1860).
fn proxied_lb(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ouroboros", "resourceVersion": "7"},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.96.1.1", "clusterIPs": ["10.96.1.1"]},
        "status": {"loadBalancer": {"ingress": [
            {"ip": "203.0.113.7", "ipMode": "Proxy"},
            {"ip": "2001:db8::7", "ipMode": "Proxy"}
        ]}}
    })
}

/// traefik's load balancer reports ipMode Proxy: in-cluster clients reach it themselves, so its
/// names leave the block (nginx's stay), with an Event on its Service and the target_skipped
/// gauge; with --skip-proxy-ipmode=false they stay.
#[tokio::test]
async fn a_target_behind_an_ipmode_proxy_load_balancer_is_left_out() {
    const CONTROLLER_LIST: &str =
        "/api/v1/namespaces/ouroboros/services?&fieldSelector=metadata.name%3Dtraefik&limit=500";
    let run = |skip: &'static str| async move {
        let mut st = state_with(vec![
            classed("shop", "nginx", None, &["shop.example.com"]),
            classed("blog", "traefik", None, &["blog.example.com"]),
        ]);
        st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
        st.services = vec![
            service("proxy-traefik", &["10.96.0.60"]),
            proxied_lb("traefik"),
        ];
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let r = start(
            st,
            &[
                "--listen-health",
                &listen,
                "--leader-elect=false",
                "--coredns-answer",
                "template",
                "--proxy-service-namespace",
                "ouroboros",
                "--target",
                "name=traefik,service=proxy-traefik,ingress-class=traefik,\
                 ingress-controller=ouroboros/traefik",
                skip,
            ],
        );
        let settled = r
            .api
            .wait_for(10, |a| {
                let last = a.matching("PUT", COREDNS).pop().and_then(|(_, b)| b);
                last.is_some_and(|b| {
                    let text = b["data"]["Corefile"].as_str().unwrap_or_default();
                    text.contains("shop")
                        && text.contains("blog") != (skip == "--skip-proxy-ipmode=true")
                })
            })
            .await;
        assert!(settled, "{:#?}", r.api.calls());
        let (_, metrics) = http_get(port, "/metrics").await;
        let corefile = r.state.lock().unwrap().corefile.clone();
        (r.shutdown().await, corefile, metrics)
    };

    let (api, corefile, metrics) = run("--skip-proxy-ipmode=true").await;
    assert!(
        !corefile.contains("blog") && corefile.contains("10.96.0.53"),
        "{corefile}"
    );
    assert!(!corefile.contains("10.96.0.60"), "{corefile}");
    assert_eq!(api.count("GET", CONTROLLER_LIST), 1, "{:#?}", api.calls());
    let ev = api
        .matching("POST", EVENTS)
        .into_iter()
        .filter_map(|(_, b)| b)
        .find(|b| b["reason"] == "HairpinSkipped")
        .expect("a HairpinSkipped Event");
    assert_eq!(
        (
            ev["regarding"]["kind"].as_str(),
            ev["regarding"]["name"].as_str()
        ),
        (Some("Service"), Some("traefik"))
    );
    assert!(
        ev["note"].as_str().unwrap().contains("target traefik"),
        "{ev}"
    );
    for line in [
        "ouroboros_controller_target_skipped{target=\"traefik\"} 1",
        "ouroboros_controller_target_hostnames{target=\"traefik\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }

    // Off: traefik's names are hairpinned whatever its load balancer says; it is not watched.
    let (api, corefile, _) = run("--skip-proxy-ipmode=false").await;
    assert!(
        corefile.contains("blog") && corefile.contains("10.96.0.60"),
        "{corefile}"
    );
    assert_eq!(api.count("GET", CONTROLLER_LIST), 0);
}

/// Source selection through the whole controller: an opted-out Ingress, an excluded namespace
/// and `--ingress-hosts all` decide what the block holds.
#[tokio::test]
async fn opt_out_namespaces_and_rule_hosts_shape_the_block() {
    let mut opted_out = ingress("legacy", &["legacy.example.com"]);
    opted_out["metadata"]["annotations"] = json!({"ouroboros.io/hairpin": "false"});
    let mut staging = ingress("staging", &["staging.example.com"]);
    staging["metadata"]["namespace"] = json!("staging");
    let mut http = ingress("shop", &["shop.example.com"]);
    http["spec"]["rules"] = json!([{"host": "shop.example.com"}, {"host": "plain.example.com"}]);
    let r = start(
        state_with(vec![opted_out, staging, http]),
        &[
            "--leader-elect=false",
            "--exclude-namespace",
            "staging",
            "--ingress-hosts",
            "all",
        ],
    );
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    let corefile = r.state.lock().unwrap().corefile.clone();
    r.shutdown().await;
    let rewritten: Vec<&str> = corefile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rewrite name "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        rewritten,
        ["plain.example.com", "shop.example.com"],
        "{corefile}"
    );
}

/// The Events' bodies, in the order sent, for one method.
fn event_bodies(api: &Routed, method: &str) -> Vec<(String, Value)> {
    api.matching(method, EVENTS)
        .into_iter()
        .map(|(u, b)| (u, b.expect("an Event request has a body")))
        .collect()
}

/// Two conflicts on one Ingress (another host lost, to another winner) are two Events, each
/// with its own note; the second conflict going away and coming back is a true repeat, counted
/// up on its own Event (not on the first).
#[tokio::test]
async fn each_conflict_message_is_its_own_event_and_a_repeat_counts_up() {
    const INGRESS_WATCH: &str = "/apis/networking.k8s.io/v1/ingresses?&watch=true";
    let mut st = state_with(vec![
        classed(
            "shop",
            "nginx",
            None,
            &["shop.example.com", "www.example.com"],
        ),
        classed("shop-traefik", "traefik", None, &["shop.example.com"]),
    ]);
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![service("proxy-traefik", &["10.96.0.60"])];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            "name=traefik,service=proxy-traefik,ingress-class=traefik",
        ],
    );
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 1).await);
    let mut www = classed("www-traefik", "traefik", None, &["www.example.com"]);
    www["metadata"]["resourceVersion"] = json!("11");
    let puts = |a: &Routed| a.count("PUT", COREDNS);
    let step = |kind: &'static str, rv: &'static str| {
        let mut o = www.clone();
        o["metadata"]["resourceVersion"] = json!(rv);
        json!({"type": kind, "object": o})
    };
    r.api.deliver(INGRESS_WATCH, step("ADDED", "11")).await;
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 2).await);
    // Gone (www goes back to nginx's proxy: a write), then back: the same loss again.
    let before = puts(&r.api);
    r.api.deliver(INGRESS_WATCH, step("DELETED", "12")).await;
    assert!(r.api.wait_for(10, |a| puts(a) > before).await);
    r.api.deliver(INGRESS_WATCH, step("ADDED", "13")).await;
    assert!(
        r.api.wait_for(10, |a| a.count("PATCH", EVENTS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api = r.shutdown().await;

    let created = event_bodies(&api, "POST");
    assert_eq!(created.len(), 2, "{created:#?}");
    for (uri, ev) in &created {
        assert_eq!(uri, "/apis/events.k8s.io/v1/namespaces/web/events?");
        assert_eq!(ev["reason"], "HostnameConflict");
        assert_eq!(ev["type"], "Warning");
        assert_eq!(ev["regarding"]["name"], "shop");
        assert_eq!(ev["reportingController"], "ouroboros-controller");
    }
    let notes: Vec<&str> = created
        .iter()
        .map(|(_, e)| e["note"].as_str().unwrap())
        .collect();
    assert_eq!(
        notes,
        [
            "not hairpinned through target default: shop.example.com goes to target traefik \
             through Ingress web/shop-traefik; set the ouroboros.io/priority annotation (higher \
             wins) to choose",
            "not hairpinned through target default: www.example.com goes to target traefik \
             through Ingress web/www-traefik; set the ouroboros.io/priority annotation (higher \
             wins) to choose",
        ]
    );
    let second = created[1].1["metadata"]["name"].as_str().unwrap();
    let repeats = event_bodies(&api, "PATCH");
    assert_eq!(repeats.len(), 1, "{repeats:#?}");
    assert_eq!(
        repeats[0].0,
        format!("/apis/events.k8s.io/v1/namespaces/web/events/{second}?")
    );
    let series = &repeats[0].1["series"];
    assert_eq!(series["count"], 2, "{:#?}", repeats[0].1);
    assert!(series["lastObservedTime"].is_string());
    assert_eq!(
        repeats[0].1.as_object().unwrap().len(),
        1,
        "only the series changes: the API refuses a changed note"
    );
}

/// A target's names coming back after `ipMode: Proxy` went away is a `HairpinRestored` Event
/// (Normal) of its own, not a repeat of the skip; the skip seen again counts up its own Event.
#[tokio::test]
async fn a_target_hairpinned_again_gets_its_own_event() {
    const TRAEFIK_WATCH: &str =
        "watch=true&timeoutSeconds=290&fieldSelector=metadata.name%3Dtraefik";
    let mut st = state_with(vec![
        classed("shop", "nginx", None, &["shop.example.com"]),
        classed("blog", "traefik", None, &["blog.example.com"]),
    ]);
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![
        service("proxy-traefik", &["10.96.0.60"]),
        proxied_lb("traefik"),
    ];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            "name=traefik,service=proxy-traefik,ingress-class=traefik,\
             ingress-controller=ouroboros/traefik",
        ],
    );
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 1).await);
    let mut vip = proxied_lb("traefik");
    vip["metadata"]["resourceVersion"] = json!("8");
    vip["status"]["loadBalancer"]["ingress"][0]["ipMode"] = json!("VIP");
    r.api
        .deliver(TRAEFIK_WATCH, json!({"type": "MODIFIED", "object": vip}))
        .await;
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 2).await);
    let mut proxied = proxied_lb("traefik");
    proxied["metadata"]["resourceVersion"] = json!("9");
    r.api
        .deliver(
            TRAEFIK_WATCH,
            json!({"type": "MODIFIED", "object": proxied}),
        )
        .await;
    assert!(r.api.wait_for(10, |a| a.count("PATCH", EVENTS) >= 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api = r.shutdown().await;

    let created = event_bodies(&api, "POST");
    let seen: Vec<(&str, &str, &str)> = created
        .iter()
        .map(|(u, e)| {
            assert_eq!(u, "/apis/events.k8s.io/v1/namespaces/ouroboros/events?");
            assert_eq!(e["regarding"]["name"], "traefik");
            (
                e["reason"].as_str().unwrap(),
                e["type"].as_str().unwrap(),
                e["note"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "HairpinSkipped",
                "Warning",
                "every load-balancer address reports ipMode: Proxy (KEP-1860), so in-cluster \
                 clients of target traefik go through the load balancer and ouroboros leaves its \
                 names out (--skip-proxy-ipmode=false keeps them)"
            ),
            (
                "HairpinRestored",
                "Normal",
                "not every load-balancer address reports ipMode: Proxy any more: ouroboros \
                 hairpins the names of target traefik again"
            ),
        ]
    );
    let first = created[0].1["metadata"]["name"].as_str().unwrap();
    let repeats = event_bodies(&api, "PATCH");
    assert_eq!(repeats.len(), 1, "{repeats:#?}");
    assert_eq!(
        repeats[0].0,
        format!("/apis/events.k8s.io/v1/namespaces/ouroboros/events/{first}?")
    );
    assert_eq!(repeats[0].1["series"]["count"], 2);
}

/// One Ingress with `n` hosts h0..h(n-1).example.com.
fn many(n: usize) -> Value {
    let hosts: Vec<String> = (0..n).map(|i| format!("h{i}.example.com")).collect();
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    ingress("shop", &hosts)
}

/// The Ingress `shop` now has `n` hosts (on the watch, and for any relist).
async fn shrink_to(r: &Running, n: usize, rv: u64) {
    let mut o = many(n);
    o["metadata"]["resourceVersion"] = json!(rv.to_string());
    r.state.lock().unwrap().ingresses = vec![o.clone()];
    r.api
        .deliver(
            "/apis/networking.k8s.io/v1/ingresses?&watch=true",
            json!({"type": "MODIFIED", "object": o}),
        )
        .await;
}

fn hosts_in(corefile: &str) -> usize {
    corefile.matches(".example.com").count()
}

/// A change that removes 10 of 12 hosts is held: the block keeps the 12, a RemovalHeld Event on
/// the ConfigMap, the held-hostnames metric and a /readyz cause say so. Another set meanwhile
/// starts the hold again; the set written is the one that stayed the same for 5 minutes.
#[tokio::test(start_paused = true)]
async fn a_mass_removal_is_held_until_the_same_set_stays_for_the_hold_time() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let flags = [
        "--leader-elect=false",
        "--listen-health",
        &listen,
        "--resync",
        "1h",
        "--watch-idle-timeout",
        "0",
    ];
    let r = start(state_with(vec![many(12)]), &flags);
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    assert_eq!(hosts_in(&r.state.lock().unwrap().corefile), 12);

    shrink_to(&r, 2, 11).await;
    assert!(r.api.wait_for(10, |a| a.count("POST", EVENTS) >= 1).await);
    tokio::time::sleep(Duration::from_secs(240)).await;
    assert_eq!(r.api.count("PUT", COREDNS), 1, "held 4 minutes in");
    assert_eq!(
        hosts_in(&r.state.lock().unwrap().corefile),
        12,
        "old block kept"
    );
    let (code, ready) = http_get(port, "/readyz").await;
    assert_eq!(
        (code, ready.as_str()),
        (
            503,
            "removal-held: a write that removes 10 of 12 hostnames is held\n"
        )
    );
    let (_, metrics) = http_get(port, "/metrics").await;
    for line in [
        "ouroboros_controller_removal_held_hostnames 10",
        "ouroboros_controller_removal_holds_total 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }

    // Another set: the hold starts again, so 5 minutes after the first change nothing is written.
    shrink_to(&r, 1, 12).await;
    tokio::time::sleep(Duration::from_secs(240)).await;
    assert_eq!(r.api.count("PUT", COREDNS), 1, "the hold restarted");
    tokio::time::sleep(Duration::from_secs(65)).await;
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await);
    assert_eq!(hosts_in(&r.state.lock().unwrap().corefile), 1);
    let (code, _) = http_get(port, "/readyz").await;
    assert_eq!(code, 200);
    let (_, metrics) = http_get(port, "/metrics").await;
    for line in [
        "ouroboros_controller_removal_held_hostnames 0",
        "ouroboros_controller_removal_holds_total 2",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    let api = r.shutdown().await;
    assert_eq!(api.count("PUT", COREDNS), 2, "{:#?}", api.calls());
    let created = event_bodies(&api, "POST");
    let held: Vec<(&str, &str, &str)> = created
        .iter()
        .map(|(u, e)| {
            assert_eq!(u, "/apis/events.k8s.io/v1/namespaces/kube-system/events?");
            (
                e["reason"].as_str().unwrap(),
                e["regarding"]["name"].as_str().unwrap(),
                e["note"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(held.len(), 2, "one a held set: {created:#?}");
    assert_eq!(held[0].0, "RemovalHeld");
    assert_eq!(held[0].1, "coredns");
    assert!(
        held[0]
            .2
            .starts_with("a write would remove 10 of the 12 hostnames"),
        "{}",
        held[0].2
    );
    assert!(
        held[1]
            .2
            .starts_with("a write would remove 11 of the 12 hostnames"),
        "{}",
        held[1].2
    );
}

/// With --removal-guard-hold=0s the same removal is written at once, with no Event.
#[tokio::test]
async fn a_zero_hold_writes_a_mass_removal_at_once() {
    let r = start(
        state_with(vec![many(12)]),
        &["--leader-elect=false", "--removal-guard-hold=0s"],
    );
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    shrink_to(&r, 2, 11).await;
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 2).await);
    assert_eq!(hosts_in(&r.state.lock().unwrap().corefile), 2);
    let api = r.shutdown().await;
    assert_eq!(api.count("POST", EVENTS), 0);
}

fn list_failed() -> Answer {
    Answer::Json(
        500,
        status(500, "InternalError", "etcdserver: request timed out"),
    )
}

/// An initial Ingress list that keeps failing writes nothing, and /readyz says why; the first
/// list that succeeds is written.
#[tokio::test(start_paused = true)]
async fn an_initial_list_that_fails_writes_nothing() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.ingress_lists = (0..4).map(|_| list_failed()).collect();
    let r = start(st, &["--leader-elect=false", "--listen-health", &listen]);
    assert!(
        r.api
            .wait_for(60, |a| a.count("GET", INGRESS_LIST) >= 4)
            .await,
        "{:#?}",
        r.api.calls()
    );
    assert_eq!(
        r.api.count("PUT", COREDNS),
        0,
        "nothing written on a failed list"
    );
    assert_eq!(r.api.count("GET", COREDNS), 0, "nothing even read");
    let (code, why) = http_get(port, "/readyz").await;
    assert_eq!(
        (code, why.as_str()),
        (
            503,
            "syncing: waiting for the initial list of every watched kind\n"
        )
    );
    assert!(r.api.wait_for(60, |a| a.count("PUT", COREDNS) >= 1).await);
    assert!(r
        .state
        .lock()
        .unwrap()
        .corefile
        .contains("shop.example.com"));
    r.shutdown().await;
}

/// A watch that must list again (410 Gone) and whose new list fails, then comes back partial
/// (the second page fails), never empties the block: the store keeps the last complete list
/// until a new one is complete, so a sync meanwhile (the resync) writes no host away.
#[tokio::test(start_paused = true)]
async fn a_relist_that_fails_or_comes_back_partial_removes_nothing() {
    const INGRESS_WATCH: &str = "/apis/networking.k8s.io/v1/ingresses?&watch=true";
    let ingresses = vec![
        ingress("shop", &["shop.example.com"]),
        ingress("blog", &["blog.example.com"]),
    ];
    let r = start(
        state_with(ingresses.clone()),
        &[
            "--leader-elect=false",
            "--resync",
            "1m",
            "--watch-idle-timeout",
            "0",
        ],
    );
    assert!(r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await);
    let mut first_page = list(
        "networking.k8s.io/v1",
        "IngressList",
        "",
        vec![ingresses[0].clone()],
    );
    first_page["metadata"]["continue"] = json!("page-2");
    r.state.lock().unwrap().ingress_lists = vec![
        list_failed(),
        list_failed(),
        Answer::Json(200, first_page),
        list_failed(),
        Answer::Hold,
    ];
    let gone =
        json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")});
    r.api.deliver(INGRESS_WATCH, gone).await;
    assert!(
        r.api
            .wait_for(60, |a| a.count("GET", "&continue=page-2") >= 1)
            .await,
        "the partial list was read: {:#?}",
        r.api.calls()
    );
    // The next list hangs, so the store is as the failures left it when the resync (1m)
    // computes and writes the set: the block must still hold both hosts.
    assert!(
        r.api
            .wait_for(60, |a| a.count("GET", INGRESS_LIST) >= 5)
            .await
    );
    let reads = r.api.count("GET", COREDNS);
    tokio::time::sleep(Duration::from_secs(70)).await;
    assert!(
        r.api.count("GET", COREDNS) > reads,
        "the resync read the ConfigMap"
    );
    let corefile = r.state.lock().unwrap().corefile.clone();
    let api = r.shutdown().await;
    assert!(
        corefile.contains("shop.example.com") && corefile.contains("blog.example.com"),
        "{corefile}"
    );
    assert_eq!(api.count("PUT", COREDNS), 1, "{:#?}", api.calls());
}

/// ingress-nginx's ConfigMap as its users write it, with `use-proxy-protocol` set to `on`.
fn nginx_config(on: &str, rv: u64) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ingress-nginx-controller", "namespace": "ouroboros",
                     "resourceVersion": rv.to_string()},
        "data": {"use-proxy-protocol": on, "use-forwarded-headers": "true"}
    })
}

/// The last Corefile written.
fn last_corefile(a: &Routed) -> String {
    a.matching("PUT", COREDNS)
        .pop()
        .and_then(|(_, b)| b)
        .and_then(|b| b["data"]["Corefile"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The controller answering with templates, the proxy at 10.96.0.53, the default target's
/// ingress controller Service `ouroboros/ingress-nginx-controller`, and `extra` flags.
fn start_auto(mut st: State, extra: &[&str]) -> Running {
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    let mut flags = vec![
        "--leader-elect=false",
        "--coredns-answer",
        "template",
        "--proxy-service-namespace",
        "ouroboros",
        "--ingress-controller-service",
        "ouroboros/ingress-nginx-controller",
    ];
    flags.extend_from_slice(extra);
    start(st, &flags)
}

/// Asserts that the default target's answer metric is 1 on `picked` and 0 on the others.
async fn assert_answer_metric(port: u16, picked: &str) {
    let (_, metrics) = http_get(port, "/metrics").await;
    for answer in ["relay", "direct", "skip"] {
        let line = format!(
            "ouroboros_controller_target_answer{{target=\"default\",answer=\"{answer}\"}} {}",
            u8::from(answer == picked)
        );
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
}

/// Whether the `n`th write of the CoreDNS ConfigMap has been made, answering with `ip`.
fn wrote(n: usize, ip: &'static str) -> impl Fn(&Routed) -> bool {
    move |a: &Routed| a.count("PUT", COREDNS) == n && last_corefile(a).contains(ip)
}

/// Asserts that the object at the path ending in `suffix` was read before the first write.
fn read_before_the_first_write(api: &Routed, suffix: &str) {
    let calls = api.calls();
    let read_at = calls
        .iter()
        .position(|(m, u)| m == "GET" && u.ends_with(suffix))
        .unwrap_or_else(|| panic!("no read of {suffix}: {calls:#?}"));
    let put_at = calls.iter().position(|(m, _)| m == "PUT").unwrap();
    assert!(read_at < put_at, "{suffix} read before the first write");
}

/// `--answer auto` with ingress-nginx's ConfigMap: the header is required, so the names go to
/// the proxy, read before the first write (one write); `use-proxy-protocol` flipped to false
/// answers them with the ingress controller Service's ClusterIPs in exactly one more write,
/// listed by name (no `get` on it); flipped back, one more.
#[tokio::test]
async fn auto_follows_the_ingress_nginx_configmap_one_write_per_flip() {
    const CONFIG_WATCH: &str = "/api/v1/namespaces/ouroboros/configmaps?&watch=true";
    const CONTROLLER_LIST: &str = "/api/v1/namespaces/ouroboros/services?&fieldSelector=\
         metadata.name%3Dingress-nginx-controller";
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.services = vec![service("ingress-nginx-controller", &["10.96.7.7"])];
    st.configmaps = vec![nginx_config("true", 3)];
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let r = start_auto(
        st,
        &[
            "--listen-health",
            &listen,
            "--ingress-controller-kind",
            "ingress-nginx",
            "--ingress-controller-config",
            "ouroboros/ingress-nginx-controller",
        ],
    );
    assert!(
        r.api.wait_for(10, wrote(1, "10.96.0.53")).await,
        "{:#?}",
        r.api.calls()
    );
    assert_answer_metric(port, "relay").await;
    let flip = |on: &'static str, rv: u64| {
        let event = json!({"type": "MODIFIED", "object": nginx_config(on, rv)});
        r.api.deliver(CONFIG_WATCH, event)
    };
    read_before_the_first_write(&r.api, "/configmaps/ingress-nginx-controller");

    flip("false", 4).await;
    assert!(
        r.api.wait_for(10, wrote(2, "10.96.7.7")).await,
        "{:#?}",
        r.api.calls()
    );
    let direct = last_corefile(&r.api);
    assert!(!direct.contains("10.96.0.53"), "{direct}");
    assert!(r.api.count("GET", CONTROLLER_LIST) >= 1);
    assert_answer_metric(port, "direct").await;

    // An edit that keeps the verdict writes nothing.
    flip("False", 5).await;
    flip("true", 6).await;
    assert!(
        r.api.wait_for(10, wrote(3, "10.96.0.53")).await,
        "{:#?}",
        r.api.calls()
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let api = r.shutdown().await;
    assert_eq!(
        api.count("PUT", COREDNS),
        3,
        "one write per flip: {:#?}",
        api.calls()
    );
    assert_eq!(
        api.count("GET", "/services/ingress-nginx-controller"),
        0,
        "the ingress controller Service is listed by name, never read with get"
    );
}

/// An ingress controller stand-in on 127.0.0.1: answers `HTTP/1.1 200` when it is happy with
/// what came, `400` to a PROXY header it does not expect (as nginx does), and closes on a
/// connection without the header it requires. `requires` switches it while it runs.
async fn header_listener(requires: Arc<std::sync::atomic::AtomicBool>) -> u16 {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let requires = requires.load(Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 512];
                let n = c.read(&mut buf).await.unwrap_or(0);
                let headed = buf[..n].starts_with(b"PROXY ");
                let reply: &[u8] = match (requires, headed) {
                    (true, false) => return,
                    (false, true) => b"HTTP/1.1 400 Bad Request\r\n\r\n",
                    _ => b"HTTP/1.1 200 OK\r\n\r\n",
                };
                let _ = c.write_all(reply).await;
            });
        }
    });
    port
}

/// The ingress controller Service on 127.0.0.1 with `port` named `http` (so it is knocked on
/// with HTTP there).
fn probed_service(port: u16, rv: u64) -> Value {
    let mut svc = service("ingress-nginx-controller", &["127.0.0.1"]);
    svc["metadata"]["resourceVersion"] = json!(rv.to_string());
    svc["spec"]["ports"] = json!([{"name": "http", "port": port, "protocol": "TCP"}]);
    svc
}

/// `--ingress-controller-kind probe`: the Service is read and knocked on before the first
/// write (a listener that requires the header: relay); once it stops requiring it, the next
/// resync answers directly in exactly one more write; the Service moved to a port that
/// requires it again, its watch relays in one more; resyncs that find the same verdict write
/// nothing.
#[tokio::test]
async fn probe_follows_the_ingress_controller_service_one_write_per_flip() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const SERVICE_WATCH: &str =
        "watch=true&timeoutSeconds=290&fieldSelector=metadata.name%3Dingress-nginx-controller";
    let first = Arc::new(AtomicBool::new(true));
    let port = header_listener(first.clone()).await;
    let other = header_listener(Arc::new(AtomicBool::new(true))).await;
    let mut st = state_with(vec![ingress("shop", &["shop.example.com"])]);
    st.services = vec![probed_service(port, 100)];
    let r = start_auto(
        st,
        &[
            "--ingress-controller-kind",
            "probe",
            "--skip-proxy-ipmode=false",
            "--resync",
            "2s",
        ],
    );
    assert!(
        r.api.wait_for(10, wrote(1, "10.96.0.53")).await,
        "{:#?}",
        r.api.calls()
    );
    read_before_the_first_write(&r.api, "/services/ingress-nginx-controller");

    // No longer requires the header: the next resync knocks and answers directly.
    first.store(false, Ordering::SeqCst);
    assert!(
        r.api.wait_for(10, wrote(2, "127.0.0.1")).await,
        "{:#?}",
        r.api.calls()
    );
    assert!(!last_corefile(&r.api).contains("10.96.0.53"));

    // The Service moves to a port whose listener requires it: its watch relays again.
    let moved = json!({"type": "MODIFIED", "object": probed_service(other, 101)});
    r.state.lock().unwrap().services = vec![probed_service(other, 101)];
    r.api.deliver(SERVICE_WATCH, moved).await;
    assert!(
        r.api.wait_for(10, wrote(3, "10.96.0.53")).await,
        "{:#?}",
        r.api.calls()
    );
    // Two more resyncs knock again and find the same: nothing written.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let api = r.shutdown().await;
    assert_eq!(
        api.count("PUT", COREDNS),
        3,
        "one write per flip: {:#?}",
        api.calls()
    );
}

/// `answer=direct` answers a target's names with its ingress controller Service's ClusterIPs
/// (dual-stack: both); `answer=skip` leaves its names out while the others stay.
#[tokio::test]
async fn direct_answers_the_ingress_controller_and_skip_leaves_names_out() {
    let mut st = state_with(vec![
        classed("shop", "nginx", None, &["shop.example.com"]),
        classed("blog", "traefik", None, &["blog.example.com"]),
        classed("wiki", "internal", None, &["wiki.example.com"]),
    ]);
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![
        service("proxy-traefik", &["10.96.0.60"]),
        service("traefik", &["10.96.9.9", "fd00::9"]),
        service("proxy-internal", &["10.96.0.61"]),
    ];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            "name=traefik,service=proxy-traefik,ingress-class=traefik,answer=direct,\
             ingress-controller=ouroboros/traefik",
            "--target",
            "name=internal,service=proxy-internal,ingress-class=internal,answer=skip",
        ],
    );
    assert!(
        r.api
            .wait_for(10, |a| last_corefile(a).contains("blog"))
            .await,
        "{:#?}",
        r.api.calls()
    );
    let corefile = last_corefile(&r.api);
    let api = r.shutdown().await;
    assert!(
        corefile.contains("10.96.0.53") && corefile.contains("shop"),
        "{corefile}"
    );
    assert!(
        corefile.contains("IN A 10.96.9.9") && corefile.contains("IN AAAA fd00::9"),
        "{corefile}"
    );
    assert!(
        !corefile.contains("10.96.0.60"),
        "not through the traefik proxy: {corefile}"
    );
    assert!(
        !corefile.contains("wiki") && !corefile.contains("10.96.0.61"),
        "{corefile}"
    );
    assert_eq!(api.count("PUT", COREDNS), 1);
}

/// `answer=direct` without the ingress controller Service is refused before any request.
#[tokio::test]
async fn direct_without_the_ingress_controller_service_is_refused_at_start() {
    let r = start(
        state_with(vec![]),
        &["--leader-elect=false", "--answer", "direct"],
    );
    let got = tokio::time::timeout(Duration::from_secs(5), r.task)
        .await
        .unwrap()
        .unwrap();
    let e = got.unwrap_err().to_string();
    assert!(
        e.contains("answer direct") && e.contains("--ingress-controller-service"),
        "{e}"
    );
    assert!(r.api.calls().is_empty(), "{:#?}", r.api.calls());
}

/// Answers every connection with an HTTP status line once it has read the request.
async fn answering_listener(addr: &str) -> (u16, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind(addr).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await;
            });
        }
    });
    (port, task)
}

/// Polls /metrics until `done` holds for it (the deadline is only a safety net).
async fn metrics_until(port: u16, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            drop(s);
            let (_, m) = http_get(port, "/metrics").await;
            if done(&m) {
                return m;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}; metrics now:\n{m}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn probe_lines(metrics: &str) -> Vec<&str> {
    let mut v: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("ouroboros_controller_probe_failing_hosts{")
                || l.starts_with("ouroboros_controller_probe_last_failure_timestamp_seconds{")
        })
        .map(|l| l.rsplit_once(' ').map_or(l, |(series, _)| series))
        .collect();
    v.sort();
    v
}

/// The controller's flags for the probe test: template answers with both addresses given, a
/// probe every second through `dns` to HTTP on `http`.
fn probe_flags<'a>(listen: &'a str, dns: &'a str, http: &'a str) -> Vec<&'a str> {
    vec![
        "--leader-elect=false",
        "--listen-health",
        listen,
        "--coredns-answer",
        "template",
        "--proxy-ip",
        "127.0.0.1,127.0.0.2",
        "--probe-interval",
        "1s",
        "--probe-dns-server",
        dns,
        "--probe-https-port",
        "0",
        "--probe-http-port",
        http,
        "--probe-timeout",
        "1s",
        // The CoreDNS here answers from a hosts file, not from what the controller writes:
        // judge its answers at once, not as a block still propagating.
        "--probe-propagation",
        "0s",
    ]
}

#[tokio::test]
async fn the_probe_counts_results_and_keeps_series_only_for_failing_hosts() {
    let dir = crate::support::temp_dir("probe-controller");
    // Real CoreDNS answers the names: shop and down with the proxy's addresses, wrong with a
    // public one.
    let Some(dns) = crate::peers::probe::hosts_dns(
        dir.path(),
        &[
            ("127.0.0.1", "shop.example.com"),
            ("127.0.0.2", "down.example.com"),
            ("192.0.2.7", "wrong.example.com"),
        ],
    ) else {
        return;
    };
    let (http, _listener) = answering_listener("127.0.0.1:0").await;
    let port = free_port();
    let (listen, dns_addr, http_port) = (
        format!("127.0.0.1:{port}"),
        dns.addr().to_string(),
        http.to_string(),
    );
    let mut wrong = ingress("wrong", &["wrong.example.com"]);
    wrong["metadata"]["resourceVersion"] = json!("11");
    let st = state_with(vec![
        ingress("shop", &["shop.example.com"]),
        ingress("down", &["down.example.com"]),
        wrong.clone(),
    ]);
    let r = start(st, &probe_flags(&listen, &dns_addr, &http_port));
    // shop answers; nothing listens on 127.0.0.2 (refused); wrong is answered publicly.
    let m = metrics_until(port, "the three verdicts counted", |m| {
        [
            "ouroboros_controller_probes_total{target=\"default\",result=\"ok\"}",
            "ouroboros_controller_probes_total{target=\"default\",result=\"refused\"}",
            "ouroboros_controller_probes_total{target=\"default\",result=\"dns-wrong\"}",
        ]
        .iter()
        .all(|s| m.contains(s))
    })
    .await;
    assert_eq!(
        probe_lines(&m),
        [
            "ouroboros_controller_probe_failing_hosts{target=\"default\"}",
            "ouroboros_controller_probe_last_failure_timestamp_seconds{target=\"default\",host=\"down.example.com\",result=\"refused\"}",
            "ouroboros_controller_probe_last_failure_timestamp_seconds{target=\"default\",host=\"wrong.example.com\",result=\"dns-wrong\"}",
        ],
        "{m}"
    );
    assert!(
        m.contains("ouroboros_controller_probe_failing_hosts{target=\"default\"} 2"),
        "{m}"
    );
    // Every result is exported from the start; these two never happened.
    for absent in ["reset", "timeout"] {
        let line = format!(
            "ouroboros_controller_probes_total{{target=\"default\",result=\"{absent}\"}} 0"
        );
        assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
    }
    // The probe is not the controller's own health.
    assert_eq!(http_get(port, "/readyz").await.0, 200);

    // wrong's Ingress goes: its series goes with the next write.
    wrong["metadata"]["resourceVersion"] = json!("12");
    r.api
        .deliver(INGRESS_WATCH, json!({"type": "DELETED", "object": wrong}))
        .await;
    let m = metrics_until(port, "wrong's series removed", |m| {
        !m.contains("host=\"wrong.example.com\"")
    })
    .await;
    assert!(
        m.contains("ouroboros_controller_probe_failing_hosts{target=\"default\"} 1"),
        "{m}"
    );

    // Something answers on 127.0.0.2 now: down recovers and its series goes.
    let (_, _recovered) = answering_listener(&format!("127.0.0.2:{http}")).await;
    let m = metrics_until(port, "down recovered", |m| {
        !m.contains("host=\"down.example.com\"")
    })
    .await;
    assert_eq!(
        probe_lines(&m),
        ["ouroboros_controller_probe_failing_hosts{target=\"default\"}"],
        "{m}"
    );
    assert!(
        m.contains("ouroboros_controller_probe_failing_hosts{target=\"default\"} 0"),
        "{m}"
    );
    r.shutdown().await;
}

const INGRESS_CLASS_WATCH: &str = "/apis/networking.k8s.io/v1/ingressclasses?&watch=true";

/// An IngressClass served by `controller`, the default class when `default`.
fn ingress_class(name: &str, controller: &str, default: bool, rv: u64) -> Value {
    let mut v = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {"name": name, "resourceVersion": rv.to_string()},
        "spec": {"controller": controller}
    });
    if default {
        v["metadata"]["annotations"] =
            json!({"ingressclass.kubernetes.io/is-default-class": "true"});
    }
    v
}

/// Which of `hosts` the A templates of `corefile` answer with `ip` (each template's `match`
/// regex applied to the name).
fn answered_with<'h>(corefile: &str, ip: &str, hosts: &[&'h str]) -> Vec<&'h str> {
    let mut matching = Vec::new();
    for pair in corefile.split("template IN A ").skip(1) {
        // The A template's lines, up to its closing brace (the AAAA one follows).
        let lines: Vec<&str> = pair.lines().take_while(|l| l.trim() != "}").collect();
        if !lines
            .iter()
            .any(|l| l.trim() == format!("answer \"{{{{ .Name }}}} 30 IN A {ip}\""))
        {
            continue;
        }
        for l in &lines {
            if let Some(re) = l.trim().strip_prefix("match ") {
                matching.push(regex::Regex::new(re).unwrap());
            }
        }
    }
    hosts
        .iter()
        .copied()
        .filter(|h| matching.iter().any(|re| re.is_match(&format!("{h}."))))
        .collect()
}

const TRAEFIK: &str = "traefik.io/ingress-controller";
const INGRESS_NGINX: &str = "k8s.io/ingress-nginx";

/// Traefik serves `ingressClassName: nginx`: its hosts go to the traefik target by the
/// IngressClass's `spec.controller`, not to the default proxy by the class name. Each change to
/// the IngressClasses (the controller, a new default class, a deleted one) moves the hosts in
/// exactly one write, and no write ever lacks a host.
#[allow(
    clippy::too_many_lines,
    reason = "one scenario whose steps build on each other"
)]
#[tokio::test]
async fn a_changed_ingress_class_moves_its_hosts_in_one_write() {
    let mut st = state_with(vec![
        classed("shop", "nginx", None, &["shop.example.com"]),
        ingress("old", &["old.example.com"]),
    ]);
    st.ingress_classes = vec![ingress_class("nginx", TRAEFIK, true, 10)];
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![service("proxy-traefik", &["10.96.0.60"])];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            &format!("name=traefik,service=proxy-traefik,ingress-class-controller={TRAEFIK}"),
        ],
    );
    let both = ["old.example.com", "shop.example.com"];
    let mut puts = 1;
    let wait_put = |n: usize| {
        let api = &r.api;
        async move {
            assert!(
                api.wait_for(10, |a| a.count("PUT", COREDNS) >= n).await,
                "{:#?}",
                api.calls()
            );
        }
    };
    wait_put(puts).await;
    let now = || r.state.lock().unwrap().corefile.clone();
    assert_eq!(
        answered_with(&now(), "10.96.0.60", &both),
        both,
        "{}",
        now()
    );
    assert!(
        answered_with(&now(), "10.96.0.53", &both).is_empty(),
        "{}",
        now()
    );

    // The events, what they do, the names then answered by traefik and by the default proxy.
    type Step<'a> = (Vec<Value>, &'a str, &'a [&'a str], &'a [&'a str]);
    let steps: [Step<'_>; 3] = [
        // The class is served by ingress-nginx now: both Ingresses go to the default proxy.
        // `spec.controller` is immutable, so the class is replaced (`kubectl replace --force`:
        // deleted and created again, both within the debounce).
        (
            vec![
                json!({"type": "DELETED",
                    "object": ingress_class("nginx", TRAEFIK, true, 11)}),
                json!({"type": "ADDED",
                    "object": ingress_class("nginx", INGRESS_NGINX, true, 12)}),
            ],
            "the class replaced with another controller",
            &[],
            &both,
        ),
        // A Traefik class becomes the default one: the classless Ingress follows it.
        (
            vec![
                json!({"type": "MODIFIED",
                    "object": ingress_class("nginx", INGRESS_NGINX, false, 13)}),
                json!({"type": "ADDED",
                    "object": ingress_class("traefik", TRAEFIK, true, 14)}),
            ],
            "a new default class",
            &["old.example.com"],
            &["shop.example.com"],
        ),
        // And goes away: no default class, so the classless Ingress is the default proxy's.
        (
            vec![json!({"type": "DELETED",
                "object": ingress_class("traefik", TRAEFIK, true, 15)})],
            "the default class deleted",
            &[],
            &both,
        ),
    ];
    for (events, what, traefik, default) in steps {
        assert_eq!(r.api.release(INGRESS_CLASS_WATCH, &events), 1, "{what}");
        puts += 1;
        wait_put(puts).await;
        // Well past the 50 ms debounce: nothing more is written for this change.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(r.api.count("PUT", COREDNS), puts, "{what}: one write");
        let corefile = now();
        assert_eq!(
            answered_with(&corefile, "10.96.0.60", &both),
            traefik,
            "{what}: {corefile}"
        );
        assert_eq!(
            answered_with(&corefile, "10.96.0.53", &both),
            default,
            "{what}: {corefile}"
        );
    }
    let writes = r.puts();
    let api = r.shutdown().await;
    assert_eq!(writes.len(), 4, "{:#?}", api.calls());
    // Every write answers both names: a move is never a removal then an addition.
    for w in &writes {
        let corefile = w["data"]["Corefile"].as_str().unwrap();
        let mut answered = answered_with(corefile, "10.96.0.60", &both);
        answered.extend(answered_with(corefile, "10.96.0.53", &both));
        answered.sort();
        assert_eq!(answered, both, "{corefile}");
    }
}

/// `answer=direct` with `direct-ip=` and no `ingress-controller=`: the target's names are
/// answered with those addresses, never silently with its proxy's.
#[tokio::test]
async fn a_direct_answer_from_direct_ips_alone_is_not_relayed() {
    let mut st = state_with(vec![
        classed("blog", "traefik", None, &["blog.example.com"]),
        classed("shop", "nginx", None, &["shop.example.com"]),
    ]);
    st.proxy_service = Some(proxy_service(&["10.96.0.53"]));
    st.services = vec![service("proxy-traefik", &["10.96.0.60"])];
    let r = start(
        st,
        &[
            "--leader-elect=false",
            "--coredns-answer",
            "template",
            "--proxy-service-namespace",
            "ouroboros",
            "--target",
            "name=traefik,service=proxy-traefik,ingress-class=traefik,answer=direct,\
             direct-ip=10.43.0.9",
        ],
    );
    assert!(
        r.api.wait_for(10, |a| a.count("PUT", COREDNS) >= 1).await,
        "{:#?}",
        r.api.calls()
    );
    let corefile = r.state.lock().unwrap().corefile.clone();
    let api = r.shutdown().await;
    let hosts = ["blog.example.com", "shop.example.com"];
    let answered = |ip| answered_with(&corefile, ip, &hosts);
    assert_eq!(answered("10.43.0.9"), ["blog.example.com"], "{corefile}");
    assert!(answered("10.96.0.60").is_empty(), "{corefile}");
    assert_eq!(answered("10.96.0.53"), ["shop.example.com"], "{corefile}");
    // The addresses are given: the ingress controller's Service is never read.
    assert_eq!(api.count("GET", "/api/v1/namespaces/traefik"), 0);
}
