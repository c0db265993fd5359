//! The index's cache tree (`TREE`), invalidated along changed paths.
//!
//! Owns that extension's format. Invariant: a directory above a changed
//! path is never left valid (git's `write-tree` would reuse its old tree
//! id); every other directory keeps its entry byte for byte.

/// The cache tree (`TREE`: per directory, pre-order, `path\0count
/// subtrees\n` and, when valid, its tree id) with every directory above a
/// changed path marked invalid (count -1, no id), as git's
/// `cache_tree_invalidate_path` does; None when it does not parse (then it
/// is left out, and git rebuilds it).
pub(super) fn invalidated_tree(data: &[u8], changed: &[&[u8]]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len());
    let mut at = 0;
    node(data, &mut at, &mut Vec::new(), changed, &mut out)?;
    (at == data.len()).then_some(out)
}

/// The directories the cache tree holds valid: their paths (empty for the
/// root, else ending in `/`) and the tree ids git computed from the
/// index's entries under them. None when it does not parse.
pub(super) fn valid_trees(data: &[u8]) -> Option<std::collections::HashMap<Vec<u8>, git2::Oid>> {
    let mut out = std::collections::HashMap::new();
    let mut at = 0;
    // Pending subtrees per level, as the pre-order walk goes.
    let mut stack: Vec<(Vec<u8>, usize)> = Vec::new();
    let mut first = true;
    while at < data.len() {
        let nul = data[at..].iter().position(|b| *b == 0)?;
        let name = &data[at..at + nul];
        at += nul + 1;
        let nl = data.get(at..)?.iter().position(|b| *b == b'\n')?;
        let line = std::str::from_utf8(&data[at..at + nl]).ok()?;
        at += nl + 1;
        let (count, subtrees) = line.split_once(' ')?;
        let count: i64 = count.parse().ok()?;
        let subtrees: usize = subtrees.parse().ok()?;
        // This node's parent is the innermost level still expecting one.
        while stack.last().is_some_and(|(_, left)| *left == 0) {
            stack.pop();
        }
        let mut dir = match stack.last_mut() {
            Some((parent, left)) => {
                *left -= 1;
                parent.clone()
            }
            None if first => Vec::new(),
            // More directories than the root's counts hold.
            None => return None,
        };
        first = false;
        if !name.is_empty() {
            dir.extend_from_slice(name);
            dir.push(b'/');
        }
        if count >= 0 {
            let id = git2::Oid::from_bytes(data.get(at..at + 20)?).ok()?;
            at += 20;
            out.insert(dir.clone(), id);
        }
        stack.push((dir, subtrees));
    }
    Some(out)
}

fn node(
    data: &[u8],
    at: &mut usize,
    dir: &mut Vec<u8>,
    changed: &[&[u8]],
    out: &mut Vec<u8>,
) -> Option<()> {
    let nul = data.get(*at..)?.iter().position(|b| *b == 0)?;
    let name = &data[*at..*at + nul];
    *at += nul + 1;
    let nl = data.get(*at..)?.iter().position(|b| *b == b'\n')?;
    let line = std::str::from_utf8(&data[*at..*at + nl]).ok()?;
    *at += nl + 1;
    let (count, subtrees) = line.split_once(' ')?;
    let count: i64 = count.parse().ok()?;
    let subtrees: usize = subtrees.parse().ok()?;
    let len = dir.len();
    if !name.is_empty() {
        if !dir.is_empty() {
            dir.push(b'/');
        }
        dir.extend_from_slice(name);
    }
    let touched = changed.iter().any(|p| {
        dir.is_empty() || (p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/')
    });
    let id = if count >= 0 {
        let id = data.get(*at..*at + 20)?;
        *at += 20;
        Some(id)
    } else {
        None
    };
    out.extend_from_slice(name);
    out.push(0);
    match (touched, id) {
        (false, Some(id)) => {
            out.extend_from_slice(format!("{count} {subtrees}\n").as_bytes());
            out.extend_from_slice(id);
        }
        _ => out.extend_from_slice(format!("-1 {subtrees}\n").as_bytes()),
    }
    for _ in 0..subtrees {
        node(data, at, dir, changed, out)?;
    }
    dir.truncate(len);
    Some(())
}
