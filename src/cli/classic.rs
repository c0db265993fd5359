//! `git steps classic-apply` (hidden): the classic runner, for `crashtest
//! --runner classic` and `demo`.

use std::io::Write;

use super::{Ctx, Failure};
use crate::error::Error;
use crate::matrix::classic::{self, Log};
use crate::plan::reader::Plan;
use crate::sync::remote::{Remote, Transport};

/// Run a plan the common broken way (cursor checkpointed every 3 steps,
/// receipts on the box, no trailer check). For demonstrations only.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(value_name = "PLAN")]
    plan: String,
    /// The bare remote (a path).
    #[arg(long, value_name = "PATH")]
    remote: String,
    /// Push the artifact every step (durable) or only at the end (volatile).
    #[arg(long, value_name = "durable|volatile", default_value = "durable")]
    log: String,
}

pub fn run(ctx: &Ctx, a: Args, _out: &mut dyn Write) -> Result<(), Failure> {
    let log = match a.log.as_str() {
        "durable" => Log::Durable,
        "volatile" => Log::Volatile,
        other => {
            return Err(Error::input(format!("--log {other:?}: use durable or volatile")).into())
        }
    };
    let repo = crate::git::open(&ctx.repo)?;
    let plan = Plan::open(&a.plan, repo.path())?;
    let workdir = crate::workdir::worktree::workdir(&repo)?;
    let remote = Remote {
        spec: a.remote,
        transport: Transport::Libgit2,
    };
    crate::settings::remote::refuse_libgit2_ssh(&repo, &remote)?;
    classic::run(&workdir, &plan, &remote, "main", "classic", log)?;
    Ok(())
}
