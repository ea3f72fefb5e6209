//! The etc-hosts mode: our marked block in each node's hosts file (mounted into the pod),
//! written by one controller per node (no lease) with the same pure editor as `ouroboros render
//! etc-hosts`. It writes no API object, so it needs no RBAC of its own, and removal needs no
//! API client.
//!
//! Crash safety: a reader (or a crash) never sees a truncated or half-written file.
//! - Normally the new text goes to a temporary file next to the target (same owner and mode),
//!   is fsynced and renamed over it (rename(2) is atomic), then the directory is fsynced.
//! - When that is impossible, the file is rewritten in place: a hostPath volume of type `File`
//!   is a single-file bind mount (rename over it fails with EBUSY), and a read-only root
//!   filesystem or directory leaves no room for a temporary file (EROFS, EACCES). In place,
//!   growing is one `pwrite` of the whole text at offset 0 (space reserved first, so it cannot
//!   stop half-way for lack of space); shrinking first writes the new text padded with blank
//!   space to the old length (still a valid hosts file), fsyncs, then truncates. Owner, mode and
//!   inode are kept. Files with several hard links are always rewritten in place, to keep the
//!   links. The temporary file gets the original's owner, mode and extended attributes (SELinux
//!   label, ACLs); when those cannot be copied, the file is rewritten in place too.
//! - Right before writing, the file is read again and compared with the text the edit was made
//!   from; if another program changed it meanwhile, the edit starts again from the new text, so
//!   a concurrent edit outside our block is never lost.
//! - A file the editor cannot parse (two marker pairs, an unclosed block) or that is not UTF-8 is
//!   never written.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use clap::Args;

use super::build::{default_proxy, proxy_ips, Build};
use super::render::{Placed, ProxyIpArg, RenderMode, LOG_TARGET};
use super::{DnsArgs, DnsMode, Grant, ProxySource};
use crate::dns::etc_hosts::{self, HostsGroup};
use crate::dns::write::apply::{Applied, Change, Outcome};
use crate::dns::write::error::{Reason, SinkError};
use crate::dns::write::plan::Plan;
use crate::dns::write::proxy_ips::{route_each, set_named, ProxyIps};
use crate::dns::write::sink::{AnySink, Sink};
use crate::dns::Mode;
use crate::flags::UsageError;
use crate::hostname::Hostname;

/// How the file may be replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMethod {
    /// Temporary file and rename, falling back to in place when that fails (see [`falls_back`]).
    Auto,
    /// Always in place (what a single-file bind mount gets).
    InPlace,
}

/// How a write was done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    Renamed,
    InPlace,
}

/// Whether an error creating or renaming the temporary file means "write in place instead":
/// EBUSY (rename over a mount point, i.e. a single-file bind mount), EXDEV (different
/// filesystems), EROFS/EACCES/EPERM (read-only or locked-down directory, or an owner we cannot
/// set), ENOSPC/EDQUOT (no room for a second copy).
pub fn falls_back(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EBUSY
                | libc::EXDEV
                | libc::EROFS
                | libc::EACCES
                | libc::EPERM
                | libc::ENOSPC
                | libc::EDQUOT
        )
    )
}

/// A failed update; nothing (more) was written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error(
        "hosts file {} not found: check --etc-hosts (the node's /etc/hosts, mounted into the pod \
         with a hostPath volume)", .path.display()
    )]
    NotFound { path: PathBuf },
    #[error(
        "hosts file {}: cannot edit it, line {line}: {reason}; nothing was written (fix the \
         file, then ouroboros retries on its own)", .path.display()
    )]
    Unparseable {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error(
        "hosts file {}: not UTF-8 text (invalid byte at offset {offset}); nothing was written",
        .path.display()
    )]
    NotUtf8 { path: PathBuf, offset: usize },
    #[error(
        "hosts file {} changed during each of {attempts} attempts (another program keeps \
         editing it); nothing was written, will retry", .path.display()
    )]
    KeepsChanging { path: PathBuf, attempts: u32 },
    #[error("hosts file {}: {op}: {error}", .path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        /// In the message, so not a `#[source]` (a chain would print it twice).
        error: io::Error,
    },
}

impl FileError {
    pub fn reason(&self) -> Reason {
        match self {
            FileError::NotFound { .. } => Reason::NotFound,
            FileError::Unparseable { .. } | FileError::NotUtf8 { .. } => Reason::Unparseable,
            FileError::KeepsChanging { .. } => Reason::Conflict,
            FileError::Io { .. } => Reason::Io,
        }
    }
}

impl From<FileError> for SinkError {
    fn from(e: FileError) -> Self {
        SinkError {
            reason: e.reason(),
            object: None,
            message: e.to_string(),
            kept: Box::default(),
        }
    }
}

/// What [`update`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    pub before: String,
    pub after: String,
    /// `None`: unchanged, or a dry run.
    pub written: Option<Written>,
    /// Times the file changed under us and the edit started again.
    pub restarts: u32,
    pub skipped_wildcards: Vec<Hostname>,
}

/// Reads `path`, splices the block for `groups` (names and their proxy's IPs) and writes the
/// result if it differs (blocking). `attempts` bounds the restarts after concurrent edits.
pub fn update(
    path: &Path,
    groups: &[HostsGroup<'_>],
    method: WriteMethod,
    dry_run: bool,
    attempts: u32,
) -> Result<Update, FileError> {
    let io_err = |op, error| FileError::Io {
        path: path.to_path_buf(),
        op,
        error,
    };
    // Write through a symlink to its target rather than replacing the link.
    let real = match fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(FileError::NotFound {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io_err("resolving the path", e)),
    };
    let attempts = attempts.max(1);
    for restarts in 0..attempts {
        let bytes = fs::read(&real).map_err(|e| io_err("reading", e))?;
        let before = String::from_utf8(bytes).map_err(|e| FileError::NotUtf8 {
            path: path.to_path_buf(),
            offset: e.utf8_error().valid_up_to(),
        })?;
        let edit =
            etc_hosts::splice_groups(&before, groups).map_err(|e| FileError::Unparseable {
                path: path.to_path_buf(),
                line: e.line,
                reason: e.reason,
            })?;
        let done = |written| Update {
            before: before.clone(),
            after: edit.text.clone(),
            written,
            restarts,
            skipped_wildcards: edit.skipped_wildcards.clone(),
        };
        if !edit.changed || dry_run {
            return Ok(done(None));
        }
        match write(&real, before.as_bytes(), edit.text.as_bytes(), method) {
            Ok(w) => return Ok(done(Some(w))),
            Err(Failed::Changed) => {
                tracing::info!(
                    path = %path.display(),
                    "hosts file changed since it was read; editing it again"
                );
            }
            Err(Failed::Io(op, e) | Failed::Fallback(op, e)) => return Err(io_err(op, e)),
        }
    }
    Err(FileError::KeepsChanging {
        path: path.to_path_buf(),
        attempts,
    })
}

enum Failed {
    /// The file no longer holds the text the edit was made from.
    Changed,
    Io(&'static str, io::Error),
    /// Replacing by rename would lose something: write in place.
    Fallback(&'static str, io::Error),
}

/// Replaces the content of `real` (no symlink) with `after` if it still is `before`: `Ok(None)`
/// when it is not (someone else edited it; nothing written). The step under [`update`].
pub fn replace_if_unchanged(
    real: &Path,
    before: &[u8],
    after: &[u8],
    method: WriteMethod,
) -> Result<Option<Written>, (&'static str, io::Error)> {
    match write(real, before, after, method) {
        Ok(w) => Ok(Some(w)),
        Err(Failed::Changed) => Ok(None),
        Err(Failed::Io(op, e) | Failed::Fallback(op, e)) => Err((op, e)),
    }
}

fn write(real: &Path, before: &[u8], after: &[u8], method: WriteMethod) -> Result<Written, Failed> {
    let meta = fs::metadata(real).map_err(|e| Failed::Io("reading its metadata", e))?;
    if method == WriteMethod::Auto && meta.nlink() == 1 {
        match replace_by_rename(real, &meta, before, after) {
            Ok(()) => return Ok(Written::Renamed),
            Err(Failed::Fallback(op, e)) => {
                tracing::debug!(
                    path = %real.display(),
                    step = op,
                    error = %e,
                    "replacing the hosts file by rename would lose attributes; writing it in place"
                );
            }
            Err(Failed::Io(op, e)) if falls_back(&e) => {
                tracing::debug!(
                    path = %real.display(),
                    step = op,
                    error = %e,
                    "cannot replace the hosts file by rename; writing it in place"
                );
            }
            Err(e) => return Err(e),
        }
    }
    in_place(real, before, after).map(|()| Written::InPlace)
}

/// Removes the temporary file unless it was renamed.
struct TempGuard<'a>(Option<&'a Path>);

impl Drop for TempGuard<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            let _ = fs::remove_file(p);
        }
    }
}

fn replace_by_rename(
    real: &Path,
    meta: &fs::Metadata,
    before: &[u8],
    after: &[u8],
) -> Result<(), Failed> {
    let dir = real.parent().unwrap_or(Path::new("/"));
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "hosts".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(".{name}.ouroboros-{}-{nanos}", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Failed::Io("creating a temporary file next to it", e))?;
    let mut guard = TempGuard(Some(&tmp));
    f.write_all(after)
        .map_err(|e| Failed::Io("writing the temporary file", e))?;
    let tmeta = f
        .metadata()
        .map_err(|e| Failed::Io("reading the temporary file's metadata", e))?;
    if (tmeta.uid(), tmeta.gid()) != (meta.uid(), meta.gid()) {
        std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid()))
            .map_err(|e| Failed::Io("setting the temporary file's owner", e))?;
    }
    f.set_permissions(meta.permissions())
        .map_err(|e| Failed::Io("setting the temporary file's mode", e))?;
    // The SELinux label and ACLs live in extended attributes; a replacement without them could
    // be unreadable for the host's resolver. If they cannot be copied, write in place instead.
    copy_xattrs(real, &f).map_err(|e| {
        Failed::Fallback(
            "copying extended attributes (SELinux label, ACLs) to the temporary file",
            e,
        )
    })?;
    f.sync_all()
        .map_err(|e| Failed::Io("syncing the temporary file", e))?;
    drop(f);
    if fs::read(real).map_err(|e| Failed::Io("reading it again", e))? != before {
        return Err(Failed::Changed);
    }
    fs::rename(&tmp, real).map_err(|e| Failed::Io("renaming the temporary file over it", e))?;
    guard.0 = None;
    // Make the rename durable; the data already is.
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        tracing::debug!(dir = %dir.display(), error = %e, "syncing the directory");
    }
    Ok(())
}

/// Copies every extended attribute of `src` (SELinux label, POSIX ACLs, user attributes) to
/// `dst`. A filesystem without extended attributes has none to copy.
fn copy_xattrs(src: &Path, dst: &File) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use crate::sys::{fsetxattr, getxattr, listxattr};
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let path = CString::new(src.as_os_str().as_bytes())?;
        let len = match listxattr(&path, &mut []) {
            Ok(len) => len,
            Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut names = vec![0u8; len];
        let len = listxattr(&path, &mut names)?;
        names.truncate(len);
        for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let name = CString::new(name)?;
            let n = getxattr(&path, &name, &mut [])?;
            let mut value = vec![0u8; n];
            let n = getxattr(&path, &name, &mut value)?;
            fsetxattr(dst, &name, &value[..n])?;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (src, dst);
    Ok(())
}

/// The new text never observed half-done: see the module documentation.
fn in_place(real: &Path, before: &[u8], after: &[u8]) -> Result<(), Failed> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(real)
        .map_err(|e| Failed::Io("opening it for writing", e))?;
    let mut current = Vec::with_capacity(before.len());
    f.read_to_end(&mut current)
        .map_err(|e| Failed::Io("reading it again", e))?;
    if current != before {
        return Err(Failed::Changed);
    }
    if after.len() >= before.len() {
        reserve(&f, after.len())?;
        f.write_all_at(after, 0)
            .map_err(|e| Failed::Io("writing it in place", e))?;
        f.sync_all().map_err(|e| Failed::Io("syncing it", e))?;
    } else {
        f.write_all_at(&pad(after, before.len()), 0)
            .map_err(|e| Failed::Io("writing it in place", e))?;
        f.sync_all().map_err(|e| Failed::Io("syncing it", e))?;
        f.set_len(after.len() as u64)
            .map_err(|e| Failed::Io("truncating it", e))?;
        f.sync_all().map_err(|e| Failed::Io("syncing it", e))?;
    }
    Ok(())
}

/// `text` followed by blank space up to `len` bytes: empty lines when it ends a line, else
/// spaces after its last line. Either way still a valid hosts file with the same entries.
pub fn pad(text: &[u8], len: usize) -> Vec<u8> {
    let fill = if text.is_empty() || text.ends_with(b"\n") {
        b'\n'
    } else {
        b' '
    };
    let mut v = text.to_vec();
    v.resize(len.max(text.len()), fill);
    v
}

/// Reserves the disk space for `len` bytes without changing the size, so the write that follows
/// cannot stop half-way with ENOSPC. Filesystems without fallocate just skip this.
fn reserve(f: &File, len: usize) -> Result<(), Failed> {
    #[cfg(target_os = "linux")]
    {
        use nix::errno::Errno;
        use nix::fcntl::{fallocate, FallocateFlags};
        let keep_size = FallocateFlags::FALLOC_FL_KEEP_SIZE;
        if let Err(e @ (Errno::ENOSPC | Errno::EDQUOT)) =
            fallocate(f, keep_size, 0, len as libc::off_t)
        {
            return Err(Failed::Io("reserving space for the new text", e.into()));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (f, len);
    Ok(())
}

/// The etc-hosts [`Sink`]: one per node, no lease.
pub struct HostsWriter {
    path: PathBuf,
    /// One per proxy target, the default target's first (see [`Plan`]).
    ips: Vec<ProxyIps>,
    method: WriteMethod,
    dry_run: bool,
    attempts: u32,
    /// Wildcards already warned about (a hosts file cannot hold them): warn once per name.
    warned: Mutex<BTreeSet<Hostname>>,
}

impl HostsWriter {
    pub fn new(path: PathBuf, ips: ProxyIps) -> Self {
        Self {
            path,
            ips: vec![ips],
            method: WriteMethod::Auto,
            dry_run: false,
            attempts: 5,
            warned: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn dry_run(mut self, on: bool) -> Self {
        self.dry_run = on;
        self
    }

    /// The named proxy targets' addresses ([`set_named`]).
    pub fn targets(mut self, ips: Vec<ProxyIps>) -> Self {
        set_named(&mut self.ips, ips);
        self
    }

    /// Each target's addresses passed through `f` ([`route_each`]).
    pub fn routed(mut self, f: impl Fn(ProxyIps, usize) -> ProxyIps) -> Self {
        route_each(&mut self.ips, f);
        self
    }

    /// Forces the in-place write (tests; the fallback otherwise chosen on EBUSY and friends).
    pub fn write_method(mut self, m: WriteMethod) -> Self {
        self.method = m;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the block hold exactly the exact names of `hosts` (wildcards are warned about once
    /// and skipped). The proxy IPs are resolved only when there is something to write.
    pub async fn apply(&self, hosts: &BTreeSet<Hostname>) -> Result<Applied, SinkError> {
        self.apply_plan(&Plan::new(hosts.clone())).await
    }

    /// [`apply`](Self::apply) with each name on its proxy target's addresses; a target's
    /// addresses are resolved only when it has a name to write.
    pub async fn apply_plan(&self, plan: &Plan) -> Result<Applied, SinkError> {
        let mut groups = Vec::new();
        for (hosts, ips) in plan.groups(self.ips.len())?.into_iter().zip(&self.ips) {
            let ips = if hosts.iter().any(|h| !h.is_wildcard()) {
                ips.resolve().await?
            } else {
                Vec::new()
            };
            groups.push((hosts.into_owned(), ips));
        }
        let u = self.run(groups).await?;
        self.warn_wildcards(&u.skipped_wildcards);
        Ok(self.applied(u))
    }

    /// Removes the block (for `ouroboros cleanup`); needs no API access.
    pub async fn cleanup(&self) -> Result<Applied, SinkError> {
        let u = self.run(Vec::new()).await?;
        Ok(self.applied(u))
    }

    async fn run(
        &self,
        groups: Vec<(BTreeSet<Hostname>, Vec<IpAddr>)>,
    ) -> Result<Update, SinkError> {
        let (path, method, dry_run, attempts) =
            (self.path.clone(), self.method, self.dry_run, self.attempts);
        let u = tokio::task::spawn_blocking(move || {
            let groups: Vec<HostsGroup<'_>> = groups
                .iter()
                .map(|(hosts, ips)| HostsGroup { hosts, ips })
                .collect();
            update(&path, &groups, method, dry_run, attempts)
        })
        .await
        .map_err(|e| SinkError {
            reason: Reason::Io,
            object: None,
            message: format!(
                "hosts file {}: the write task failed: {e}",
                self.path.display()
            ),
            kept: Box::default(),
        })??;
        if let Some(w) = u.written {
            tracing::info!(
                path = %self.path.display(),
                method = ?w,
                bytes = u.after.len(),
                "wrote the hosts file"
            );
        }
        Ok(u)
    }

    fn warn_wildcards(&self, skipped: &[Hostname]) {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        for h in skipped {
            if warned.insert(h.clone()) {
                tracing::warn!(
                    hostname = h.as_str(),
                    path = %self.path.display(),
                    "a hosts file cannot hold wildcard names; this one is not hairpinned on this \
                     node (use the coredns, coredns-import or external-dns mode for wildcards)"
                );
            }
        }
    }

    fn applied(&self, u: Update) -> Applied {
        let outcome = match u.written {
            Some(_) => Outcome::Written,
            None if u.before != u.after => Outcome::DryRun,
            None => Outcome::Unchanged,
        };
        let change = (outcome != Outcome::Unchanged).then_some(Change {
            before: Some(u.before),
            after: Some(u.after),
        });
        Applied {
            rules: None,
            texts: Vec::new(),
            outcome,
            findings: None,
            conflicts: u.restarts,
            change,
        }
    }
}

pub struct EtcHosts;

impl DnsMode for EtcHosts {
    fn runs_per_node(&self) -> bool {
        true
    }

    fn proxy(&self, dns: &DnsArgs) -> ProxySource {
        default_proxy(dns)
    }

    fn sink(&self, dns: &DnsArgs, at: &Build<'_>) -> Result<AnySink, UsageError> {
        Ok(AnySink::new(
            hosts_writer(dns, Some(at.client.clone()))
                .targets(at.target_ips(dns))
                .routed(|ips, i| at.route_at(ips, i)),
        ))
    }

    /// A hosts block is removed without the API (and without the proxy's addresses).
    fn offline_removal(&self, dns: &DnsArgs) -> Option<AnySink> {
        Some(AnySink::new(hosts_writer(dns, None)))
    }

    /// A file on the node: no API call.
    fn write_grants(&self, _dns: &DnsArgs, _namespace: &str) -> Vec<Grant> {
        Vec::new()
    }

    fn removal_grants(&self, _dns: &DnsArgs, _namespace: &str) -> Vec<Grant> {
        Vec::new()
    }
}

/// etc-hosts's own flag: the hosts file it edits.
#[derive(Args, Clone, Debug)]
#[group(skip)]
pub struct Flags {
    /// etc-hosts: the host's hosts file, mounted into the pod.
    #[arg(
        long = "etc-hosts",
        env = "OUROBOROS_CONTROLLER_ETC_HOSTS",
        value_name = "PATH",
        default_value = "/host/etc/hosts"
    )]
    pub etc_hosts: PathBuf,
}

/// `render etc-hosts`'s own flags: the hosts file to edit and the proxy's addresses.
#[derive(Args, Clone, Debug)]
#[command(alias = "hosts")]
pub struct Render {
    /// The hosts file to edit, or `-` for stdin.
    #[arg(long, env = "OUROBOROS_RENDER_HOSTS_FILE", value_name = "FILE")]
    pub hosts_file: PathBuf,
    #[command(flatten)]
    pub proxy: ProxyIpArg,
}

impl RenderMode for Render {
    const ABOUT: &'static str = "A hosts file with the ouroboros block of `IP host` lines";

    fn edits(&self) -> Option<(&Path, &'static str)> {
        Some((&self.hosts_file, "hosts file"))
    }

    fn render(&self, edited: &str, placed: &Placed) -> anyhow::Result<String> {
        let hosts = &placed.plan.hosts;
        let with_ips = placed.with_ips(&self.proxy.proxy_ips)?;
        let groups: Vec<HostsGroup<'_>> = with_ips
            .iter()
            .map(|(hosts, ips)| HostsGroup { hosts, ips })
            .collect();
        let edit = etc_hosts::splice_groups(edited, &groups).map_err(|e| {
            anyhow::anyhow!("{}: {e} (nothing was printed)", self.hosts_file.display())
        })?;
        for host in &edit.skipped_wildcards {
            tracing::warn!(
                target: LOG_TARGET,
                hostname = %host,
                "skipping a wildcard: hosts files cannot express wildcards; use the coredns or external-dns mode for it"
            );
        }
        // The names as written: wildcards were skipped above.
        tracing::info!(
            target: LOG_TARGET,
            hosts = hosts.len() - edit.skipped_wildcards.len(),
            changed = edit.changed,
            "rendered the hosts file"
        );
        Ok(edit.text)
    }
}

/// The etc-hosts writer. Without a client it can only remove the block (`cleanup`) or write
/// with --proxy-ip.
pub fn hosts_writer(dns: &DnsArgs, client: Option<kube::Client>) -> HostsWriter {
    HostsWriter::new(
        dns.etc_hosts.etc_hosts.clone(),
        proxy_ips(&default_proxy(dns), client),
    )
    .dry_run(dns.shared.dry_run)
}

impl Sink for HostsWriter {
    fn mode(&self) -> &'static str {
        Mode::EtcHosts.name()
    }

    async fn apply(&self, plan: &Plan) -> Result<Applied, SinkError> {
        HostsWriter::apply_plan(self, plan).await
    }

    async fn cleanup(&self) -> Result<Applied, SinkError> {
        HostsWriter::cleanup(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_selection() {
        for (errno, want) in [
            (libc::EBUSY, true),
            (libc::EXDEV, true),
            (libc::EROFS, true),
            (libc::EACCES, true),
            (libc::EPERM, true),
            (libc::ENOSPC, true),
            (libc::EDQUOT, true),
            (libc::EIO, false),
            (libc::ENOENT, false),
            (libc::EEXIST, false),
        ] {
            assert_eq!(
                falls_back(&io::Error::from_raw_os_error(errno)),
                want,
                "errno {errno}"
            );
        }
        assert!(!falls_back(&io::Error::other("no errno")));
    }

    #[test]
    fn padding_keeps_a_valid_file() {
        assert_eq!(pad(b"a b\n", 7), b"a b\n\n\n\n");
        assert_eq!(pad(b"a b", 6), b"a b   ");
        assert_eq!(pad(b"", 2), b"\n\n");
        assert_eq!(pad(b"a b\r\n", 6), b"a b\r\n\n");
        assert_eq!(pad(b"abc", 2), b"abc");
    }
}
