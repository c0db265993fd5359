//! A loose ref file read as git reads it, to tell a ref git accepts from
//! one a power cut tore or another tool wrote.
//!
//! Owns no state. Invariant: agrees with git's `parse_loose_ref_contents`
//! (`refs/files-backend.c`) on what is a ref.

/// Whether a loose ref file's bytes are a ref as git reads them
/// (`refs/files-backend.c`, `parse_loose_ref_contents`): `ref:` and a
/// target (spaces allowed between), or an object id in hex (SHA-1 or
/// SHA-256) followed by nothing or by white space (`<id>\r\n` is a ref).
pub fn loose_ref_parses(bytes: &[u8]) -> bool {
    if let Some(target) = bytes.strip_prefix(b"ref:") {
        let target = target.trim_ascii();
        return !target.is_empty() && !target.contains(&0);
    }
    [40, 64].iter().any(|&n| {
        bytes.len() >= n
            && bytes[..n].iter().all(u8::is_ascii_hexdigit)
            && bytes.get(n).is_none_or(|b| b.is_ascii_whitespace())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn loose_refs_parse_as_git_reads_them() {
        let id = "a".repeat(40);
        for ok in [
            format!("{id}\n"),
            id.clone(),
            format!("{id}\r\n"),
            format!("{id} trailing"),
            "b".repeat(64),
            "ref: refs/heads/main\n".into(),
            "ref:refs/heads/main".into(),
        ] {
            assert!(super::loose_ref_parses(ok.as_bytes()), "{ok:?}");
        }
        for torn in [
            String::new(),
            "\0\0\0".into(),
            id[..20].to_string(),
            format!("{id}x"),
            "ref:".into(),
            "zz".repeat(20),
        ] {
            assert!(!super::loose_ref_parses(torn.as_bytes()), "{torn:?}");
        }
    }
}
