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

use std::io::{BufReader, ErrorKind, Read, Write};

pub use super::framing::parse_response;
use super::framing::{read_response, Exchange};
use super::pace::Paced;
use super::proxy::Proxy;
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
    /// The HTTP proxy requests go through ([`super::proxy`]): https is
    /// tunnelled with `CONNECT`, http sent to it in absolute form.
    proxy: Option<Proxy>,
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
            proxy: None,
        })
    }

    /// The same client, going through `proxy`.
    pub fn via(mut self, proxy: Option<Proxy>) -> Client {
        self.proxy = proxy;
        self
    }

    fn connect(&mut self) -> Result<BufReader<Paced<Stream>>, Failure> {
        let Endpoint { host, port, .. } = &self.endpoint;
        let fail = |message: String, transient: bool| Failure::Connect { message, transient };
        // Through a proxy, the connection is the proxy's.
        let (host, port) = match &self.proxy {
            Some(p) => (&p.host, &p.port),
            None => (host, port),
        };
        let through = self
            .proxy
            .as_ref()
            .map(|p| format!(" (the proxy {})", p.shown))
            .unwrap_or_default();
        let addrs: Vec<_> = (host.as_str(), *port)
            .to_socket_addrs()
            .map_err(|e| {
                fail(
                    format!("failed to resolve address for {host}{through}: {e}"),
                    true,
                )
            })?
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
                    "failed to connect to {host}:{port}{through}: {}",
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
        let Endpoint { host, port, .. } = &self.endpoint;
        let mut tcp = tcp;
        if let (Some(p), Some(_)) = (&self.proxy, &self.tls) {
            tunnel(&mut tcp, p, &self.endpoint.authority)?;
        }
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
        // To a proxy, plain http goes in absolute form, with its
        // credentials (https goes through the tunnel as it is).
        let plain_proxy = self.proxy.as_ref().filter(|_| !self.endpoint.tls);
        let target = match plain_proxy {
            Some(_) => format!("http://{}{target}", self.endpoint.authority),
            None => target.to_string(),
        };
        write!(
            wire,
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nUser-Agent: git/2.0 (git-steps {})\r\n",
            self.endpoint.authority,
            env!("CARGO_PKG_VERSION")
        )
        .expect("writing to a Vec");
        if let Some(auth) = plain_proxy.and_then(|p| p.authorization.as_ref()) {
            write!(wire, "Proxy-Authorization: {auth}\r\n").expect("writing to a Vec");
        }
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

/// Open a `CONNECT` tunnel to `authority` through the proxy `tcp` is
/// connected to. Its answer's head is read byte by byte: nothing of what
/// follows (the server's TLS) is taken from the socket.
fn tunnel(tcp: &mut TcpStream, p: &Proxy, authority: &str) -> Result<(), Failure> {
    let fail = |message: String, transient: bool| Failure::Connect { message, transient };
    let mut ask = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if let Some(auth) = &p.authorization {
        ask.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    ask.push_str("\r\n");
    tcp.write_all(ask.as_bytes())
        .map_err(|e| fail(format!("the proxy {} broke off: {e}", p.shown), true))?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tcp.read(&mut byte) {
            Ok(1) if head.len() < 16 * 1024 => head.push(byte[0]),
            Ok(1) => {
                return Err(fail(
                    format!("the proxy {}'s answer to CONNECT has no end", p.shown),
                    false,
                ))
            }
            Ok(_) => {
                return Err(fail(
                    format!(
                        "the proxy {} closed the connection before it answered CONNECT",
                        p.shown
                    ),
                    true,
                ))
            }
            Err(e) => {
                return Err(fail(
                    format!("the proxy {} did not answer CONNECT: {e}", p.shown),
                    true,
                ))
            }
        }
    }
    let line = String::from_utf8_lossy(&head);
    let line = line.lines().next().unwrap_or_default();
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(0);
    if (200..300).contains(&status) {
        return Ok(());
    }
    let why = if status == 407 {
        " (it wants credentials: give them in the proxy's URL)"
    } else {
        ""
    };
    Err(fail(
        format!(
            "the proxy {} refused to connect to {authority}: {}{why}",
            p.shown,
            line.trim()
        ),
        status >= 500,
    ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
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
