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

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};

use super::terminal::Terminal;
use super::{failure_json, failure_text, json_data, Ctx, Failure, RunArgs, Ui};
use crate::error::Error;
use crate::plan::reader::Plan;
use crate::run::engine;
use crate::run::inspect;
use crate::run::session::{ApplyOptions, StepOutcome};

mod frame;

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
    /// The server's log: its stderr, which MCP clients keep.
    log: Ui,
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
        log: ctx.ui.clone(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // Between stdin/stdout and the SDK: every request gets an answer,
        // a message over the limit too (the SDK drops such a line unseen).
        let (to_server, server_in) = tokio::io::duplex(1 << 20);
        let (server_out, from_server) = tokio::io::duplex(1 << 20);
        let (replies, replies_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(frame::read_stdin(to_server, replies));
        let writer = tokio::spawn(frame::write_stdout(from_server, replies_rx));
        let transport =
            rmcp::transport::async_rw::AsyncRwTransport::new_server(server_in, server_out)
                .with_max_line_length(frame::MAX_MESSAGE + 2);
        let service = server
            .serve(transport)
            .await
            .map_err(|e| Error::program(format!("the MCP client did not initialise: {e}")))?;
        let stopped = service
            .waiting()
            .await
            .map_err(|e| Error::program(format!("the MCP server stopped: {e}")));
        // The SDK's last answers may still be on their way to stdout (a
        // client that sent its requests and closed stdin): let them out.
        let _ = writer.await;
        stopped?;
        Ok::<(), Error>(())
    })?;
    Ok(())
}

/// A tool's answer: structured content, or a tool error with the CLI's message.
type Answer = Result<Value, (Value, String)>;

/// A strict-mode client (OpenAI's strict tool calling) sends every optional
/// field the schema declares, as `null` when it has no value: such a field
/// is absent. Removed from the step object and from the objects inside it
/// (a `files` object value, an `edits` operation); a `files` value of
/// `null` itself stays, as it means "delete the file". The decision is the
/// object without them.
fn strip_strict_nulls(step: &mut Value) {
    let Value::Object(top) = step else { return };
    top.retain(|_, v| !v.is_null());
    if let Some(Value::Object(files)) = top.get_mut("files") {
        for v in files.values_mut() {
            if let Value::Object(o) = v {
                o.retain(|_, v| !v.is_null());
            }
        }
    }
    if let Some(Value::Array(ops)) = top.get_mut("edits") {
        for op in ops {
            if let Value::Object(o) = op {
                o.retain(|_, v| !v.is_null());
            }
        }
    }
}

/// What `apply_step` answers (its structured content).
fn apply_step_output() -> JsonObject {
    let string = json!({"type": "string"});
    let nullable = json!({"type": ["string", "null"]});
    match json!({
        "type": "object",
        "properties": {
            "step": nullable,
            "status": {"type": "string", "enum": ["applied", "already_recorded"]},
            "commit": string,
            "decision": string,
            "diff": string,
            "artifact": string,
            "history": string,
            "head": nullable,
            "run": string,
            "branch": string,
            "durable": string,
            "effects": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["status", "commit", "decision", "diff", "artifact", "history"],
    }) {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// The read-only tools answer their command's `--json` document's `data`.
fn object_output() -> JsonObject {
    match json!({"type": "object"}) {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

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
                 fingerprint. A step may carry `effects`: HTTP requests and commands this box \
                 delivers once the step is durable (a command runs in the repository; a secret \
                 named by `{\"env\": NAME}` goes only to the URL local config binds it to): \
                 approve such a step as you would the request or the command itself.",
                crate::plan::schema::step_schema(),
            )
            .with_raw_output_schema(Arc::new(apply_step_output()))
            .with_annotations(
                // Files may be deleted or overwritten, and a step's effects
                // reach the world (requests, commands).
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .idempotent(true)
                    .open_world(true),
            ),
            Tool::new(
                "status",
                "The run: its branch, durable head and remote, steps applied, the worktree's \
                 state and whether a resume is needed (as `git steps status --json`).",
                empty(Value::Null),
            )
            .with_raw_output_schema(Arc::new(object_output()))
            .with_annotations(read_only()),
            Tool::new(
                "log",
                "The run's steps in order: id, decision digest, receipt commit, files, lines \
                 added and removed, duplicated hunks (as `git steps log --json`).",
                empty(Value::Null),
            )
            .with_raw_output_schema(Arc::new(object_output()))
            .with_annotations(read_only()),
            Tool::new(
                "verify",
                "Check the run's receipts: one per id, indexes in order, every decision \
                 recomputable; the answer lists problems (as `git steps verify --json`).",
                empty(Value::Null),
            )
            .with_raw_output_schema(Arc::new(object_output()))
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
            .with_raw_output_schema(Arc::new(object_output()))
            .with_annotations(read_only()),
        ]
    }

    /// One tool call, through a capturing [`Ui`]: the protocol owns
    /// stdout, and what the call says on stderr goes to the server's log.
    fn call(&self, name: &str, args: JsonObject) -> Option<Answer> {
        let (ui, said) = Ui::capture(true, false, self.log.verbose);
        let ctx = Ctx {
            ui: &ui,
            repo: self.repo.clone(),
        };
        let answer = self.answer(&ctx, name, args);
        for line in said.stderr().lines() {
            self.log.line(line);
        }
        debug_assert!(said.stdout().is_empty(), "an MCP call wrote to stdout");
        answer
    }

    fn answer(&self, ctx: &Ctx, name: &str, args: JsonObject) -> Option<Answer> {
        Some(match name {
            "apply_step" => self.apply_step(ctx, Value::Object(args)),
            "status" | "log" | "verify" => self.read_only(ctx, name, None),
            "fingerprint" => match args.get("rev").filter(|v| !v.is_null()) {
                Some(Value::String(rev)) => self.read_only(ctx, name, Some(rev)),
                None => self.read_only(ctx, name, None),
                Some(_) => {
                    let e = Failure::from(Error::input("fingerprint: `rev` must be a string"));
                    Err((failure_json(&e), failure_text(&e.error)))
                }
            },
            _ => return None,
        })
    }

    /// A read-only tool: the library call its command makes, answered with
    /// the data of that command's `--json` document (`fingerprint`'s has
    /// both fingerprints, so its `history` argument changes nothing here).
    fn read_only(&self, ctx: &Ctx, name: &str, rev: Option<&String>) -> Answer {
        let fail = |f: Failure| (failure_json(&f), failure_text(&f.error));
        let (repo, s) = ctx.open(&self.run).map_err(|e| fail(e.into()))?;
        if name == "verify" {
            let v = inspect::verify(&repo, &s, None).map_err(|e| fail(e.into()))?;
            let data = json_data(&v).map_err(|e| fail(e.into()))?;
            if !v.ok {
                // The document says what is wrong; the text is the CLI's error.
                return Err((data, failure_text(&super::verify::refusal(&v, &s))));
            }
            return Ok(data);
        }
        let data =
            match name {
                "status" => inspect::status(&repo, &s, None).and_then(|st| json_data(&st)),
                "log" => inspect::log(&repo, &s)
                    .and_then(|(l, _)| json_data(&super::log::document(&s, &l))),
                "fingerprint" => inspect::fingerprint(&repo, &s, rev.map(String::as_str))
                    .and_then(|f| json_data(&f)),
                _ => unreachable!("a read-only tool: {name}"),
            };
        data.map_err(|e| fail(e.into()))
    }

    /// One step object, applied as `apply` applies a one-step plan.
    fn apply_step(&self, ctx: &Ctx, mut step: Value) -> Answer {
        // There is no plan here: an error names the step, not a plan line.
        let fail = |mut f: Failure| {
            if let Error::Input { line, .. } = &mut f.error {
                *line = None;
            }
            (failure_json(&f), failure_text(&f.error))
        };
        strip_strict_nulls(&mut step);
        let (repo, s) = ctx.open_deepened(&self.run).map_err(|e| fail(e.into()))?;
        let id = step.get("id").and_then(Value::as_str).map(str::to_string);
        let text = serde_json::to_string(&step).unwrap_or_default();
        let plan = Plan::from_text(&text, repo.path(), "the apply_step arguments")
            .map_err(|e| fail(e.into()))?;
        let config = &s.config;
        let opts = ApplyOptions {
            dry_run: false,
            allow_duplicate_hunks: self.allow_duplicate_hunks || config.allow_duplicate_hunks,
            batch: 1,
        };
        let report = engine::apply_plan_from(
            &repo,
            &s,
            &plan,
            &opts,
            &mut Terminal::new(ctx.ui, false),
            Some(crate::run::session::Source::Mcp),
        )
        .map_err(|(error, _)| {
            let error = match &error {
                // As `apply` says it for a plan, for the one step there is.
                Error::Apply { step, .. } => {
                    let step = step.clone();
                    error.with_hint(format!(
                        "nothing was written for step {step}, and the steps before it stay durable; send a corrected step (the same id is fine: it has no receipt)"
                    ))
                }
                _ => error,
            };
            fail(error.into())
        })?;
        let (status, commit) = match report.steps.first() {
            Some(StepOutcome::Applied { commit, .. }) => ("applied", commit.clone()),
            Some(StepOutcome::Skip { commit, .. }) => ("already_recorded", commit.clone()),
            _ => {
                return Err(fail(
                    Error::internal("apply_step: the step has no outcome").into(),
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
            "effects": report.effects,
            "effects_pending": report.effects_pending,
        }))
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
        // Held until this call's answer is ready here, not only until its
        // work is done: the next call then starts after this one is
        // answered, so answers go out in the order the calls came (JSON-RPC
        // clients match them by id; a script reading lines need not).
        let one = self.one.clone().lock_owned().await;
        let answer = tokio::task::spawn_blocking(move || server.call(&tool, args))
            .await
            .map_err(|e| ErrorData::internal_error(format!("the tool call failed: {e}"), None));
        drop(one);
        let answer = answer?;
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
