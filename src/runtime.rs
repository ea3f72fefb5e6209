//! The async runtime each subcommand runs on: how many threads, and whether they busy-poll.
//!
//! The relays (`proxy`, `edge`) run one event loop per CPU ([`relay_loops`]): each loop is a
//! thread with tokio's single-threaded scheduler, and every loop accepts on the same listening
//! sockets, so a connection lives its whole life on the loop that accepted it. This replaced
//! tokio's multi-threaded (work-stealing) scheduler there, whose cross-thread wake-ups and
//! stealing cost both CPU per request and tail latency when the relay shares its CPUs with
//! other work (docs/performance.md has the measurements).
//!
//! Busy polling (`--busy-poll`): when a worker runs out of work it would block in
//! `epoll_wait(2)`, and the next packet then has to wake it. On a virtual machine without guest
//! halt polling, waking an idle vCPU is an inter-processor interrupt that costs the *sender* a
//! VM exit, so the clients and backends on other CPUs pay for every time the relay fell asleep
//! (bench/README.md measures it). With a window set, the worker first watches its epoll instance
//! for up to that long, and goes on the moment anything is ready. Tokio has no such option, and
//! no crate adds one: the hook below is written here.
//!
//! `--busy-poll auto` sizes that window from the loop's own sleeps, as Linux's cpuidle-haltpoll
//! governor does for a guest's idle vCPUs (drivers/cpuidle/governors/haltpoll.c): it grows
//! while sleeps end within [`AUTO_MAX`] (a longer spin would have caught the event that ended
//! them) and shrinks when one lasts longer. Under load the loop spins instead of sleeping; an
//! idle relay's sleeps last until its next one-second heartbeat, so it does not spin at all.

use std::collections::BTreeSet;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Why the async runtime did not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("starting the async runtime: {0}")]
    Start(std::io::Error),
    #[error("--busy-poll: listing /proc/self/fd: {0}")]
    ListFds(std::io::Error),
    #[error(
        "--busy-poll: expected 1 to {MAX_EPOLL_FDS} new epoll descriptors in /proc/self/fd \
         after starting the runtime, found {0}; run without --busy-poll"
    )]
    EpollFds(usize),
    #[error("starting relay event loop {index}: {error}")]
    Loop {
        index: usize,
        error: Box<RuntimeError>,
    },
    #[error("starting the thread of relay event loop {0}: {1}")]
    Thread(usize, std::io::Error),
}

/// `--busy-poll`: whether a relay thread watches for events before it sleeps, and how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusyPoll {
    /// Sleep as soon as there is nothing to do (`0`).
    Off,
    /// Spin up to this long before every sleep.
    Fixed(Duration),
    /// A window sized from the loop's own sleeps, at most [`AUTO_MAX`]; off under a CPU limit.
    Auto,
}

/// The adaptive window's first step and its cap: sleeps shorter than the cap are what a spin
/// saves (a wake-up interrupt each), longer ones cost less asleep than spinning.
pub const AUTO_START: Duration = Duration::from_micros(10);
pub const AUTO_MAX: Duration = Duration::from_micros(50);

/// The adaptive window after a sleep of `slept` (from the start of the spin before it, which
/// did not catch anything): doubled, from [`AUTO_START`] up to [`AUTO_MAX`], when the sleep
/// ended within `AUTO_MAX`; halved, and off below `AUTO_START`, when it lasted longer.
pub fn next_window(window: Duration, slept: Duration) -> Duration {
    if slept <= AUTO_MAX {
        (window * 2).clamp(AUTO_START, AUTO_MAX)
    } else if window / 2 < AUTO_START {
        Duration::ZERO
    } else {
        window / 2
    }
}

/// Whether this process runs under a CPU limit, as last read. `auto` does not spin under one:
/// every spin is CPU time the quota then takes from relaying (bench/README.md). Read when the
/// loops start and again at every heartbeat of the first loop (a few small file reads a
/// second), since a pod's limit can change while it runs (in-place resize).
static CPU_LIMITED: AtomicBool = AtomicBool::new(false);

/// Reads the CPU limit into [`CPU_LIMITED`]; logs when that changes after the start.
fn recheck_cpu_limit() {
    let limited = cpu_limit().is_some();
    if CPU_LIMITED.swap(limited, Ordering::Relaxed) != limited {
        tracing::info!(
            cpu_limited = limited,
            "the CPU limit changed: --busy-poll auto now {}",
            if limited { "does not spin" } else { "spins" }
        );
    }
}

/// Builds the runtime. `threads`: 0 = one per CPU this process may use (affinity and cgroup
/// quota count); 1 = the current-thread scheduler, which skips work stealing, cross-thread
/// wakeups and per-batch poll-time bookkeeping (13 % fewer instructions per relayed keep-alive
/// request than one worker of the multi-threaded one, bench/README.md); N = N workers.
/// `busy_poll`: whether a worker spins before it sleeps.
pub fn build(threads: usize, busy_poll: BusyPoll) -> Result<tokio::runtime::Runtime, RuntimeError> {
    build_with(threads, busy_poll, busy_poll == BusyPoll::Auto)
}

/// [`build`]; `recheck_limit`: this runtime's heartbeat re-reads the CPU limit (one per process
/// is enough).
fn build_with(
    threads: usize,
    busy_poll: BusyPoll,
    recheck_limit: bool,
) -> Result<tokio::runtime::Runtime, RuntimeError> {
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder.enable_all();
    let runtime = match busy_poll {
        BusyPoll::Off => builder.build().map_err(RuntimeError::Start)?,
        spin => with_busy_poll(builder, spin)?,
    };
    runtime.spawn(heartbeat(recheck_limit));
    Ok(runtime)
}

/// How many event loops `--threads N` means: N, or for 0 one per CPU this process may use
/// (its affinity mask and its cgroup CPU quota, rounded up, both count).
pub fn loop_count(threads: usize) -> usize {
    match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Runs `work` on `rt`, then leaves without waiting for blocking tasks. A resolver lookup
/// (`getaddrinfo` on a blocking thread, which cannot be cancelled) started by a readiness
/// check or a dial can take its whole timeout against a silent DNS server; dropping the
/// runtime would wait for it, so a process that has already drained and logged `exiting` would
/// linger for seconds.
pub fn run_then_leave<T>(
    rt: tokio::runtime::Runtime,
    work: impl std::future::Future<Output = T>,
) -> T {
    let out = rt.block_on(work);
    rt.shutdown_background();
    out
}

/// The relays' runtimes: the caller's (single-threaded, returned to `block_on` the subcommand)
/// and [`Loops`] for the others. Built before any task runs, one after the other, so
/// `--busy-poll` finds each runtime's own epoll descriptor.
pub fn relay_loops(
    threads: usize,
    busy_poll: BusyPoll,
) -> Result<(tokio::runtime::Runtime, Loops), RuntimeError> {
    let limit = cpu_limit();
    CPU_LIMITED.store(limit.is_some(), Ordering::Relaxed);
    if let (BusyPoll::Fixed(window), Some(cpus)) = (busy_poll, limit) {
        tracing::warn!(
            busy_poll_us = window.as_micros() as u64,
            cpu_limit = cpus,
            "--busy-poll under a CPU limit: the spin is CPU time the limit counts, so the relay \
             gets less real work done per period (under a 400m limit, --busy-poll 50us relayed \
             7-23 % fewer requests per second than --busy-poll 0; bench/README.md); consider \
             --busy-poll auto, which does not spin under a limit"
        );
    }
    let main = build(1, busy_poll)?;
    let stop = tokio_util::sync::CancellationToken::new();
    let mut handles = Vec::new();
    for index in 1..loop_count(threads) {
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name(format!("relay-{index}"))
            .spawn(move || {
                let rt = match build_with(1, busy_poll, false) {
                    Ok(rt) => rt,
                    Err(e) => return drop(tx.send(Err(e))),
                };
                let _ = tx.send(Ok(rt.handle().clone()));
                // Runs the loop's tasks until the Loops are dropped; dropping the runtime here,
                // outside any async context, then closes the connections it still holds.
                rt.block_on(stop.cancelled());
            })
            .map_err(|e| RuntimeError::Thread(index, e))?;
        let handle = rx
            .recv()
            .unwrap_or_else(|_| Err(RuntimeError::Start(std::io::ErrorKind::Other.into())))
            .map_err(|e| RuntimeError::Loop {
                index,
                error: Box::new(e),
            })?;
        handles.push(handle);
    }
    Ok((
        main,
        Loops {
            handles,
            _stop: stop.drop_guard(),
        },
    ))
}

/// The relay event loops beside the caller's own: each a thread running a single-threaded
/// runtime. Dropping this stops them (their remaining tasks are dropped).
pub struct Loops {
    handles: Vec<tokio::runtime::Handle>,
    _stop: tokio_util::sync::DropGuard,
}

impl Loops {
    /// No extra loops: everything runs on the caller's runtime.
    pub fn none() -> Self {
        Loops {
            handles: Vec::new(),
            _stop: tokio_util::sync::CancellationToken::new().drop_guard(),
        }
    }

    /// Handles to spawn work onto each extra loop.
    pub fn handles(&self) -> &[tokio::runtime::Handle] {
        &self.handles
    }
}

/// Tokio wakes its I/O driver (an eventfd write, and an extra return from `epoll_wait`) each
/// time a newly armed timer expires before every timer already armed. A relay's other timers
/// are idle timeouts an hour away, so every dial's timeout would be that timer: a syscall and
/// a wake-up per new connection. A timer re-armed every second keeps the earliest expiry
/// within a second, and dial timeouts (5 s by default) are armed without waking anything.
/// With `--busy-poll auto` each beat also re-reads the CPU limit.
async fn heartbeat(recheck_limit: bool) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if recheck_limit {
            recheck_cpu_limit();
        }
    }
}

/// One loop's spin before it sleeps: the window, and for `Auto` when the current sleep began.
struct Spinner {
    mode: BusyPoll,
    /// (the adaptive window, the start of the spin that preceded the current sleep). Only the
    /// loop's own thread takes the lock (the hooks need `Sync`).
    state: Mutex<(Duration, Option<Instant>)>,
    /// [`CPU_LIMITED`] (a test's own flag in tests).
    limited: &'static AtomicBool,
}

impl Spinner {
    fn new(mode: BusyPoll, limited: &'static AtomicBool) -> Self {
        Spinner {
            mode,
            state: Mutex::new((Duration::ZERO, None)),
            limited,
        }
    }

    /// Runs before the loop sleeps (at `start`): spins for the window, and notes when the
    /// sleep began if the spin caught nothing.
    fn before_park(&self, fds: &[RawFd], start: Instant) {
        let window = match self.mode {
            BusyPoll::Fixed(window) => window,
            BusyPoll::Auto if self.limited.load(Ordering::Relaxed) => return,
            BusyPoll::Auto => self.state.lock().expect("spinner lock").0,
            BusyPoll::Off => return,
        };
        let caught = !window.is_zero() && spin_until_ready(fds, window);
        if self.mode == BusyPoll::Auto && !caught {
            self.state.lock().expect("spinner lock").1 = Some(start);
        }
    }

    /// Runs after the loop woke (at `now`): an adaptive window follows how long it slept.
    fn after_unpark(&self, now: Instant) {
        let mut state = self.state.lock().expect("spinner lock");
        if let Some(start) = state.1.take() {
            state.0 = next_window(state.0, now.saturating_duration_since(start));
        }
    }
}

/// Builds the runtime with the `--busy-poll` park hooks.
fn with_busy_poll(
    mut builder: tokio::runtime::Builder,
    busy_poll: BusyPoll,
) -> Result<tokio::runtime::Runtime, RuntimeError> {
    let spinner = Arc::new(Spinner::new(busy_poll, &CPU_LIMITED));
    // The epoll descriptors only exist once the runtime is built; the hook waits for them.
    let epoll = Arc::new(OnceLock::<Vec<RawFd>>::new());
    let (hook, park) = (epoll.clone(), spinner.clone());
    builder.on_thread_park(move || {
        if let Some(fds) = hook.get() {
            park.before_park(fds, Instant::now());
        }
    });
    builder.on_thread_unpark(move || spinner.after_unpark(Instant::now()));
    let before = epoll_fds()?;
    let runtime = builder.build().map_err(RuntimeError::Start)?;
    let new: Vec<RawFd> = epoll_fds()?.difference(&before).copied().collect();
    if new.is_empty() || new.len() > MAX_EPOLL_FDS {
        return Err(RuntimeError::EpollFds(new.len()));
    }
    let _ = epoll.set(new);
    Ok(runtime)
}

/// Tokio opens one epoll instance and may `dup(2)` it (its signal driver does); all are polled.
const MAX_EPOLL_FDS: usize = 4;

/// Longest `--busy-poll` window: past this, sleeping and being woken costs less than spinning.
pub const MAX_BUSY_POLL: Duration = Duration::from_millis(1);

/// Parses `--busy-poll`: `auto`, or a duration up to [`MAX_BUSY_POLL`] (`0` for off).
pub fn parse_busy_poll(s: &str) -> Result<BusyPoll, String> {
    if s == "auto" {
        return Ok(BusyPoll::Auto);
    }
    let d = crate::flags::parse_duration(s)?;
    if d > MAX_BUSY_POLL {
        return Err(format!(
            "{s} is longer than the 1ms maximum (auto, a window such as 50us, or 0 = off)"
        ));
    }
    Ok(if d.is_zero() {
        BusyPoll::Off
    } else {
        BusyPoll::Fixed(d)
    })
}

/// The CPU limit (in CPUs) the kernel enforces on this process through its cgroup or an
/// ancestor's, the tightest one: cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us` over
/// `cpu.cfs_period_us`. `None` without a limit or when it cannot be read.
pub fn cpu_limit() -> Option<f64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cpu_limit_in(&cgroups, |path| std::fs::read_to_string(path).ok())
}

/// [`cpu_limit`] over the text of /proc/self/cgroup and a file reader.
fn cpu_limit_in(cgroups: &str, read: impl Fn(&str) -> Option<String>) -> Option<f64> {
    let number = |path: &str| read(path)?.trim().parse::<f64>().ok();
    let mut tightest: Option<f64> = None;
    for line in cgroups.lines() {
        // "ID:CONTROLLERS:PATH"; v2's single hierarchy has no controllers listed.
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let v1 = controllers.split(',').any(|c| c == "cpu");
        if !v1 && !controllers.is_empty() {
            continue;
        }
        // The cgroup itself, then each ancestor up to the root.
        let mut dir = path.trim_end_matches('/');
        loop {
            let limit = if v1 {
                let base = format!("/sys/fs/cgroup/{controllers}{dir}");
                number(&format!("{base}/cpu.cfs_quota_us"))
                    .zip(number(&format!("{base}/cpu.cfs_period_us")))
            } else {
                read(&format!("/sys/fs/cgroup{dir}/cpu.max")).and_then(|max| {
                    let (quota, period) = max.trim().split_once(' ')?;
                    quota.parse().ok().zip(period.parse().ok())
                })
            };
            // A quota of -1 (v1) or "max" (v2, unparsed) is no limit.
            if let Some(l) = limit
                .filter(|&(q, p)| q > 0.0 && p > 0.0)
                .map(|(q, p)| q / p)
            {
                tightest = Some(tightest.map_or(l, |t| t.min(l)));
            }
            match dir.rfind('/') {
                Some(i) => dir = &dir[..i],
                None => break,
            }
        }
    }
    tightest
}

/// The process's open epoll descriptors (their /proc/self/fd links name `[eventpoll]`).
fn epoll_fds() -> Result<BTreeSet<RawFd>, RuntimeError> {
    let dir = std::fs::read_dir("/proc/self/fd").map_err(RuntimeError::ListFds)?;
    Ok(dir
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|l| l.to_string_lossy() == "anon_inode:[eventpoll]")
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect())
}

/// Polls the epoll descriptors `fds` (without taking their events, which stay for the runtime's
/// own `epoll_wait`) until something is ready or `window` has passed. True when something is.
fn spin_until_ready(fds: &[RawFd], window: Duration) -> bool {
    // poll(2) skips negative descriptors.
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; MAX_EPOLL_FDS];
    for (p, &fd) in pfds.iter_mut().zip(fds) {
        p.fd = fd;
    }
    // Zero timeout; an error also ends the spin.
    spin(window, Instant::now, || {
        !matches!(crate::sys::poll(&mut pfds, 0), Ok(0))
    })
}

/// The spin loop of [`spin_until_ready`]: asks `ready` until it says yes (true) or the clock
/// `now` has reached `window` past its first reading (false). `ready` is always asked at least
/// once, and never again once the window has passed.
fn spin(
    window: Duration,
    mut now: impl FnMut() -> Instant,
    mut ready: impl FnMut() -> bool,
) -> bool {
    let end = now() + window;
    loop {
        if ready() {
            return true;
        }
        if now() >= end {
            return false;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
    use nix::sys::eventfd::{EfdFlags, EventFd};
    use std::os::fd::AsRawFd;

    #[test]
    fn busy_poll_windows() {
        let us = |n| Some(BusyPoll::Fixed(Duration::from_micros(n)));
        for (input, want) in [
            ("0", Some(BusyPoll::Off)),
            ("0us", Some(BusyPoll::Off)),
            ("auto", Some(BusyPoll::Auto)),
            ("50us", us(50)),
            ("1ms", us(1000)),
            ("1001us", None),
            ("1s", None),
            ("50", None),
        ] {
            assert_eq!(parse_busy_poll(input).ok(), want, "{input:?}");
        }
    }

    #[test]
    fn the_adaptive_window_follows_the_sleeps() {
        let us = Duration::from_micros;
        for (window, slept, want) in [
            // Woken within the cap: a longer spin would have caught it.
            (0, 3, 10),
            (0, 50, 10),
            (10, 20, 20),
            (40, 45, 50),
            (50, 12, 50),
            // A long sleep: the spin was wasted.
            (50, 51, 25),
            (20, 1_000_000, 10),
            (10, 800, 0),
            (0, 1_000_000, 0),
        ] {
            assert_eq!(
                next_window(us(window), us(slept)),
                us(want),
                "{window} {slept}"
            );
        }
        // An idle loop (its heartbeat sleeps 1 s) stops spinning within three sleeps.
        let mut w = AUTO_MAX;
        for _ in 0..3 {
            w = next_window(w, Duration::from_secs(1));
        }
        assert_eq!(w, Duration::ZERO);
    }

    /// `auto` on a real epoll instance, on a made-up clock: a sleep after a spin that caught
    /// nothing grows the window when it was short and shrinks it when it was long, a caught
    /// event leaves it, and under a CPU limit nothing spins or adapts.
    #[test]
    fn auto_adapts_to_its_sleeps_and_stops_under_a_cpu_limit() {
        let (ep, ev) = epoll_with_eventfd();
        let fds = [ep.0.as_raw_fd()];
        let limited: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let s = Spinner::new(BusyPoll::Auto, limited);
        let t0 = Instant::now();
        let us = Duration::from_micros;
        // One park: parked at `t0`, woken `slept` later.
        let sleep = |slept: u64| {
            s.before_park(&fds, t0);
            s.after_unpark(t0 + us(slept));
            s.state.lock().unwrap().0
        };
        assert_eq!(sleep(3), AUTO_START, "a spin would have caught it");
        assert_eq!(sleep(30), AUTO_START * 2);
        assert_eq!(sleep(2_000), AUTO_START, "a long sleep halves it");
        assert_eq!(sleep(3), AUTO_START * 2);
        // An event is ready: the spin catches it, the loop does not sleep, the window stays.
        ev.write(1).unwrap();
        s.before_park(&fds, t0);
        assert_eq!(s.state.lock().unwrap().1, None, "caught: not asleep");
        assert_eq!(sleep(2_000), AUTO_START * 2);
        ev.read().unwrap();
        // Under a limit: no spin and no change, however the loop slept.
        limited.store(true, Ordering::Relaxed);
        assert_eq!(sleep(3), AUTO_START * 2);
        assert_eq!(sleep(2_000), AUTO_START * 2);
        limited.store(false, Ordering::Relaxed);
        assert_eq!(sleep(2_000), AUTO_START);
        assert_eq!(sleep(2_000), Duration::ZERO, "an idle loop stops spinning");
    }

    /// An epoll instance watching an eventfd, and the eventfd.
    fn epoll_with_eventfd() -> (Epoll, EventFd) {
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
        let ev = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .unwrap();
        let e = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLET, 1);
        let r = ep.add(&ev, e);
        assert_eq!(r, Ok(()));
        (ep, ev)
    }

    #[test]
    fn cpu_limits_from_cgroup_files() {
        use std::collections::HashMap;
        const V2: &str = "0::/kubepods/pod1/c1\n";
        const V1: &str = "4:memory:/x\n1:cpu,cpuacct:/kubepods/pod1/c1\n0::/\n";
        for (cgroups, files, want) in [
            (
                V2,
                vec![("/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "40000 100000\n")],
                Some(0.4),
            ),
            (
                V2,
                vec![("/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n")],
                None,
            ),
            // An ancestor's limit counts; the tightest wins.
            (
                V2,
                vec![
                    ("/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000"),
                    ("/sys/fs/cgroup/kubepods/pod1/cpu.max", "150000 100000"),
                    ("/sys/fs/cgroup/kubepods/cpu.max", "300000 100000"),
                ],
                Some(1.5),
            ),
            (V2, vec![], None),
            (
                "0::/\n",
                vec![("/sys/fs/cgroup/cpu.max", "50000 100000")],
                Some(0.5),
            ),
            (
                V1,
                vec![
                    (
                        "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_quota_us",
                        "20000\n",
                    ),
                    (
                        "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_period_us",
                        "100000\n",
                    ),
                ],
                Some(0.2),
            ),
            (
                V1,
                vec![
                    (
                        "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_quota_us",
                        "-1",
                    ),
                    (
                        "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_period_us",
                        "100000",
                    ),
                    ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1"),
                    ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000"),
                ],
                None,
            ),
            // A v1 "memory" line is not the cpu controller.
            (
                "4:memory:/x\n",
                vec![("/sys/fs/cgroup/memory/x/cpu.cfs_quota_us", "1000")],
                None,
            ),
            ("garbage\n", vec![], None),
        ] {
            let files: HashMap<&str, &str> = files.into_iter().collect();
            let got = cpu_limit_in(cgroups, |p| files.get(p).map(|s| s.to_string()));
            assert_eq!(got, want, "{cgroups:?} {files:?}");
        }
    }

    /// A clock that moves `step` forward on every reading, and how often it was read.
    fn stepping_clock(
        step: Duration,
    ) -> (impl FnMut() -> Instant, std::rc::Rc<std::cell::Cell<u32>>) {
        let start = Instant::now();
        let reads = std::rc::Rc::new(std::cell::Cell::new(0u32));
        let r = reads.clone();
        let now = move || {
            let t = start + step * r.get();
            r.set(r.get() + 1);
            t
        };
        (now, reads)
    }

    /// What bounds the CPU an idle `--busy-poll` relay costs: each park spins until its window
    /// has passed on the loop's own clock, then stops (and the worker sleeps in epoll_wait).
    /// Counted on a fake clock, so no wall-clock bound is involved; bench/README.md says how to
    /// measure the idle CPU time itself.
    #[test]
    fn spin_stops_once_its_window_has_passed_on_its_clock() {
        for (window_us, step_us, polls) in [(1000, 10, 100), (1000, 7, 143), (50, 50, 1), (0, 1, 1)]
        {
            let (now, reads) = stepping_clock(Duration::from_micros(step_us));
            let mut asked = 0u32;
            let ready = spin(Duration::from_micros(window_us), now, || {
                asked += 1;
                false
            });
            assert!(!ready);
            assert_eq!(asked, polls, "window {window_us}us, clock step {step_us}us");
            // One reading to set the end, one after each poll.
            assert_eq!(reads.get(), polls + 1);
        }
        // Something ready ends the spin at once, however long the window.
        let (now, _) = stepping_clock(Duration::from_micros(1));
        let mut asked = 0u32;
        assert!(spin(Duration::from_secs(60), now, || {
            asked += 1;
            asked == 3
        }));
        assert_eq!(asked, 3);
    }

    #[test]
    fn spin_returns_as_soon_as_an_event_is_ready_and_leaves_it_for_epoll_wait() {
        let (ep, ev) = epoll_with_eventfd();
        // Nothing ready: the whole window passes.
        let start = Instant::now();
        assert!(!spin_until_ready(
            &[ep.0.as_raw_fd()],
            Duration::from_millis(5)
        ));
        assert!(start.elapsed() >= Duration::from_millis(5));
        // Ready: back long before a 60 s window ends.
        let one = 1u64.to_ne_bytes();
        assert_eq!(nix::unistd::write(&ev, &one), Ok(8));
        let start = Instant::now();
        assert!(spin_until_ready(
            &[ep.0.as_raw_fd()],
            Duration::from_secs(60)
        ));
        assert!(start.elapsed() < Duration::from_secs(30));
        // The event is still there for the edge-triggered epoll_wait.
        let mut out = [EpollEvent::empty(); 4];
        let n = ep.wait(&mut out, 0u8);
        assert_eq!(n, Ok(1));
        assert_eq!(out[0].data(), 1);
    }
}
