//! The controller's own flag groups: leader election (shared with `doctor`) and what the
//! hostname flags select. The DNS-target flags every DNS subcommand shares live in
//! `crate::dns::args`.

use std::time::Duration;

use clap::{ArgAction, Args};

use super::hostnames::{args::HostnameArgs, model::Filters};
use crate::flags::UsageError;
use crate::hostname::HostPolicy;
use crate::target::{Target, TargetRule};

pub const DEFAULT_LEASE_NAME: &str = "ouroboros-controller";

/// Leader election: flags of `controller`, which `doctor` takes too (same names, variables and
/// defaults) to check the controller's permissions.
#[derive(Args, Clone, Debug)]
pub struct ElectionArgs {
    /// Only the holder of a Lease writes (`--leader-elect=false` to turn off); never used in
    /// etc-hosts mode or with --dry-run.
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_LEADER_ELECT",
        value_name = "BOOL",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub leader_elect: bool,

    /// Name of the Lease.
    #[arg(long, env = "OUROBOROS_CONTROLLER_LEASE_NAME", value_name = "NAME", default_value = DEFAULT_LEASE_NAME)]
    pub lease_name: String,

    /// Namespace of the Lease [default: this pod's namespace, else `ouroboros`].
    #[arg(long, env = "OUROBOROS_CONTROLLER_LEASE_NAMESPACE", value_name = "NS")]
    pub lease_namespace: Option<String>,
}

/// The watches of the source kinds (Ingress, Gateway-API): how a watch that went quiet is told
/// from a quiet cluster.
#[derive(Args, Clone, Debug)]
pub struct WatchArgs {
    /// Restart a watch with a fresh list when it has delivered neither an event nor a bookmark
    /// for this long (a watch through a tunnel or proxy that drops idle streams can stop without
    /// an error); 0 disables, else at least 2m.
    #[arg(long, env = "OUROBOROS_CONTROLLER_WATCH_IDLE_TIMEOUT", value_name = "DURATION", default_value = "10m", value_parser = parse_watch_idle_timeout)]
    pub watch_idle_timeout: Duration,

    /// How often to ask the API which of its places each CRD source kind is served at
    /// (Istio's Gateway at networking.istio.io v1, else v1beta1, else v1alpha3; Traefik's kinds
    /// in traefik.io, else traefik.containo.us; the Gateway API's at v1, else older versions):
    /// each kind is read at the first one served, and its watch moves when a CRD installed or
    /// upgraded later changes that. Not 0.
    #[arg(long, env = "OUROBOROS_CONTROLLER_SOURCE_DISCOVERY_INTERVAL", value_name = "DURATION", default_value = "30s", value_parser = parse_source_discovery_interval)]
    pub source_discovery_interval: Duration,
}

/// KEP-1860: targets whose ingress controller's load balancer keeps client IPs for in-cluster
/// clients too (`ipMode: Proxy`) need no hairpin.
#[derive(Args, Clone, Debug, Default)]
pub struct IpModeArgs {
    /// The default proxy's ingress controller Service (NAMESPACE/NAME), watched for its
    /// load-balancer addresses' `ipMode` (KEP-1860); a named target's is `ingress-controller=`
    /// in its --target. While every address reports `ipMode: Proxy`, kube-proxy sends in-cluster
    /// clients through the load balancer itself (with its PROXY header), so that target's names
    /// are left out (see --skip-proxy-ipmode).
    #[arg(
        long,
        env = "OUROBOROS_CONTROLLER_INGRESS_CONTROLLER_SERVICE",
        value_name = "NAMESPACE/NAME",
        value_parser = crate::controller::hostnames::targets::parse_namespaced
    )]
    pub ingress_controller_service: Option<(String, String)>,

    /// Leave out the names of a target whose ingress controller Service reports `ipMode: Proxy`
    /// on every load-balancer address; false hairpins them anyway (a CNI that replaces
    /// kube-proxy may not honour ipMode: check with `ouroboros doctor`).
    #[arg(
        long = "skip-proxy-ipmode",
        env = "OUROBOROS_CONTROLLER_SKIP_PROXY_IPMODE",
        value_name = "BOOL",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub skip_proxy_ipmode: bool,
}

impl IpModeArgs {
    /// The ingress controller Services to watch, each with its target, when skipping is on:
    /// --ingress-controller-service for the default target, `ingress-controller=` for a named
    /// one.
    pub fn watched(&self, targets: &[TargetRule]) -> Vec<(Target, (String, String))> {
        if !self.skip_proxy_ipmode {
            return Vec::new();
        }
        Target::all(targets.len())
            .filter_map(|target| {
                let service = match target.rule(targets) {
                    None => self.ingress_controller_service.clone(),
                    Some(rule) => rule.ingress_controller.clone(),
                };
                Some((target, service?))
            })
            .collect()
    }
}

/// The mass removal guard (`removal_guard`): a write that would remove most of the last
/// write's hostnames waits until the same set has been seen for a while.
#[derive(Args, Clone, Debug)]
pub struct RemovalGuardArgs {
    /// Hold a write that removes more than this share (0 to 1) of the last write's hostnames
    /// (and at least --removal-guard-min of them): the last write stays in place meanwhile.
    #[arg(long, env = "OUROBOROS_CONTROLLER_REMOVAL_GUARD_SHARE", value_name = "SHARE", default_value = "0.5", value_parser = parse_share)]
    pub removal_guard_share: f64,

    /// A write that removes fewer hostnames than this is never held.
    #[arg(long, env = "OUROBOROS_CONTROLLER_REMOVAL_GUARD_MIN", value_name = "COUNT", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub removal_guard_min: u32,

    /// How long a held write's hostname set must stay the same before it is written (another
    /// set starts the wait again); 0 writes at once, turning the guard off.
    #[arg(long, env = "OUROBOROS_CONTROLLER_REMOVAL_GUARD_HOLD", value_name = "DURATION", default_value = "5m", value_parser = crate::flags::parse_duration)]
    pub removal_guard_hold: Duration,
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        Ok(_) => Err("must be at least 0 and less than 1 (0.5: more than half)".into()),
        Err(_) => Err(format!("{s:?} is not a number (0.5: more than half)")),
    }
}

impl RemovalGuardArgs {
    pub fn policy(&self) -> crate::controller::removal_guard::Policy {
        crate::controller::removal_guard::Policy {
            share: self.removal_guard_share,
            min: self.removal_guard_min as usize,
            hold: self.removal_guard_hold,
        }
    }
}

/// The shortest `--watch-idle-timeout`: the API server sends a bookmark about once a minute
/// (and one before each watch's 290 s deadline), so a healthy quiet watch can go a minute and a
/// little more without one; anything shorter would restart healthy watches.
pub const MIN_WATCH_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

fn parse_watch_idle_timeout(s: &str) -> Result<Duration, String> {
    let d = crate::flags::parse_duration(s)?;
    if !d.is_zero() && d < MIN_WATCH_IDLE_TIMEOUT {
        return Err(format!(
            "must be 0 (off) or at least 2m: the API server sends a bookmark only about once a \
             minute, so {} would restart healthy watches",
            humantime::format_duration(d)
        ));
    }
    Ok(d)
}

fn parse_source_discovery_interval(s: &str) -> Result<Duration, String> {
    let d = crate::flags::parse_duration(s)?;
    if d.is_zero() {
        return Err(
            "must not be 0: it is how long discovery waits between rounds (e.g. 30s)".into(),
        );
    }
    Ok(d)
}

impl WatchArgs {
    /// The idle timeout (`None`: the detector is off).
    pub fn idle_timeout(&self) -> Option<Duration> {
        (!self.watch_idle_timeout.is_zero()).then_some(self.watch_idle_timeout)
    }
}

impl ElectionArgs {
    /// --lease-namespace, else `default` (the controller's own namespace).
    pub fn lease_namespace_or(&self, default: &str) -> String {
        self.lease_namespace
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| default.to_string())
    }
}

/// What the hostname flags select: the filters, the cluster domain (the flag, else detected
/// from /etc/resolv.conf) and the name policy.
pub struct Selection {
    pub filters: Filters,
    pub cluster_domain: String,
    pub policy: HostPolicy,
}

impl Selection {
    /// Checks the hostname flags; errors are `UsageError`s (exit 64).
    pub fn of(hostnames: &HostnameArgs) -> Result<Selection, UsageError> {
        let filters = hostnames.filters().map_err(UsageError)?;
        let cluster_domain = crate::cluster_domain::resolve(hostnames.cluster_domain.as_deref());
        let policy = hostnames.policy(&cluster_domain).map_err(UsageError)?;
        Ok(Selection {
            filters,
            cluster_domain,
            policy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removal_guard_flags() {
        use crate::controller::removal_guard::Policy;
        let parse = |argv: &[&str]| crate::flags::parse_args::<RemovalGuardArgs>(argv);
        assert_eq!(parse(&[]).unwrap().policy(), Policy::DEFAULT);
        let p = parse(&[
            "--removal-guard-share",
            "0",
            "--removal-guard-min",
            "1",
            "--removal-guard-hold",
            "0s",
        ])
        .unwrap()
        .policy();
        assert_eq!((p.share, p.min, p.hold), (0.0, 1, Duration::ZERO));
        for (flag, bad, says) in [
            ("--removal-guard-share", "1", "less than 1"),
            ("--removal-guard-share=-0.1", "", "at least 0"),
            ("--removal-guard-share", "half", "not a number"),
            ("--removal-guard-min", "0", "1.."),
            ("--removal-guard-hold", "soon", ""),
        ] {
            let argv: Vec<&str> = [flag, bad].into_iter().filter(|a| !a.is_empty()).collect();
            let e = parse(&argv).unwrap_err().to_string();
            assert!(e.contains(says), "{flag} {bad}: {e}");
        }
    }

    #[test]
    fn watch_idle_timeout() {
        let parse = |argv: &[&str]| crate::flags::parse_args::<WatchArgs>(argv);
        let t = parse(&[]).unwrap();
        assert_eq!(t.idle_timeout(), Some(Duration::from_secs(600)));
        let t = parse(&["--watch-idle-timeout", "0"]).unwrap();
        assert_eq!(t.idle_timeout(), None, "0 disables");
        let t = parse(&["--watch-idle-timeout", "2m"]).unwrap();
        assert_eq!(t.idle_timeout(), Some(MIN_WATCH_IDLE_TIMEOUT));
        let e = parse(&["--watch-idle-timeout", "90s"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 2m") && e.contains("1m 30s"), "{e}");
        assert!(parse(&["--watch-idle-timeout", "soon"]).is_err());
    }

    #[test]
    fn source_discovery_interval() {
        let parse = |argv: &[&str]| crate::flags::parse_args::<WatchArgs>(argv);
        let t = parse(&[]).unwrap();
        assert_eq!(t.source_discovery_interval, Duration::from_secs(30));
        let t = parse(&["--source-discovery-interval", "5m"]).unwrap();
        assert_eq!(t.source_discovery_interval, Duration::from_secs(300));
        let e = parse(&["--source-discovery-interval", "0s"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must not be 0"), "{e}");
    }
}
