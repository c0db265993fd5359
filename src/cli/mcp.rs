//! `git steps mcp`: the run's steps as tools for any Model Context Protocol
//! client, over stdio.
//!
//! Owns the MCP front end (rmcp, the protocol's Rust SDK): `apply_step`
//! applies one step object exactly as `apply` applies a one-step plan, and
//! `status`, `log`, `verify` and `fingerprint` answer what the commands of
//! those names answer with `--json`. Invariant: stdout carries only protocol
//! messages, and the server keeps no state between calls — each call opens
//! the repository afresh and goes through the same library calls as the
//! CLI, one call at a time — so the durable branch alone decides what is
//! applied, and a restarted server or client resumes as the CLI does.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};

use super::{failure_json, failure_text, Cli, Ctx, Failure, RunArgs};
use crate::error::Error;
use crate::plan::reader::Plan;
use crate::run::engine;
use crate::run::inspect;
use crate::run::session::{ApplyOptions, StepOutcome, Ui};
use crate::settings;

/// Serve the run's steps to an MCP client on stdin/stdout.
///
/// Tools: `apply_step` (one step object in any format, its `id` the
/// idempotency key: the same id and content lands once, other content under
/// a used id is refused), and the read-only `status`, `log`, `verify` and
/// `fingerprint`. Every call resumes from the durable branch, as the CLI
/// does: a server or client killed mid-call is restarted and the call
/// repeated. Start it from the client's configuration, in the repository.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub(super) run: RunArgs,
    /// Apply steps whose hunks repeat an earlier change [config: steps.allowDuplicateHunks].
    #[arg(long)]
    pub(super) allow_duplicate_hunks: bool,
}

/// What every call needs: where the repository is and the run's options.
#[derive(Clone)]
struct Server {
    repo: PathBuf,
    run: RunArgs,
    allow_duplicate_hunks: bool,
    /// One call at a time, in the order they arrived (tokio's mutex is
    /// fair): calls are steps of one run, and a client may send the next
    /// before the last is answered.
    one: Arc<tokio::sync::Mutex<()>>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    // Fail before serving when the repository or the run's settings are
    // wrong: the client shows a server that exits with its stderr.
    ctx.open(&a.run)?;
    let server = Server {
        repo: std::path::absolute(&ctx.repo)?,
        run: a.run,
        allow_duplicate_hunks: a.allow_duplicate_hunks,
        one: Arc::new(tokio::sync::Mutex::new(())),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let service = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| Error::other(format!("the MCP client did not initialise: {e}")))?;
        service
            .waiting()
            .await
            .map_err(|e| Error::other(format!("the MCP server stopped: {e}")))?;
        Ok::<(), Error>(())
    })?;
    Ok(())
}

/// A tool's answer: structured content, or a tool error with the CLI's message.
type Answer = Result<Value, (Value, String)>;

impl Server {
    fn tools() -> Vec<Tool> {
        let empty = |extra: Value| -> JsonObject {
            let mut schema = json!({"type": "object", "additionalProperties": false});
            if let Value::Object(props) = extra {
                schema["properties"] = Value::Object(props);
            }
            match schema {
                Value::Object(m) => m,
                _ => unreachable!(),
            }
        };
        let read_only = || {
            ToolAnnotations::new()
                .read_only(true)
                .destructive(false)
                .idempotent(true)
                .open_world(false)
        };
        vec![
            Tool::new(
                "apply_step",
                "Apply one step to the repository as one git commit whose trailer is its receipt, \
                 and make it durable (pushed to the run's remote when it has one). The arguments \
                 are the step object itself: an `id` (the idempotency key; a tool-call id is a \
                 fine one) and exactly one of `patch`, `files`, `edits`, `apply_patch`, \
                 `search_replace`. Calling again with the same id and content applies nothing and \
                 answers `already_recorded`; other content under a used id, a patch that does not \
                 apply, or a change that repeats one still in effect is refused with the reason \
                 and a hint. Answers the receipt commit, the resolved diff and the artifact \
                 fingerprint.",
                crate::plan::schema::step_schema(),
            )
            .with_annotations(
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(false)
                    .idempotent(true)
                    .open_world(false),
            ),
            Tool::new(
                "status",
                "The run: its branch, durable head and remote, steps applied, the worktree's \
                 state and whether a resume is needed (as `git steps status --json`).",
                empty(Value::Null),
            )
            .with_annotations(read_only()),
            Tool::new(
                "log",
                "The run's steps in order: id, decision digest, receipt commit, files, lines \
                 added and removed, duplicated hunks (as `git steps log --json`).",
                empty(Value::Null),
            )
            .with_annotations(read_only()),
            Tool::new(
                "verify",
                "Check the run's receipts: one per id, indexes in order, every decision \
                 recomputable; the answer lists problems (as `git steps verify --json`).",
                empty(Value::Null),
            )
            .with_annotations(read_only()),
            Tool::new(
                "fingerprint",
                "The artifact fingerprint of the run's durable head or of `rev` (as `git steps \
                 fingerprint --json`); with `history: true` the history fingerprint.",
                empty(json!({
                    "rev": {"type": "string", "description": "A commit (default: the run's durable head)."},
                    "history": {"type": "boolean", "description": "The history fingerprint instead."}
                })),
            )
            .with_annotations(read_only()),
        ]
    }

    fn call(&self, name: &str, args: JsonObject) -> Option<Answer> {
        Some(match name {
            "apply_step" => self.apply_step(Value::Object(args)),
            "status" | "log" | "verify" => self.command(name, &args, &[]),
            "fingerprint" => {
                let mut extra = Vec::new();
                if args.get("history") == Some(&Value::Bool(true)) {
                    extra.push("--history".to_string());
                }
                match args.get("rev") {
                    // After `--`: a rev is never read as an option.
                    Some(Value::String(rev)) => extra.extend(["--".to_string(), rev.clone()]),
                    None => {}
                    Some(_) => {
                        let e = Failure::from(Error::input("fingerprint: `rev` must be a string"));
                        return Some(Err((failure_json(&e), failure_text(&e.error))));
                    }
                }
                self.command(name, &args, &extra)
            }
            _ => return None,
        })
    }

    /// One step object, applied as `apply` applies a one-step plan.
    fn apply_step(&self, step: Value) -> Answer {
        let fail = |f: Failure| (failure_json(&f), failure_text(&f.error));
        let ctx = self.ctx();
        let (repo, s) = ctx.open_deepened(&self.run).map_err(|e| fail(e.into()))?;
        let id = step.get("id").and_then(Value::as_str).map(str::to_string);
        let text = serde_json::to_string(&step).unwrap_or_default();
        let plan = Plan::from_text(&text, repo.path(), "the apply_step arguments")
            .map_err(|e| fail(e.into()))?;
        let opts = ApplyOptions {
            dry_run: false,
            allow_duplicate_hunks: self.allow_duplicate_hunks
                || settings::config_bool(&repo, "steps.allowDuplicateHunks")
                    .map_err(|e| fail(e.into()))?,
            batch: 1,
            in_place: false,
        };
        let report = engine::apply_plan(&repo, &s, &plan, &opts, &mut Notes)
            .map_err(|(error, _)| fail(error.into()))?;
        let (status, commit) = match report.steps.first() {
            Some(StepOutcome::Applied { commit, .. }) => ("applied", commit.clone()),
            Some(StepOutcome::Skip { commit, .. }) => ("already_recorded", commit.clone()),
            _ => {
                return Err(fail(
                    Error::other("apply_step: the step has no outcome").into(),
                ))
            }
        };
        let oid = git2::Oid::from_str(&commit).map_err(|e| fail(Error::from(e).into()))?;
        let diff = inspect::step_diff(&repo, oid).map_err(|e| fail(e.into()))?;
        let decision = crate::plan::step::Step::from_value(step, 0)
            .map(|s| s.digest)
            .unwrap_or_default();
        Ok(json!({
            "step": id,
            "status": status,
            "commit": commit,
            "decision": decision,
            "diff": diff,
            "artifact": report.artifact,
            "history": report.history,
            "head": report.head,
            "run": report.run,
            "branch": report.branch,
            "durable": report.durable,
        }))
    }

    /// A read-only command, run in this process with `--json`: its
    /// document's `data` is the answer.
    fn command(&self, name: &str, _args: &JsonObject, extra: &[String]) -> Answer {
        let mut argv: Vec<std::ffi::OsString> = vec![
            "git-steps".into(),
            "-C".into(),
            self.repo.clone().into(),
            "--json".into(),
            "--quiet".into(),
            name.into(),
        ];
        let r = &self.run;
        for (flag, value) in [
            ("--branch", &r.branch),
            ("--run", &r.run),
            ("--remote", &r.remote),
        ] {
            if let Some(v) = value {
                argv.push(flag.into());
                argv.push(v.into());
            }
        }
        if let Some(t) = r.transport {
            argv.push("--transport".into());
            argv.push(
                clap::ValueEnum::to_possible_value(&t)
                    .map(|v| v.get_name().to_string())
                    .unwrap_or_default()
                    .into(),
            );
        }
        argv.extend(extra.iter().map(Into::into));
        let cli = Cli::try_parse_from(argv).map_err(|e| {
            // As the CLI answers a usage error: exit code 2.
            let message = e.to_string();
            (
                json!({
                    "code": crate::error::exit::USAGE,
                    "kind": "usage",
                    "message": message.trim_end(),
                    "hint": null,
                }),
                format!("Error: {}\n", message.trim_end()),
            )
        })?;
        let mut out = Vec::new();
        let result = super::run(cli, &mut out);
        let data = serde_json::from_slice::<Value>(&out)
            .ok()
            .map(|mut doc| doc["data"].take());
        match result {
            Ok(()) => Ok(data.unwrap_or(Value::Null)),
            Err(f) if f.json_written => Err((data.unwrap_or(Value::Null), failure_text(&f.error))),
            Err(f) => Err((failure_json(&f), failure_text(&f.error))),
        }
    }

    fn ctx(&self) -> Ctx {
        Ctx {
            json: true,
            quiet: true,
            verbose: false,
            repo: self.repo.clone(),
        }
    }
}

/// A session's notes go to stderr, which MCP clients keep as the server's log.
struct Notes;

impl Ui for Notes {
    fn note(&mut self, note: &str) {
        say!("note: {note}");
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("git-steps", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Edit the repository through apply_step: each call is one step, one git commit \
                 whose trailer is its receipt, made durable before the answer. Give every step \
                 an id you can repeat (a tool-call id): after a crash or a lost answer, call \
                 again with the same id and content; it lands once. Read the run with status, \
                 log, verify and fingerprint.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(Self::tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        Self::tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name: Cow<'static, str> = request.name;
        let args = request.arguments.unwrap_or_default();
        let server = self.clone();
        let tool = name.to_string();
        let one = self.one.clone().lock_owned().await;
        let answer = tokio::task::spawn_blocking(move || {
            let answer = server.call(&tool, args);
            drop(one);
            answer
        })
        .await
        .map_err(|e| ErrorData::internal_error(format!("the tool call failed: {e}"), None))?;
        match answer {
            None => Err(ErrorData::invalid_params(
                format!("no tool named {name:?}"),
                None,
            )),
            Some(Ok(value)) => Ok(CallToolResult::structured(value).into()),
            Some(Err((value, text))) => {
                let mut result = CallToolResult::structured_error(value);
                result.content = vec![ContentBlock::text(text)];
                Ok(result.into())
            }
        }
    }
}
