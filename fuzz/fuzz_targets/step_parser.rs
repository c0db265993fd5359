//! Any bytes as a plan: the reader returns steps or errors, never panics,
//! and every step it returns obeys the step invariants.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for step in git_steps_plan::reader::PlanReader::new(data) {
        let Ok(step) = step else { break };
        assert!(git_steps_plan::step::validate_id(&step.id).is_ok());
        assert!(step.digest.starts_with("sha256:") && step.digest.len() == 71);
        if let git_steps_plan::step::Content::Files(files) = &step.content {
            for p in files.keys() {
                assert!(git_steps_plan::path::validate(p).is_ok(), "{p:?}");
            }
        }
    }
});
