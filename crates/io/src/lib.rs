//! git-steps' git and disk I/O: everything below the engine that touches
//! a repository's files, the disk or the operating system.
//!
//! Owns libgit2 set up once, git's objects, index and refs written as git
//! writes them, the run's locks, what reaches the disk when, commit
//! signing, the named crash points at every write boundary, and the system
//! calls beyond std. Invariant: the only `unsafe` code of git-steps is
//! here, in [`git`] and [`os`], each block with its `SAFETY:` argument;
//! every other module of this crate, and every other crate of the
//! workspace, forbids it (the compiler refuses it).
//!
//! The engine re-exports these modules under their own names
//! (`git_steps::git`, `git_steps::lock`, …); nothing here can import it.
//!
//! ## Layers
//!
//! Every module uses only the crates below (`git-steps-error`,
//! `git-steps-plan`), the modules listed before it here, and its own
//! submodules; the top package's test `layers_point_down` reads this list and
//! every source file of this crate. Bottom to top:
//!
//! 1. [`keys`]: every `steps.*` key and `GIT_STEPS_*` variable, one table;
//! 2. [`backoff`]: the one backoff schedule (jittered) and the clock it waits on;
//! 3. [`os`]: the system calls beyond std, Linux's own and a portable set;
//! 4. [`git`]: git primitives (libgit2 set up once with its TCP
//!    stream, certificates, signature, short ids, hex, tree modes and tree
//!    changes; a step's small objects written as git writes them);
//! 5. [`sign`]: commits signed as git signs them (`commit.gpgSign`);
//! 6. [`crash`]: named crash points at every write boundary;
//! 7. [`progress`]: long work reported to a front end (bars on a terminal);
//! 8. [`lock`]: one runner per repository, git-style lock files, the branch moved as git moves it;
//! 9. [`flush`]: what reaches the disk when: one syncfs per commit point, the boot epoch.

#![deny(unsafe_code)]

use git_steps_error as error;

pub mod backoff;
pub mod crash;
pub mod flush;
#[allow(unsafe_code)]
pub mod git;
pub mod keys;
pub mod lock;
#[allow(unsafe_code)]
pub mod os;
pub mod progress;
pub mod sign;
