//! Linux's set and the portable set, side by side on this machine: where
//! both can tell, they tell the same; where the portable set cannot, it
//! says so instead of guessing.

use super::{linux, portable};
use std::io::{Read, Write};
use std::time::Duration;

#[test]
fn both_sets_name_the_holder_of_a_flock_and_nobody_once_it_is_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steps.lock");
    let mut held = std::fs::File::create(&path).unwrap();
    writeln!(held, "4242").unwrap();
    assert_eq!(linux::flock_holder(&path), None);
    assert_eq!(portable::flock_holder(&path), None);
    held.lock().unwrap();
    // Linux's names the process that holds it (this one); the portable
    // set, the pid the holder wrote.
    assert_eq!(linux::flock_holder(&path), Some(std::process::id()));
    assert_eq!(portable::flock_holder(&path), Some(4242));
    held.unlock().unwrap();
    assert_eq!(linux::flock_holder(&path), None);
    assert_eq!(portable::flock_holder(&path), None);
    // The portable probe gave its shared lock back: the holder can lock again.
    held.try_lock().unwrap();
}

#[test]
fn both_sets_see_the_same_parent() {
    let me = std::process::id();
    let (ppid, comm) = linux::parent_of(me).expect("/proc/<pid>/stat");
    assert_eq!(ppid, std::os::unix::process::parent_id());
    assert_eq!(portable::parent_of(me), Some((ppid, comm)));
    assert_eq!(linux::parent_of(u32::MAX), None);
    assert_eq!(portable::parent_of(u32::MAX), None);
}

#[test]
fn an_anonymous_file_reads_whole_through_its_path_each_time() {
    for (set, make) in [
        (
            "linux",
            linux::anonymous_file as fn(&str, &[u8]) -> std::io::Result<_>,
        ),
        ("portable", portable::anonymous_file),
    ] {
        let (f, path) = make("git-steps-test", b"[steps]\n\tremote = origin\n").unwrap();
        for _ in 0..2 {
            super::rewind(&f).unwrap();
            let mut got = String::new();
            std::fs::File::open(&path)
                .unwrap()
                .read_to_string(&mut got)
                .unwrap();
            assert_eq!(
                got,
                "[steps]\n\tremote = origin\n",
                "{set}: {}",
                path.display()
            );
        }
    }
}

#[test]
fn a_swap_swaps_and_no_replace_refuses() {
    use rustix::fs::RenameFlags;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, "A").unwrap();
    std::fs::write(&b, "B").unwrap();
    super::rename_with(&a, &b, RenameFlags::EXCHANGE).unwrap();
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "B");
    assert_eq!(std::fs::read_to_string(&b).unwrap(), "A");
    let e = super::rename_with(&a, &b, RenameFlags::NOREPLACE).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
    assert!(!super::rename_unsupported(&e));
    assert_eq!(std::fs::read_to_string(&b).unwrap(), "A");
    assert!(super::rename_unsupported(
        &std::io::Error::from_raw_os_error(libc::ENOSYS)
    ));
}

#[test]
fn the_portable_set_says_unknown_where_only_linux_can_tell() {
    let here = std::path::Path::new(".");
    assert!(linux::fs_type(here).is_some());
    assert!(linux::boot_id().is_some());
    assert!(linux::boot_time().is_some());
    assert!(linux::umask().is_some());
    assert!(linux::peak_memory_kib().is_some_and(|k| k > 0));
    assert_eq!(portable::fs_type(here), None);
    // The portable boot id is sysctl(8)'s, where it answers: Linux's own.
    if std::path::Path::new("/usr/sbin/sysctl").exists() {
        assert_eq!(portable::boot_id(), linux::boot_id());
    }
    assert_eq!(portable::boot_time(), None);
    assert_eq!(portable::umask(), None);
    assert_eq!(portable::mountinfo(), None);
    // Unknown is "open" and "not known to be written": the careful answers.
    let file = tempfile::NamedTempFile::new().unwrap();
    assert!(portable::open_here(file.path()));
    assert_eq!(portable::open_for_writing(file.path()), None);
    assert!(linux::open_here(file.path()));
    let dir = std::fs::File::open(here).unwrap();
    assert_eq!(
        portable::syncfs(&dir).unwrap_err().kind(),
        std::io::ErrorKind::Unsupported
    );
}

#[test]
fn an_exit_watch_returns_once_the_child_exits_with_a_pidfd_or_polling() {
    for pidfd in [true, false] {
        let mut child = std::process::Command::new("sleep")
            .arg("0.1")
            .spawn()
            .unwrap();
        let watch = super::ExitWatch {
            fd: pidfd.then(|| linux::pidfd(&child)).flatten(),
            poll: Duration::from_millis(5),
        };
        assert_eq!(watch.fd.is_some(), pidfd);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "pidfd {pidfd}: never exited"
            );
            watch.wait(Duration::from_secs(30));
        }
    }
}

#[test]
fn a_dir_watch_wakes_for_a_file_made_after_it_was_set() {
    for inotify in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let watch = super::DirWatch {
            fd: inotify.then(|| linux::watch_dir(dir.path())).flatten(),
            poll: Duration::from_millis(10),
        };
        assert_eq!(watch.fd.is_some(), inotify);
        let target = dir.path().join("reached");
        let maker = {
            let target = target.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                std::fs::write(target, b"").unwrap();
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !target.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "inotify {inotify}: never woke"
            );
            watch.wait(Duration::from_secs(30));
        }
        maker.join().unwrap();
    }
}
