//! When what git-steps writes reaches the disk: one flush of a file system
//! (syncfs) at a commit point, in place of an fsync per object, ref and
//! directory, where syncfs is known to flush (elsewhere each file and
//! directory in order, [`crate::git::fsync`]); and the boot epoch, which
//! tells a process whether writes an earlier boot left unflushed may be
//! torn.
//!
//! libgit2 writes objects and refs without flushing them (a box holds
//! nothing the durable domain cannot rebuild). What is durable is flushed
//! in order by its commit point: everything written before it — the step's
//! objects in the box, the objects and the ref's new value linked into a
//! local remote — is flushed by [`file_systems`] before the ref is renamed,
//! and the rename by an fsync of its directory.
//!
//! Invariant: nothing durable (a remote's ref, the local branch of a run
//! without a remote, a rescue) names an object whose bytes were not flushed
//! first, and no loose object goes into a local remote unchecked unless this
//! process created it ([`loose_is_whole`]). A repository written in a boot
//! that ended before its writes were flushed is checked ([`scrub`]: every
//! loose object that boot wrote against its id, every loose ref readable)
//! before anything trusts it: a torn object is moved aside (libgit2 would
//! otherwise keep it, as the object it names, when the same object is
//! written again), a tree or commit naming a missing object too, a torn
//! branch is set back to its reflog's last value, another torn ref moved
//! aside. Each repository records the boot that writes it (`epoch`, written
//! and flushed before that boot's first unflushed write).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Flush the file systems holding `paths`: one syncfs each (two paths on
/// one file system cost one) where syncfs is known to flush; on any other
/// (FUSE, a network or unknown file system), every file and directory this
/// process wrote since the last commit point, one by one
/// ([`crate::git::fsync`]).
pub fn file_systems(paths: &[&Path]) -> std::io::Result<()> {
    use crate::git::fsync;
    fsync::flush_pending()?;
    // The device of each path seen, so that a path on a file system
    // already flushed is not even opened (a push flushes box and remote
    // every step, most often on one file system).
    static DEVICES: std::sync::Mutex<Vec<(PathBuf, u64)>> = std::sync::Mutex::new(Vec::new());
    let known = |p: &Path| {
        let devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        devices.iter().find(|(q, _)| q == p).map(|(_, d)| *d)
    };
    let mut done = HashSet::new();
    for p in paths {
        if known(p).is_some_and(|d| done.contains(&d)) {
            continue;
        }
        let dir = std::fs::File::open(p)?;
        let dev = dir.metadata()?.dev();
        if known(p).is_none() {
            DEVICES
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((p.to_path_buf(), dev));
        }
        if done.insert(dev) {
            match fsync::judge_device(dev, p) {
                fsync::Flushing::Syncfs => crate::os::syncfs(&dir)?,
                fsync::Flushing::PerFile => crate::os::flush_drive_cache(&dir)?,
            }
        }
    }
    Ok(())
}

/// Flush the file system of `repo`'s git dir, and of its `objects/` where
/// that is another (a symlink or a mount): everything written there so far
/// is durable when this returns.
pub fn repository(repo: &git2::Repository) -> crate::error::Result<()> {
    let objects = repo.commondir().join("objects");
    file_systems(&[repo.commondir(), &objects]).map_err(|e| {
        crate::error::Error::io(format!("cannot flush {}", repo.commondir().display()), e)
    })
}

/// This boot's identity: the kernel's boot id (`GIT_STEPS_BOOT_ID` stands
/// for it in `crashtest --power-loss`, whose states resume as if after a
/// reboot).
pub fn boot_id() -> String {
    if let Some(id) = std::env::var_os(crate::keys::BOOT_ID.name) {
        return id.to_string_lossy().into_owned();
    }
    crate::os::boot_id()
        .or_else(|| {
            crate::lock::boot_time().and_then(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .map(|d| format!("btime-{}", d.as_secs()))
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Per git dir, whether this process found it last written by git-steps
/// in another boot (read before [`scrub`] records this one).
static REBOOTED: std::sync::Mutex<Vec<(PathBuf, bool)>> = std::sync::Mutex::new(Vec::new());

fn remember_reboot(git_dir: &Path, rebooted: bool) {
    let mut seen = REBOOTED.lock().unwrap_or_else(|e| e.into_inner());
    if !seen.iter().any(|(d, _)| d == git_dir) {
        seen.push((git_dir.to_path_buf(), rebooted));
    }
}

/// Whether the repository at `git_dir` was last written by git-steps in
/// another boot of this machine: its epoch (`steps-epoch`) names another
/// boot id than the kernel's. The evidence a lock's date needs before it
/// is called stale: `btime` alone can be shifted (a time namespace, a
/// container restored on another host), the kernel's boot id cannot. A
/// repository git-steps never wrote has no epoch: nothing in it is judged
/// by its date.
pub fn rebooted(git_dir: &Path) -> bool {
    if let Some((_, r)) = REBOOTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(d, _)| d == git_dir)
    {
        return *r;
    }
    std::fs::read_to_string(git_dir.join("steps-epoch")).is_ok_and(|recorded| recorded != boot_id())
}

/// What [`scrub`] found torn and moved aside.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scrubbed {
    pub objects: Vec<String>,
    pub refs: Vec<String>,
    /// Where they were moved.
    pub kept: Option<PathBuf>,
}

impl Scrubbed {
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.refs.is_empty()
    }

    /// The sentence that says what was done, if anything was.
    pub fn note(&self, repo: &Path) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.objects.is_empty() {
            parts.push(format!("{} loose object(s)", self.objects.len()));
        }
        if !self.refs.is_empty() {
            parts.push(format!("ref(s) {}", self.refs.join(", ")));
        }
        Some(format!(
            "{}: {} written before the last power cut or reset were torn (not flushed when it came): moved to {}; they are fetched or written again",
            repo.display(),
            parts.join(" and "),
            self.kept.as_deref().unwrap_or(Path::new("?")).display()
        ))
    }
}

/// If the repository at `git_dir` (a git dir: objects/ and refs/ under
/// it) was last written in another boot, check it ([`Scrubbed`]); then
/// record this boot in `git_dir/<epoch>`, flushed, so this boot's writes
/// need no flush of their own. `skip` names refs another mend owns (the
/// run's branch, set back to its last value rather than moved aside).
/// Cheap when the epoch is this boot's: one read.
pub fn scrub(git_dir: &Path, epoch: &str, keep: &Path, skip: &[&str]) -> std::io::Result<Scrubbed> {
    let marker = git_dir.join(epoch);
    let now = boot_id();
    let recorded = std::fs::read_to_string(&marker).ok();
    remember_reboot(git_dir, recorded.as_deref().is_some_and(|r| r != now));
    if recorded.as_deref() == Some(now.as_str()) {
        return Ok(Scrubbed::default());
    }
    let mut found = Scrubbed::default();
    // No epoch: written by a git-steps that flushed everything, or never.
    if recorded.is_some() {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let aside = keep.join(format!("scrub.{stamp}"));
        // Another process of this clone (a run in a linked worktree) may
        // be checking too: what it moved first is gone, and no error.
        let move_aside = |from: &Path, name: &str| -> std::io::Result<()> {
            let to = aside.join(name);
            std::fs::create_dir_all(to.parent().unwrap_or(&aside))?;
            match std::fs::rename(from, to) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        };
        let objects = git_dir.join("objects");
        // Only what the recorded boot wrote (or freshened): created or
        // changed since its epoch was written, a minute's slack for the
        // clock. Older objects were checked, or flushed, before it.
        let since = std::fs::metadata(&marker)
            .and_then(|m| m.modified())
            .ok()
            .map(|t| t - std::time::Duration::from_secs(60));
        let recent = |p: &Path| {
            since.is_none_or(|since| {
                std::fs::symlink_metadata(p).is_ok_and(|m| {
                    let ctime = std::time::UNIX_EPOCH
                        + std::time::Duration::new(m.ctime().max(0) as u64, m.ctime_nsec() as u32);
                    ctime >= since
                })
            })
        };
        let candidates: Vec<(PathBuf, String)> = loose_objects(&objects)
            .into_iter()
            .filter(|(p, _)| recent(p))
            .collect();
        for (path, hex) in &candidates {
            if object_is_torn(path, hex) {
                move_aside(path, hex)?;
                found.objects.push(hex.clone());
            }
        }
        // A whole tree or commit whose entry is torn or missing goes too:
        // the cut kept a parent and lost its child (written first, flushed
        // by nobody; names in two directories reach the disk in any
        // order), and a push takes an object it finds as complete.
        // Not in a partial clone, where a missing blob is normal; and a
        // shallow commit's parents are not looked for.
        let partial = std::fs::read_dir(objects.join("pack")).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".promisor"))
        }) || objects.join("info").join("alternates").exists();
        let shallow = std::fs::read_to_string(git_dir.join("shallow")).unwrap_or_default();
        if !partial {
            let odb = git2::Odb::new().map_err(std::io::Error::other)?;
            odb.add_disk_alternate(&objects.to_string_lossy())
                .map_err(std::io::Error::other)?;
            loop {
                let mut more = Vec::new();
                for (path, hex) in &candidates {
                    if shallow.contains(hex.as_str()) || !path.exists() {
                        continue;
                    }
                    let lacks = crate::git::loose::inflate(path)
                        .map(|raw| referents(&raw))
                        .unwrap_or_default()
                        .into_iter()
                        .any(|id| !odb.exists(id));
                    if lacks {
                        move_aside(path, hex)?;
                        more.push(hex.clone());
                    }
                }
                if more.is_empty() {
                    break;
                }
                found.objects.extend(more);
            }
        }
        let mut refs = Vec::new();
        loose_refs(&git_dir.join("refs"), "refs", &mut refs);
        // Only refs that boot wrote, judged as git reads them: a tag
        // stored as `<id>\r\n`, a symref `ref:refs/heads/main`, are refs.
        for (path, name) in refs {
            if skip.contains(&name.as_str()) || !recent(&path) || ref_is_whole(&path) {
                continue;
            }
            // A branch goes back to the last value its reflog recorded
            // (another run's, whose own mend would find it gone); anything
            // else, or a branch with no such value, is moved aside.
            let restored = name
                .starts_with("refs/heads/")
                .then(|| last_logged(git_dir, &name))
                .flatten();
            match restored {
                Some(id) => {
                    let tmp = path.with_extension(format!("steps-{}.tmp", std::process::id()));
                    std::fs::write(&tmp, format!("{id}\n"))?;
                    std::fs::File::open(&tmp)?.sync_all()?;
                    std::fs::rename(&tmp, &path)?;
                    crate::lock::sync_dir(path.parent().unwrap_or(git_dir))?;
                    found
                        .refs
                        .push(format!("{name} (set back to {id} from its reflog)"));
                }
                None => {
                    move_aside(&path, &name)?;
                    found.refs.push(name);
                }
            }
        }
        if !found.is_empty() {
            found.kept = Some(aside.clone());
            crate::lock::sync_dir(&aside)?;
            crate::lock::sync_dir(keep)?;
        }
    }
    // The epoch, durable before this boot's first unflushed write (a name
    // of this process's own: two runs of one clone may write it at once).
    let tmp = git_dir.join(format!("{epoch}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, &now)?;
    crate::git::shared::created(git_dir, &tmp)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &marker)?;
    crate::lock::sync_dir(git_dir)?;
    Ok(found)
}

/// The values a reflog's text records, newest first: the new id of each
/// whole line (a cut can leave the last line short or zeroed).
pub fn reflog_values(text: &[u8]) -> impl Iterator<Item = git2::Oid> + '_ {
    text.split(|b| *b == b'\n').rev().filter_map(|line| {
        // "<old> <new> <who> <when>\t<message>"
        let new = line.get(41..81)?;
        let id = git2::Oid::from_str(std::str::from_utf8(new).ok()?).ok()?;
        (line.get(40) == Some(&b' ') && !id.is_zero()).then_some(id)
    })
}

/// The last value `refname`'s reflog records whose object is here.
fn last_logged(git_dir: &Path, refname: &str) -> Option<git2::Oid> {
    let text = std::fs::read(git_dir.join("logs").join(refname)).ok()?;
    let odb = git2::Odb::new().ok()?;
    odb.add_disk_alternate(&git_dir.join("objects").to_string_lossy())
        .ok()?;
    let found = reflog_values(&text).find(|id| odb.exists(*id));
    found
}

/// Every loose object file under `objects`: (path, hex id).
fn loose_objects(objects: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(objects) else {
        return out;
    };
    for d in dirs.flatten() {
        let fan = d.file_name().to_string_lossy().into_owned();
        if fan.len() != 2 || !fan.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let Ok(files) = std::fs::read_dir(d.path()) else {
            continue;
        };
        for f in files.flatten() {
            let rest = f.file_name().to_string_lossy().into_owned();
            if rest.len() == 38 && rest.bytes().all(|b| b.is_ascii_hexdigit()) {
                out.push((f.path(), format!("{fan}{rest}")));
            }
        }
    }
    out
}

/// When this process started (the first call), for [`written_here`].
fn started() -> std::time::SystemTime {
    static START: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();
    *START.get_or_init(std::time::SystemTime::now)
}

/// Note the process's start (call before its first write).
pub fn mark_start() {
    let _ = started();
}

/// Whether the loose object at `path` is whole before it is copied to a
/// remote: one this process created (birth time after its start) is
/// trusted; any other, which a cut in an earlier boot may have torn while
/// libgit2 took it as present ("freshened" it), is inflated and hashed.
pub fn loose_is_whole(path: &Path, hex: &str) -> bool {
    let fresh = std::fs::metadata(path)
        .and_then(|m| m.created())
        .is_ok_and(|born| born >= started());
    fresh || crate::git::loose::is_whole(path, hex)
}

/// Whether a loose object file was read and is not whole (a file that
/// cannot be read — permissions, an I/O error — is not called torn).
fn object_is_torn(path: &Path, hex: &str) -> bool {
    std::fs::File::open(path).is_ok() && !crate::git::loose::is_whole(path, hex)
}

/// The objects a loose object (inflated, header first) names: a commit's
/// tree and parents, a tree's entries (not gitlinks), a tag's object.
fn referents(raw: &[u8]) -> Vec<git2::Oid> {
    let Some(nul) = raw.iter().position(|b| *b == 0) else {
        return Vec::new();
    };
    let (header, body) = (&raw[..nul], &raw[nul + 1..]);
    let hex_after = |line: &[u8], key: &[u8]| {
        line.strip_prefix(key)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| git2::Oid::from_str(h.trim()).ok())
    };
    let mut out = Vec::new();
    if header.starts_with(b"tree ") {
        let mut rest = body;
        while let Some(sp) = rest.iter().position(|b| *b == b' ') {
            let mode = &rest[..sp];
            let Some(nul) = rest[sp..].iter().position(|b| *b == 0) else {
                break;
            };
            let at = sp + nul + 1;
            let Some(id) = rest.get(at..at + 20) else {
                break;
            };
            if mode != b"160000" {
                if let Ok(id) = git2::Oid::from_bytes(id) {
                    out.push(id);
                }
            }
            rest = &rest[at + 20..];
        }
    } else if header.starts_with(b"commit ") || header.starts_with(b"tag ") {
        for line in body.split(|b| *b == b'\n') {
            if line.is_empty() {
                break;
            }
            out.extend(
                hex_after(line, b"tree ")
                    .or_else(|| hex_after(line, b"parent "))
                    .or_else(|| hex_after(line, b"object ")),
            );
        }
    }
    out
}

/// Every loose ref file under `dir` (named `prefix/...`).
fn loose_refs(dir: &Path, prefix: &str, out: &mut Vec<(PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = format!("{prefix}/{}", e.file_name().to_string_lossy());
        match e.file_type() {
            Ok(t) if t.is_dir() => loose_refs(&e.path(), &name, out),
            Ok(t) if t.is_file() && !name.ends_with(".lock") => out.push((e.path(), name)),
            _ => {}
        }
    }
}

/// Whether a loose ref file holds a whole value: an id and a newline, or
/// `ref: ` and a name.
fn ref_is_whole(path: &Path) -> bool {
    // (A file that cannot be read, permissions or I/O, is not called torn.)
    std::fs::read(path).map_or(true, |b| crate::git::loose_ref_parses(&b))
}

/// Make the 256 fan-out directories of `objects/` exist, their names
/// durable, where writes are flushed file by file. There libgit2 makes one
/// when it first writes an object under it and fsyncs the object and that
/// directory, never `objects/` itself: a cut may then lose the new
/// directory, and with it an object a durable ref names (what the POSIX
/// model of `crashtest --power-loss` found). Made here once, with one fsync
/// of `objects/`; `git prune` removes empty ones again, and the next run
/// makes them again. Where one `syncfs` at the commit point flushes the
/// file system (this module), it flushes a new directory's name with
/// the objects under it, before any ref names them: nothing is made (256
/// directories and their modes cost a fresh clone's first step more than
/// the step).
pub fn fan_out(repo: &git2::Repository) -> crate::error::Result<()> {
    let objects = repo.commondir().join("objects");
    if crate::git::fsync::note_file_system(&objects) == crate::git::fsync::Flushing::Syncfs {
        return Ok(());
    }
    let Ok(entries) = std::fs::read_dir(&objects) else {
        return Ok(());
    };
    let mut have = [false; 256];
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.len() == 2 {
            if let Ok(i) = u8::from_str_radix(&name, 16) {
                have[i as usize] = true;
            }
        }
    }
    if have.iter().all(|h| *h) {
        return Ok(());
    }
    let io = |what: &str, e: std::io::Error| {
        crate::error::Error::io(format!("cannot {what} {}", objects.display()), e)
    };
    // As objects/ itself is (core.sharedRepository: group-writable, setgid).
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&objects).map(|m| m.permissions().mode() & 0o7777)
    };
    for (i, _) in have.iter().enumerate().filter(|(_, h)| !**h) {
        let dir = objects.join(format!("{i:02x}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                if let Ok(mode) = mode {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
                        .and_then(|()| crate::git::shared::created(repo.path(), &dir))
                        .map_err(|e| io("set the mode of a directory in", e))?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io("make the object directories in", e)),
        }
    }
    crate::lock::sync_dir(&objects).map_err(|e| io("fsync", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loose(dir: &Path, content: &[u8]) -> (PathBuf, String) {
        loose_kind(dir, "blob", content)
    }

    fn loose_kind(dir: &Path, kind: &str, content: &[u8]) -> (PathBuf, String) {
        use sha1::Digest;
        let mut raw = format!("{kind} {}\0", content.len()).into_bytes();
        raw.extend_from_slice(content);
        let hex = crate::git::hex(&sha1::Sha1::digest(&raw));
        let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut z = vec![0u8; c.zlib_compress_bound(raw.len())];
        let n = c.zlib_compress(&raw, &mut z).unwrap();
        z.truncate(n);
        let p = dir.join("objects").join(&hex[..2]).join(&hex[2..]);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, z).unwrap();
        (p, hex)
    }

    #[test]
    fn torn_objects_and_refs_are_moved_aside_once_per_boot() {
        let t = tempfile::tempdir().unwrap();
        let g = t.path();
        let (whole, whole_hex) = loose(g, b"whole\n");
        let (torn, torn_hex) = loose(g, b"a longer object, cut short by the power cut\n");
        let bytes = std::fs::read(&torn).unwrap();
        std::fs::write(&torn, &bytes[..bytes.len() / 2]).unwrap();
        let (empty, empty_hex) = loose(g, b"empty after the cut\n");
        std::fs::write(&empty, b"").unwrap();
        // A whole tree naming the torn blob, and a commit naming the tree:
        // both go (a push would take them as complete).
        let mut entries = b"100644 f\0".to_vec();
        entries.extend(git2::Oid::from_str(&empty_hex).unwrap().as_bytes());
        let (tree, tree_hex) = loose_kind(g, "tree", &entries);
        let commit_body =
            format!("tree {tree_hex}\nauthor a <a> 0 +0000\ncommitter a <a> 0 +0000\n\nm\n");
        let (commit, commit_hex) = loose_kind(g, "commit", commit_body.as_bytes());
        std::fs::create_dir_all(g.join("refs/heads")).unwrap();
        std::fs::write(g.join("refs/heads/ok"), format!("{}\n", "a".repeat(40))).unwrap();
        std::fs::write(g.join("refs/heads/torn"), b"").unwrap();
        std::fs::write(g.join("refs/heads/run"), b"").unwrap();
        // Git reads a value without its newline.
        std::fs::write(g.join("refs/heads/nonl"), "b".repeat(40)).unwrap();
        // Another run's branch, torn, with a reflog whose last line the cut
        // cut short: set back to the line before it.
        std::fs::write(g.join("refs/heads/other"), b"\0\0\0").unwrap();
        std::fs::create_dir_all(g.join("logs/refs/heads")).unwrap();
        let zero = "0".repeat(40);
        std::fs::write(
            g.join("logs/refs/heads/other"),
            format!(
                "{zero} {whole_hex} a <a> 0 +0000\tone\n{whole_hex} {}",
                "c".repeat(20)
            ),
        )
        .unwrap();
        let keep = g.join("steps/torn");
        std::fs::create_dir_all(&keep).unwrap();
        // No epoch yet: nothing is checked (no unflushed writes are known).
        let first = scrub(g, "epoch", &keep, &[]).unwrap();
        assert!(first.is_empty());
        assert!(torn.exists());
        // This boot's epoch: nothing is checked either.
        assert!(scrub(g, "epoch", &keep, &[]).unwrap().is_empty());
        // Another boot wrote last.
        std::fs::write(g.join("epoch"), "an earlier boot").unwrap();
        let found = scrub(g, "epoch", &keep, &["refs/heads/run"]).unwrap();
        let mut objects = found.objects.clone();
        objects.sort();
        let mut want = vec![torn_hex, empty_hex, tree_hex, commit_hex];
        want.sort();
        assert_eq!(objects, want);
        let mut refs = found.refs.clone();
        refs.sort();
        assert_eq!(
            refs,
            [
                format!("refs/heads/other (set back to {whole_hex} from its reflog)"),
                "refs/heads/torn".to_string()
            ]
        );
        assert_eq!(
            std::fs::read_to_string(g.join("refs/heads/other")).unwrap(),
            format!("{whole_hex}\n")
        );
        assert!(g.join("refs/heads/nonl").exists());
        assert!(whole.exists() && !torn.exists() && !empty.exists());
        assert!(!tree.exists() && !commit.exists());
        assert!(g.join("refs/heads/ok").exists() && g.join("refs/heads/run").exists());
        let kept = found.kept.unwrap();
        // Kept by name: four objects' and refs/heads/torn's.
        let mut kept_names = Vec::new();
        for e in walk(&kept) {
            kept_names.push(e);
        }
        assert_eq!(kept_names.len(), 5, "{kept_names:?}");
        assert_eq!(std::fs::read_to_string(g.join("epoch")).unwrap(), boot_id());
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
        out
    }

    #[test]
    fn one_flush_per_file_system() {
        let t = tempfile::tempdir().unwrap();
        file_systems(&[t.path(), t.path()]).unwrap();
        assert!(file_systems(&[&t.path().join("missing")]).is_err());
    }
}
