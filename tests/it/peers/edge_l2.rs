//! `edge --pools` with a layer-2 pool, as the chart installs it, against a real kube-apiserver
//! (the per-address Leases are real Leases, under the chart's Role): two edge "nodes", a
//! client and a backend pod as network namespaces on one bridge. The elected edge puts the
//! address on its interface and announces it; the client reaches it and the backend sees the
//! client's own address in the PROXY header. The holder then dies (the process killed and its
//! link cut, as a node that fails): the other edge takes the Lease and the address, its
//! gratuitous ARP moves the client's neighbour entry to its MAC before the client sends
//! anything, and the client is served again within the stated time.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use super::cluster;
use super::controller_modes::{assert_no_refusal, lease_holder, runtime, Install};
use super::edge_lb::{
    backend, eventually, eventually_replies, pools_file, proxy_at, spawn_edge_in, with_endpoint,
    APPS, RELEASE,
};
use super::netns::{self, Netns};
use super::Process;
use crate::support::temp_dir;

/// The link: the pods' network, where the edge nodes, the backend and the client all are.
const POD_IP: &str = "10.246.1.2";
const CLIENT_IP: &str = "10.246.1.20";
const VIP: &str = "10.246.1.241";
/// A dead holder's Lease expires after 15 s; a standby then takes it within about a second and
/// confirms it with a read. Measured here from the kill to the client's next reply, which also
/// waits for the listener's address and the client's retries.
const FAILOVER_BOUND: Duration = Duration::from_secs(25);

/// The chart with one layer-2 pool on the nodes' eth0.
fn install() -> Install {
    Install::render(
        RELEASE,
        &[
            "edge.enabled=true".into(),
            "edge.loadBalancer.enabled=true".into(),
            "edge.loadBalancer.pools[0].name=lan".into(),
            "edge.loadBalancer.pools[0].addresses={10.246.1.240/29}".into(),
            "edge.loadBalancer.pools[0].l2.interface=eth0".into(),
        ],
    )
}

/// `ns` joined to the bridge in `lan` by a veth whose end in `ns` is eth0 with `cidr`.
fn plug(lan: &Netns, ns: &Netns, port: &str, cidr: &str) {
    netns::ip(&[
        "link", "add", port, "netns", &lan.name, "type", "veth", "peer", "name", "eth0", "netns",
        &ns.name,
    ]);
    lan.ip(&["link", "set", port, "master", "br0", "up"]);
    ns.ip(&["addr", "add", cidr, "dev", "eth0"]);
    ns.ip(&["link", "set", "eth0", "up"]);
}

/// The MAC of `ns`'s eth0.
fn mac(ns: &Netns) -> String {
    let out = ns
        .command("cat")
        .arg("/sys/class/net/eth0/address")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `ip -o addr show dev eth0 to PREFIX` in `ns`: the lines of the addresses in `prefix`.
fn addresses(ns: &Netns, prefix: &str) -> String {
    let out = Command::new("ip")
        .args([
            "-n", &ns.name, "-o", "addr", "show", "dev", "eth0", "to", prefix,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Whether `ns` has the address on its eth0 (as the /32 the holder adds).
fn has_vip(ns: &Netns) -> bool {
    addresses(ns, VIP).contains(&format!("inet {VIP}/32 "))
}

/// Polls `f` every 100 ms for at most `limit`; how long it took.
fn within(
    limit: Duration,
    what: &str,
    logs: &dyn Fn() -> String,
    mut f: impl FnMut() -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        if f() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "{what} not within {limit:?}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the test can run (root, for network namespaces); says why not, and fails under CI.
fn root() -> bool {
    if !netns::available() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "the layer-2 tests need root under CI"
        );
        eprintln!("SKIPPED: the layer-2 tests need root (network namespaces)");
    }
    netns::available()
}

/// The bridge (in namespace `lan`), the two edge nodes, the backend pod and the client on it,
/// and the API server reachable from the nodes at its own address.
fn wire(cluster: &cluster::Cluster) -> [Netns; 5] {
    let tag = format!("l2{}", std::process::id() % 100_000);
    let [lan, a, b, pods, client] =
        ["lan", "a", "b", "pods", "client"].map(|n| Netns::new(&format!("{tag}-{n}")));
    lan.ip(&["link", "add", "br0", "type", "bridge"]);
    lan.ip(&["link", "set", "br0", "up"]);
    plug(&lan, &a, "pa", "10.246.1.11/24");
    plug(&lan, &b, "pb", "10.246.1.12/24");
    plug(&lan, &pods, "pp", &format!("{POD_IP}/24"));
    plug(&lan, &client, "pc", &format!("{CLIENT_IP}/24"));
    backend(&pods, SocketAddr::new(POD_IP.parse().unwrap(), 8443));
    let api: SocketAddr = (cluster.server.trim_start_matches("https://"))
        .parse()
        .unwrap();
    for node in [&a, &b] {
        netns::forward(node.run(|| std::net::TcpListener::bind(api).unwrap()), api);
    }
    [lan, a, b, pods, client]
}

/// The edges' last log lines, for a failure message.
fn logs(edges: &[(&Netns, Option<Process>)]) -> String {
    (edges.iter())
        .filter_map(|(n, p)| p.as_ref().map(|p| format!("--- {}:\n{}", n.name, p.tail())))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Kills edge `holder` with its node (the process, then its link) and waits for the other to
/// take the address over, for its announcement to move `client`'s neighbour entry before the
/// client sends anything, and for the client to be served again, within [`FAILOVER_BOUND`].
fn fail_over(edges: &mut [(&Netns, Option<Process>)], holder: usize, client: &Netns) {
    let other = 1 - holder;
    let other_mac = mac(edges[other].0);
    let vip: SocketAddr = format!("{VIP}:443").parse().unwrap();
    // The holder dies with its node: the process killed, its link cut.
    let dead = edges[holder].1.take().unwrap();
    drop(dead);
    edges[holder].0.ip(&["link", "set", "eth0", "down"]);
    let killed = Instant::now();

    // The other edge takes the Lease and the address...
    let snapshot = || logs(edges);
    let took = within(FAILOVER_BOUND, "the takeover", &snapshot, || {
        has_vip(edges[other].0)
    });
    eprintln!(
        "the address moved {:.1} s after the holder died",
        took.as_secs_f64()
    );
    // ... and its gratuitous ARP moves the client's entry before the client sends anything.
    within(
        Duration::from_secs(3),
        "the client's entry moving to the new holder",
        &snapshot,
        || neighbour(client, VIP).as_deref() == Some(other_mac.as_str()),
    );
    let reply = eventually_replies(client, edges[other].1.as_ref().unwrap(), vip, "v2 ");
    assert!(reply.starts_with(&format!("v2 {CLIENT_IP}:")), "{reply:?}");
    let served_again = killed.elapsed();
    eprintln!(
        "the client was served again {:.1} s after the holder died",
        served_again.as_secs_f64()
    );
    assert!(
        served_again < FAILOVER_BOUND,
        "{served_again:?}\n{}",
        snapshot()
    );
}

#[test]
fn the_elected_edge_announces_the_address_and_another_takes_it_over_when_it_dies() {
    if !root() {
        return;
    }
    let Some(cluster) = cluster::private("edge-l2") else {
        return;
    };
    let install = install();
    let dir = temp_dir("edge-l2");
    let pools = pools_file(&install, dir.path());
    let rt = runtime();
    // Every namespace lives until the end of the test (dropped, they are deleted).
    let [_lan, a, b, _pods, client] = wire(&cluster);
    let kubeconfig = rt.block_on(async {
        install.apply(&cluster).await;
        cluster.ensure_namespace(APPS).await;
        with_endpoint(&cluster, "web", json!({})).await;
        install.edge_kubeconfig(&cluster, dir.path()).await
    });
    let spawn = |node: &Netns, n: &str| {
        let d = dir.path().join(n);
        std::fs::create_dir_all(&d).unwrap();
        spawn_edge_in(node, &install, &pools, &kubeconfig, &d)
    };
    let mut edges = vec![(&a, Some(spawn(&a, "a"))), (&b, Some(spawn(&b, "b")))];
    rt.block_on(eventually(
        &cluster,
        edges[0].1.as_ref().unwrap(),
        "web",
        &proxy_at(VIP),
        "allocation",
    ));

    // One edge holds the address: it alone has it on its interface.
    within(
        Duration::from_secs(30),
        "one holder",
        &|| logs(&edges),
        || has_vip(&a) || has_vip(&b),
    );
    let holder = usize::from(has_vip(&b));
    let other = 1 - holder;
    assert!(
        !has_vip(edges[other].0),
        "both edges have the address\n{}",
        logs(&edges)
    );
    let lease = format!("{}-edge-10-246-1-241", install.fullname());
    let first_identity = rt
        .block_on(lease_holder(&rt.block_on(cluster.admin()), RELEASE, &lease))
        .expect("the address's Lease has a holder");

    // The client reaches it; the backend sees the client's own address; the client's
    // neighbour entry is the holder's MAC.
    let vip: SocketAddr = format!("{VIP}:443").parse().unwrap();
    let reply = eventually_replies(&client, edges[holder].1.as_ref().unwrap(), vip, "v2 ");
    assert!(
        reply.starts_with(&format!("v2 {CLIENT_IP}:")) && reply.ends_with(&format!(" {VIP}:443\n")),
        "{reply:?}"
    );
    let holder_mac = mac(edges[holder].0);
    assert_ne!(holder_mac, mac(edges[other].0));
    assert_eq!(neighbour(&client, VIP), Some(holder_mac.clone()));

    fail_over(&mut edges, holder, &client);
    let identity = rt.block_on(lease_holder(&rt.block_on(cluster.admin()), RELEASE, &lease));
    assert!(
        identity.as_ref().is_some_and(|i| *i != first_identity),
        "the Lease went from {first_identity} to {identity:?}"
    );

    come_back_and_hand_over(&mut edges, holder, &client, &spawn);
    let last = rt.block_on(lease_holder(&rt.block_on(cluster.admin()), RELEASE, &lease));
    assert!(
        last.is_some() && last != identity,
        "the Lease went from {identity:?} to {last:?}"
    );
}

/// The dead node `holder` comes back with the address still on its link (its edge was killed):
/// its new edge takes it off at start while the survivor keeps it. Then the survivor stops
/// (SIGTERM): it takes the address off and releases the Lease, and the new edge takes it over
/// within the lease duration (after the survivor's --shutdown-delay) and serves the client.
fn come_back_and_hand_over(
    edges: &mut [(&Netns, Option<Process>)],
    holder: usize,
    client: &Netns,
    spawn: &dyn Fn(&Netns, &str) -> Process,
) {
    let other = 1 - holder;
    edges[holder].0.ip(&["link", "set", "eth0", "up"]);
    assert!(has_vip(edges[holder].0), "the killed edge left its address");
    edges[holder].1 = Some(spawn(edges[holder].0, "again"));
    within(
        Duration::from_secs(10),
        "the leftover address removed at start",
        &|| logs(edges),
        || !has_vip(edges[holder].0),
    );
    assert!(has_vip(edges[other].0), "the survivor keeps the address");

    let survivor = edges[other].1.take().unwrap();
    survivor.terminate();
    let stopped = Instant::now();
    within(
        Duration::from_secs(20),
        "the address going on shutdown",
        &|| survivor.tail(),
        || !has_vip(edges[other].0),
    );
    within(
        Duration::from_secs(25),
        "the hand-over",
        &|| logs(edges),
        || has_vip(edges[holder].0),
    );
    eprintln!(
        "the restarted edge took the address {:.1} s after the holder was sent SIGTERM",
        stopped.elapsed().as_secs_f64()
    );
    let vip: SocketAddr = format!("{VIP}:443").parse().unwrap();
    let reply = eventually_replies(client, edges[holder].1.as_ref().unwrap(), vip, "v2 ");
    assert!(reply.starts_with(&format!("v2 {CLIENT_IP}:")), "{reply:?}");
    assert_no_refusal(&survivor);
}

/// The MAC `client`'s neighbour cache has for `ip` on eth0, if any.
fn neighbour(client: &Netns, ip: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["-n", &client.name, "neigh", "show", ip, "dev", "eth0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut words = text.split_whitespace();
    words.find(|w| *w == "lladdr")?;
    words.next().map(String::from)
}

/// The host side alone, both families: a holder's add puts the address on the interface at
/// once (IPv6 without DAD: not tentative) and its announcement replaces a neighbour's stale
/// entry for it (a gratuitous ARP, an unsolicited NA with the Override flag); remove takes it
/// off, and removing it again is no error.
#[test]
fn a_holder_adds_announces_and_removes_both_families() {
    use ouroboros::edge::l2::link::{Host, System};
    if !root() {
        return;
    }
    let tag = format!("l2h{}", std::process::id() % 100_000);
    let [holder, client] = ["holder", "client"].map(|n| Netns::new(&format!("{tag}-{n}")));
    for ns in [&holder, &client] {
        // No DAD on the test link's own addresses: the announcement is what is tested.
        ns.sysctl("net.ipv6.conf.default.accept_dad=0");
    }
    netns::veth(
        &holder,
        "eth0",
        "10.247.0.1/24",
        &client,
        "eth0",
        "10.247.0.2/24",
    );
    holder.ip(&["addr", "add", "fd00:247::1/64", "dev", "eth0", "nodad"]);
    client.ip(&["addr", "add", "fd00:247::2/64", "dev", "eth0", "nodad"]);
    let holder_mac = mac(&holder);
    for (vip, found_by_network) in [("10.247.0.100", true), ("fd00:247::100", false)] {
        // The client still has the old holder's MAC for the address.
        client.ip(&[
            "neigh",
            "replace",
            vip,
            "lladdr",
            "02:00:00:00:00:99",
            "dev",
            "eth0",
            "nud",
            "stale",
        ]);
        let ip: std::net::IpAddr = vip.parse().unwrap();
        let named = (!found_by_network).then_some("eth0");
        let iface = holder
            .run(|| System.add(ip, named))
            .unwrap_or_else(|e| panic!("{vip}: {e}"));
        assert_eq!(iface, "eth0");
        let shown = addresses(&holder, vip);
        let len = if ip.is_ipv4() { 32 } else { 128 };
        assert!(shown.contains(&format!(" {vip}/{len} ")), "{vip}: {shown}");
        assert!(!shown.contains("tentative"), "{vip}: {shown}");
        within(Duration::from_secs(3), vip, &String::new, || {
            neighbour(&client, vip).as_deref() == Some(holder_mac.as_str())
        });
        // Announced again (as the holder does twice more): still no error.
        holder.run(|| System.announce(ip, named)).unwrap();
        holder.run(|| System.remove(ip, named)).unwrap();
        assert_eq!(addresses(&holder, vip), "", "{vip}: still there");
        holder.run(|| System.remove(ip, named)).unwrap();
    }
}
