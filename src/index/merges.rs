//! Which segments the index writer merges, and how many merges run at once.
//!
//! Tantivy's log merge policy groups segments of about the same size into levels and merges a
//! level whole once it holds eight or more. Nothing bounds what such a merge makes: a bulk load
//! of a million files left levels of segments each under a million documents, and merged them
//! into one segment of 3.7 million, mapping 1.1–1.4 GB of input segments at once, at the end of
//! the run. Here each level is split into merges that make at most `MAX_MERGE_DOCS` documents,
//! and the writer runs one merge at a time (`MERGE_THREADS`), so what a merge reads and holds
//! of its inputs (their term dictionaries, read whole) stays bounded however large the store.
//!
//! A level spans sizes within a factor of 2^0.75, so a segment over about 630k documents has
//! no partner it fits with and is not merged again: a large store keeps a segment for every
//! 0.6–1M documents.

use std::collections::HashMap;

use tantivy::index::{SegmentId, SegmentMeta};
use tantivy::indexer::LogMergePolicy;
use tantivy::merge_policy::{MergeCandidate, MergePolicy};

/// Segments under this many documents (what the commits of small runs make) form a level of
/// their own, so a run that edits one file merges a few small segments, never a small one into
/// the large ones of a bulk load.
const MIN_LAYER_DOCS: u32 = 1_000;

/// No merge makes a segment of more live documents than this, and a segment of more is not
/// merged again.
pub(super) const MAX_MERGE_DOCS: u32 = 1_000_000;

/// Merges the writer runs at once. Each reads its input segments; on a two-core machine a second
/// merge thread did not shorten a cold ingest.
pub(super) const MERGE_THREADS: usize = 1;

/// Tantivy's log merge policy, each of its merges split so none makes a segment of more than
/// `max_docs` live documents.
#[derive(Debug)]
pub(super) struct BoundedMerges {
    levels: LogMergePolicy,
    max_docs: u32,
}

impl BoundedMerges {
    pub(super) fn new() -> BoundedMerges {
        let mut levels = LogMergePolicy::default();
        levels.set_min_layer_size(MIN_LAYER_DOCS);
        levels.set_max_docs_before_merge(MAX_MERGE_DOCS as usize);
        BoundedMerges {
            levels,
            max_docs: MAX_MERGE_DOCS,
        }
    }
}

impl MergePolicy for BoundedMerges {
    fn compute_merge_candidates(&self, segments: &[SegmentMeta]) -> Vec<MergeCandidate> {
        // Live documents, as the levels count them: a merge drops the deleted ones, so a level
        // of segments emptied by edits still merges.
        let docs: HashMap<SegmentId, u32> = segments
            .iter()
            .map(|segment| (segment.id(), segment.num_docs()))
            .collect();
        self.levels
            .compute_merge_candidates(segments)
            .into_iter()
            .flat_map(|candidate| split(candidate, &docs, self.max_docs))
            .collect()
    }
}

/// Splits one merge into merges of at most `max_docs` live documents each, smallest segments
/// first; a segment left alone is not merged. A merge of one segment (the policy's way of
/// dropping its deleted documents) is kept as it is.
fn split(
    candidate: MergeCandidate,
    docs: &HashMap<SegmentId, u32>,
    max_docs: u32,
) -> Vec<MergeCandidate> {
    if candidate.0.len() < 2 {
        return vec![candidate];
    }
    let mut segments: Vec<(u32, SegmentId)> = candidate
        .0
        .into_iter()
        .map(|id| (docs.get(&id).copied().unwrap_or(u32::MAX), id))
        .collect();
    segments.sort_unstable();
    let mut merges = Vec::new();
    let mut group: Vec<SegmentId> = Vec::new();
    let mut group_docs: u64 = 0;
    for (segment_docs, id) in segments {
        if !group.is_empty() && group_docs + u64::from(segment_docs) > u64::from(max_docs) {
            merges.push(std::mem::take(&mut group));
            group_docs = 0;
        }
        group.push(id);
        group_docs += u64::from(segment_docs);
    }
    merges.push(group);
    merges
        .into_iter()
        .filter(|group| group.len() > 1)
        .map(MergeCandidate)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tantivy::index::{SegmentId, SegmentMeta};
    use tantivy::merge_policy::{MergeCandidate, MergePolicy};

    use super::{BoundedMerges, MAX_MERGE_DOCS, split};

    /// Segments of these sizes, each as (documents, of which deleted).
    fn segments(sizes: &[(u32, u32)]) -> Vec<SegmentMeta> {
        let index = tantivy::Index::create_in_ram(tantivy::schema::Schema::builder().build());
        sizes
            .iter()
            .map(|&(docs, deleted)| {
                let meta = index.new_segment_meta(SegmentId::generate_random(), docs);
                match deleted {
                    0 => meta,
                    deleted => meta.with_delete_meta(deleted, 1),
                }
            })
            .collect()
    }

    /// The merges the policy asks for, each as its segments' live sizes, sorted.
    fn merges_with_deletes(sizes: &[(u32, u32)]) -> Vec<Vec<u32>> {
        let metas = segments(sizes);
        let docs: HashMap<SegmentId, u32> = metas
            .iter()
            .map(|meta| (meta.id(), meta.num_docs()))
            .collect();
        let mut merges: Vec<Vec<u32>> = BoundedMerges::new()
            .compute_merge_candidates(&metas)
            .into_iter()
            .map(|candidate| {
                let mut sizes: Vec<u32> = candidate.0.iter().map(|id| docs[id]).collect();
                sizes.sort_unstable();
                sizes
            })
            .collect();
        merges.sort_unstable();
        merges
    }

    fn merges_of(sizes: &[u32]) -> Vec<Vec<u32>> {
        let sizes: Vec<(u32, u32)> = sizes.iter().map(|&docs| (docs, 0)).collect();
        merges_with_deletes(&sizes)
    }

    #[test]
    fn a_level_of_large_segments_is_merged_in_parts_under_the_bound() {
        // Twelve segments of 300k documents: Tantivy's policy merges them into one of 3.6M.
        let merges = merges_of(&[300_000; 12]);
        assert_eq!(merges, vec![vec![300_000; 3]; 4]);
        assert!(
            merges
                .iter()
                .all(|merge| merge.iter().sum::<u32>() <= MAX_MERGE_DOCS)
        );
    }

    #[test]
    fn small_levels_merge_as_tantivy_would() {
        // Eight small segments: one merge of all of them.
        assert_eq!(merges_of(&[2_000; 8]), vec![vec![2_000; 8]]);
        // Under eight of a size: nothing to merge yet.
        assert!(merges_of(&[2_000; 7]).is_empty());
    }

    #[test]
    fn segments_too_large_to_pair_are_left_alone() {
        assert!(merges_of(&[600_000; 8]).is_empty());
    }

    #[test]
    fn a_level_of_mixed_sizes_packs_the_smallest_together() {
        // One level (within a factor of 2^0.75): five of 300k, then 400k, 450k and 500k.
        let merges = merges_of(&[
            400_000, 450_000, 500_000, 300_000, 300_000, 300_000, 300_000, 300_000,
        ]);
        assert_eq!(
            merges,
            vec![
                vec![300_000, 300_000, 300_000],
                vec![300_000, 300_000, 400_000],
                vec![450_000, 500_000],
            ]
        );
    }

    #[test]
    fn segments_emptied_by_deletes_merge_by_what_they_still_hold() {
        // Eight segments of 900k documents, 700k of each deleted: 200k live each, so they
        // merge in groups of five and three, where by their 900k they could not pair.
        let merges = merges_with_deletes(&[(900_000, 700_000); 8]);
        assert_eq!(merges, vec![vec![200_000; 3], vec![200_000; 5]]);
    }

    #[test]
    fn a_merge_of_one_segment_is_kept() {
        let id = SegmentId::generate_random();
        let docs = HashMap::from([(id, 5_000_000)]);
        let merges = split(MergeCandidate(vec![id]), &docs, MAX_MERGE_DOCS);
        assert_eq!(merges.len(), 1);
        assert_eq!(merges[0].0, vec![id]);
    }
}
