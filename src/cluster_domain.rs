//! The cluster DNS domain (`cluster.local` unless the cluster was built otherwise), detected from
//! the pod's /etc/resolv.conf the way kubelet writes it.

/// Used when no `svc.<domain>` search entry is found and `--cluster-domain` is not given.
pub const DEFAULT: &str = "cluster.local";

/// Finds the cluster domain in resolv.conf text: kubelet writes
/// `search <ns>.svc.<domain> svc.<domain> <domain>`, so the entry `svc.<domain>` names it.
pub fn from_resolv_conf(text: &str) -> Option<String> {
    let search = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with(';'))
        .filter_map(|l| l.strip_prefix("search"))
        .rfind(|rest| rest.starts_with([' ', '\t']))?; // the last search line wins
    search
        .split_whitespace()
        .filter_map(|d| d.trim_end_matches('.').strip_prefix("svc."))
        .find(|d| !d.is_empty())
        .map(str::to_ascii_lowercase)
}

/// The flag value if set, else the domain found in /etc/resolv.conf, else `cluster.local`.
pub fn resolve(flag: Option<&str>) -> String {
    if let Some(d) = flag
        .map(|d| d.trim().trim_end_matches('.'))
        .filter(|d| !d.is_empty())
    {
        return d.to_ascii_lowercase();
    }
    std::fs::read_to_string("/etc/resolv.conf")
        .ok()
        .and_then(|t| from_resolv_conf(&t))
        .unwrap_or_else(|| DEFAULT.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_from_search_line() {
        for (text, want) in [
            (
                "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
                Some("cluster.local"),
            ),
            ("search ns.svc.k8s.corp.example svc.k8s.corp.example k8s.corp.example\n", Some("k8s.corp.example")),
            ("search\tsvc.Cluster.Local.\n", Some("cluster.local")),
            ("search example.com\n", None),
            ("nameserver 1.1.1.1\n", None),
            ("# search svc.commented.out\n", None),
            ("search svc.first.local\nsearch svc.second.local\n", Some("second.local")),
            ("searchsvc.bogus\n", None),
            ("", None),
        ] {
            assert_eq!(from_resolv_conf(text).as_deref(), want, "{text:?}");
        }
    }

    #[test]
    fn flag_wins() {
        assert_eq!(resolve(Some("Corp.Local.")), "corp.local");
    }
}
