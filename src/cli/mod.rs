//! The command line: arguments, dispatch, and rendering for people and programs.
//!
//! Owns the contract of stdout and stderr: stdout is data (human lines, or
//! with `--json` exactly one JSON document `{"type": <command>, "data": …}`,
//! or `{"type": "error", "data": …}`), stderr is status, progress and error
//! messages. Invariant: every command's failure reaches `main` as a typed
//! [`Error`], which alone decides the exit code.

mod adopt;
mod apply;
#[cfg(feature = "harness")]
mod classic;
#[cfg(feature = "harness")]
mod crashtest;
#[cfg(feature = "harness")]
mod demo;
mod docs;
mod effects;
mod fingerprint;
mod init;
mod log;
#[cfg(feature = "mcp")]
mod mcp;
mod merge;
mod progress;
mod record;
mod resume;
mod run;
mod runs;
mod show;
mod status;
mod terminal;
mod ui;
mod undo;
mod verify;

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::settings::{self, Overrides, Settings};
use crate::sync::remote::Transport;
pub use ui::{Captured, Ui};

/// Resume-equivalent agent steps: every step is one git commit whose trailer is its receipt.
///
/// A resumed run produces the same artifact, with the same fingerprint, as an
/// uninterrupted run of the same steps — or it refuses loudly and changes nothing.
#[derive(Debug, Parser)]
#[command(name = "git-steps", version, max_term_width = 100)]
pub struct Cli {
    /// Run as if started in <PATH> (the repository).
    #[arg(
        short = 'C',
        global = true,
        value_name = "PATH",
        default_value = ".",
        help_heading = "Global options"
    )]
    pub repo: PathBuf,
    /// Machine output: one JSON document on stdout.
    #[arg(long, global = true, help_heading = "Global options")]
    pub json: bool,
    /// Less status on stderr.
    #[arg(
        short,
        long,
        global = true,
        conflicts_with = "verbose",
        help_heading = "Global options"
    )]
    pub quiet: bool,
    /// More status on stderr.
    #[arg(short, long, global = true, help_heading = "Global options")]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Init(init::Args),
    Apply(apply::Args),
    Resume(resume::Args),
    Run(run::Args),
    Record(record::Args),
    Status(status::Args),
    Log(log::Args),
    Show(show::Args),
    Runs(runs::Args),
    Effects(effects::Args),
    MergeMessage(merge::MessageArgs),
    Archive(merge::ArchiveArgs),
    Verify(verify::Args),
    Adopt(adopt::Args),
    Undo(undo::Args),
    Fingerprint(fingerprint::Args),
    #[cfg(feature = "mcp")]
    Mcp(mcp::Args),
    #[cfg(feature = "harness")]
    Crashtest(crashtest::Args),
    #[cfg(feature = "harness")]
    Demo(demo::Args),
    Man(docs::ManArgs),
    Completions(docs::CompletionsArgs),
    /// What git-steps runs of itself, parsed apart ([`parse`]): never
    /// listed, suggested or completed.
    #[command(skip)]
    Internal(Internal),
}

/// A command effect's supervisor (see [`crate::run::supervisor::supervise`]).
#[derive(Debug, clap::Args)]
pub struct EffectExecArgs {
    /// The git-steps that delivers it: when it is gone, so is the command.
    #[arg(long)]
    parent: u32,
    #[arg(last = true, required = true)]
    argv: Vec<String>,
}

/// The `git://` relay the git CLI transport gives git as its proxy command
/// (see [`crate::sync::remote::relay`]).
#[derive(Debug, clap::Args)]
pub struct NetRelayArgs {
    host: String,
    port: u16,
}

/// The commands git-steps runs of itself: the crash matrix's runners in
/// each box, git's `git://` relay and an effect's supervisor. Declared
/// here only, and parsed apart from [`Cli`], so that `git steps aply` is
/// never told about them and no completion lists them.
#[derive(Debug, Parser)]
#[command(name = "git-steps")]
struct InternalCli {
    #[arg(short = 'C', value_name = "PATH", default_value = ".")]
    repo: PathBuf,
    #[arg(long)]
    json: bool,
    #[arg(short, long)]
    quiet: bool,
    #[arg(short, long)]
    verbose: bool,
    #[command(subcommand)]
    command: Internal,
}

#[derive(Debug, Subcommand)]
pub enum Internal {
    /// The classic design the matrix compares against.
    #[cfg(feature = "harness")]
    ClassicApply(classic::Args),
    /// A deterministic decider for `run`: replays a plan's steps by index.
    ReplayDecider(run::ReplayArgs),
    /// The crash matrix's in-place agent: each step of a plan written into the worktree, then recorded.
    #[cfg(feature = "harness")]
    ReplayRecord(record::ReplayArgs),
    /// The crash matrix's undo scenario: a plan applied, its second half undone, then made again.
    #[cfg(feature = "harness")]
    ReplayUndo(record::ReplayArgs),
    /// git's proxy command for `git://` under `--transport git`: stdin and stdout relayed to HOST:PORT.
    NetRelay(NetRelayArgs),
    /// A command effect, run under a supervisor that kills it when git-steps dies.
    EffectExec(EffectExecArgs),
}

/// The names of the [`Internal`] commands, as clap spells them.
fn internal_names() -> Vec<String> {
    <InternalCli as clap::CommandFactory>::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

/// Parse the process's arguments: git-steps' internal commands first,
/// then the public command line (whose errors, help and suggestions know
/// only public commands).
pub fn parse() -> Cli {
    // git's `git://` proxy command under `--transport git`: git-steps itself,
    // run by git as `<git-steps> <host> <port>`.
    // The variable names the binary git runs; a git-steps a hook starts
    // (with the variable inherited) has its own arguments, and is no relay
    // when they name a command.
    let relay_of = std::env::var_os(crate::keys::NET_RELAY.name);
    let this = std::env::current_exe().ok();
    if relay_of.is_some() && relay_of.as_deref() == this.as_deref().map(|p| p.as_os_str()) {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let command = |w: &str| {
            <Cli as clap::CommandFactory>::command()
                .get_subcommands()
                .any(|c| c.get_name() == w)
        };
        if let [host, port] = args.as_slice() {
            if let (false, Ok(port)) = (command(host), port.parse()) {
                return Cli {
                    repo: PathBuf::from("."),
                    json: false,
                    quiet: true,
                    verbose: false,
                    command: Command::Internal(Internal::NetRelay(NetRelayArgs {
                        host: host.clone(),
                        port,
                    })),
                };
            }
        }
    }
    let internal = internal_names();
    // Read as OsStrings: an argument that is not UTF-8 (a path given to
    // `-C`) is clap's to take or refuse, never a panic here.
    if std::env::args_os().any(|a| a.to_str().is_some_and(|a| internal.iter().any(|n| n == a))) {
        let i = InternalCli::parse();
        return Cli {
            repo: i.repo,
            json: i.json,
            quiet: i.quiet,
            verbose: i.verbose,
            command: Command::Internal(i.command),
        };
    }
    Cli::parse()
}

/// Flags every run-scoped command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The run's branch [config: steps.branch; init's default: steps/<run>; without init: the checked-out branch, never the default branch unless named].
    #[arg(long, value_name = "NAME", help_heading = "Run options")]
    pub branch: Option<String>,
    /// The run id written in every receipt [config: steps.run; default: the branch name; init's default: the checked-out branch's name].
    #[arg(long, value_name = "ID", help_heading = "Run options")]
    pub run: Option<String>,
    /// The durable remote: a remote name, URL or path [config: steps.remote; init's default: the clone's only remote; otherwise none: the local repository].
    #[arg(long, value_name = "NAME|URL", help_heading = "Run options")]
    pub remote: Option<String>,
    /// How to reach the remote: libgit2, or the user's git [config: steps.transport; default: git for an ssh remote, else libgit2].
    #[arg(long, value_name = "TRANSPORT", value_parser = transport_values(), help_heading = "Run options")]
    pub transport: Option<Transport>,
}

/// `--transport`'s values, listed with what each means in `--help` and in
/// clap's error for another.
fn transport_values() -> impl clap::builder::TypedValueParser<Value = Transport> {
    use clap::builder::{PossibleValue, TypedValueParser};
    clap::builder::PossibleValuesParser::new([
        PossibleValue::new(Transport::Libgit2.as_str())
            .help("File paths, file://, git://, http(s)://, through libgit2 (no ssh)"),
        PossibleValue::new(Transport::Git.as_str())
            .help("The user's `git` executable, for its credential helpers and ssh config"),
    ])
    .map(|s| Transport::parse(&s).expect("a listed transport parses"))
}

impl RunArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            branch: self.branch.clone(),
            run: self.run.clone(),
            remote: self.remote.clone(),
            transport: self.transport,
            follow: false,
        }
    }
}

/// What every command is given: the Ui it speaks through and where the
/// repository is.
pub struct Ctx<'a> {
    pub ui: &'a Ui,
    pub repo: PathBuf,
}

impl Ctx<'_> {
    pub fn open(&self, run: &RunArgs) -> Result<(git2::Repository, Settings)> {
        let repo = crate::git::open(&self.repo)?;
        settings::refuse_shared_settings_in_linked_worktree(&repo, &run.overrides())?;
        self.open_settings(repo, run, false)
    }

    /// As [`Ctx::open`], for a read-only audit (`log`, `verify`,
    /// `status`, `fingerprint`): the run follows the checked-out run
    /// branch, and `--run X` alone names `steps/X`
    /// ([`settings::Overrides::follow`]).
    ///
    /// In a clone where no durable domain is set up (no `steps.remote`, no
    /// `--remote`) and the run is not checked out, its remote is read: the
    /// one remote whose copy (`refs/remotes/<r>/<branch>`) holds the run,
    /// or the clone's only remote. A read-only audit from any clone.
    pub fn open_audit(&self, run: &RunArgs) -> Result<(git2::Repository, Settings)> {
        let repo = crate::git::open(&self.repo)?;
        settings::refuse_shared_settings_in_linked_worktree(&repo, &run.overrides())?;
        let (repo, mut s) = self.open_settings(repo, run, true)?;
        if s.remote.is_none()
            && run.remote.is_none()
            && settings::config_str(&repo, crate::keys::REMOTE.name)?.is_none()
            && repo.refname_to_id(&s.refname()).is_err()
        {
            let remotes = crate::git::remote_names(&repo);
            let holding: Vec<&String> = remotes
                .iter()
                .filter(|r| {
                    repo.find_reference(&format!("refs/remotes/{r}/{}", s.branch))
                        .is_ok()
                })
                .collect();
            let pick = match (holding.as_slice(), remotes.as_slice()) {
                ([one], _) => Some((*one).clone()),
                ([], [only]) => Some(only.clone()),
                _ => None,
            };
            if let Some(spec) = pick {
                let transport = crate::settings::remote::default_transport(&repo, &spec);
                s.remote = Some(crate::settings::Remote { spec, transport });
            }
        }
        Ok((repo, s))
    }

    /// As [`Ctx::open`], for a command that writes the run (or, as a dry
    /// run, says what it would write): without `init` or `--branch` it
    /// refuses to write on the repository's default branch.
    pub fn open_to_write(&self, run: &RunArgs) -> Result<(git2::Repository, Settings)> {
        let repo = crate::git::open(&self.repo)?;
        settings::refuse_shared_settings_in_linked_worktree(&repo, &run.overrides())?;
        settings::refuse_unset_default_branch(&repo, &run.overrides())?;
        settings::refuse_silently_local(&repo, &run.overrides())?;
        self.open_settings(repo, run, false)
    }

    /// As [`Ctx::open`], for a command that writes the run: a shallow clone
    /// whose boundary cuts the run is deepened first (and says so), so that
    /// the run is never judged from a history that lacks its first step or
    /// the commit it started from. The repository is opened after that.
    pub fn open_deepened(&self, run: &RunArgs) -> Result<(git2::Repository, Settings)> {
        let (repo, s) = self.open_to_write(run)?;
        if !repo.is_shallow() || s.remote.is_none() {
            return Ok((repo, s));
        }
        let path = repo.path().to_path_buf();
        drop(repo);
        let deepened = crate::sync::reconcile::deepen_for_run(&path, &s)?;
        if deepened == u64::MAX {
            self.ui.status("note: this clone was shallow and cut a merge inside the run: fetched its whole history from the remote (`git fetch --unshallow`)");
        } else if deepened > 0 {
            self.ui.status(&format!(
                "note: this clone is shallow and its boundary cut the run: deepened it by {deepened} commit(s) from the remote (`git fetch --deepen`), to the run's first step and the commit it started from"
            ));
        }
        Ok((crate::git::open(&self.repo)?, s))
    }

    /// As [`Ctx::open`], for `init`, which sets this worktree's own run and
    /// so may ignore another worktree's settings in the shared config.
    pub fn open_for_init(&self, run: &RunArgs) -> Result<(git2::Repository, Settings)> {
        let repo = crate::git::open(&self.repo)?;
        self.open_settings(repo, run, false)
    }

    fn open_settings(
        &self,
        repo: git2::Repository,
        run: &RunArgs,
        follow: bool,
    ) -> Result<(git2::Repository, Settings)> {
        // A mistyped --remote is said as such before anything asks it for
        // a ref (not "unsupported URL protocol" from the network layer). A
        // configured one that has gone is the network's to report: `status`
        // still shows this box's view.
        if let Some(r) = run.remote.as_deref().filter(|r| !r.is_empty()) {
            crate::sync::remote::check_spec(&repo, r)?;
        }
        let s = settings::resolve(
            &repo,
            &Overrides {
                follow,
                ..run.overrides()
            },
        )?;
        // Said by `init`, where it is chosen; elsewhere with -v.
        if self.ui.verbose {
            self.ui.status(&s.durable_domain());
        }
        // Not set up here, in a clone that has remotes: the durable domain
        // is local by default, which a user who forgot `init` would not
        // guess; and a fresh clone may hold the run on a remote already.
        let set_up = run.branch.is_some()
            || settings::config_str(&repo, crate::keys::BRANCH.name)?.is_some();
        let remotes = crate::git::remote_names(&repo);
        // (An audit of a run not checked out here says where it read
        // instead.)
        let here = repo.refname_to_id(&s.refname()).is_ok();
        if (!follow || here)
            && !set_up
            && run.remote.is_none()
            && s.remote.is_none()
            && !remotes.is_empty()
        {
            let held = settings::default_run(&repo).ok().and_then(|r| {
                remotes.iter().find_map(|name| {
                    let tracking = format!("{name}/steps/{r}");
                    repo.find_reference(&format!("refs/remotes/{tracking}"))
                        .is_ok()
                        .then(|| format!("; {tracking} holds run {r}: `git steps init` resumes it"))
                })
            });
            self.ui.status(&format!(
                "note: no run is set up here (`git steps init`), so the durable domain is this local repository, not {}{}",
                remotes.join(" or "),
                held.unwrap_or_default()
            ));
        }
        Ok((repo, s))
    }
}

/// A `--json` document's data as a value, with any URL's password
/// redacted, for a front end that does not print it (MCP).
pub fn json_data<T: Serialize>(data: &T) -> Result<serde_json::Value> {
    let text =
        serde_json::to_string(data).map_err(|e| Error::local(format!("cannot write JSON: {e}")))?;
    serde_json::from_str(&crate::git::redact(&text))
        .map_err(|e| Error::internal(format!("redacted JSON does not parse: {e}")))
}

/// Write a `--json` document.
pub fn emit_json<T: Serialize>(out: &mut dyn Write, kind: &str, data: &T) -> Result<()> {
    #[derive(Serialize)]
    struct Envelope<'a, T> {
        #[serde(rename = "type")]
        kind: &'a str,
        data: &'a T,
    }
    let text = serde_json::to_string(&Envelope { kind, data })
        .map_err(|e| Error::local(format!("cannot write JSON: {e}")))?;
    // A password in a URL never reaches the output (JSON strings cannot
    // hold a raw quote or space, so the redaction stays inside one).
    writeln!(out, "{}", crate::git::redact(&text))?;
    Ok(())
}

/// A failure, with anything the command wants to report alongside it.
pub struct Failure {
    pub error: Error,
    /// Extra JSON fields for the error document (e.g. steps done so far).
    pub partial: Option<serde_json::Value>,
    /// The command already wrote its `--json` document (which says why it
    /// failed); only the stderr message and the exit code remain.
    pub json_written: bool,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure {
            error,
            partial: None,
            json_written: false,
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::from(Error::from(e))
    }
}

/// `git steps mcp` owns stdio: no progress bars there.
pub fn draws_bars(command: &Command) -> bool {
    #[cfg(feature = "mcp")]
    if matches!(command, Command::Mcp(_)) {
        return false;
    }
    let _ = command;
    true
}

/// Run a parsed command line, speaking through `ui`.
pub fn run(cli: Cli, ui: &Ui) -> std::result::Result<(), Failure> {
    let ctx = Ctx { ui, repo: cli.repo };
    for ignored in &crate::keys::environment().ignored {
        ui.line(&format!("warning: {ignored}; the default is used"));
    }
    let out = &mut ui.out();
    match cli.command {
        Command::Init(a) => init::run(&ctx, a, out).map_err(Failure::from),
        Command::Apply(a) => apply::run(&ctx, a, out),
        Command::Resume(a) => resume::run(&ctx, a, out),
        Command::Run(a) => run::run(&ctx, a, out),
        Command::Record(a) => record::run(&ctx, a, out),
        Command::Status(a) => status::run(&ctx, a, out).map_err(Failure::from),
        Command::Log(a) => log::run(&ctx, a, out).map_err(Failure::from),
        Command::Show(a) => show::run(&ctx, a, out).map_err(Failure::from),
        Command::Runs(a) => runs::run(&ctx, a, out).map_err(Failure::from),
        Command::Effects(a) => effects::run(&ctx, a, out).map_err(Failure::from),
        Command::MergeMessage(a) => merge::message(&ctx, a, out).map_err(Failure::from),
        Command::Archive(a) => merge::archive(&ctx, a, out).map_err(Failure::from),
        Command::Verify(a) => verify::run(&ctx, a, out),
        Command::Adopt(a) => adopt::run(&ctx, a, out),
        Command::Undo(a) => undo::run(&ctx, a, out),
        Command::Fingerprint(a) => fingerprint::run(&ctx, a, out).map_err(Failure::from),
        #[cfg(feature = "mcp")]
        Command::Mcp(a) => mcp::run(&ctx, a),
        #[cfg(feature = "harness")]
        Command::Crashtest(a) => crashtest::run(&ctx, a, out),
        #[cfg(feature = "harness")]
        Command::Demo(a) => demo::run(&ctx, a, out),
        Command::Man(a) => docs::man(&ctx, a, out),
        Command::Completions(a) => docs::completions(a, out),
        Command::Internal(i) => match i {
            #[cfg(feature = "harness")]
            Internal::ClassicApply(a) => classic::run(&ctx, a, out),
            Internal::ReplayDecider(a) => run::replay(a, out),
            #[cfg(feature = "harness")]
            Internal::ReplayRecord(a) => record::replay(&ctx, a),
            #[cfg(feature = "harness")]
            Internal::ReplayUndo(a) => record::replay_undo(&ctx, a),
            Internal::EffectExec(a) => crate::run::supervisor::supervise(a.parent, &a.argv),
            Internal::NetRelay(a) => crate::sync::remote::relay::relay(
                &a.host,
                a.port,
                crate::keys::environment().net_timeout,
            )
            .map_err(Failure::from),
        },
    }
}

/// The `--json` error document's `data`: code, kind, message, hint,
/// whether rerunning the same command is the way on (`rerun`: "now", as
/// it is; "after" the hint's first part; "no"), and what the error says
/// about the step (`step`, `saw`, `would`, `line`).
pub fn failure_json(f: &Failure) -> serde_json::Value {
    let e = &f.error;
    let mut data = serde_json::json!({
        "code": e.exit_code(),
        "kind": e.kind(),
        "message": crate::git::redact(&e.to_string()),
        "hint": e.hint().map(|h| crate::git::redact(&h.to_string()).into_owned()),
        "rerun": e.hint().map_or(crate::error::Rerun::No, crate::error::Hint::next).as_str(),
    });
    match e {
        Error::Refused(r) => {
            data["step"] = serde_json::json!(r.step);
            data["saw"] = serde_json::json!(r.saw);
            data["would"] = serde_json::json!(r.would);
        }
        Error::Input { step, line, .. } => {
            data["step"] = serde_json::json!(step);
            data["line"] = serde_json::json!(line);
        }
        Error::Apply { step, .. } | Error::AtStep { step, .. } => {
            data["step"] = serde_json::json!(step)
        }
        _ => {}
    }
    if let Some(serde_json::Value::Object(extra)) = &f.partial {
        for (k, v) in extra {
            data[k] = v.clone();
        }
    }
    data
}

/// The lines stderr shows for an error, each ending in a newline.
pub fn failure_text(e: &Error) -> String {
    failure_text_with(e, false)
}

/// As [`failure_text`]; with `verbose`, libgit2's own error (its class and
/// code) and the OS's as `Caused by:` lines too. Their words are already
/// in the error's message.
pub fn failure_text_with(e: &Error, verbose: bool) -> String {
    let mut text = format!("Error: {e}\n");
    if let Error::Refused(r) = e {
        text.push_str(&format!("Would have: {}\n", r.would));
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if verbose || !(s.is::<git2::Error>() || s.is::<std::io::Error>()) {
            text.push_str(&format!("Caused by: {s}\n"));
        }
        source = s.source();
    }
    if let Some(h) = e.hint() {
        text.push_str(&format!("Hint: {h}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    /// The names git-steps runs itself by are the [`super::Internal`]
    /// commands: the supervisor's, the relay's, and (with the harness)
    /// those the crash matrix's boxes spell.
    #[test]
    fn the_internal_commands_are_the_ones_git_steps_runs() {
        let names = super::internal_names();
        let mut want = vec!["replay-decider", "net-relay", crate::run::supervisor::EXEC];
        if cfg!(feature = "harness") {
            want.extend(["classic-apply", "replay-record", "replay-undo"]);
        }
        let mut names: Vec<&str> = names.iter().map(String::as_str).collect();
        names.sort_unstable();
        want.sort_unstable();
        assert_eq!(names, want);
        // None of them is a public command's name.
        let public = <super::Cli as clap::CommandFactory>::command();
        assert!(public
            .get_subcommands()
            .all(|c| !names.contains(&c.get_name())));
    }
}
