//! Real git servers the tests start themselves on 127.0.0.1: a bare
//! repository (as a path and as `file://`), `git daemon` with receive-pack,
//! and smart HTTP through `git http-backend` behind lighttpd. Each server
//! picks a free port and is stopped when dropped.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::hermetic;

/// A server's own processes: hermetic, and never under the client's policy
/// (`GIT_STEPS_TEST_CONFIG` is the box's global config, not the server's).
fn serverside(cmd: &mut Command, root: &Path) {
    hermetic(cmd, root);
    cmd.env("GIT_CONFIG_GLOBAL", "/dev/null");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Path,
    FileUrl,
    Daemon,
    Http,
    /// Smart HTTP over TLS: lighttpd with mod_openssl and a certificate for
    /// 127.0.0.1 signed by a CA the server generates (`ca.pem` in its root;
    /// clients must be told to trust it).
    Https,
    /// sshd on 127.0.0.1 with a generated host key, logged into with a
    /// generated user key; the client's ssh reads `Server::ssh_config`
    /// (through `GIT_SSH_COMMAND`, see [`Server::client_env`]).
    Ssh,
}

pub const ALL: [Kind; 4] = [Kind::Path, Kind::FileUrl, Kind::Daemon, Kind::Http];

/// A bare repository served one way.
pub struct Server {
    pub kind: Kind,
    pub root: PathBuf,
    pub bare: PathBuf,
    url: String,
    child: Option<Child>,
}

/// A port of 127.0.0.1 nothing listens on, for a server to bind: below
/// the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 by
/// default), where every `bind(0)` of another test and every outgoing
/// connection take theirs. A port from `bind(0)` could be taken by another
/// test's listener between here and the server's bind: the server then
/// exits, but the check that it listens may first reach the other
/// listener, and the test later finds the port closed.
///
/// No port is handed out twice in this process: two callers (a server's
/// start and a test that names a port) cannot pick the same one.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if low > 12_000 {
        for _ in 0..1000 {
            // RandomState is seeded anew on each call.
            let h = std::collections::hash_map::RandomState::new().build_hasher();
            let port = 10_000 + (h.finish() % u64::from(low - 10_000)) as u16;
            if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.push(port);
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Start a server on a free port: `start` writes whatever names the port
/// and spawns the server. One server starts at a time in this process, so
/// between picking a port and the server binding it no other test's
/// server can take it; a port taken meanwhile by anything else (another
/// process, a client's ephemeral port) makes the server exit, and the next
/// try picks another port.
fn listen(what: &str, log: &Path, mut start: impl FnMut(u16) -> Child) -> (u16, Child) {
    static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    let mut last = String::new();
    for _ in 0..5 {
        let port = free_port();
        let mut child = start(port);
        match wait_for_port(port, &mut child, log) {
            Ok(()) => return (port, child),
            Err(why) => {
                let _ = child.kill();
                let _ = child.wait();
                last = why;
            }
        }
    }
    panic!("{what} did not start on any of 5 free ports; the last try: {last}");
}

/// Whether something listens on `port` of 127.0.0.1.
pub fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

fn wait_for_port(port: u16, child: &mut Child, log: &Path) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "exited with {status} before listening on {port}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            ));
        }
        if listening(port) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("did not listen on port {port} within 10 s"))
}

/// A self-signed certificate authority `dir/<name>.pem` with its key
/// `dir/<name>.key`.
pub fn make_ca(dir: &Path, name: &str, cn: &str) {
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ])
        .arg("-subj")
        .arg(format!("/CN={cn}"))
        .arg("-keyout")
        .arg(dir.join(format!("{name}.key")))
        .arg("-out")
        .arg(dir.join(format!("{name}.pem")))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(st.success(), "openssl req -x509 for {name}");
}

fn git_exec_path() -> PathBuf {
    let out = Command::new("git").arg("--exec-path").output().unwrap();
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// How a smart-HTTP server behaves beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Close every connection after one request (no keep-alive).
    pub no_keep_alive: bool,
    /// Ask for HTTP Basic credentials: this user and password.
    pub basic_auth: Option<(String, String)>,
}

impl Server {
    /// A new empty bare repository (branch `main`) under `root`, served as `kind`.
    pub fn start(kind: Kind, root: &Path) -> Server {
        Server::start_with(kind, root, &HttpOptions::default())
    }

    /// As [`Server::start`], an http(s) server set up as `http` says.
    pub fn start_with(kind: Kind, root: &Path, http: &HttpOptions) -> Server {
        let bare = root.join("remote.git");
        let mut init = Command::new("git");
        init.args(["init", "-q", "--bare", "-b", "main"]).arg(&bare);
        serverside(&mut init, root);
        assert!(init.status().unwrap().success());
        let cfg = |k: &str, v: &str| {
            let mut c = Command::new("git");
            c.arg("-C").arg(&bare).args(["config", k, v]);
            serverside(&mut c, root);
            assert!(c.status().unwrap().success());
        };
        cfg("http.receivepack", "true");
        cfg("receive.denyNonFastForwards", "true");
        // The server's hooks are its own, also when a client's global
        // config sets core.hooksPath (a push to a path runs receive-pack
        // under the client's environment).
        cfg("core.hooksPath", bare.join("hooks").to_str().unwrap());
        let (url, child) = match kind {
            Kind::Path => (bare.to_str().unwrap().to_string(), None),
            Kind::FileUrl => (format!("file://{}", bare.display()), None),
            Kind::Daemon => {
                let log = root.join("daemon.log");
                let (port, child) = listen("git daemon", &log, |port| {
                    // The daemon itself, not `git daemon`: git runs it as a child
                    // and waits, so killing `git` would leave the daemon running.
                    let mut cmd = Command::new(git_exec_path().join("git-daemon"));
                    cmd.args([
                        "--reuseaddr",
                        "--listen=127.0.0.1",
                        &format!("--port={port}"),
                        &format!("--base-path={}", root.display()),
                        "--export-all",
                        "--enable=receive-pack",
                    ])
                    .arg(root)
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).unwrap());
                    serverside(&mut cmd, root);
                    cmd.spawn().expect("git daemon")
                });
                (format!("git://127.0.0.1:{port}/remote.git"), Some(child))
            }
            Kind::Ssh => {
                let keygen = |name: &str| {
                    let st = Command::new("ssh-keygen")
                        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
                        .arg(root.join(name))
                        .status()
                        .expect("ssh-keygen (scripts/test.sh installs openssh-client)");
                    assert!(st.success());
                };
                keygen("host_ed25519");
                keygen("client_ed25519");
                std::fs::copy(
                    root.join("client_ed25519.pub"),
                    root.join("authorized_keys"),
                )
                .unwrap();
                let host_pub = std::fs::read_to_string(root.join("host_ed25519.pub")).unwrap();
                let host_key: String = host_pub
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ");
                let log = root.join("sshd.log");
                let (_, child) = listen("sshd", &log, |port| {
                    std::fs::write(
                        root.join("known_hosts"),
                        format!("[127.0.0.1]:{port} {host_key}\n"),
                    )
                    .unwrap();
                    let user =
                        String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
                            .unwrap()
                            .trim()
                            .to_string();
                    std::fs::write(
                    root.join("sshd_config"),
                    format!(
                        "Port {port}\nListenAddress 127.0.0.1\nHostKey {root}/host_ed25519\nPidFile {root}/sshd.pid\nAuthorizedKeysFile {root}/authorized_keys\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\nPubkeyAuthentication yes\nAllowUsers {user}\nLogLevel VERBOSE\n",
                        root = root.display()
                    ),
                )
                .unwrap();
                    std::fs::write(
                    root.join("ssh_config"),
                    format!(
                        "Host steps-ssh\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {root}/client_ed25519\n  IdentitiesOnly yes\n  UserKnownHostsFile {root}/known_hosts\n  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n",
                        root = root.display()
                    ),
                )
                .unwrap();
                    // sshd's privilege separation directory, when run as root.
                    let _ = std::fs::create_dir_all("/run/sshd");
                    let mut cmd = Command::new(
                        ["/usr/sbin/sshd", "/usr/bin/sshd"]
                            .into_iter()
                            .find(|p| Path::new(p).exists())
                            .expect("sshd (scripts/test.sh installs openssh-server)"),
                    );
                    cmd.args(["-D", "-e", "-f"])
                        .arg(root.join("sshd_config"))
                        .stdout(Stdio::null())
                        .stderr(std::fs::File::create(&log).unwrap());
                    cmd.spawn().expect("sshd")
                });
                (format!("steps-ssh:{}", bare.display()), Some(child))
            }
            Kind::Http | Kind::Https => {
                let tls = kind == Kind::Https;
                if tls {
                    make_ca(root, "ca", "git-steps test CA");
                    let openssl = |args: &[&str]| {
                        let st = Command::new("openssl")
                            .args(args)
                            .current_dir(root)
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status()
                            .expect("openssl");
                        assert!(st.success(), "openssl {args:?}");
                    };
                    openssl(&[
                        "req",
                        "-newkey",
                        "ec",
                        "-pkeyopt",
                        "ec_paramgen_curve:prime256v1",
                        "-nodes",
                        "-keyout",
                        "server.key",
                        "-out",
                        "server.csr",
                        "-subj",
                        "/CN=127.0.0.1",
                    ]);
                    std::fs::write(
                        root.join("server.ext"),
                        "subjectAltName=IP:127.0.0.1,DNS:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
                    )
                    .unwrap();
                    openssl(&[
                        "x509",
                        "-req",
                        "-in",
                        "server.csr",
                        "-CA",
                        "ca.pem",
                        "-CAkey",
                        "ca.key",
                        "-CAcreateserial",
                        "-out",
                        "server.crt",
                        "-days",
                        "2",
                        "-extfile",
                        "server.ext",
                    ]);
                }
                let www = root.join("www");
                std::fs::create_dir_all(&www).unwrap();
                let log = root.join("lighttpd.log");
                let conf = root.join("lighttpd.conf");
                // git http-backend behind a wrapper that logs each request
                // (method and path, in requests.log) and answers the first
                // N receive-pack requests with 503 when the file
                // fail-receive-pack holds N, or the first N requests of any
                // kind when fail-any does (a flaky proxy, for retries).
                let backend = root.join("backend.sh");
                crate::harness::script(
                    &backend,
                    &format!(
                        r#"#!/bin/sh
root='{root}'
echo "$REQUEST_METHOD $PATH_INFO?$QUERY_STRING port=$REMOTE_PORT" >> "$root/requests.log"
# Answer 503 while the counter file $1 holds more than 0, counting down.
fail_while() {{
  [ -s "$root/$1" ] || return 0
  left=$(cat "$root/$1")
  [ "$left" -gt 0 ] || return 0
  echo $((left - 1)) > "$root/$1"
  printf 'Status: 503 Service Unavailable
Content-Type: text/plain
Retry-After: 0

busy, try again
'
  exit 0
}}
fail_while fail-any
case "$PATH_INFO?$QUERY_STRING" in
*git-receive-pack*) fail_while fail-receive-pack ;;
esac
exec '{http_backend}'
"#,
                        root = root.display(),
                        http_backend = git_exec_path().join("git-http-backend").display(),
                    ),
                );
                let (port, child) = listen("lighttpd", &log, |port| {
                    std::fs::write(
                    &conf,
                    format!(
                        r#"server.document-root = "{www}"
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = "{log}"
server.modules = ({auth_modules}"mod_alias", "mod_cgi", "mod_setenv"{tls_module})
{tls_conf}{extra}alias.url = ("/git" => "{backend}")
$HTTP["url"] =~ "^/git" {{
  cgi.assign = ("" => "")
  setenv.add-environment = (
    "GIT_PROJECT_ROOT" => "{root}",
    "GIT_HTTP_EXPORT_ALL" => "1",
    "GIT_CONFIG_GLOBAL" => "/dev/null",
    "GIT_CONFIG_NOSYSTEM" => "1"
  )
}}
"#,
                        www = www.display(),
                        log = log.display(),
                        backend = backend.display(),
                        root = root.display(),
                        tls_module = if tls { ", \"mod_openssl\"" } else { "" },
                        auth_modules = if http.basic_auth.is_some() {
                            "\"mod_auth\", \"mod_authn_file\", "
                        } else {
                            ""
                        },
                        extra = {
                            let mut extra = String::new();
                            if http.no_keep_alive {
                                extra.push_str("server.max-keep-alive-requests = 0\n");
                            }
                            if let Some((user, pass)) = &http.basic_auth {
                                let users = root.join("users");
                                std::fs::write(&users, format!("{user}:{pass}\n")).unwrap();
                                extra.push_str(&format!(
                                    "auth.backend = \"plain\"\nauth.backend.plain.userfile = \"{}\"\nauth.require = (\"/git\" => (\"method\" => \"basic\", \"realm\" => \"git\", \"require\" => \"valid-user\"))\n",
                                    users.display()
                                ));
                            }
                            extra
                        },
                        tls_conf = if tls {
                            format!(
                                "ssl.engine = \"enable\"\nssl.pemfile = \"{}\"\nssl.privkey = \"{}\"\n",
                                root.join("server.crt").display(),
                                root.join("server.key").display()
                            )
                        } else {
                            String::new()
                        },
                    ),
                )
                .unwrap();
                    let mut cmd = Command::new("lighttpd");
                    cmd.arg("-D")
                        .arg("-f")
                        .arg(&conf)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    cmd.spawn().unwrap_or_else(|e| {
                    panic!("cannot start lighttpd ({e}); scripts/test.sh installs it (apt-get install lighttpd)")
                })
                });
                (
                    format!(
                        "{}://127.0.0.1:{port}/git/remote.git",
                        if tls { "https" } else { "http" }
                    ),
                    Some(child),
                )
            }
        };
        Server {
            kind,
            root: root.to_path_buf(),
            bare,
            url,
            child,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bare repository the server serves.
    pub fn bare(&self) -> &std::path::Path {
        &self.bare
    }

    /// What a client needs in its environment to reach this server: for
    /// ssh, `GIT_SSH_COMMAND` reading the server's client config (ssh reads
    /// `~/.ssh` from the password database, not from `$HOME`).
    pub fn client_env(&self) -> Vec<(String, String)> {
        match self.kind {
            Kind::Ssh => vec![(
                "GIT_SSH_COMMAND".into(),
                format!("ssh -F {}", self.root.join("ssh_config").display()),
            )],
            _ => Vec::new(),
        }
    }

    /// `git` in the bare repository, asserting success; trimmed stdout.
    pub fn git(&self, args: &[&str]) -> String {
        let mut c = Command::new("git");
        c.arg("-C").arg(&self.bare).args(args);
        serverside(&mut c, &self.root);
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?} in the remote failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .trim_end()
            .to_string()
    }

    /// Step ids on the remote's `main`, oldest first.
    pub fn step_ids(&self) -> Vec<String> {
        if self.git(&["for-each-ref", "refs/heads/main"]).is_empty() {
            return Vec::new();
        }
        self.git(&[
            "log",
            "--reverse",
            "--format=%(trailers:key=Step-Id,valueonly,separator=)",
            "main",
        ])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
    }

    pub fn head(&self) -> Option<String> {
        let out = self.git(&["for-each-ref", "--format=%(objectname)", "refs/heads/main"]);
        (!out.is_empty()).then_some(out)
    }

    /// Install a hook in the bare repository.
    pub fn hook(&self, name: &str, script: &str) {
        crate::harness::script(&self.bare.join("hooks").join(name), script);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
