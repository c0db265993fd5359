//! One kept-alive HTTP/1.1 connection to a smart-HTTP server, plain or
//! under TLS, for the push client in `smart.rs`.
//!
//! Owns the bytes on the wire: a request written whole (head and body in
//! one buffer, `TCP_NODELAY`), its response read to the end (by
//! `Content-Length`, chunked, or to the close), and the connection kept for
//! the next request when the server allows it. TLS is OpenSSL's, the one
//! libgit2 links, with the CA locations git would use
//! ([`crate::git::ca_locations`]). Invariant: a request is sent again only
//! on a fresh connection, and only when the kept one it went out on gave
//! back not one byte (the server closed it while idle); what a server
//! answered is never mistaken for a whole response when it was cut.
//! Counters of connections and requests are kept for the benchmarks and
//! `-v`.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};

use super::pace::Paced;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use openssl::ssl::{SslConnector, SslMethod, SslStream, SslVerifyMode};

/// Connections opened and requests sent by this process (every server).
pub static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);
pub static REQUESTS: AtomicUsize = AtomicUsize::new(0);

/// Where to connect.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// The repository's path on the server, without a trailing `/`.
    pub path: String,
    /// `host` or `host:port`, for the `Host` header.
    pub authority: String,
}

impl Endpoint {
    /// An http(s) URL's endpoint; None for anything else.
    pub fn parse(url: &url::Url) -> Option<Endpoint> {
        let tls = match url.scheme() {
            "https" => true,
            "http" => false,
            _ => return None,
        };
        let host = url.host_str()?.to_string();
        let port = url.port_or_known_default()?;
        let authority = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        Some(Endpoint {
            tls,
            host,
            port,
            path: url.path().trim_end_matches('/').to_string(),
            authority,
        })
    }
}

/// Why a request got no usable response.
#[derive(Debug)]
pub enum Failure {
    /// The connection could not be made (refused, no route, TLS refused
    /// the certificate...): nothing was sent.
    Connect { message: String, transient: bool },
    /// The request went out (in part or whole) and the answer broke off or
    /// never came: what the server did is unknown.
    Broken(String),
}

/// A response read to its end.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<SslStream<TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A client for one endpoint: at most one connection, kept between
/// requests.
pub struct Client {
    pub endpoint: Endpoint,
    tls: Option<SslConnector>,
    timeout: Duration,
    conn: Option<BufReader<Paced<Stream>>>,
    /// Connections this client opened.
    pub opened: usize,
}

impl Client {
    /// A client for `endpoint`; `ca` is where the CA certificates are (a
    /// file, a directory), for https.
    pub fn new(
        endpoint: Endpoint,
        ca: (Option<std::path::PathBuf>, Option<std::path::PathBuf>),
        timeout: Duration,
    ) -> Result<Client, String> {
        let tls = if endpoint.tls {
            let mut b = SslConnector::builder(SslMethod::tls_client())
                .map_err(|e| format!("cannot set up TLS: {e}"))?;
            b.set_verify(SslVerifyMode::PEER);
            let (file, dir) = ca;
            if let Some(f) = &file {
                b.set_ca_file(f)
                    .map_err(|e| format!("cannot read the CA file {}: {e}", f.display()))?;
            }
            if let Some(d) = &dir {
                let lookup = b
                    .cert_store_mut()
                    .add_lookup(openssl::x509::store::X509Lookup::hash_dir())
                    .map_err(|e| format!("cannot use the CA directory {}: {e}", d.display()))?;
                lookup
                    .add_dir(&d.to_string_lossy(), openssl::ssl::SslFiletype::PEM)
                    .map_err(|e| format!("cannot use the CA directory {}: {e}", d.display()))?;
            }
            // HTTP/1.1 only: the server must not pick h2.
            b.set_alpn_protos(b"\x08http/1.1")
                .map_err(|e| format!("cannot set up TLS: {e}"))?;
            Some(b.build())
        } else {
            None
        };
        Ok(Client {
            endpoint,
            tls,
            timeout,
            conn: None,
            opened: 0,
        })
    }

    fn connect(&mut self) -> Result<BufReader<Paced<Stream>>, Failure> {
        let Endpoint { host, port, .. } = &self.endpoint;
        let fail = |message: String, transient: bool| Failure::Connect { message, transient };
        let addrs: Vec<_> = (host.as_str(), *port)
            .to_socket_addrs()
            .map_err(|e| fail(format!("failed to resolve address for {host}: {e}"), true))?
            .collect();
        let mut last = None;
        let mut tcp = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, self.timeout) {
                Ok(t) => {
                    tcp = Some(t);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = tcp.ok_or_else(|| {
            fail(
                format!(
                    "failed to connect to {host}:{port}: {}",
                    last.map_or("no address".to_string(), |e| e.to_string())
                ),
                true,
            )
        })?;
        CONNECTIONS.fetch_add(1, Ordering::Relaxed);
        self.opened += 1;
        let _ = tcp.set_nodelay(true);
        let _ = tcp.set_read_timeout(Some(self.timeout));
        let _ = tcp.set_write_timeout(Some(self.timeout));
        let stream = match &self.tls {
            None => Stream::Plain(tcp),
            Some(c) => {
                let s = c.connect(host, tcp).map_err(|e| {
                    let transient = matches!(e, openssl::ssl::HandshakeError::Failure(_))
                        && !e.to_string().contains("certificate");
                    fail(format!("TLS with {host}:{port} failed: {e}"), transient)
                })?;
                Stream::Tls(Box::new(s))
            }
        };
        Ok(BufReader::with_capacity(
            64 * 1024,
            Paced::new(stream, self.timeout),
        ))
    }

    /// Send one request and read its response whole; `sent` is called
    /// once the request is out in full, before the answer is read. The body
    /// is sent with its length.
    pub fn request(
        &mut self,
        method: &str,
        target: &str,
        headers: &[(&str, String)],
        body: &[u8],
        sent: &mut dyn FnMut(),
    ) -> Result<Response, Failure> {
        let mut wire = Vec::with_capacity(512 + body.len());
        write!(
            wire,
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nUser-Agent: git/2.0 (git-steps {})\r\n",
            self.endpoint.authority,
            env!("CARGO_PKG_VERSION")
        )
        .expect("writing to a Vec");
        for (k, v) in headers {
            write!(wire, "{k}: {v}\r\n").expect("writing to a Vec");
        }
        if !matches!(method, "GET" | "HEAD") || !body.is_empty() {
            write!(wire, "Content-Length: {}\r\n", body.len()).expect("writing to a Vec");
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(body);
        // A kept connection the server has closed (or said anything on)
        // while it was idle is not used.
        if self.conn.as_mut().is_some_and(|c| !idle_and_open(c)) {
            self.conn = None;
        }
        let reused = self.conn.is_some();
        match self.exchange(&wire, sent) {
            // A kept connection the server closed as the request went out:
            // the request could not be written whole, so the server did
            // not act on it. Once more, on a new connection. (A request
            // written whole is never sent again here: what the server did
            // with it is for the caller to settle.)
            Err(Exchange::Silent(_)) if reused => {
                self.conn = None;
                self.exchange(&wire, sent).map_err(Exchange::into_failure)
            }
            other => other.map_err(Exchange::into_failure),
        }
    }

    fn exchange(&mut self, wire: &[u8], sent: &mut dyn FnMut()) -> Result<Response, Exchange> {
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => self.connect().map_err(Exchange::Failed)?,
        };
        REQUESTS.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = conn
            .get_mut()
            .write_all(wire)
            .and_then(|()| conn.get_mut().flush())
        {
            return Err(
                if e.kind() == ErrorKind::BrokenPipe || e.kind() == ErrorKind::ConnectionReset {
                    Exchange::Silent(format!("sending the request failed: {e}"))
                } else {
                    Exchange::Failed(Failure::Broken(format!("sending the request failed: {e}")))
                },
            );
        }
        sent();
        conn.get_mut().start();
        let (resp, keep) = read_response(&mut conn).map_err(|e| match e {
            // Written whole: not one to send again.
            Exchange::Silent(m) => Exchange::Failed(Failure::Broken(m)),
            other => other,
        })?;
        if keep {
            self.conn = Some(conn);
        }
        Ok(resp)
    }
}

/// Whether a kept connection is still open and quiet: nothing to read
/// (a server that closed it sends EOF; one that talks out of turn is not
/// trusted with the next request).
fn idle_and_open(conn: &mut BufReader<Paced<Stream>>) -> bool {
    if !conn.buffer().is_empty() {
        return false;
    }
    let tcp = match &conn.get_ref().s {
        Stream::Plain(t) => t,
        Stream::Tls(t) => t.get_ref(),
    };
    if tcp.set_nonblocking(true).is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    let quiet = matches!(tcp.peek(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock);
    tcp.set_nonblocking(false).is_ok() && quiet
}

/// The outcome of one try of a request that failed.
enum Exchange {
    /// Not one byte of an answer came back, and the connection was a kept
    /// one the server may have closed while idle.
    Silent(String),
    Failed(Failure),
}

impl Exchange {
    fn into_failure(self) -> Failure {
        match self {
            Exchange::Silent(m) => Failure::Broken(m),
            Exchange::Failed(f) => f,
        }
    }
}

fn io_failure(what: &str, e: std::io::Error) -> Exchange {
    // (The low-speed rule's own words, else the kernel's timeout.)
    let how = if e.get_ref().is_none()
        && matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
    {
        "timed out".to_string()
    } else {
        e.to_string()
    };
    Exchange::Failed(Failure::Broken(format!("{what}: {how}")))
}

/// Most of a response head a server may send.
const MAX_HEAD: usize = 64 * 1024;
/// Most of a response body (a ref advertisement of a large repository, a
/// push's report): anything larger is not an answer git-steps asked for.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// Read one response; true when the connection may serve the next request.
/// Interim answers (`100 Continue`, `103 Early Hints`) are skipped.
fn read_response(conn: &mut BufReader<Paced<Stream>>) -> Result<(Response, bool), Exchange> {
    for _ in 0..8 {
        let (resp, keep) = read_one(conn)?;
        if !(100..200).contains(&resp.status) || resp.status == 101 {
            return Ok((resp, keep));
        }
    }
    Err(broken("the server sent interim answers and no final one"))
}

fn read_one(conn: &mut BufReader<Paced<Stream>>) -> Result<(Response, bool), Exchange> {
    // The head: up to the empty line, at most MAX_HEAD bytes.
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let limit = (MAX_HEAD + 1 - head.len()) as u64;
        let n = match conn.by_ref().take(limit).read_until(b'\n', &mut head) {
            Ok(n) => n,
            Err(e) if before == 0 && e.kind() == ErrorKind::ConnectionReset => {
                return Err(Exchange::Silent(format!("the connection was reset: {e}")))
            }
            Err(e) => return Err(io_failure("reading the answer failed", e)),
        };
        if n == 0 {
            return Err(if head.is_empty() {
                Exchange::Silent("the server closed the connection without an answer".into())
            } else {
                Exchange::Failed(Failure::Broken(
                    "the server closed the connection in the middle of its answer".into(),
                ))
            });
        }
        if head.len() > MAX_HEAD {
            return Err(broken("the answer's head is too long"));
        }
        if !head.ends_with(b"\n") {
            return Err(broken(
                "the server closed the connection in the middle of its answer",
            ));
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            break;
        }
    }
    let mut hdrs = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Response::new(&mut hdrs);
    match parsed.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(broken("the server's answer is not HTTP")),
    }
    let status = parsed.code.unwrap_or(0);
    let reason = parsed.reason.unwrap_or_default().to_string();
    let http10 = parsed.version == Some(0);
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).trim().to_string(),
            )
        })
        .collect();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let close = match get("Connection") {
        Some(v) if v.eq_ignore_ascii_case("close") => true,
        Some(v) if v.eq_ignore_ascii_case("keep-alive") => false,
        _ => http10,
    };
    // RFC 9112, 6.3: a message with both is a smuggling attempt, an
    // error; a response whose last coding is not chunked runs to the
    // close; several Content-Length values must agree, and are digits.
    let all = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .collect()
    };
    let codings = all("Transfer-Encoding");
    let lengths = all("Content-Length");
    if !codings.is_empty() && !lengths.is_empty() {
        return Err(broken(
            "the answer has both Transfer-Encoding and Content-Length (RFC 9112: an error)",
        ));
    }
    let chunked = codings
        .last()
        .is_some_and(|c| c.eq_ignore_ascii_case("chunked"));
    let to_close = !codings.is_empty() && !chunked;
    let length = match lengths.first() {
        None => None,
        Some(first) => {
            if lengths.iter().any(|l| l != first) {
                return Err(broken("the answer's Content-Length values disagree"));
            }
            Some(
                if !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()) {
                    first.parse::<usize>()
                } else {
                    "not a number".parse::<usize>()
                },
            )
        }
    };
    let mut body = Vec::new();
    let keep = if chunked {
        read_chunked(conn, &mut body)?;
        !close
    } else if to_close {
        read_to_close(conn, &mut body)?;
        false
    } else if let Some(len) = length {
        let len = len.map_err(|_| broken("the answer's Content-Length is not a number"))?;
        if len > MAX_BODY {
            return Err(broken("the answer is too large"));
        }
        body.resize(len, 0);
        conn.read_exact(&mut body)
            .map_err(|e| io_failure("the answer broke off", e))?;
        !close
    } else if status == 204 || status == 304 || (100..200).contains(&status) {
        !close
    } else {
        // To the end of the connection.
        read_to_close(conn, &mut body)?;
        false
    };
    Ok((
        Response {
            status,
            reason,
            headers,
            body,
        },
        keep,
    ))
}

/// A body that runs to the connection's close, at most [`MAX_BODY`].
fn read_to_close(conn: &mut BufReader<Paced<Stream>>, body: &mut Vec<u8>) -> Result<(), Exchange> {
    conn.take(MAX_BODY as u64 + 1)
        .read_to_end(body)
        .map_err(|e| io_failure("the answer broke off", e))?;
    if body.len() > MAX_BODY {
        return Err(broken("the answer is too large"));
    }
    Ok(())
}

fn broken(what: &str) -> Exchange {
    Exchange::Failed(Failure::Broken(what.to_string()))
}

/// A chunked body, trailers skipped.
fn read_chunked(conn: &mut BufReader<Paced<Stream>>, body: &mut Vec<u8>) -> Result<(), Exchange> {
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = conn
            .by_ref()
            .take(1024)
            .read_until(b'\n', &mut line)
            .map_err(|e| io_failure("the answer broke off", e))?;
        if n == 0 || !line.ends_with(b"\n") {
            return Err(broken("the answer broke off in a chunk's size"));
        }
        let text = String::from_utf8_lossy(&line);
        let size = text.trim().split(';').next().unwrap_or_default().trim();
        let size = Some(size)
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .ok_or_else(|| broken("a chunk's size is not hexadecimal"))?;
        if size == 0 {
            // Trailers, up to the empty line (bounded as a head is).
            let mut trailers = 0usize;
            loop {
                line.clear();
                let n = conn
                    .by_ref()
                    .take(MAX_HEAD as u64)
                    .read_until(b'\n', &mut line)
                    .map_err(|e| io_failure("the answer broke off", e))?;
                if n == 0 {
                    return Err(broken("the answer broke off after its last chunk"));
                }
                if line == b"\r\n" || line == b"\n" {
                    return Ok(());
                }
                trailers += n;
                if trailers > MAX_HEAD || !line.ends_with(b"\n") {
                    return Err(broken("the answer's trailers are too long"));
                }
            }
        }
        if body.len().checked_add(size).is_none_or(|n| n > MAX_BODY) {
            return Err(broken("the answer is too large"));
        }
        let at = body.len();
        body.resize(at + size, 0);
        conn.read_exact(&mut body[at..])
            .map_err(|e| io_failure("the answer broke off", e))?;
        let mut crlf = [0u8; 2];
        conn.read_exact(&mut crlf)
            .map_err(|e| io_failure("the answer broke off", e))?;
        if &crlf != b"\r\n" {
            return Err(broken("a chunk does not end with CRLF"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server on 127.0.0.1 that answers each connection with `answers`
    /// (one per request read, then closes), and counts the requests.
    fn server(answers: Vec<Vec<&'static [u8]>>) -> (Endpoint, std::thread::JoinHandle<usize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let mut seen = 0;
            for conn in answers {
                let (s, _) = l.accept().unwrap();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                for answer in conn {
                    // Read one request head (and its body, by length).
                    let mut len = 0;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return seen;
                        }
                        if let Some(v) = line.strip_prefix("Content-Length: ") {
                            len = v.trim().parse().unwrap();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; len];
                    r.read_exact(&mut body).unwrap();
                    seen += 1;
                    let _ = w.write_all(answer);
                }
            }
            seen
        });
        let ep = local(port);
        (ep, t)
    }

    /// The endpoint `/r.git` of a test server on this machine.
    fn local(port: u16) -> Endpoint {
        Endpoint {
            tls: false,
            host: "127.0.0.1".into(),
            port,
            path: "/r.git".into(),
            authority: format!("127.0.0.1:{port}"),
        }
    }

    fn client(ep: Endpoint) -> Client {
        Client::new(ep, (None, None), Duration::from_secs(5)).unwrap()
    }

    #[test]
    fn a_kept_connection_serves_several_requests_chunked_or_not() {
        let (ep, t) = server(vec![vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: v\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ]]);
        let mut c = client(ep);
        let a = c
            .request("GET", "/r.git/info/refs", &[], &[], &mut || {})
            .unwrap();
        assert_eq!(a.body, b"abcde");
        let mut sent = false;
        let b = c
            .request("POST", "/r.git/x", &[], b"body", &mut || sent = true)
            .unwrap();
        assert_eq!((b.status, &b.body[..], sent), (200, &b"ok"[..], true));
        assert_eq!(c.opened, 1);
        assert_eq!(t.join().unwrap(), 2);
    }

    #[test]
    fn a_connection_closed_while_idle_is_replaced_and_the_request_sent_once() {
        // The first connection answers once and closes; the second request
        // goes out on it, gets nothing, and is sent again on a new one.
        let (ep, t) = server(vec![
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"],
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"],
        ]);
        let mut c = client(ep);
        c.request("GET", "/r.git/1", &[], &[], &mut || {}).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let b = c.request("GET", "/r.git/2", &[], &[], &mut || {}).unwrap();
        assert_eq!(b.body, b"b");
        assert_eq!(c.opened, 2);
        // Each request reached the server once.
        assert_eq!(t.join().unwrap(), 2);
    }

    /// A head line that never ends.
    static LONG_HEAD: [u8; 100_000] = {
        let mut b = [b'a'; 100_000];
        let start = b"HTTP/1.1 200 OK\r\nX: ";
        let mut i = 0;
        while i < start.len() {
            b[i] = start[i];
            i += 1;
        }
        b
    };

    /// Issue 48, item 9: a server that drips its answer a byte inside
    /// every read timeout is cut off by the low-speed rule, within a few
    /// windows, not after the whole answer.
    #[test]
    fn a_dripping_answer_is_a_timeout() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let mut w = s;
            for b in b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
                .iter()
                .cycle()
                .take(60)
            {
                if w.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(1500));
            }
        });
        let ep = local(port);
        // Each byte inside the 2 s read timeout, 0.67 bytes a second.
        let mut c = Client::new(ep, (None, None), Duration::from_secs(2)).unwrap();
        let start = std::time::Instant::now();
        match c.request("GET", "/r.git/x", &[], &[], &mut || {}) {
            Err(Failure::Broken(m)) => assert!(m.contains("under 1 byte a second"), "{m}"),
            other => panic!("{other:?}"),
        }
        // The 60 bytes would take 90 s.
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "{:?}",
            start.elapsed()
        );
        drop(c);
        let _ = t.join();
    }

    #[test]
    fn interim_answers_are_skipped() {
        let (ep, t) = server(vec![vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ]]);
        let mut c = client(ep);
        let r = c.request("GET", "/r.git/x", &[], &[], &mut || {}).unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]));
        drop(c);
        t.join().unwrap();
    }

    #[test]
    fn a_cut_or_crafted_answer_is_an_error_never_a_response() {
        for (answer, why) in [
            (
                &b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"[..],
                "broke off",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
                "too large",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                "hexadecimal",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY",
                "CRLF",
            ),
            (b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP"),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
                "too large",
            ),
            (&LONG_HEAD[..], "too long"),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n",
                "broke off",
            ),
            // Issue 48, item 10: framing as RFC 9112 says.
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nokabc",
                "disagree",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
                "not a number",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                "both Transfer-Encoding and Content-Length",
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+2\r\nok\r\n0\r\n\r\n",
                "hexadecimal",
            ),
        ] {
            let (ep, t) = server(vec![vec![answer]]);
            let mut c = client(ep);
            match c.request("GET", "/r.git/x", &[], &[], &mut || {}) {
                Err(Failure::Broken(m)) => assert!(m.contains(why), "{why}: {m}"),
                other => panic!("{why}: {other:?}"),
            }
            drop(c);
            t.join().unwrap();
        }
    }
}
