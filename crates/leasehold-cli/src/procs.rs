//! Process trees from `/proc` (Linux): what `run` and `run --etcd`'s supervisor signal when
//! they stop COMMAND and everything it started.

use rustix::process::Pid;

/// Every live (not zombie) descendant of this process and, with `group`, every live member
/// of that process group, from `/proc`. A zombie is left out: it cannot be signalled, and
/// waits for its reaper.
///
/// "Every descendant" is exact only for a child subreaper (`PR_SET_CHILD_SUBREAPER`): an
/// orphan of the tree is then re-parented to it instead of to init, and so stays in the
/// walk; both callers become one first.
#[cfg(target_os = "linux")]
pub fn descendants(group: Option<Pid>) -> Vec<Pid> {
    use std::io::Read;
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let group = group.map(|g| g.as_raw_nonzero().get());
    // (pid, ppid, pgrp) of every live process.
    let mut all: Vec<(i32, i32, i32)> = Vec::new();
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
        // "PID (comm) S PPID PGRP ...": the comm may hold anything; the fields follow the
        // last ')'.
        let stat = String::from_utf8_lossy(&buf[..n]);
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let mut ids = fields.map(|f| f.parse::<i32>().ok());
        if let (Some(state), Some(Some(ppid)), Some(Some(pgrp))) = (state, ids.next(), ids.next())
            && state != "Z"
            && state != "X"
        {
            all.push((pid, ppid, pgrp));
        }
    }
    let mut found = vec![me];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            all.iter()
                .filter(|(_, pp, _)| *pp == parent)
                .map(|(p, _, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    for (pid, _, pgrp) in &all {
        if Some(*pgrp) == group && !found.contains(pid) && *pid != me {
            found.push(*pid);
        }
    }
    found.into_iter().filter_map(Pid::from_raw).collect()
}
