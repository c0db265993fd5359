//! The `git-steps` binary: parse arguments, call the library, map the typed
//! error to the SPEC's exit code. Nothing else lives here but three
//! process-wide settings: the allocator's trim threshold, the instant the
//! process started (`flush::mark_start`) and the binary that supervises
//! command effects, and, at the end, closing the ssh connections the run
//! shared.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use git_steps::cli::{self, Ui};
use git_steps::error::exit;

fn main() -> ExitCode {
    // glibc's allocator keeps freed memory instead of a brk pair per
    // step's peak (Linux).
    git_steps::os::tune_allocator();
    git_steps::flush::mark_start();
    // Command effects run under this binary's supervisor, so none outlives
    // a git-steps that was killed.
    if let Ok(exe) = std::env::current_exe() {
        git_steps::run::supervisor::set_supervisor(exe);
    }
    let cli = cli::parse();
    // A failed effect's answer goes to whoever called only when asked.
    git_steps::run::deliver::show_answers(cli.verbose);
    let ui = Ui::stdio(
        cli.json,
        cli.quiet,
        cli.verbose,
        cli::draws_bars(&cli.command),
    );
    let code = match cli::run(cli, &ui) {
        Ok(()) => exit::OK,
        Err(failure) => {
            // A reader that went away (`git steps log | head`) is not an error.
            if failure.error.io_kind() == Some(std::io::ErrorKind::BrokenPipe) {
                git_steps::sync::remote::close_shared_ssh();
                return ExitCode::SUCCESS;
            }
            ui.failure(&failure);
            failure.error.exit_code()
        }
    };
    // ssh connections this run shared end with it.
    git_steps::sync::remote::close_shared_ssh();
    ui.flush();
    ui.peak_memory();
    ExitCode::from(code)
}
