//! The receive-pack protocol's bytes for the smart-HTTP push: pkt-lines,
//! the ref advertisement, the pack of a step's new objects, and the side
//! band that carries receive-pack's report.
//!
//! Owns parsing what a server sends back, which may be hostile: every
//! length is checked against what is there, and anything malformed is an
//! error, never a status. Invariant: a ref is reported updated only when
//! the report says `ok` for it after `unpack ok`.

use git2::{Oid, Repository};

use crate::error::Result;

/// The largest pack sent as one request body; a larger step's push goes
/// through libgit2, which streams it.
const MAX_PACK: usize = 32 * 1024 * 1024;

/// The objects `new` adds to the commits in `hide` (those this repository
/// has), as a pack; None when it would pass [`MAX_PACK`].
pub(super) fn pack(repo: &Repository, new: Oid, hide: &[Oid]) -> Result<Option<Vec<u8>>> {
    let mut walk = repo.revwalk()?;
    walk.push(new)?;
    for h in hide {
        // An id this repository lacks (another branch's, a tag's) hides
        // nothing: the server has it either way.
        let _ = walk.hide(*h);
    }
    let mut pb = repo.packbuilder()?;
    pb.insert_walk(&mut walk)?;
    let mut out = Vec::new();
    let mut too_large = false;
    let r = pb.foreach(|chunk| {
        out.extend_from_slice(chunk);
        too_large = out.len() > MAX_PACK;
        !too_large
    });
    if too_large {
        return Ok(None);
    }
    r?;
    Ok(Some(out))
}

/// Append one pkt-line holding `data`.
pub(super) fn pkt_line(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(format!("{:04x}", data.len() + 4).as_bytes());
    out.extend_from_slice(data);
}

/// Split pkt-lines: each payload, `None` for a flush packet.
fn pkt_lines(mut data: &[u8]) -> std::result::Result<Vec<Option<&[u8]>>, String> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let len = data
            .get(..4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or("a pkt-line's length is not four hex digits")?;
        match len {
            0 => {
                out.push(None);
                data = &data[4..];
            }
            1..=3 => return Err(format!("a pkt-line of length {len}")),
            _ => {
                let line = data.get(4..len).ok_or("a pkt-line is cut short")?;
                out.push(Some(line));
                data = &data[len..];
            }
        }
    }
    Ok(out)
}

/// The capabilities and refs of a receive-pack advertisement.
pub(super) type Advertised = (Vec<String>, Vec<(String, Oid)>);

pub(super) fn parse_advertisement(body: &[u8]) -> std::result::Result<Advertised, String> {
    let lines = pkt_lines(body)?;
    let mut it = lines.into_iter();
    match it.next() {
        Some(Some(l)) if l.trim_ascii_end() == b"# service=git-receive-pack" => {}
        _ => return Err("it does not start with `# service=git-receive-pack`".into()),
    }
    if it.next() != Some(None) {
        return Err("no flush after the service line".into());
    }
    let (mut caps, mut refs) = (Vec::new(), Vec::new());
    for (n, line) in it.enumerate() {
        let Some(line) = line else { break };
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let (main, c) = match line.iter().position(|&b| b == 0) {
            Some(i) => (&line[..i], Some(&line[i + 1..])),
            None => (line, None),
        };
        if let (0, Some(c)) = (n, c) {
            caps = String::from_utf8_lossy(c)
                .split(' ')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
        }
        let main = std::str::from_utf8(main).map_err(|_| "a ref line is not UTF-8")?;
        let (id, name) = main.split_once(' ').ok_or("a ref line without a name")?;
        let id = Oid::from_str(id).map_err(|_| format!("{id:?} is not an object id"))?;
        if name != "capabilities^{}" && !id.is_zero() {
            refs.push((name.to_string(), id));
        }
    }
    Ok((caps, refs))
}

/// What receive-pack reported.
#[derive(Debug)]
pub(super) struct Report {
    pub unpack: String,
    /// Each ref, and its `ng` reason.
    pub refs: Vec<(String, Option<String>)>,
    /// What the server's hooks and receive-pack wrote on the side band.
    pub said: String,
}

pub(super) fn read_report(body: &[u8], side_band: bool) -> std::result::Result<Report, String> {
    let mut said = String::new();
    let inner: Vec<u8> = if side_band {
        let mut data = Vec::new();
        for line in pkt_lines(body)? {
            let Some(line) = line else { break };
            match line.split_first() {
                Some((1, rest)) => data.extend_from_slice(rest),
                Some((2, rest)) => said.push_str(&String::from_utf8_lossy(rest)),
                Some((3, rest)) => {
                    return Err(format!(
                        "the server failed: {}",
                        String::from_utf8_lossy(rest).trim()
                    ))
                }
                _ => return Err("a side-band packet of no known band".into()),
            }
        }
        data
    } else {
        body.to_vec()
    };
    let mut unpack = None;
    let mut refs = Vec::new();
    for line in pkt_lines(&inner)? {
        let Some(line) = line else { break };
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches('\n');
        if let Some(u) = text.strip_prefix("unpack ") {
            unpack = Some(u.to_string());
        } else if let Some(r) = text.strip_prefix("ok ") {
            refs.push((r.to_string(), None));
        } else if let Some(r) = text.strip_prefix("ng ") {
            let (name, why) = r.split_once(' ').unwrap_or((r, "rejected"));
            refs.push((name.to_string(), Some(why.to_string())));
        }
    }
    Ok(Report {
        unpack: unpack.ok_or("no `unpack` status")?,
        refs,
        said,
    })
}

/// The readers of what a receive-pack server sends, for the fuzz targets:
/// a ref advertisement (its capabilities and refs) and a push's report
/// (its `unpack` status and each ref's `ng` reason).
#[doc(hidden)]
pub mod fuzzing {
    pub type Refs = Vec<(String, git2::Oid)>;
    /// Each ref of a report, and its `ng` reason.
    pub type Reported = Vec<(String, Option<String>)>;

    pub fn advertisement(body: &[u8]) -> Result<(Vec<String>, Refs), String> {
        super::parse_advertisement(body)
    }

    pub fn report(body: &[u8], side_band: bool) -> Result<(String, Reported), String> {
        super::read_report(body, side_band).map(|r| (r.unpack, r.refs))
    }

    /// One pkt-line, as the server writes it.
    pub fn pkt_line(out: &mut Vec<u8>, data: &[u8]) {
        super::pkt_line(out, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertisements_and_reports_parse() {
        let mut body = Vec::new();
        pkt_line(&mut body, b"# service=git-receive-pack\n");
        body.extend_from_slice(b"0000");
        pkt_line(
            &mut body,
            format!(
                "{} capabilities^{{}}\0report-status side-band-64k ofs-delta\n",
                Oid::ZERO_SHA1
            )
            .as_bytes(),
        );
        body.extend_from_slice(b"0000");
        let (caps, refs) = parse_advertisement(&body).unwrap();
        assert_eq!(caps, ["report-status", "side-band-64k", "ofs-delta"]);
        assert!(refs.is_empty());

        let id = "1111111111111111111111111111111111111111";
        let mut body = Vec::new();
        pkt_line(&mut body, b"# service=git-receive-pack\n");
        body.extend_from_slice(b"0000");
        pkt_line(
            &mut body,
            format!("{id} refs/heads/main\0report-status\n").as_bytes(),
        );
        pkt_line(&mut body, format!("{id} refs/heads/x\n").as_bytes());
        body.extend_from_slice(b"0000");
        let (_, refs) = parse_advertisement(&body).unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[1].0, "refs/heads/x");
        assert!(parse_advertisement(b"0005x").is_err());
        assert!(parse_advertisement(b"00").is_err());

        let mut inner = Vec::new();
        pkt_line(&mut inner, b"unpack ok\n");
        pkt_line(&mut inner, b"ng refs/heads/main failed to update ref\n");
        inner.extend_from_slice(b"0000");
        let mut banded = Vec::new();
        pkt_line(&mut banded, b"\x02remote: hello\n");
        let mut one = vec![1u8];
        one.extend_from_slice(&inner);
        pkt_line(&mut banded, &one);
        banded.extend_from_slice(b"0000");
        let r = read_report(&banded, true).unwrap();
        assert_eq!(r.unpack, "ok");
        assert_eq!(
            r.refs,
            [(
                "refs/heads/main".to_string(),
                Some("failed to update ref".to_string())
            )]
        );
        assert!(r.said.contains("hello"));
        let r = read_report(&inner, false).unwrap();
        assert_eq!(r.refs.len(), 1);
        let mut fatal = Vec::new();
        pkt_line(&mut fatal, b"\x03disk full");
        assert!(read_report(&fatal, true).unwrap_err().contains("disk full"));
    }
}
