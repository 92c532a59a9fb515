//! Properties of the volatile-layer model, without FUSE: random operation sequences with
//! random syncs, then a cut, checked against an independent oracle.
//!
//! The oracle is deliberately simpler than the model: it remembers a *snapshot* of each
//! inode at its last fsync (and at its creation) and the *history* of its live states since,
//! where the model keeps per-inode operation logs and replays a prefix. So:
//!
//! * a cut that keeps nothing leaves exactly the snapshots reachable from the root;
//! * a cut that keeps everything leaves exactly the live state;
//! * a random-prefix cut leaves every inode in one of its states since its last sync;
//! * with directory fsync ignored, nothing created after the start is reachable after a
//!   drop-all cut, and with file fsync ignored no file has more than its creation content.

#![cfg(target_os = "linux")]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};

use crashfs::backing::Backing;
use crashfs::model::{Content, CutPolicy, Faults, Ino, Model, NewKind, Node, ROOT, Rng};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    Create {
        dir: usize,
        name: u8,
        is_dir: bool,
    },
    Write {
        file: usize,
        offset: u8,
        len: u8,
        byte: u8,
    },
    Truncate {
        file: usize,
        len: u8,
    },
    Unlink {
        dir: usize,
        name: u8,
    },
    Rename {
        from_dir: usize,
        from: u8,
        to_dir: usize,
        to: u8,
    },
    Fsync {
        node: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (any::<usize>(), 0u8..4, any::<bool>()).prop_map(|(dir, name, is_dir)| Step::Create {
            dir,
            name,
            is_dir
        }),
        (any::<usize>(), 0u8..16, 1u8..8, any::<u8>()).prop_map(|(file, offset, len, byte)| {
            Step::Write {
                file,
                offset,
                len,
                byte,
            }
        }),
        (any::<usize>(), 0u8..12).prop_map(|(file, len)| Step::Truncate { file, len }),
        (any::<usize>(), 0u8..4).prop_map(|(dir, name)| Step::Unlink { dir, name }),
        (any::<usize>(), 0u8..4, any::<usize>(), 0u8..4).prop_map(
            |(from_dir, from, to_dir, to)| {
                Step::Rename {
                    from_dir,
                    from,
                    to_dir,
                    to,
                }
            }
        ),
        any::<usize>().prop_map(|node| Step::Fsync { node }),
        any::<usize>().prop_map(|node| Step::Fsync { node }),
    ]
}

fn name(n: u8) -> OsString {
    OsString::from(format!("n{n}"))
}

/// Live inodes reachable from the root, directories and files apart.
fn reachable(model: &Model) -> (Vec<Ino>, Vec<Ino>) {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    let mut seen = BTreeSet::new();
    for (_, ino) in model.live_paths() {
        if !seen.insert(ino) {
            continue;
        }
        match model.live(ino).map(|n| &n.content) {
            Some(Content::Dir(_)) => dirs.push(ino),
            Some(Content::File(_)) => files.push(ino),
            _ => {}
        }
    }
    (dirs, files)
}

struct Oracle {
    snapshot: BTreeMap<Ino, Node>,
    history: BTreeMap<Ino, Vec<Node>>,
}

impl Oracle {
    fn record(&mut self, model: &Model, ino: Ino) {
        if let Some(n) = model.live(ino) {
            self.history.entry(ino).or_default().push(n.clone());
        }
    }
}

/// Runs `steps`; returns the model and the oracle.
fn drive(steps: &[Step], faults: Faults) -> (Model, Oracle) {
    drive_backed(steps, faults, None)
}

/// [`drive`], writing every sync through to `backing`.
fn drive_backed(
    steps: &[Step],
    faults: Faults,
    mut backing: Option<&mut Backing>,
) -> (Model, Oracle) {
    let mut model = Model::empty(faults);
    let mut oracle = Oracle {
        snapshot: BTreeMap::new(),
        history: BTreeMap::new(),
    };
    let root = model.live(ROOT).cloned().unwrap();
    oracle.snapshot.insert(ROOT, root.clone());
    oracle.history.insert(ROOT, vec![root]);
    for s in steps {
        let (dirs, files) = reachable(&model);
        let pick = |v: &Vec<Ino>, i: usize| v.get(i % v.len().max(1)).copied();
        match *s {
            Step::Create {
                dir,
                name: n,
                is_dir,
            } => {
                let Some(d) = pick(&dirs, dir) else { continue };
                let kind = if is_dir { NewKind::Dir } else { NewKind::File };
                if let Ok(ino) = model.create(d, &name(n), kind, 0o600) {
                    let node = model.live(ino).cloned().unwrap();
                    oracle.snapshot.insert(ino, node.clone());
                    oracle.history.insert(ino, vec![node]);
                    oracle.record(&model, d);
                }
            }
            Step::Write {
                file,
                offset,
                len,
                byte,
            } => {
                let Some(f) = pick(&files, file) else {
                    continue;
                };
                let data = vec![byte; usize::from(len)];
                model.write(f, u64::from(offset), &data).unwrap();
                oracle.record(&model, f);
            }
            Step::Truncate { file, len } => {
                let Some(f) = pick(&files, file) else {
                    continue;
                };
                model.truncate(f, u64::from(len)).unwrap();
                oracle.record(&model, f);
            }
            Step::Unlink { dir, name: n } => {
                let Some(d) = pick(&dirs, dir) else { continue };
                let r = match model.lookup(d, &name(n)) {
                    Ok(i) if model.live(i).is_some_and(Node::is_dir) => model.rmdir(d, &name(n)),
                    Ok(_) => model.unlink(d, &name(n)),
                    Err(e) => Err(e),
                };
                if r.is_ok() {
                    oracle.record(&model, d);
                }
            }
            Step::Rename {
                from_dir,
                from,
                to_dir,
                to,
            } => {
                let (Some(a), Some(b)) = (pick(&dirs, from_dir), pick(&dirs, to_dir)) else {
                    continue;
                };
                if model.rename(a, &name(from), b, &name(to), false).is_ok() {
                    oracle.record(&model, a);
                    oracle.record(&model, b);
                }
            }
            Step::Fsync { node } => {
                let all: Vec<Ino> = dirs.iter().chain(files.iter()).copied().collect();
                let Some(i) = pick(&all, node) else { continue };
                let ops = model.fsync(i).unwrap();
                if let Some(b) = backing.as_deref_mut() {
                    b.synced(&model, i, &ops).unwrap();
                }
                let n = model.live(i).cloned().unwrap();
                let ignored = if n.is_dir() {
                    faults.ignore_dir_fsync
                } else {
                    faults.ignore_file_fsync
                };
                if !ignored {
                    oracle.snapshot.insert(i, n.clone());
                    oracle.history.insert(i, vec![n]);
                }
            }
        }
    }
    (model, oracle)
}

/// The tree `nodes` defines from the root, as (path, content) pairs, a directory shown by
/// its entry names only (inode numbers are the model's business).
fn tree(nodes: &BTreeMap<Ino, Node>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(String::new(), ROOT)];
    while let Some((path, ino)) = stack.pop() {
        match nodes.get(&ino).map(|n| &n.content) {
            Some(Content::Dir(entries)) => {
                let names: Vec<_> = entries
                    .keys()
                    .map(|k| k.to_string_lossy().into_owned())
                    .collect();
                out.insert(path.clone(), format!("dir {names:?}"));
                for (n, child) in entries {
                    if nodes.contains_key(child) {
                        stack.push((format!("{path}/{}", n.to_string_lossy()), *child));
                    }
                }
            }
            Some(Content::File(bytes)) => {
                out.insert(path, format!("file {bytes:?}"));
            }
            Some(Content::Symlink(t)) => {
                out.insert(path, format!("link {t:?}"));
            }
            None => {}
        }
    }
    out
}

fn live_nodes(model: &Model) -> BTreeMap<Ino, Node> {
    model
        .live_paths()
        .into_iter()
        .filter_map(|(_, i)| model.live(i).map(|n| (i, n.clone())))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_drop_all_cut_leaves_exactly_the_synced_state(steps in prop::collection::vec(step(), 0..60)) {
        let (mut model, oracle) = drive(&steps, Faults::default());
        model.cut(CutPolicy::DropAll, &mut Rng::new(0));
        prop_assert_eq!(tree(&live_nodes(&model)), tree(&oracle.snapshot));
    }

    #[test]
    fn a_keep_all_cut_leaves_exactly_the_live_state(steps in prop::collection::vec(step(), 0..60)) {
        let (mut model, _) = drive(&steps, Faults::default());
        let before = tree(&live_nodes(&model));
        model.cut(CutPolicy::KeepAll, &mut Rng::new(0));
        prop_assert_eq!(tree(&live_nodes(&model)), before);
    }

    #[test]
    fn a_random_prefix_cut_leaves_every_inode_in_a_state_it_had_since_its_last_sync(
        steps in prop::collection::vec(step(), 0..60),
        seed in any::<u64>(),
    ) {
        let (mut model, oracle) = drive(&steps, Faults::default());
        model.cut(CutPolicy::RandomPrefix { torn: false }, &mut Rng::new(seed));
        for (_, ino) in model.live_paths() {
            let node = model.live(ino).unwrap();
            let history = oracle.history.get(&ino).cloned().unwrap_or_default();
            prop_assert!(
                history.contains(node),
                "inode {} is {:?}, never one of its states since its last sync: {:?}",
                ino, node, history
            );
        }
    }

    #[test]
    fn a_torn_cut_never_changes_a_synced_byte_and_powers_off(
        steps in prop::collection::vec(step(), 0..60),
        seed in any::<u64>(),
    ) {
        let (mut model, oracle) = drive(&steps, Faults::default());
        model.cut(CutPolicy::RandomPrefix { torn: true }, &mut Rng::new(seed));
        prop_assert!(model.powered_off());
        prop_assert!(model.lookup(ROOT, OsStr::new("n0")).is_err());
        // Every directory is in one of its states since its last sync (writes tear, names
        // do not).
        for (_, ino) in model.live_paths() {
            let node = model.live(ino).unwrap();
            if node.is_dir() {
                let history = oracle.history.get(&ino).cloned().unwrap_or_default();
                prop_assert!(history.contains(node));
            }
        }
    }

    #[test]
    fn the_backing_directory_always_holds_the_durable_state(
        steps in prop::collection::vec(step(), 0..60),
        seed in any::<u64>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (mut backing, _) = Backing::load(dir.path()).unwrap();
        let (mut model, _) = drive_backed(&steps, Faults::default(), Some(&mut backing));
        let durable: BTreeMap<Ino, Node> = model
            .durable_paths()
            .into_iter()
            .filter_map(|(_, i)| model.durable(i).map(|n| (i, n.clone())))
            .collect();
        let (_, loaded) = Backing::load(dir.path()).unwrap();
        prop_assert_eq!(tree(&loaded), tree(&durable));
        // And after a cut: what it changed, written through (and a whole rewrite agrees).
        let report = model.cut(CutPolicy::RandomPrefix { torn: true }, &mut Rng::new(seed));
        backing.after_cut(&model, &report.changed).unwrap();
        let (_, loaded) = Backing::load(dir.path()).unwrap();
        prop_assert_eq!(tree(&loaded), tree(&live_nodes(&model)));
        backing.rewrite(&model).unwrap();
        let (_, loaded) = Backing::load(dir.path()).unwrap();
        prop_assert_eq!(tree(&loaded), tree(&live_nodes(&model)));
    }

    #[test]
    fn ignoring_directory_fsync_loses_every_new_name(steps in prop::collection::vec(step(), 0..60)) {
        let faults = Faults { ignore_dir_fsync: true, ..Faults::default() };
        let (mut model, _) = drive(&steps, faults);
        model.cut(CutPolicy::DropAll, &mut Rng::new(0));
        model.power_on();
        prop_assert!(model.readdir(ROOT).unwrap().is_empty());
    }

    #[test]
    fn ignoring_file_fsync_loses_every_unsynced_byte(steps in prop::collection::vec(step(), 0..60)) {
        let faults = Faults { ignore_file_fsync: true, ..Faults::default() };
        let (mut model, _) = drive(&steps, faults);
        model.cut(CutPolicy::DropAll, &mut Rng::new(0));
        for (_, ino) in model.live_paths() {
            if let Some(Content::File(bytes)) = model.live(ino).map(|n| &n.content) {
                prop_assert!(bytes.is_empty(), "file {} kept {:?}", ino, bytes);
            }
        }
    }
}

#[test]
fn fsync_of_a_file_does_not_make_its_name_durable() {
    let mut m = Model::empty(Faults::default());
    let f = m
        .create(ROOT, OsStr::new("doc"), NewKind::File, 0o600)
        .unwrap();
    m.write(f, 0, b"data").unwrap();
    m.fsync(f).unwrap();
    m.cut(CutPolicy::DropAll, &mut Rng::new(0));
    m.power_on();
    assert!(
        m.readdir(ROOT).unwrap().is_empty(),
        "the name was never synced"
    );
}

#[test]
fn a_synced_name_without_synced_data_is_an_empty_file() {
    let mut m = Model::empty(Faults::default());
    let f = m
        .create(ROOT, OsStr::new("doc"), NewKind::File, 0o600)
        .unwrap();
    m.write(f, 0, b"data").unwrap();
    m.fsync(ROOT).unwrap();
    m.cut(CutPolicy::DropAll, &mut Rng::new(0));
    m.power_on();
    let f = m.lookup(ROOT, OsStr::new("doc")).unwrap();
    assert_eq!(m.read(f, 0, 100).unwrap(), b"");
}

#[test]
fn the_durable_rewrite_order_survives_a_cut_and_without_the_dir_fsync_rolls_back() {
    for sync_dir in [true, false] {
        let mut m = Model::empty(Faults::default());
        let doc = m
            .create(ROOT, OsStr::new("doc"), NewKind::File, 0o600)
            .unwrap();
        m.write(doc, 0, b"old").unwrap();
        m.fsync(doc).unwrap();
        m.fsync(ROOT).unwrap();
        let tmp = m
            .create(ROOT, OsStr::new(".doc.tmp"), NewKind::File, 0o600)
            .unwrap();
        m.write(tmp, 0, b"new").unwrap();
        m.fsync(tmp).unwrap();
        m.rename(ROOT, OsStr::new(".doc.tmp"), ROOT, OsStr::new("doc"), false)
            .unwrap();
        if sync_dir {
            m.fsync(ROOT).unwrap();
        }
        m.cut(CutPolicy::DropAll, &mut Rng::new(0));
        m.power_on();
        let f = m.lookup(ROOT, OsStr::new("doc")).unwrap();
        let want: &[u8] = if sync_dir { b"new" } else { b"old" };
        assert_eq!(m.read(f, 0, 100).unwrap(), want, "sync_dir {sync_dir}");
        assert!(m.lookup(ROOT, OsStr::new(".doc.tmp")).is_err());
    }
}
