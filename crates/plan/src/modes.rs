//! The two facts of git's object format a plan needs without libgit2:
//! tree entry modes, as git writes them, and lower-case hex. The engine's
//! `git` module re-exports them.

/// Tree entry modes, as git writes them.
pub const MODE_FILE: u32 = 0o100644;
pub const MODE_EXEC: u32 = 0o100755;
pub const MODE_LINK: u32 = 0o120000;
pub const MODE_TREE: u32 = 0o040000;
/// A submodule commit (a gitlink): never a blob git-steps can read.
pub const MODE_GITLINK: u32 = 0o160000;
/// A group-writable file: older gits wrote it; read as [`MODE_FILE`].
pub const MODE_FILE_GROUP_WRITABLE: u32 = 0o100664;

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
