//! The integration tests: one binary, real repositories, the real `git-steps`
//! binary, real git servers on 127.0.0.1, audited with the real `git` CLI.

mod agent;
mod attributes;
mod audit;
mod authority;
mod core;
mod effects;
mod faults;
mod first_hour;
mod formats;
mod forward_proxy;
mod harness;
mod hooks;
mod hostile;
mod http_push;
mod matrix;
mod network_faults;
mod policy;
mod provenance;
mod proxy;
mod real_repos;
mod receiver;
mod remote;
mod servers;
mod shared_cache;
mod signing;
mod trailers;
mod trust;
mod wide;
