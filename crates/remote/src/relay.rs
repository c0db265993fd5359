//! The `git://` relay for the git CLI transport: git's `GIT_PROXY_COMMAND`,
//! which git runs as `<command> <host> <port>` and talks to over its stdin
//! and stdout, relayed to a TCP connection with git-steps' network bound.
//!
//! git's own `git://` client waits forever for a server that stops
//! answering; libgit2's stream (see `git::stream`) gives up after
//! `GIT_STEPS_NET_TIMEOUT_SECS` without a byte. Owns that same bound for
//! the git CLI: the connection is given up when no byte has moved either
//! way for the timeout (the client computing a pack is not a stall: it
//! moves bytes up). Invariant: bytes are relayed unchanged and in order;
//! the relay ends when the server closes, or fails loudly on a stall.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Relay stdin and stdout to `host:port`, giving up after `idle` without a
/// byte either way.
pub fn relay(host: &str, port: u16, idle: Duration) -> Result<()> {
    let fail = |what: String| Error::remote(what, true);
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| fail(format!("failed to resolve address for {host}: {e}")))?
        .collect();
    let mut tcp = None;
    let mut last_error = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, idle) {
            Ok(t) => {
                tcp = Some(t);
                break;
            }
            Err(e) => last_error = Some(e),
        }
    }
    let tcp = tcp.ok_or_else(|| {
        fail(format!(
            "failed to connect to {host}:{port}: {}",
            last_error.map_or("no address".to_string(), |e| e.to_string())
        ))
    })?;
    let _ = tcp.set_nodelay(true);
    let _ = tcp.set_write_timeout(Some(idle));
    let _ = tcp.set_read_timeout(Some(idle));
    let start = Instant::now();
    // Milliseconds after `start` of the last byte moved, either way.
    let moved = Arc::new(AtomicU64::new(0));
    let now = move || start.elapsed().as_millis() as u64;
    {
        let (mut up, moved) = (tcp.try_clone()?, moved.clone());
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 64 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = up.shutdown(Shutdown::Write);
                        return;
                    }
                    Ok(n) => {
                        if up.write_all(&buf[..n]).is_err() {
                            let _ = up.shutdown(Shutdown::Both);
                            return;
                        }
                        moved.store(now(), Ordering::SeqCst);
                    }
                }
            }
        });
    }
    let mut down = tcp;
    let mut stdout = std::io::stdout().lock();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match down.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                stdout.write_all(&buf[..n])?;
                stdout.flush()?;
                moved.store(now(), Ordering::SeqCst);
                let _ = down.set_read_timeout(Some(idle));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                let quiet = now().saturating_sub(moved.load(Ordering::SeqCst));
                let Some(left) = idle
                    .checked_sub(Duration::from_millis(quiet))
                    .filter(|l| !l.is_zero())
                else {
                    let _ = down.shutdown(Shutdown::Both);
                    return Err(fail(format!(
                        "{host}:{port} timed out: no byte either way for {} s",
                        idle.as_secs()
                    )));
                };
                // Bytes went up meanwhile: wait out the rest.
                let _ = down.set_read_timeout(Some(left));
            }
            Err(e) => return Err(fail(format!("recv from {host}:{port} failed: {e}"))),
        }
    }
}
