//! Whatever a step's message and intent say, the receipt read back is
//! exactly the one written.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (message, intent) = text.split_once('\u{1}').unwrap_or((&text, ""));
    let step = serde_json::json!({
        "id": "fuzz-1",
        "files": {"f": "x"},
        "message": message,
        "intent": intent,
    });
    let step = git_steps::plan::step::Step::from_value(step, 1).expect("a valid step");
    for source in [None, Some("journal")] {
        let m = git_steps::history::receipt::message(&step, "run", 7, "summary", source);
        let r = git_steps::history::receipt::parse(&m).unwrap_or_else(|e| panic!("{e:?}\n{m}"));
        assert_eq!(r.id, "fuzz-1", "{m}");
        assert_eq!(r.run, "run");
        assert_eq!(r.decision, step.digest);
        assert_eq!(r.index, Some(7), "{m}");
        assert_eq!(r.source.as_deref(), source, "{m}");
    }
});
