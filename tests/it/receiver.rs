//! A receiving server for effects, started by the tests on 127.0.0.1: it
//! records every delivery (its `Idempotency-Key`, method, path, body and
//! when it came) before it answers, and honours keys as a careful receiver
//! does — a key it has seen is not applied again. What it answers is set
//! per path: 201, a run of 5xx answers, a delay (a timeout for the client).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub key: Option<String>,
    pub method: String,
    pub path: String,
    pub body: String,
    pub content_type: Option<String>,
    pub headers: Vec<(String, String)>,
    pub at: Instant,
}

/// How the receiver answers a path.
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    /// Answer this many requests with 503 first.
    pub fail_first: usize,
    /// Answer every request with this status (until changed).
    pub status: Option<u16>,
    /// Wait this long before answering the first `delay_first` requests.
    pub delay: Duration,
    pub delay_first: usize,
}

#[derive(Default)]
struct State {
    deliveries: Vec<Delivery>,
    /// Key → how many times it was applied (a receiver that honours keys
    /// applies each once: this stays at 1).
    applied: HashMap<String, usize>,
    behaviour: HashMap<String, Behaviour>,
    seen_by_path: HashMap<String, usize>,
}

pub struct Receiver {
    pub base: String,
    state: Arc<Mutex<State>>,
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                std::thread::spawn(move || serve(conn, &st));
            }
        });
        Receiver { base, state }
    }

    /// The URL of `path` on this receiver.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn set(&self, path: &str, b: Behaviour) {
        self.state.lock().unwrap().behaviour.insert(path.into(), b);
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state.lock().unwrap().deliveries.clone()
    }

    /// Deliveries per key.
    pub fn counts(&self) -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for d in self.deliveries() {
            *m.entry(d.key.unwrap_or_default()).or_insert(0) += 1;
        }
        m
    }

    /// Applications per key (at most 1 each: the receiver honours keys).
    pub fn applied(&self) -> HashMap<String, usize> {
        self.state.lock().unwrap().applied.clone()
    }

    pub fn clear(&self) {
        let mut s = self.state.lock().unwrap();
        s.deliveries.clear();
        s.applied.clear();
        s.seen_by_path.clear();
    }
}

fn serve(conn: TcpStream, state: &Mutex<State>) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut w = conn;
    // One request a connection (the answer says `Connection: close`).
    {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end().to_string();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let len: usize = get("Content-Length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let key = get("Idempotency-Key");
        // Recorded before the answer: a client killed while it waits has
        // still delivered.
        let (status, wait) = {
            let mut s = state.lock().unwrap();
            s.deliveries.push(Delivery {
                key: key.clone(),
                method,
                path: path.clone(),
                body: String::from_utf8_lossy(&body).into_owned(),
                content_type: get("Content-Type"),
                headers: headers.clone(),
                at: Instant::now(),
            });
            let n = {
                let c = s.seen_by_path.entry(path.clone()).or_insert(0);
                *c += 1;
                *c
            };
            let b = s.behaviour.get(&path).cloned().unwrap_or_default();
            let wait = if n <= b.delay_first {
                b.delay
            } else {
                Duration::ZERO
            };
            let status = if n <= b.fail_first {
                503
            } else {
                b.status.unwrap_or(201)
            };
            if (200..300).contains(&status) {
                if let Some(k) = &key {
                    let a = s.applied.entry(k.clone()).or_insert(0);
                    // Honours the key: a repeat is answered, not applied.
                    if *a == 0 {
                        *a = 1;
                    }
                }
            }
            (status, wait)
        };
        std::thread::sleep(wait);
        // A 401 echoes the credential it was sent, as some servers do.
        let text = match status {
            201 => "created".to_string(),
            401 => format!(
                "bad credentials: {}",
                get("Authorization").unwrap_or_default()
            ),
            _ => "busy".to_string(),
        };
        // A redirect to a signed URL that carries the credential, as some
        // APIs answer.
        let location = if (300..400).contains(&status) {
            format!(
                "Location: https://elsewhere.example/?sig={}\r\n",
                get("Authorization").unwrap_or_default()
            )
        } else {
            String::new()
        };
        let reply = format!(
            "HTTP/1.1 {status} {text}\r\n{location}Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        );
        let _ = w.write_all(reply.as_bytes());
    }
}
