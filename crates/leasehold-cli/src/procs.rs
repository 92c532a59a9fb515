//! Processes as `/proc` shows them (Linux): the trees `run` and `run --etcd`'s supervisor stop,
//! and whether a process group is orphaned, for `run --etcd`'s job control.

use rustix::process::Pid;

/// One process, from `/proc/PID/stat` ("PID (comm) S PPID PGRP SID …").
struct Stat {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    /// Asked by `orphaned` alone (`run --etcd`'s job control).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    session: i32,
    /// Not a zombie (a zombie cannot be signalled, and waits for its reaper).
    live: bool,
}

/// Every process `/proc` lists now.
fn all() -> Vec<Stat> {
    use std::io::Read;
    let mut all = Vec::new();
    // One read of a buffer that holds any stat line (a `read_to_string` of a file whose size
    // reads 0 takes five): the walk runs while a successor waits.
    let mut buf = [0u8; 4096];
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(n) =
            std::fs::File::open(format!("/proc/{pid}/stat")).and_then(|mut f| f.read(&mut buf))
        else {
            continue;
        };
        // The comm may hold anything; the fields follow the last ')'.
        let stat = String::from_utf8_lossy(&buf[..n]);
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let mut ids = fields.map(|f| f.parse::<i32>().ok());
        if let (Some(state), Some(Some(ppid)), Some(Some(pgrp)), Some(Some(session))) =
            (state, ids.next(), ids.next(), ids.next())
        {
            all.push(Stat {
                pid,
                ppid,
                pgrp,
                session,
                live: state != "Z" && state != "X",
            });
        }
    }
    all
}

/// Every live descendant of this process and, with `group`, every live member of that
/// process group.
///
/// "Every descendant" is exact only for a child subreaper (`PR_SET_CHILD_SUBREAPER`): an
/// orphan of the tree is then re-parented to it instead of to init, and so stays in the
/// walk; both callers become one first.
pub fn descendants(group: Option<Pid>) -> Vec<Pid> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let group = group.map(|g| g.as_raw_nonzero().get());
    let all: Vec<Stat> = all().into_iter().filter(|p| p.live).collect();
    let mut found = vec![me];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(all.iter().filter(|p| p.ppid == parent).map(|p| p.pid));
        i += 1;
    }
    found.remove(0);
    for p in &all {
        if Some(p.pgrp) == group && !found.contains(&p.pid) && p.pid != me {
            found.push(p.pid);
        }
    }
    found.into_iter().filter_map(Pid::from_raw).collect()
}

/// Whether process group `group` is orphaned (POSIX): no member has a parent in another
/// group of the same session — the kernel then discards a stop signal sent to it.
#[cfg(feature = "etcd")]
pub fn orphaned(group: Pid) -> bool {
    let group = group.as_raw_nonzero().get();
    let all = all();
    !all.iter().filter(|p| p.pgrp == group).any(|member| {
        all.iter().any(|parent| {
            parent.pid == member.ppid && parent.pgrp != group && parent.session == member.session
        })
    })
}
