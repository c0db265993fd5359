//! The ledger's index of step ids: each id's position without a copy of
//! the id. Invariant: a lookup returns the entry whose id is the one asked
//! for, whatever the hashes collide on.

use std::collections::HashMap;

use super::AppliedStep;

/// Step id → position, without a copy of each id: positions keyed by the
/// id's hash, the (rare) colliding ones kept aside.
#[derive(Debug, Default)]
pub(super) struct IdIndex {
    first: HashMap<u64, u32>,
    more: Vec<(u64, u32)>,
}

pub(super) fn id_hash(id: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // Fixed keys: the index lives for one process; the ids are ours.
    let mut h =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .build_hasher();
    h.write(id.as_bytes());
    h.finish()
}

impl IdIndex {
    pub(super) fn new(entries: &[AppliedStep]) -> IdIndex {
        let mut ix = IdIndex {
            first: HashMap::with_capacity(entries.len()),
            more: Vec::new(),
        };
        for (i, e) in entries.iter().enumerate() {
            let h = id_hash(&e.id);
            match ix.first.entry(h) {
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(i as u32);
                }
                std::collections::hash_map::Entry::Occupied(_) => ix.more.push((h, i as u32)),
            }
        }
        ix
    }

    pub(super) fn get<'a>(&self, entries: &'a [AppliedStep], id: &str) -> Option<&'a AppliedStep> {
        let h = id_hash(id);
        let first = self.first.get(&h).map(|&i| &entries[i as usize]);
        if let Some(e) = first.filter(|e| e.id == id) {
            return Some(e);
        }
        self.more
            .iter()
            .filter(|(k, _)| *k == h)
            .map(|&(_, i)| &entries[i as usize])
            .find(|e| e.id == id)
    }
}
