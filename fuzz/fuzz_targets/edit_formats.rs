//! Any bytes as an `apply_patch` patch, a `search_replace` text or an
//! `edits` array, applied to any file contents: parse or fail cleanly,
//! never panic, and a successful apply is deterministic (twice, same files).
#![no_main]
use git_steps_plan::formats::{apply_patch, edits, search_replace, Files, MemFiles, MODE_FILE};
use libfuzzer_sys::fuzz_target;

fn start(content: &[u8]) -> MemFiles {
    let mut f = MemFiles::default();
    for path in ["f", "a.py", "src/app.py"] {
        f.put(path, content.to_vec(), MODE_FILE).unwrap();
    }
    f
}

fn run(kind: u8, text: &str, content: &[u8]) -> Option<MemFiles> {
    let mut f = start(content);
    let ok = match kind % 3 {
        0 => apply_patch::parse(text).and_then(|ops| apply_patch::apply(&mut f, &ops)),
        1 => search_replace::parse(text).and_then(|b| search_replace::apply(&mut f, &b)),
        _ => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Array(a)) => edits::parse(&a).and_then(|ops| edits::apply(&mut f, &ops)),
            _ => Ok(()),
        },
    };
    ok.ok().map(|()| f)
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    // The text and the file contents, split at the first NUL.
    let (text, content) = match rest.iter().position(|b| *b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &b"x\ny\nx\n"[..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let once = run(kind, text, content);
    let twice = run(kind, text, content);
    assert_eq!(once, twice, "applying is deterministic");
});
