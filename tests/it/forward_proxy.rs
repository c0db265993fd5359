//! A forward HTTP proxy on 127.0.0.1, as a company network puts between a
//! box and the world: plain http comes to it in absolute form (forwarded in
//! origin form), https as a `CONNECT` tunnel. It logs the first request of
//! every connection (`POST http://host:port/path`, `CONNECT host:port`), and
//! may demand credentials (`Proxy-Authorization`, else 407).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

pub struct ForwardProxy {
    pub port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl ForwardProxy {
    /// `auth`: the `Proxy-Authorization` value it demands, if any.
    pub fn start(auth: Option<&str>) -> ForwardProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let auth = auth.map(str::to_string);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (log, auth) = (log.clone(), auth.clone());
                std::thread::spawn(move || serve(conn, &log, auth.as_deref()));
            }
        });
        ForwardProxy { port, seen }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The first request line of every connection so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(mut client: TcpStream, log: &Mutex<Vec<String>>, auth: Option<&str>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let first = text.lines().next().unwrap_or_default().to_string();
    let mut parts = first.split(' ');
    let (method, target) = (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
    );
    let given = text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("proxy-authorization")
            .then(|| v.trim().to_string())
    });
    log.lock().unwrap().push(format!("{method} {target}"));
    if let Some(want) = auth {
        if given.as_deref() != Some(want) {
            let _ = client.write_all(
                b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"p\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return;
        }
    }
    let (upstream, first_bytes) = if method == "CONNECT" {
        let Ok(up) = TcpStream::connect(&target) else {
            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
            return;
        };
        let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
        (up, Vec::new())
    } else {
        // http://host:port/path → origin form to host:port.
        let Some(rest) = target.strip_prefix("http://") else {
            let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            return;
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        let Ok(up) = TcpStream::connect(authority) else {
            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
            return;
        };
        let rewritten = text.replacen(&target, path, 1);
        (up, rewritten.into_bytes())
    };
    let mut up_w = upstream.try_clone().unwrap();
    if up_w.write_all(&first_bytes).is_err() {
        return;
    }
    let mut client_r = client.try_clone().unwrap();
    let up_thread = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_r, &mut up_w);
        let _ = up_w.shutdown(Shutdown::Write);
    });
    let mut up_r = upstream;
    let _ = std::io::copy(&mut up_r, &mut client);
    let _ = client.shutdown(Shutdown::Both);
    let _ = up_thread.join();
}
