//! A fault-injecting TCP proxy between git-steps and a real server: per
//! connection, one [`Fault`] — a cut after K bytes in either direction, a
//! reset, a stall, a drip, or (for plain HTTP) a 503 in place of a request
//! whose body has begun. Started on 127.0.0.1 with a port of its own; every
//! connection it saw and the fault it got are logged.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Which way bytes flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Client to server (a request, a pack being pushed).
    Up,
    /// Server to client (a ref advertisement, a pack being fetched).
    Down,
}

/// What one connection suffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forwarded faithfully.
    None,
    /// Both sockets closed after `after` bytes went `dir`.
    Cut { dir: Dir, after: usize },
    /// A TCP reset (RST) to the client after `after` bytes went `dir`.
    Reset { dir: Dir, after: usize },
    /// After `after` bytes went `dir`, nothing more either way, the
    /// connection held open until the proxy is dropped.
    Stall { dir: Dir, after: usize },
    /// After `after` bytes went `dir`, one byte every `every` in that
    /// direction.
    Drip {
        dir: Dir,
        after: usize,
        every: Duration,
    },
    /// Plain HTTP: once `after` bytes went up, the client is answered 503
    /// and the connection closed (the server never sees the rest).
    Http503 { after: usize },
}

impl Fault {
    /// The kind's name, for tallies.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Cut { .. } => "cut",
            Fault::Reset { .. } => "reset",
            Fault::Stall { .. } => "stall",
            Fault::Drip { .. } => "drip",
            Fault::Http503 { .. } => "503",
        }
    }
}

/// What a proxy was told to do to each connection.
type Choose = Box<dyn FnMut(usize) -> Fault + Send>;

pub struct Proxy {
    pub port: u16,
    stop: Arc<AtomicBool>,
    /// Every connection's fault, in the order they came.
    pub log: Arc<Mutex<Vec<Fault>>>,
}

impl Proxy {
    /// Listen on a port of its own and forward to `upstream`, each
    /// connection `n` (0, 1, …) suffering `choose(n)`.
    pub fn start(
        upstream: SocketAddr,
        choose: impl FnMut(usize) -> Fault + Send + 'static,
    ) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (stop2, log2) = (stop.clone(), log.clone());
        let mut choose: Choose = Box::new(choose);
        std::thread::spawn(move || {
            for (n, client) in listener.incoming().enumerate() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let fault = choose(n);
                log2.lock().unwrap().push(fault);
                let stop = stop2.clone();
                std::thread::spawn(move || serve(client, upstream, fault, stop));
            }
        });
        Proxy { port, stop, log }
    }

    /// `url` with its port replaced by the proxy's.
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (host_port, path) = rest.split_once('/').unwrap();
        let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
        format!("{scheme}://{host}:{}/{path}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// The upstream address of a server URL (`http://127.0.0.1:PORT/…`).
pub fn upstream_of(url: &str) -> SocketAddr {
    let rest = url.split_once("://").unwrap().1;
    let host_port = rest.split_once('/').unwrap().0;
    host_port.parse().unwrap()
}

fn serve(client: TcpStream, upstream: SocketAddr, fault: Fault, stop: Arc<AtomicBool>) {
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let stop2 = stop.clone();
    let up = std::thread::spawn(move || pump(c2, s2, Dir::Up, fault, stop2));
    pump(server, client, Dir::Down, fault, stop);
    let _ = up.join();
}

/// Forward `from` to `to`, applying `fault` when it is this direction's.
fn pump(mut from: TcpStream, mut to: TcpStream, dir: Dir, fault: Fault, stop: Arc<AtomicBool>) {
    let mut sent = 0usize;
    let mut buf = [0u8; 16 * 1024];
    let close = |a: &TcpStream, b: &TcpStream| {
        let _ = a.shutdown(Shutdown::Both);
        let _ = b.shutdown(Shutdown::Both);
    };
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => {
                // The other side is done: pass the half-close on.
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => n,
        };
        let mut chunk = &buf[..n];
        // Where this direction's fault begins within the chunk.
        let at = |after: usize| after.saturating_sub(sent).min(chunk.len());
        match fault {
            Fault::Cut { dir: d, after } if d == dir && sent + chunk.len() >= after => {
                let k = at(after);
                let _ = to.write_all(&chunk[..k]);
                close(&from, &to);
                return;
            }
            Fault::Reset { dir: d, after } if d == dir && sent + chunk.len() >= after => {
                let k = at(after);
                let _ = to.write_all(&chunk[..k]);
                // The client's socket is `to` going down, `from` going up.
                let client = if dir == Dir::Down { &to } else { &from };
                let _ = rustix::net::sockopt::set_socket_linger(client, Some(Duration::ZERO));
                close(&from, &to);
                return;
            }
            Fault::Stall { dir: d, after } if d == dir && sent + chunk.len() >= after => {
                let k = at(after);
                let _ = to.write_all(&chunk[..k]);
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                close(&from, &to);
                return;
            }
            Fault::Drip {
                dir: d,
                after,
                every,
            } if d == dir && sent + chunk.len() > after => {
                let k = at(after);
                if to.write_all(&chunk[..k]).is_err() {
                    return;
                }
                sent += k;
                chunk = &chunk[k..];
                for b in chunk {
                    if stop.load(Ordering::SeqCst) || to.write_all(std::slice::from_ref(b)).is_err()
                    {
                        close(&from, &to);
                        return;
                    }
                    sent += 1;
                    std::thread::sleep(every);
                }
                continue;
            }
            Fault::Http503 { after } if dir == Dir::Up && sent + chunk.len() >= after => {
                // `to` is the server: it gets nothing more; the client gets
                // a 503 on its own socket (`from`).
                let _ = from.write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                close(&from, &to);
                return;
            }
            _ => {}
        }
        if to.write_all(chunk).is_err() {
            close(&from, &to);
            return;
        }
        sent += chunk.len();
    }
}
