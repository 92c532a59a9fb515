//! The backing directory: always exactly the model's *durable* state.
//!
//! A mount loads the backing directory as its durable (and live) state; every sync that
//! changes the durable state is written through at once (a file's new content at each of
//! its durable names, a directory's entries reconciled), and a cut rewrites it whole. So the
//! backing directory is what a machine would find on its disk after the power came back,
//! and a remount of it is the reboot. (It is written without fsync of its own: it needs to
//! survive the crashfs process, not a real power loss.)
//!
//! Hard links are not preserved: an inode durable under two names is stored as two copies.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use crate::model::{Content, Ino, Model, Node, Op, ROOT};

/// A backing directory and which durable inode each of its paths holds.
#[derive(Debug)]
pub struct Backing {
    root: PathBuf,
    /// Relative path (`""` = root) → the inode written there: always the durable tree.
    written: BTreeMap<String, Ino>,
    /// The inverse: every path an inode is written at.
    paths_of: BTreeMap<Ino, BTreeSet<String>>,
}

impl Backing {
    /// Reads the backing directory `root` into inodes (the root is [`ROOT`]).
    pub fn load(root: &Path) -> io::Result<(Backing, BTreeMap<Ino, Node>)> {
        let mut nodes = BTreeMap::new();
        let mut written = BTreeMap::new();
        let mut next = ROOT;
        load_node(root, "", &mut next, &mut nodes, &mut written)?;
        let mut backing = Backing {
            root: root.to_path_buf(),
            written: BTreeMap::new(),
            paths_of: BTreeMap::new(),
        };
        for (rel, ino) in written {
            backing.record(&rel, ino);
        }
        Ok((backing, nodes))
    }

    /// The backing directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn abs(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    /// Writes through what a sync of `ino` made durable: `ops`, just replayed onto it.
    pub fn synced(&mut self, model: &Model, ino: Ino, ops: &[Op]) -> io::Result<()> {
        let paths: Vec<String> = self
            .paths_of
            .get(&ino)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .collect();
        for rel in paths {
            match model.durable(ino).map(|n| &n.content) {
                Some(Content::File(_)) => {
                    // The same operations on the backing file: a per-record fsync of a long
                    // log costs its record, not the log.
                    let file = fs::OpenOptions::new().write(true).open(self.abs(&rel))?;
                    for op in ops {
                        match op {
                            Op::Write { offset, data } => file.write_all_at(data, *offset)?,
                            Op::Truncate(len) => file.set_len(*len)?,
                            Op::Mode(_) => set_mode(&self.abs(&rel), model.durable(ino))?,
                            _ => {}
                        }
                    }
                }
                Some(Content::Dir(_)) => self.reconcile(model, &rel, ino)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn record(&mut self, rel: &str, ino: Ino) {
        if let Some(old) = self.written.insert(rel.to_string(), ino)
            && let Some(set) = self.paths_of.get_mut(&old)
        {
            set.remove(rel);
        }
        self.paths_of
            .entry(ino)
            .or_default()
            .insert(rel.to_string());
    }

    /// Writes through what a cut changed: the inodes in `changed` (directories reconciled
    /// first, then every changed file rewritten whole at each of its names).
    pub fn after_cut(&mut self, model: &Model, changed: &[Ino]) -> io::Result<()> {
        let (dirs, files): (Vec<Ino>, Vec<Ino>) = changed
            .iter()
            .partition(|i| model.durable(**i).is_some_and(Node::is_dir));
        for dir in dirs {
            let paths: Vec<String> = self
                .paths_of
                .get(&dir)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .collect();
            for rel in paths {
                // An earlier reconcile may have removed or replaced this path.
                if self.written.get(&rel) == Some(&dir) {
                    self.reconcile(model, &rel, dir)?;
                }
            }
        }
        for file in files {
            let paths: Vec<String> = self
                .paths_of
                .get(&file)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .collect();
            for rel in paths {
                if let Some(
                    node @ Node {
                        content: Content::File(bytes),
                        ..
                    },
                ) = model.durable(file)
                {
                    fs::write(self.abs(&rel), bytes)?;
                    set_mode(&self.abs(&rel), Some(node))?;
                }
            }
        }
        Ok(())
    }

    /// Rewrites the whole backing directory from the durable state.
    pub fn rewrite(&mut self, model: &Model) -> io::Result<()> {
        for entry in fs::read_dir(&self.root)? {
            remove_any(&entry?.path())?;
        }
        self.written.clear();
        self.paths_of.clear();
        self.record("", ROOT);
        self.reconcile(model, "", ROOT)
    }

    /// Makes the backing directory at `rel` hold exactly the durable entries of `dir`.
    fn reconcile(&mut self, model: &Model, rel: &str, dir: Ino) -> io::Result<()> {
        let Some(Content::Dir(entries)) = model.durable(dir).map(|n| &n.content) else {
            return Ok(());
        };
        let abs = self.abs(rel);
        set_mode(&abs, model.durable(dir))?;
        for entry in fs::read_dir(&abs)? {
            let name = entry?.file_name();
            if !entries.contains_key(&name) {
                let child = join(rel, &name);
                remove_any(&self.abs(&child))?;
                self.forget(&child);
            }
        }
        for (name, child) in entries {
            let child_rel = join(rel, name);
            let present = fs::symlink_metadata(self.abs(&child_rel)).is_ok();
            if !present || self.written.get(&child_rel) != Some(child) {
                self.replace(model, &child_rel, *child)?;
            }
        }
        Ok(())
    }

    fn forget(&mut self, rel: &str) {
        let prefix = format!("{rel}/");
        let mut gone: Vec<(String, Ino)> = self
            .written
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, i)| (k.clone(), *i))
            .collect();
        if let Some(i) = self.written.get(rel) {
            gone.push((rel.to_string(), *i));
        }
        for (k, ino) in gone {
            self.written.remove(&k);
            if let Some(set) = self.paths_of.get_mut(&ino) {
                set.remove(&k);
            }
        }
    }

    /// Removes whatever is at `rel` and writes inode `ino` (recursively) there.
    fn replace(&mut self, model: &Model, rel: &str, ino: Ino) -> io::Result<()> {
        let abs = self.abs(rel);
        if fs::symlink_metadata(&abs).is_ok() {
            remove_any(&abs)?;
        }
        self.forget(rel);
        let Some(node) = model.durable(ino) else {
            return Ok(());
        };
        match &node.content {
            Content::File(bytes) => {
                fs::write(&abs, bytes)?;
                set_mode(&abs, Some(node))?;
            }
            Content::Symlink(target) => symlink(target, &abs)?,
            Content::Dir(entries) => {
                fs::create_dir(&abs)?;
                set_mode(&abs, Some(node))?;
                self.record(rel, ino);
                for (name, child) in entries {
                    self.replace(model, &join(rel, name), *child)?;
                }
            }
        }
        self.record(rel, ino);
        Ok(())
    }
}

fn join(rel: &str, name: &std::ffi::OsStr) -> String {
    if rel.is_empty() {
        name.to_string_lossy().into_owned()
    } else {
        format!("{rel}/{}", name.to_string_lossy())
    }
}

fn set_mode(path: &Path, node: Option<&Node>) -> io::Result<()> {
    match node {
        Some(node) => fs::set_permissions(path, fs::Permissions::from_mode(node.mode)),
        None => Ok(()),
    }
}

fn remove_any(path: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    }
}

fn load_node(
    abs: &Path,
    rel: &str,
    next: &mut Ino,
    nodes: &mut BTreeMap<Ino, Node>,
    written: &mut BTreeMap<String, Ino>,
) -> io::Result<Ino> {
    let ino = *next;
    *next += 1;
    let meta = fs::symlink_metadata(abs)?;
    let mode = meta.mode() & 0o7777;
    let content = if meta.is_dir() {
        let mut entries = BTreeMap::new();
        let mut names: Vec<OsString> = fs::read_dir(abs)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        for name in names {
            let child = load_node(&abs.join(&name), &join(rel, &name), next, nodes, written)?;
            entries.insert(name, child);
        }
        Content::Dir(entries)
    } else if meta.file_type().is_symlink() {
        Content::Symlink(fs::read_link(abs)?.into_os_string())
    } else if meta.is_file() {
        Content::File(fs::read(abs)?)
    } else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "crashfs: {} is neither a regular file, a directory nor a symlink; \
                 a backing directory holds only those",
                abs.display()
            ),
        ));
    };
    nodes.insert(ino, Node { content, mode });
    written.insert(rel.to_string(), ino);
    Ok(ino)
}
