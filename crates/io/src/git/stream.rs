//! The TCP stream libgit2 uses for `http://`, `https://` (under TLS) and
//! `git://` remotes: std's `TcpStream` with Nagle's algorithm off.
//!
//! libgit2's own socket stream leaves Nagle on and writes a smart-HTTP
//! request in many small pieces (each chunk of a chunked body, its size
//! line, its CRLF). The last pieces then wait for the server's delayed ACK:
//! about 40 ms on every push, more than the whole `git push` takes on a
//! local network (curl sets `TCP_NODELAY`; so does this). Registered once,
//! as libgit2's `GIT_STREAM_STANDARD`, before the first connection; libgit2's
//! TLS stream runs on top of it. Invariant: it behaves as libgit2's socket
//! stream does — the same timeouts
//! (`GIT_OPT_SET_SERVER_TIMEOUT`, `GIT_OPT_SET_SERVER_CONNECT_TIMEOUT`, read
//! when a stream is made), the same TCP keepalive (probes after 60 s idle,
//! every 10 s, 3 of them), errors set with `git_error_set_str` and
//! `GIT_TIMEOUT` when a timeout expires — and only adds `TCP_NODELAY`.

use std::ffi::{CStr, CString};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::time::Duration;

/// `git_stream` (git2/sys/stream.h, `GIT_STREAM_VERSION` 1).
#[repr(C)]
struct GitStream {
    version: c_int,
    /// The bit fields `encrypted:1, proxy_support:1`: both 0 here.
    flags: c_uint,
    timeout: c_int,
    connect_timeout: c_int,
    connect: Option<extern "C" fn(*mut GitStream) -> c_int>,
    certificate: Option<extern "C" fn(*mut *mut c_void, *mut GitStream) -> c_int>,
    set_proxy: Option<extern "C" fn(*mut GitStream, *const c_void) -> c_int>,
    read: Option<extern "C" fn(*mut GitStream, *mut c_void, usize) -> isize>,
    write: Option<extern "C" fn(*mut GitStream, *const c_char, usize, c_int) -> isize>,
    close: Option<extern "C" fn(*mut GitStream) -> c_int>,
    free: Option<extern "C" fn(*mut GitStream)>,
}

/// `git_stream_registration`.
#[repr(C)]
pub(super) struct Registration {
    version: c_int,
    init: Option<extern "C" fn(*mut *mut GitStream, *const c_char, *const c_char) -> c_int>,
    wrap: Option<extern "C" fn(*mut *mut GitStream, *mut GitStream, *const c_char) -> c_int>,
}

pub(super) const GIT_STREAM_STANDARD: c_int = 1;

extern "C" {
    pub(super) fn git_stream_register(kind: c_int, registration: *mut Registration) -> c_int;
}

/// Our stream: the public `git_stream` head (libgit2 casts a pointer to
/// it back and forth), then our own fields, which libgit2 never reads.
#[repr(C)]
struct Nodelay {
    parent: GitStream,
    host: String,
    port: String,
    tcp: Option<TcpStream>,
}

/// The stream's registration, handed to [`git_stream_register`] as
/// `GIT_STREAM_STANDARD` when libgit2 is set up ([`super::setup`]).
pub(super) fn registration() -> Registration {
    Registration {
        version: 1,
        init: Some(init),
        wrap: None,
    }
}

fn set_error(message: &str) {
    let msg = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: a valid C string; libgit2 copies it.
    unsafe {
        libgit2_sys::git_error_set_str(libgit2_sys::GIT_ERROR_NET as c_int, msg.as_ptr());
    }
}

extern "C" fn init(out: *mut *mut GitStream, host: *const c_char, port: *const c_char) -> c_int {
    let mut stream = Box::new(Nodelay {
        parent: GitStream {
            version: 1,
            flags: 0,
            timeout: 0,
            connect_timeout: 0,
            connect: Some(connect),
            certificate: None,
            set_proxy: None,
            read: Some(read),
            write: Some(write),
            close: Some(close),
            free: Some(free),
        },
        host: String::new(),
        port: String::new(),
        tcp: None,
    });
    // SAFETY: libgit2 passes NUL-terminated strings and a valid `out`; the
    // getters (as libgit2's own socket stream reads the global server
    // timeouts) are documented to write one int each; libgit2 frees the
    // stream through `free`.
    unsafe {
        libgit2_sys::git_libgit2_opts(
            libgit2_sys::GIT_OPT_GET_SERVER_TIMEOUT as c_int,
            &mut stream.parent.timeout as *mut c_int,
        );
        libgit2_sys::git_libgit2_opts(
            libgit2_sys::GIT_OPT_GET_SERVER_CONNECT_TIMEOUT as c_int,
            &mut stream.parent.connect_timeout as *mut c_int,
        );
        stream.host = CStr::from_ptr(host).to_string_lossy().into_owned();
        stream.port = CStr::from_ptr(port).to_string_lossy().into_owned();
        *out = Box::into_raw(stream).cast::<GitStream>();
    }
    0
}

fn port_number(port: &str) -> Option<u16> {
    port.parse().ok().or(match port {
        "http" => Some(80),
        "https" => Some(443),
        "git" => Some(9418),
        _ => None,
    })
}

fn ms(v: c_int) -> Option<Duration> {
    (v > 0).then(|| Duration::from_millis(v as u64))
}

extern "C" fn connect(s: *mut GitStream) -> c_int {
    // SAFETY: libgit2 calls this with the stream `init` made, whose
    // `GitStream` is its first field.
    let st = unsafe { &mut *s.cast::<Nodelay>() };
    let Some(port) = port_number(&st.port) else {
        set_error(&format!("invalid port {:?}", st.port));
        return -1;
    };
    let addrs: Vec<SocketAddr> = match (st.host.as_str(), port).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => {
            set_error(&format!("failed to resolve address for {}: {e}", st.host));
            return -1;
        }
    };
    let mut last = None;
    for addr in addrs {
        let tcp = match ms(st.parent.connect_timeout) {
            Some(t) => TcpStream::connect_timeout(&addr, t),
            None => TcpStream::connect(addr),
        };
        match tcp {
            Ok(tcp) => {
                let timeout = ms(st.parent.timeout);
                keepalive(&tcp);
                let _ = tcp.set_nodelay(true);
                let _ = tcp.set_read_timeout(timeout);
                let _ = tcp.set_write_timeout(timeout);
                st.tcp = Some(tcp);
                return 0;
            }
            Err(e) => {
                // As libgit2: a connect timeout ends the attempt.
                let timed_out = matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock);
                last = Some(e);
                if timed_out {
                    break;
                }
            }
        }
    }
    match last {
        Some(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {
            set_error(&format!("failed to connect to {}: timed out", st.host));
            libgit2_sys::GIT_TIMEOUT
        }
        Some(e) => {
            set_error(&format!("failed to connect to {}: {e}", st.host));
            -1
        }
        None => {
            set_error(&format!("failed to resolve address for {}", st.host));
            -1
        }
    }
}

/// TCP keepalive as libgit2 1.9 sets it: a peer that vanished is noticed
/// after about 90 s of silence instead of never.
fn keepalive(tcp: &TcpStream) {
    use rustix::net::sockopt;
    if sockopt::set_socket_keepalive(tcp, true).is_ok() {
        let _ = sockopt::set_tcp_keepidle(tcp, Duration::from_secs(60));
        let _ = sockopt::set_tcp_keepintvl(tcp, Duration::from_secs(10));
        let _ = sockopt::set_tcp_keepcnt(tcp, 3);
    }
}

/// An I/O error as libgit2's socket stream reports it.
fn failed(what: &str, e: std::io::Error) -> isize {
    if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) {
        set_error(&format!("{what} timed out"));
        return libgit2_sys::GIT_TIMEOUT as isize;
    }
    set_error(&format!("{what} failed: {e}"));
    -1
}

extern "C" fn read(s: *mut GitStream, data: *mut c_void, len: usize) -> isize {
    if len == 0 || data.is_null() {
        return 0;
    }
    // SAFETY: the stream `init` made (its `GitStream` first); `data` holds
    // `len` writable bytes.
    let (st, buf) = unsafe {
        (
            &mut *s.cast::<Nodelay>(),
            std::slice::from_raw_parts_mut(data.cast::<u8>(), len),
        )
    };
    let Some(tcp) = st.tcp.as_mut() else {
        set_error("read on a closed stream");
        return -1;
    };
    loop {
        match tcp.read(buf) {
            Ok(n) => return n as isize,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return failed("recv", e),
        }
    }
}

extern "C" fn write(s: *mut GitStream, data: *const c_char, len: usize, _flags: c_int) -> isize {
    if len == 0 || data.is_null() {
        return 0;
    }
    // SAFETY: the stream `init` made (its `GitStream` first); `data` holds
    // `len` readable bytes.
    let (st, buf) = unsafe {
        (
            &mut *s.cast::<Nodelay>(),
            std::slice::from_raw_parts(data.cast::<u8>(), len),
        )
    };
    let Some(tcp) = st.tcp.as_mut() else {
        set_error("write on a closed stream");
        return -1;
    };
    loop {
        match tcp.write(buf) {
            Ok(n) => return n as isize,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return failed("send", e),
        }
    }
}

extern "C" fn close(s: *mut GitStream) -> c_int {
    // SAFETY: the stream `init` made (its `GitStream` first).
    let st = unsafe { &mut *s.cast::<Nodelay>() };
    if let Some(tcp) = st.tcp.take() {
        let _ = tcp.shutdown(Shutdown::Both);
    }
    0
}

extern "C" fn free(s: *mut GitStream) {
    // SAFETY: `s` came from `Box::into_raw` in `init`; libgit2 frees once.
    drop(unsafe { Box::from_raw(s.cast::<Nodelay>()) });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_by_number_or_service_name() {
        assert_eq!(port_number("8080"), Some(8080));
        assert_eq!(port_number("https"), Some(443));
        assert_eq!(port_number("gopher"), None);
    }
}
