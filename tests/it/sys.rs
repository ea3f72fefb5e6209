//! The tests' only `unsafe` code, as in the product (`src/sys.rs`): a resource limit set between
//! fork and exec, and the extended-attribute calls no dependency wraps. Everything else goes
//! through `nix` or std.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// Makes `cmd`'s child start with at most `limit` open files (soft and hard).
pub fn limit_open_files(cmd: &mut Command, limit: u64) {
    use nix::sys::resource::{setrlimit, Resource};
    // SAFETY: only setrlimit, which is async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || Ok(setrlimit(Resource::RLIMIT_NOFILE, limit, limit)?));
    }
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

pub fn set_xattr(p: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let (path, name) = (c_path(p), CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a buffer with its length.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

pub fn get_xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let (path, name) = (c_path(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; 256];
    // SAFETY: valid NUL-terminated strings and a buffer with its length.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

/// Makes `cmd`'s child receive SIGKILL when the thread that spawns it exits, so a peer started
/// for the whole test binary (`peers::spawn`, from a thread that lives as long as the process)
/// does not outlive a run that ends, panics or is killed.
pub fn kill_with_parent(cmd: &mut Command) {
    // SAFETY: only prctl, which is async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}
