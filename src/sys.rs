//! Every raw `libc` call of dispatch, each behind a small safe wrapper: the only `unsafe` in
//! the crate (`lib.rs` denies `unsafe_code` everywhere else). A wrapper states in `SAFETY:`
//! why its call is sound, turns the C convention (`-1` and `errno`) into `io::Result`, and adds
//! no policy: what a failure means is the caller's to say. Constants such as `libc::SIGTERM`
//! or `libc::O_NOFOLLOW` are used where they are needed; they call nothing.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// `-1` with `errno` as an error, anything else as itself.
fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The effective user id of this process (`geteuid`).
pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The user name of `uid` from the system's user database (`getpwuid_r`: files, LDAP, …).
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: passwd is plain data; getpwuid_r writes only into `pwd` and `buf` (whose length
    // it is given) and sets `result` to null or to `&pwd`. `pw_name` points into `buf`, which
    // outlives the copy made of it.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        Some(CStr::from_ptr(pwd.pw_name).to_string_lossy().into_owned())
    }
}

/// This host's name (`gethostname`), up to its first NUL, lossily as UTF-8.
pub fn hostname() -> io::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it or
    // truncates, and we stop at the first NUL (or at the end).
    check(unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) })?;
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The type (`f_type` of `statfs`, its low 32 bits) of the file system holding `path`.
pub fn statfs_type(path: &Path) -> io::Result<u64> {
    let c = c_path(path)?;
    // SAFETY: statfs is plain data, so all zeroes is a valid value.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `buf` a properly sized out-parameter.
    check(unsafe { libc::statfs(c.as_ptr(), &mut buf) })?;
    #[allow(clippy::unnecessary_cast)] // f_type is i64 on glibc x86_64, u32/i32 elsewhere
    Ok(buf.f_type as u64 & 0xFFFF_FFFF)
}

/// What `statvfs` says an unprivileged writer has free on the file system holding a path.
#[derive(Debug, Clone, Copy)]
pub struct FreeSpace {
    /// `f_bavail`: free blocks for an unprivileged writer.
    pub blocks: u64,
    /// `f_frsize`: the size of those blocks, in bytes.
    pub block_size: u64,
    /// `f_favail`: free inodes for an unprivileged writer.
    pub inodes: u64,
}

/// [`FreeSpace`] of the file system holding `path` (`statvfs`).
pub fn statvfs_free(path: &Path) -> io::Result<FreeSpace> {
    let c = c_path(path)?;
    // SAFETY: statvfs is plain data, so all zeroes is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a properly sized out-parameter.
    check(unsafe { libc::statvfs(c.as_ptr(), &mut s) })?;
    // fsblkcnt_t and friends are 32-bit on some targets: widen explicitly.
    #[allow(clippy::useless_conversion)]
    Ok(FreeSpace {
        blocks: u64::from(s.f_bavail),
        block_size: u64::from(s.f_frsize),
        inodes: u64::from(s.f_favail),
    })
}

/// Fill as much of `buf` as one `getrandom` call (flags 0) does; how many bytes it filled.
#[cfg(target_os = "linux")]
pub fn getrandom(buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: getrandom writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// How a child ended, as `waitpid` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEnd {
    /// It exited with this code.
    Exited(i32),
    /// A signal (this number) killed it.
    Signaled(i32),
    /// Neither (waitpid reported it all the same).
    Other,
}

/// Reap the child `pid` if it has ended, without waiting (`waitpid` with `WNOHANG`):
/// `Ok(None)` while it runs; an error (`ECHILD`) when it is not, or no longer, our child.
pub fn waitpid_nohang(pid: i32) -> io::Result<Option<ChildEnd>> {
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG only reads and writes `status`, which outlives the call.
    let r = check(unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) })?;
    if r == 0 {
        return Ok(None);
    }
    Ok(Some(if libc::WIFEXITED(status) {
        ChildEnd::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        ChildEnd::Signaled(libc::WTERMSIG(status))
    } else {
        ChildEnd::Other
    }))
}

/// A pid as `kill` takes it: positive, since 0 and negative numbers name process groups.
fn positive_pid(pid: u32) -> io::Result<libc::pid_t> {
    libc::pid_t::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no pid {pid}")))
}

/// Send `signal` to the process `pid` (`kill(pid, signal)`).
pub fn signal_process(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = positive_pid(pid)?;
    // SAFETY: kill touches no memory; `pid` is positive, so it names one process.
    check(unsafe { libc::kill(pid, signal) }).map(drop)
}

/// Send `signal` to every process of the group `pgid` (`kill(-pgid, signal)`).
pub fn signal_group(pgid: u32, signal: libc::c_int) -> io::Result<()> {
    let pgid = positive_pid(pgid)?;
    // SAFETY: kill touches no memory; `-pgid` is negative, so it names that one group.
    check(unsafe { libc::kill(-pgid, signal) }).map(drop)
}

/// End this process at once with `code` (`_exit`): no destructor, no atexit hook, no flush.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions; skipping destructors is the point.
    unsafe { libc::_exit(code) }
}

/// Have `cmd`'s child start a new session (`setsid` between fork and exec), so that it leads
/// its own process group and has no controlling terminal; spawn fails if setsid does.
pub fn new_session_on_spawn(cmd: &mut tokio::process::Command) {
    // SAFETY: the hook runs in the forked child before exec; setsid is async-signal-safe,
    // allocates nothing and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| check(libc::setsid()).map(drop));
    }
}
