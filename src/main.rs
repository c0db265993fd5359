//! The `git-steps` binary: parse arguments, call the library, map the typed
//! error to the SPEC's exit code. Nothing else lives here.

use std::io::Write;
use std::process::ExitCode;

use git_steps::cli;
use git_steps::error::exit;

fn main() -> ExitCode {
    let cli = cli::parse();
    let json = cli.json;
    let verbose = cli.verbose;
    // Not locked for the whole run: `git steps mcp` writes its protocol
    // messages to stdout from another thread.
    let mut out = std::io::stdout();
    let code = match cli::run(cli, &mut out) {
        Ok(()) => exit::OK,
        Err(failure) => {
            // A reader that went away (`git steps log | head`) is not an error.
            if let git_steps::Error::Other {
                source: Some(s), ..
            } = &failure.error
            {
                if let Some(io) = s.downcast_ref::<std::io::Error>() {
                    if io.kind() == std::io::ErrorKind::BrokenPipe {
                        return ExitCode::SUCCESS;
                    }
                }
            }
            cli::report_failure(json, verbose, &failure, &mut out);
            failure.error.exit_code()
        }
    };
    let _ = out.flush();
    if verbose {
        git_steps::cli::report_peak_memory();
    }
    ExitCode::from(code)
}
