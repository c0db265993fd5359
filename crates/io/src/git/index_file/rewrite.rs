//! An index file rewritten with a step's entries: see [`super`].

use super::cache_tree::invalidated_tree;
use super::{name_of, u32_at, IndexFile, Stat};

impl IndexFile {
    /// The file with `updates` made (each path's stage-0 entry put in, or
    /// every stage of it removed with None; a path's conflict stages go
    /// when it gets a stage-0 entry), the cache tree invalidated along the
    /// changed paths, and the extensions git rebuilds by itself left out.
    /// The trailer is the SHA-1 of the rest, or zero (`hash` false:
    /// `index.skipHash`). Err names a path the result would hold both as a
    /// file and as a directory.
    pub fn rewrite(
        &self,
        updates: &[(Vec<u8>, Option<Stat>)],
        hash: bool,
    ) -> Result<Vec<u8>, String> {
        let mut updates: Vec<&(Vec<u8>, Option<Stat>)> = updates.iter().collect();
        // Stable: of several updates of a path, the last one wins.
        updates.sort_by(|a, b| a.0.cmp(&b.0));
        updates.reverse();
        updates.dedup_by(|later, earlier| later.0 == earlier.0);
        updates.reverse();
        if let Some(path) = self.file_and_directory(&updates) {
            return Err(path);
        }
        let mut out: Vec<u8> = Vec::with_capacity(self.bytes.len() + updates.len() * 128);
        out.extend_from_slice(&self.bytes[..12]);
        let mut count = 0u32;
        // Names written, in order: a file and a directory of one name are
        // refused, and version 4 compresses against the previous one.
        let mut previous: Vec<u8> = Vec::new();
        let mut previous_changed = false;
        let mut u = updates.iter().peekable();
        let mut i = 0;
        let emit_new = |out: &mut Vec<u8>, name: &[u8], st: &Stat, previous: &[u8]| {
            let at = out.len();
            for v in [
                st.ctime.0, st.ctime.1, st.mtime.0, st.mtime.1, st.dev, st.ino, st.mode, st.uid,
                st.gid, st.size,
            ] {
                out.extend_from_slice(&v.to_be_bytes());
            }
            out.extend_from_slice(st.oid.as_bytes());
            let len = name.len().min(0x0fff) as u16;
            out.extend_from_slice(&len.to_be_bytes());
            self.push_name(out, at, name, previous);
        };
        let racy_before = |st: &Stat| self.racy(st);
        while i < self.entries.len() || u.peek().is_some() {
            let next_entry = self.entries.get(i).map(|s| name_of(&self.bytes, s));
            let take_update = match (next_entry, u.peek()) {
                (Some(n), Some(up)) => up.0.as_slice() <= n,
                (None, Some(_)) => true,
                _ => false,
            };
            if take_update {
                let Some((name, new)) = u.next() else { break };
                // Every stage of the path goes; its new entry comes in.
                while self
                    .entries
                    .get(i)
                    .is_some_and(|s| name_of(&self.bytes, s) == name.as_slice())
                {
                    i += 1;
                }
                if let Some(st) = new {
                    check_order(&previous, name)?;
                    emit_new(&mut out, name, st, &previous);
                    previous.clone_from(name);
                    count += 1;
                }
                previous_changed = true;
                continue;
            }
            let s = &self.entries[i];
            let name = name_of(&self.bytes, s);
            check_order(&previous, name)?;
            let mut st = self.stat(s);
            let smudge = st.mode & 0o170000 != 0o160000 && st.size != 0 && racy_before(&st);
            if self.version == 4 && (previous_changed || smudge) {
                // Re-encoded: its name compresses against a new neighbour.
                if smudge {
                    st.size = 0;
                }
                let at = out.len();
                out.extend_from_slice(&self.bytes[s.start..s.start + 62]);
                if smudge {
                    out[at + 36..at + 40].copy_from_slice(&0u32.to_be_bytes());
                }
                if self.bytes[s.start + 60] & 0x40 != 0 {
                    // The extended flags, as the entry's flags say.
                    out.extend_from_slice(&self.bytes[s.start + 62..s.start + 64]);
                }
                self.push_v4_name(&mut out, name, &previous);
            } else {
                let at = out.len();
                out.extend_from_slice(&self.bytes[s.start..s.end]);
                if smudge {
                    // git's smudge: a size no file has, so git compares
                    // the content next time.
                    out[at + 36..at + 40].copy_from_slice(&0u32.to_be_bytes());
                }
            }
            previous = name.to_vec();
            previous_changed = false;
            count += 1;
            i += 1;
        }
        out[8..12].copy_from_slice(&count.to_be_bytes());
        let changed: Vec<&[u8]> = updates.iter().map(|(p, _)| p.as_slice()).collect();
        let mut at = self.extensions;
        let end = self.bytes.len() - 20;
        while at < end {
            let sig = &self.bytes[at..at + 4];
            let size = u32_at(&self.bytes, at + 4).unwrap_or(0) as usize;
            let data = &self.bytes[at + 8..at + 8 + size];
            match sig {
                b"TREE" => {
                    if let Some(tree) = invalidated_tree(data, &changed) {
                        out.extend_from_slice(b"TREE");
                        out.extend_from_slice(&(tree.len() as u32).to_be_bytes());
                        out.extend_from_slice(&tree);
                    }
                }
                // Resolve-undo and conflict names: kept as they are.
                b"REUC" | b"NAME" => out.extend_from_slice(&self.bytes[at..at + 8 + size]),
                // What git rebuilds itself (the untracked cache, fsmonitor
                // data, the offset tables) or does not know: left out.
                _ => {}
            }
            at += 8 + size;
        }
        if hash {
            use sha1::Digest;
            let sum = sha1::Sha1::digest(&out);
            out.extend_from_slice(sum.as_slice());
        } else {
            out.extend_from_slice(&[0u8; 20]);
        }
        Ok(out)
    }

    /// A path that `updates` (sorted, one per path) would leave both a
    /// file and a directory: a new file where entries that stay lie under
    /// it, or under a file that stays.
    fn file_and_directory(&self, updates: &[&(Vec<u8>, Option<Stat>)]) -> Option<String> {
        let update = |p: &[u8]| {
            updates
                .binary_search_by(|u| u.0.as_slice().cmp(p))
                .ok()
                .map(|i| updates[i].1.is_some())
        };
        let stays = |p: &[u8]| update(p).unwrap_or_else(|| self.find(p, 0).is_ok());
        let shown = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
        for (path, new) in updates {
            if new.is_none() {
                continue;
            }
            // A file that stays at one of its directories.
            let mut at = 0;
            while let Some(i) = path[at..].iter().position(|b| *b == b'/') {
                if stays(&path[..at + i]) {
                    return Some(shown(path));
                }
                at += i + 1;
            }
            // Entries that stay under it: in the index, or added.
            let mut dir = path.clone();
            dir.push(b'/');
            let first = self.find(&dir, 0).unwrap_or_else(|i| i);
            for s in &self.entries[first..] {
                let n = name_of(&self.bytes, s);
                if !n.starts_with(&dir) {
                    break;
                }
                if update(n) != Some(false) {
                    return Some(shown(path));
                }
            }
            let first = updates.partition_point(|u| u.0 < dir);
            if updates[first..]
                .iter()
                .take_while(|u| u.0.starts_with(&dir))
                .any(|u| u.1.is_some())
            {
                return Some(shown(path));
            }
        }
        None
    }

    /// A new entry's name after its fixed part at `at` (flags written).
    fn push_name(&self, out: &mut Vec<u8>, at: usize, name: &[u8], previous: &[u8]) {
        if self.version == 4 {
            self.push_v4_name(out, name, previous);
        } else {
            out.extend_from_slice(name);
            let len = out.len() - at;
            let padded = (len + 8) & !7;
            out.resize(at + padded, 0);
        }
    }

    fn push_v4_name(&self, out: &mut Vec<u8>, name: &[u8], previous: &[u8]) {
        let common = previous
            .iter()
            .zip(name)
            .take_while(|(a, b)| a == b)
            .count();
        push_offset(out, previous.len() - common);
        out.extend_from_slice(&name[common..]);
        out.push(0);
    }
}

/// `name` may follow `previous` in an index (not before it; one name
/// comes again only at its next conflict stage).
fn check_order(previous: &[u8], name: &[u8]) -> Result<(), String> {
    if !previous.is_empty() && name < previous {
        return Err(String::from_utf8_lossy(name).into_owned());
    }
    Ok(())
}

/// git's offset encoding (varint.c `encode_varint`).
fn push_offset(out: &mut Vec<u8>, mut value: usize) {
    let mut buf = [0u8; 16];
    let mut pos = buf.len() - 1;
    buf[pos] = (value & 0x7f) as u8;
    loop {
        value >>= 7;
        if value == 0 {
            break;
        }
        value -= 1;
        pos -= 1;
        buf[pos] = 0x80 | (value & 0x7f) as u8;
    }
    out.extend_from_slice(&buf[pos..]);
}
